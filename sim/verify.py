# amaranth: UnusedElaboratable=no
"""Bit-exact verification of the accelerator against PyTorch.

The same uint8 images go through the model's fixed-point forward (PyTorch), the
compiler's integer graph, and the RTL. Every logit and every class must be equal;
the first mismatching image and output is reported, and for integer graph vs
fixed-point forward the first diverging node.

Simulators
----------
``verilator``
    The fast path (:mod:`.fast_rtl`): the generated Verilog with a C++ stream
    driver, the clock loop inside the simulator, frames sharded over the cores.
``cocotb``
    cocotb on Verilator, Python on every clock cycle (:mod:`.cocotb_runner`).
``icarus``
    cocotb on Icarus Verilog.
``amaranth``
    The Amaranth simulator on the Amaranth model of the schedule (not the Verilog).

With ``stall == 0`` frames are streamed back to back with the output always ready,
so the mean interval between result beats is the measured cycles per frame. With
``stall > 0`` the input gets random gaps and the output random ready-stalls; the
outputs must still be exact and complete, and no cycles per frame are reported.

Latency (:mod:`groupnet_hw.compiler.latency` defines it) is predicted for every
simulator and measured on the fast path in stall-free runs: ``isolated`` from the
first frame of each shard (each starts from reset), ``steady`` from a second, short
run of :data:`~groupnet_hw.compiler.ops.TIMING_FRAMES` frames paced at the scheduled
frame interval.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

import torch
from amaranth.hdl import Shape

from ..compiler.execute import execute
from ..compiler.latency import predicted_latency
from ..compiler.ops import TIMING_FRAMES
from ..hw.accelerator import Accelerator

__all__ = ["VerifyResult", "RTLDesign", "run_hardware", "verify", "first_divergence",
           "port_widths", "measure_paced_latency", "SIMULATORS"]

SIMULATORS = ("verilator", "cocotb", "icarus", "amaranth")


@dataclass
class RTLDesign:
    """Generated Verilog of an accelerator and its stream ports.

    Attributes
    ----------
    verilog : path-like
        The Verilog file (``groupnet_core.v`` of a build, or a cached conversion).
    toplevel : str
        Its top module.
    in_width, out_width : int
        Payload widths of the ``i`` (pixels) and ``o`` (logits and class) streams.
    """

    verilog: object
    toplevel: str
    in_width: int
    out_width: int


@dataclass
class VerifyResult:
    """Outcome of :func:`verify`; ``ok`` only if every output of every image is equal.

    ``latency_*`` are cycles from the acceptance of a frame's first pixel to its result
    on the core's output (:mod:`groupnet_hw.compiler.latency`): ``latency_*`` of frame
    0 from reset, pixels offered back to back; ``latency_steady_*`` of frame
    ``TIMING_FRAMES - 1`` of frames paced at the scheduled interval. Measured only on
    the fast path without stalls (else None).
    """

    simulator: str
    images: int
    exact: int
    first_mismatch: str | None
    graph_equals_model: bool
    first_divergence: str | None
    cycles_per_frame_measured: float | None
    cycles_per_frame_predicted: int
    stall: float
    seed: int
    sim_seconds: float
    build_seconds: float
    images_per_second: float
    float_quantized_agreement: float | None = None
    latency_predicted: int | None = None
    latency_measured: int | None = None
    latency_steady_predicted: int | None = None
    latency_steady_measured: int | None = None
    waves: str | None = None
    mismatch_image: int | None = None
    notes: list = field(default_factory=list)

    @property
    def ok(self):
        return self.exact == self.images and self.graph_equals_model

    def to_dict(self):
        d = asdict(self)
        d["ok"] = self.ok
        return d


def port_widths(acc: Accelerator) -> tuple[int, int]:
    """Payload bits of the accelerator's ``i`` (pixels) and ``o`` (logits, class) streams."""
    return (Shape.cast(acc.i.payload.shape()).width, Shape.cast(acc.o.payload.shape()).width)


