"""Dataflow schedule: folding, FIFO depths, cycle and resource model.

Every graph node becomes one streaming unit (binary and integer convolutions
become a sliding window plus a matrix-vector unit). The schedule

- picks PE x SIMD for each matrix-vector unit: the least parallelism that meets the
  target frame interval (by default the input stream's own rate, one pixel per
  cycle), relaxing the target until the estimate fits the board;
- sizes the FIFOs on every fork (base fan-out, residual skip) from the worst-case
  lookahead of the branches that rejoin, so no back-pressure pattern can deadlock;
- predicts cycles per frame per node and for the pipeline (its slowest node),
  and estimates resources (Cyclone V ALMs, M10K blocks, DSP blocks).

Each op's cycle, timing and resource model is its definition's (:mod:`.ops`). The K
bases of a block are always mapped to parallel per-base units; the report states it
(time-sharing bases is not implemented).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import cycles as cyc
from .graph import Graph
from .ops import TIMING_FRAMES, op_of
from .ops.base import mem_blocks
from .ops.window import choose_folding

__all__ = ["BOARD_BUDGETS", "Schedule", "schedule", "choose_folding", "fifo_depths", "ideal_times",
           "check_fits", "memory_floor"]

#: Device resources used as the schedule's budget.
BOARD_BUDGETS = {
    "de10nano": dict(device="5CSEBA6U23I7 (Cyclone V SE)", clock_mhz=50.0,
                     alm=41_910, m10k=553, dsp=112),
}

FIFO_MARGIN = 2
#: StreamFIFO (SyncFIFOBuffered) passes one beat per cycle only from depth 3 on.
FIFO_MIN_DEPTH = 3


@dataclass
class Unit:
    """One node's hardware mapping."""

    name: str
    op: str
    cycles: int
    pe: int | None = None
    simd: int | None = None
    n_in: int | None = None
    resources: dict = field(default_factory=dict)


@dataclass
class Schedule:
    graph: Graph
    board: str
    units: dict
    fifos: dict          # consumer node name -> {input ref: depth}
    frame_cycles: int
    resources: dict
    budget: dict
    base_mapping: str = "parallel"
    notes: list = field(default_factory=list)

    @property
    def clock_mhz(self):
        return self.budget["clock_mhz"]

    @property
    def frames_per_second(self):
        return self.clock_mhz * 1e6 / self.frame_cycles

    def bottleneck(self):
        return max(self.units.values(), key=lambda u: u.cycles).name

    def to_dict(self):
        return {
            "board": self.board,
            "device": self.budget["device"],
            "clock_mhz": self.clock_mhz,
            "base_mapping": self.base_mapping,
            "frame_cycles": self.frame_cycles,
            "frames_per_second": round(self.frames_per_second, 1),
            "bottleneck": self.bottleneck(),
            "resources": self.resources,
            "budget": {k: self.budget[k] for k in ("alm", "m10k", "dsp")},
            "units": [
                {"name": u.name, "op": u.op, "pe": u.pe, "simd": u.simd, "cycles": u.cycles,
                 "resources": u.resources} for u in self.units.values()],
            "fifos": {k: v for k, v in self.fifos.items()},
            "notes": self.notes,
        }

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2)


# ---------------------------------------------------------------- FIFO sizing
def ideal_times(g: Graph, units, frame_cycles):
    """Cycle at which every output beat of every node appears when no FIFO is ever
    full, with input pixels arriving at the pipeline's steady rate (each op's
    ``timing``, from the latencies of the components' docstrings).

    Returns ``(produced, accepted)``: node name -> output times, and node name ->
    times at which it accepts each input beat (for joins, all inputs together).
    """
    inp = g[g.input]
    n_in = inp.height * inp.width
    rate = frame_cycles / n_in
    produced, accepted = {}, {}
    for node in g:
        if node.name == g.input:
            produced[node.name] = [p * rate for p in range(TIMING_FRAMES * n_in)]
            continue
        ins = [produced[Graph.source(r)] for r in node.inputs]
        parent = g.producer(node.inputs[0])
        produced[node.name], accepted[node.name] = op_of(node).timing(
            node, parent, ins, units[node.name])
    return produced, accepted


