"""Latency of one frame through the accelerator, predicted from the ops' timing model.

Definition
----------
The latency of a frame is the number of clock cycles from the rising edge at which
the accelerator accepts the frame's first input pixel to the rising edge at which
its result beat is taken from the accelerator's output stream, with the output
always ready: ``t_out - t_in``. (The fast Verilator path's register slice adds one
cycle after the core; :mod:`groupnet_hw.sim.verify` subtracts it, so measured and
predicted latency are both the core's.) Two figures, for two ways of offering input:

``isolated``
    Frame 0 after reset (an empty pipeline), its pixels offered back to back, one
    per cycle: the latency of a single image. The ideal model takes the pixels at
    one per cycle; the hardware may hold some back (a folded unit's window fills up),
    which does not move the result as long as the slowest unit never waits for data.
``paced`` and ``steady``
    Frames offered back to back at the scheduled rate: input pixel ``p`` (counting
    over frames) offered at cycle ``ceil(p * frame_cycles / pixels)``, the arrival
    pattern of the schedule's ideal timing model. ``paced[f]`` is frame ``f``'s
    latency for ``f < TIMING_FRAMES``; ``steady`` is that of the last of them (frame
    2), whose predecessors occupy the pipeline as they do in a long run.

Frames offered faster than the scheduled rate (as ``groupnet-hw verify`` streams
its images) queue in the line buffers and FIFOs, and their latency grows with the
queue until the input is back-pressured: that latency is a property of the buffer
sizes, not of the timing model, and is not predicted here.

How it is predicted
-------------------
Each node's output beat times follow from its producers' through the op's
``timing`` (:mod:`.ops`): :func:`.schedule.ideal_times`, which makes the prediction
exact because

- every join input passes through its FIFO: a
  :class:`~groupnet_hw.hw.fifo.StreamFIFO` delivers a beat :data:`FIFO_LATENCY`
  cycles after taking it, one beat per cycle (:func:`.schedule.ideal_times` models it,
  so the FIFOs are sized with it too);
- the input times are integers (``ceil`` of the ideal rate), as the hardware's are.
  Every timing rule is a max of input times plus integer offsets, so with integer
  inputs the result is the ceiling of the fractional model's, exactly.

Examples
--------
>>> lat = predicted_latency(sched)                       # doctest: +SKIP
>>> lat.isolated, lat.steady, lat.paced                  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .ops import TIMING_FRAMES
from .schedule import FIFO_LATENCY, ideal_times

__all__ = ["FIFO_LATENCY", "Latency", "frame_times", "input_times", "predicted_latency"]



@dataclass
class Latency:
    """Predicted latency of a schedule (see the module docstring for the definitions).

    Attributes
    ----------
    isolated : int
        Frame 0 of an empty pipeline, pixels offered one per cycle.
    paced : list[int]
        Frames ``0 .. TIMING_FRAMES - 1`` offered at the scheduled rate.
    frame_cycles : int
        The schedule's frame interval (the pacing rate's numerator).
    fifo_cycles : int
        How much later the steady frame's result is than in
        the ideal model with the join FIFOs' latency left out.
    """

    isolated: int
    paced: list
    frame_cycles: int
    fifo_cycles: int

    @property
    def steady(self) -> int:
        """Latency of the last paced frame (frame ``TIMING_FRAMES - 1``)."""
        return self.paced[-1]

    def to_dict(self):
        return {**asdict(self), "steady": self.steady}


def input_times(sched, paced: bool) -> list:
    """Cycles at which the input pixels of :data:`TIMING_FRAMES` frames are offered.

    ``paced``: pixel ``p`` at ``ceil(p * frame_cycles / pixels)`` (integer arithmetic,
    as the fast path's driver paces them); otherwise one pixel per cycle.
    """
    g = sched.graph
    inp = g[g.input]
    n = inp.height * inp.width
    if not paced:
        return list(range(TIMING_FRAMES * n))
    return [-(-p * sched.frame_cycles // n) for p in range(TIMING_FRAMES * n)]


def frame_times(sched, inputs, fifo_latency: int = FIFO_LATENCY) -> dict:
    """Time of every output beat of every node, for input pixels offered at ``inputs``:
    :func:`.schedule.ideal_times` with integer input times.

    Parameters
    ----------
    sched : Schedule
    inputs : sequence of int
        Cycle of each input pixel, :data:`TIMING_FRAMES` frames of them.
    fifo_latency : int
        Latency of each FIFO in front of a join.

    Returns
    -------
    dict
        Node name -> list of output beat times.
    """
    return ideal_times(sched.graph, sched.units, inputs=inputs, fifo_latency=fifo_latency)[0]


def _latencies(sched, inputs, produced):
    g = sched.graph
    inp = g[g.input]
    n = inp.height * inp.width
    results = produced[g.output]
    per = len(results) // TIMING_FRAMES   # result beats per frame (one: the head's)
    return [results[(f + 1) * per - 1] - inputs[f * n] for f in range(TIMING_FRAMES)]


def predicted_latency(sched) -> Latency:
    """Predicted latency of the schedule's accelerator (module docstring: definitions).

    Parameters
    ----------
    sched : Schedule

    Returns
    -------
    Latency
    """
    fast = input_times(sched, paced=False)
    isolated = _latencies(sched, fast, frame_times(sched, fast))[0]
    paced_in = input_times(sched, paced=True)
    paced = _latencies(sched, paced_in, frame_times(sched, paced_in))
    # The ideal model with the fractional input rate and the FIFOs left out: its result
    # times are the ceiling's arguments (up to float rounding) minus the FIFOs.
    ideal, _ = ideal_times(sched.graph, sched.units, sched.frame_cycles, fifo_latency=0)
    ideal_out = ideal[sched.graph.output][-1]
    ideal_steady = math.ceil(ideal_out - 1e-9) - paced_in[(TIMING_FRAMES - 1) * len(fast)
                                                           // TIMING_FRAMES]
    return Latency(isolated=int(isolated), paced=[int(x) for x in paced],
                   frame_cycles=sched.frame_cycles, fifo_cycles=int(paced[-1] - ideal_steady))