def pixel_beats(images):
    """uint8 images ([N, H, W] or [N, C, H, W]) -> one int per pixel in raster order,
    channel c in bits ``8c .. 8c+7`` (the ``ArrayLayout(unsigned(8), C)`` of the input
    stream)."""
    images = torch.as_tensor(images).to(torch.int64)
    if images.dim() == 3:
        images = images.unsqueeze(1)
    shifts = torch.arange(images.shape[1], dtype=torch.int64) * 8
    words = (images << shifts.view(1, -1, 1, 1)).sum(dim=1)
    return words.reshape(-1).tolist()


def _decode(word, n_classes, logit_width):
    mask = (1 << logit_width) - 1
    logits = []
    for c in range(n_classes):
        v = (word >> (c * logit_width)) & mask
        logits.append(v - (1 << logit_width) if v >> (logit_width - 1) else v)
    return logits, word >> (n_classes * logit_width)


def first_divergence(graph, model, images, values=None):
    """First model layer (in graph order) whose integer-graph value differs from the
    model's fixed-point forward, as ``"node NAME, image I"``; None if all agree.

    The front end records which graph value stands for each traced layer output
    (:attr:`~groupnet_hw.compiler.graph.Graph.origins`); values a pass folded away
    (post-ops inside thresholds) are skipped. ``values`` are the executor's results on
    ``images`` if the caller has them already.
    """
    if values is None:
        values = execute(graph, images)
    trace = model.forward_quantized(images, keep_trace=True).trace
    order = {node.name: i for i, node in enumerate(graph)}
    pairs = []
    for layer, ref in graph.origins.items():
        name, _, k = ref.partition(":")
        base, _, idx = layer.partition("[")
        want = trace.get(base)
        if name not in values or want is None:
            continue
        if idx:
            want = want[int(idx[:-1])]
        got = values[name][int(k)] if k else values[name]
        pairs.append((order[name], name, got, want.value))
    for _, name, got, want in sorted(pairs, key=lambda p: p[0]):
        if got.shape != want.shape:
            return f"node {name} (shape {list(got.shape)} vs {list(want.shape)})"
        if not torch.equal(want, got):
            bad = (want != got).flatten(1).any(dim=1).nonzero()
            return f"node {name}, image {int(bad[0])}"
    return None


def run_hardware(acc: Accelerator, images, simulator="verilator", design: RTLDesign = None,
                 build_dir=None, stall=0.0, seed=0, jobs=1, waves=None, waves_frame=0,
                 progress=None, pace=None):
    """Stream ``images`` (uint8 [N, H, W]) through the RTL.

    ``pace`` (fast path only): ``(cycles, beats)``, input beat ``i`` offered no earlier
    than cycle ``ceil(i * cycles / beats)`` (:func:`~.fast_rtl.run_fast_rtl`).

    Returns ``(logits list, classes list, run)`` where ``run`` has ``out_cycles``,
    ``steady_interval()``, ``sim_seconds`` and ``build_seconds`` (and, from the fast
    path, ``in_cycles``).
    """
    beats = pixel_beats(images)
    n = int(images.shape[0])
    frame_beats = acc.n_pixels
    if simulator == "amaranth":
        from .cocotb_runner import RTLRun
        from .streams import run_streams
        t0 = time.perf_counter()
        if acc.in_channels > 1:   # the simulator sets an ArrayLayout payload per channel
            beats = [[(b >> (8 * c)) & 0xFF for c in range(acc.in_channels)] for b in beats]
        got = run_streams(acc, {"i": beats}, {"o": n}, stall=stall, seed=seed,
                          max_cycles=200 * len(beats) + 10_000, vcd=waves)
        wall = time.perf_counter() - t0
        outs = got.outputs["o"]
        run = RTLRun(outputs=[], cycles=got.cycles, out_cycles=got.out_cycles["o"],
                     wall_seconds=wall, build_seconds=0.0, simulator="amaranth",
                     sim_seconds=wall, waves_file=waves)
        return [o["logits"] for o in outs], [o["cls"] for o in outs], run
    if design is None:
        raise ValueError("an RTL simulator needs the generated Verilog (design)")
    if pace is not None and simulator != "verilator":
        raise ValueError("paced input is a feature of the fast path (--sim verilator)")
    if simulator == "verilator":
        from .fast_rtl import run_fast_rtl
        # the driver's default limit counts beats; a deeply folded design spends
        # thousands of cycles on each (the CIFAR-size K = 5 network on the DE10-Nano:
        # millions per frame), so allow each frame four of its scheduled intervals more
        timeout = 1_000_000 + 1000 * (len(beats) + n) + 4 * (n + 1) * acc.sched.frame_cycles
        run = run_fast_rtl(design.verilog, design.toplevel, beats, n, design.out_width,
                           in_width=design.in_width, stall=stall, seed=seed,
                           timeout_cycles=timeout,
                           frame_beats=frame_beats, jobs=jobs, waves=waves,
                           waves_frame=waves_frame, drain_cycles=4 * frame_beats + 64,
                           pace=pace, build_dir=build_dir, progress=progress)
    else:
        from .cocotb_runner import run_stream_rtl
        sim = "verilator" if simulator == "cocotb" else "icarus"
        run = run_stream_rtl(design.verilog, design.toplevel, beats, n, design.out_width,
                             simulator=sim, build_dir=build_dir, stall=stall, seed=seed,
                             waves=waves is not None)
        if waves is not None and run.waves_file is not None:
            import shutil
            shutil.copy2(run.waves_file, waves)
    logits, classes = [], []
    for word in run.outputs:
        lg, cls = _decode(word, acc.n_classes, acc.logit_width)
        logits.append(lg)
        classes.append(cls)
    return logits, classes, run