def fifo_depths(g: Graph, units, frame_cycles):
    """FIFO depth for each input of every join (residual add, base mixer, gate): the
    most beats its producer runs ahead of the join in the ideal timing, plus the
    FIFO's own latency, so that at the scheduled rate no fork ever waits."""
    produced, accepted = ideal_times(g, units, frame_cycles)
    fifos = {}
    for node in g:
        if not op_of(node).join or len(node.inputs) < 2:
            continue
        for ref in node.inputs:
            pushed = produced[Graph.source(ref)]
            taken = accepted[node.name]
            ahead, j = 0, 0
            for k, t in enumerate(taken):
                while j < len(pushed) and pushed[j] <= t:
                    j += 1
                ahead = max(ahead, j - k)
            fifos.setdefault(node.name, {})[ref] = max(FIFO_MIN_DEPTH, ahead + FIFO_MARGIN)
    return fifos


M10K_BITS = 10_240


def memory_floor(g: Graph):
    """On-chip memory bits no folding can avoid: every weight and every line buffer."""
    bits = 0
    for node in g:
        a = node.attrs
        if node.op in ("bin_conv", "int_conv", "maxpool"):
            parent = g.producer(node.inputs[0])
            rows = (a["kernel"] - 1) * a.get("dilation", 1) + 1
            bits += rows * parent.width * parent.channels * parent.bit_width
        if node.op == "bin_conv":
            bits += a["bits"].numel()
        elif node.op == "int_conv":
            bits += a["weight"].numel() * 8
    return bits


def check_fits(g: Graph, board="de10nano"):
    """Refuse, before any folding, a network whose weights and line buffers alone
    exceed the board's block RAM (streaming dataflow keeps all of them on chip).

    Raises
    ------
    ValueError
        one line: what the network needs and what the board has.
    """
    budget = BOARD_BUDGETS[board]
    need = memory_floor(g)
    have = budget["m10k"] * M10K_BITS
    if need > have:
        raise ValueError(
            f"the network needs at least {need / 8 / 2**20:.1f} MiB of on-chip weights and line "
            f"buffers ({-(-need // M10K_BITS):,} M10K blocks), but {board} has "
            f"{have / 8 / 2**20:.2f} MiB ({budget['m10k']} M10K): it does not fit this board yet "
            "(hardware for networks this size, with weights streamed from DRAM, is a later step)")


def schedule(g: Graph, board="de10nano", target_cycles=None) -> Schedule:
    """Fold, size FIFOs and estimate; see the module docstring."""
    if board not in BOARD_BUDGETS:
        raise ValueError(f"unknown board {board!r}; known: {', '.join(BOARD_BUDGETS)}")
    check_fits(g, board)
    budget = BOARD_BUDGETS[board]
    inp = g[g.input]
    target = target_cycles or cyc.window_cycles(inp.height, inp.width)
    notes = []

    def plan(target):
        units = {}
        for node in g:
            op = op_of(node)
            parent = g.producer(node.inputs[0]) if node.inputs else None
            pe, simd, n_in = op.folding(node, parent, target)
            unit = Unit(node.name, node.op, 0, pe, simd, n_in)
            unit.cycles = op.cycles(node, parent, unit)
            unit.resources = op.resources(g, node, parent, unit)
            units[node.name] = unit
        total = {k: sum(u.resources[k] for u in units.values()) for k in ("alm", "m10k", "dsp")}
        frame = cyc.pipeline_cycles([u.cycles for u in units.values()])
        fifos = fifo_depths(g, units, frame)
        for consumer, refs in fifos.items():
            for ref, depth in refs.items():
                src = g[Graph.source(ref)]
                total["m10k"] += mem_blocks(src.channels * src.bit_width, depth)
                total["alm"] += 30
        return units, fifos, frame, total

    first = target
    while True:
        units, fifos, frame, total = plan(target)
        fits = all(total[k] <= budget[k] for k in ("alm", "m10k", "dsp"))
        if fits or target > 1 << 20:
            break
        notes.append(f"target {target} cycles/frame does not fit {board} "
                     f"(estimate {total}); folding further")
        target *= 2
    if not fits:
        # folding cannot rescue it (the per-pixel units dominate): keep the fast design
        # rather than the slowest one, and say so; time-sharing bases is the next step
        notes.append(f"does not fit {board} even fully folded (estimate {total}); scheduled "
                     f"at {first} cycles/frame instead; it needs base time-sharing or a "
                     "larger device")
        units, fifos, frame, total = plan(first)
    return Schedule(g, board, units, fifos, frame, total, budget, notes=notes)