def verify(model, sched, images, simulator="verilator", design: RTLDesign = None,
           build_dir=None, stall=0.0, seed=0, jobs=None, waves=None, progress=None,
           accelerator=None):
    """Check the RTL against the model's fixed-point forward, image by image.

    Parameters
    ----------
    model : GroupNet
        The checkpoint's model (its ``forward_quantized`` is the reference).
    sched : Schedule
        The schedule the design was generated from (its folding, FIFOs, cycle model).
    images : uint8 tensor [N, H, W]
    simulator : one of :data:`SIMULATORS`
    design : RTLDesign
        The Verilog to simulate (every simulator but ``amaranth``).
    stall : float
        Probability of random input gaps and output ready-stalls.
    seed : int
        Seed of the stalls.
    jobs : int, optional
        Simulator processes for the fast path (default: the cores).
    waves : path-like, optional
        Waveform of the first mismatching frame (frame 0 if all are exact): VCD of that
        frame from the fast path; of the whole run from cocotb (FST with Icarus, VCD
        with Verilator) and from the Amaranth simulator (VCD).

    accelerator : Accelerator, optional
        The accelerator ``sched`` was elaborated into (its ports and geometry are read;
        default: a new one).

    Returns
    -------
    VerifyResult
    """
    if simulator not in SIMULATORS:
        raise ValueError(f"unknown simulator {simulator!r}; choose one of {', '.join(SIMULATORS)}")
    images = torch.as_tensor(images).to(torch.uint8)
    jobs = jobs or max(1, min(os.cpu_count() or 1, 8))
    expected = model.forward_quantized(images)
    graph_values = execute(sched.graph, images)
    graph_ok = torch.equal(graph_values[sched.graph.output], expected.logits)
    divergence = None if graph_ok else (first_divergence(sched.graph, model, images,
                                                         graph_values)
                                        or "only at the logits (head)")
    acc = accelerator if accelerator is not None else Accelerator(sched)
    # With an RTL simulator only its ports are read (the RTL is the Verilog): one made here
    # is never elaborated, which amaranth's linter option on this file's first line allows.
    fast_waves = waves if simulator == "verilator" else None
    logits, classes, run = run_hardware(
        acc, images, simulator, design=design, build_dir=build_dir, stall=stall, seed=seed,
        jobs=jobs, waves=None if fast_waves else waves, progress=progress)
    exact, first, first_idx = 0, None, None
    for idx in range(len(images)):
        want_l = expected.logits[idx].tolist()
        want_c = int(expected.classes[idx])
        if logits[idx] == want_l and classes[idx] == want_c:
            exact += 1
        elif first is None:
            diff = [c for c in range(len(want_l)) if logits[idx][c] != want_l[c]]
            what = (f"logit {diff[0]}: RTL {logits[idx][diff[0]]}, PyTorch {want_l[diff[0]]}"
                    if diff else f"class: RTL {classes[idx]}, PyTorch {want_c}")
            first, first_idx = f"image {idx}, {what}", idx
    build_s = run.build_seconds
    if fast_waves is not None:
        # A second, traced run of the shard that holds the frame of interest.
        if progress:
            progress(f"writing the waveform of frame {first_idx or 0}")
        _, _, traced = run_hardware(acc, images, simulator, design=design, build_dir=build_dir,
                                    stall=stall, seed=seed, jobs=jobs, waves=fast_waves,
                                    waves_frame=first_idx or 0)
        build_s += traced.build_seconds
    measured = run.steady_interval() if stall == 0 else None
    predicted_lat = predicted_latency(sched)
    isolated = steady = None
    notes = []
    if simulator == "verilator" and stall == 0:
        isolated = _shard_first_latencies(run)
        if len(set(isolated)) > 1:
            notes.append(f"the first frame's latency differs between shards: {isolated}")
        isolated = max(isolated)
        steady = measure_paced_latency(acc, sched, images, design, build_dir)[-1]
    with torch.no_grad():
        float_pred = model(images).argmax(dim=1)
    agreement = float((float_pred == expected.classes).float().mean())
    if stall:
        notes.append("cycles per frame and latency are measured only in stall-free runs")
    return VerifyResult(simulator=simulator, images=len(images), exact=exact,
                        first_mismatch=first, graph_equals_model=graph_ok,
                        first_divergence=divergence, cycles_per_frame_measured=measured,
                        cycles_per_frame_predicted=sched.frame_cycles, stall=stall, seed=seed,
                        sim_seconds=round(run.sim_seconds, 3), build_seconds=round(build_s, 3),
                        images_per_second=round(len(images) / run.wall_seconds, 1)
                        if run.wall_seconds else 0.0,
                        float_quantized_agreement=agreement,
                        latency_predicted=predicted_lat.isolated, latency_measured=isolated,
                        latency_steady_predicted=predicted_lat.steady,
                        latency_steady_measured=steady,
                        waves=str(waves) if waves is not None else None,
                        mismatch_image=first_idx, notes=notes)


def _shard_first_latencies(run):
    """Latency of the first frame of each fast-path shard (each starts from reset):
    its result's cycle, less the wrapper's output register, less the cycle its first
    pixel was taken."""
    from .fast_rtl import OUTPUT_SLICE_CYCLES
    return [run.out_cycles[o_start] - OUTPUT_SLICE_CYCLES - run.in_cycles[i_start]
            for (o_start, o_count), (i_start, i_count) in zip(run.segments, run.in_segments)
            if o_count and i_count]


def measure_paced_latency(acc: Accelerator, sched, images, design: RTLDesign, build_dir=None,
                          progress=None):
    """Measured latency of :data:`~groupnet_hw.compiler.ops.TIMING_FRAMES` frames paced
    at the scheduled interval on the fast path (the arrival pattern
    :func:`~groupnet_hw.compiler.latency.predicted_latency` predicts ``paced`` for).

    ``images`` supplies the frames (repeated if there are fewer); latency does not
    depend on pixel values. Returns one latency per frame, in cycles.
    """
    from .fast_rtl import OUTPUT_SLICE_CYCLES
    images = torch.as_tensor(images)
    frames = images[torch.arange(TIMING_FRAMES) % len(images)]
    _, _, run = run_hardware(acc, frames, "verilator", design=design, build_dir=build_dir,
                             jobs=1, pace=(sched.frame_cycles, acc.n_pixels), progress=progress)
    return [run.out_cycles[f] - OUTPUT_SLICE_CYCLES - run.in_cycles[f]
            for f in range(TIMING_FRAMES)]
