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

The K bases of a block are always mapped to parallel per-base units; the report
states it (time-sharing bases is not implemented).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from math import ceil

from . import cycles as cyc
from .graph import Graph

__all__ = ["BOARD_BUDGETS", "Schedule", "schedule", "choose_folding", "fifo_depths", "ideal_times"]

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


def choose_folding(out_pixels, c_out, n_in, target):
    """Least PE*SIMD (then least padding waste) with mvu cycles <= target."""
    best = None
    for pe in range(1, c_out + 1):
        out_folds = ceil(c_out / pe)
        if pe > 1 and ceil(c_out / (pe - 1)) == out_folds:
            continue  # same folds with fewer PEs
        for simd in range(1, n_in + 1):
            in_folds = ceil(n_in / simd)
            if simd > 1 and ceil(n_in / (simd - 1)) == in_folds:
                continue
            c = cyc.mvu_cycles(out_pixels, c_out, n_in, pe, simd)
            if c <= target:
                key = (pe * simd, c)
                if best is None or key < best[0]:
                    best = (key, pe, simd)
                break
    if best is None:
        return c_out, n_in
    return best[1], best[2]


# ---------------------------------------------------------------- FIFO sizing
#: Frames of the timing model: the second and third frames see the steady state.
TIMING_FRAMES = 3


def _window_last_input(node, parent, q_local):
    """Raster index of the last input pixel a window output needs."""
    a = node.attrs
    k = a.get("kernel", a["weight"].shape[-1] if "weight" in a else 3)
    s, d, p = a["stride"], a["dilation"], a["padding"]
    r, c = divmod(q_local, node.width)
    last_row = max(0, min(parent.height - 1, r * s - p + (k - 1) * d))
    last_col = max(0, min(parent.width - 1, c * s - p + (k - 1) * d))
    return last_row * parent.width + last_col


def ideal_times(g: Graph, units, frame_cycles):
    """Cycle at which every output beat of every node appears when no FIFO is ever
    full, with input pixels arriving at the pipeline's steady rate.

    Latencies follow the components' docstrings: window 2 cycles after the last
    pixel it uses, MVU ``ii + 1`` cycles per vector with one vector per ``ii``,
    per-pixel units 1 cycle (gated mixer 2), subsample and fork 0.

    Returns ``(produced, accepted)``: node name -> output times, and node name ->
    times at which it accepts each input beat (for joins, all inputs together).
    """
    inp = g["input"]
    n_in = inp.height * inp.width
    rate = frame_cycles / n_in
    produced, accepted = {}, {}
    for node in g:
        if node.op == "input":
            produced[node.name] = [p * rate for p in range(TIMING_FRAMES * n_in)]
            continue
        ins = [produced[Graph.source(r)] for r in node.inputs]
        parent = g[Graph.source(node.inputs[0])]
        n_out = node.height * node.width
        out, acc = [], []
        if node.op in ("bin_conv", "int_conv"):
            ii = ceil(node.channels / units[node.name].pe) * ceil(units[node.name].n_in /
                                                                  units[node.name].simd)
            n_par = parent.height * parent.width
            win_prev = start_prev = float("-inf")
            for q in range(TIMING_FRAMES * n_out):
                f, ql = divmod(q, n_out)
                win = max(ins[0][f * n_par + _window_last_input(node, parent, ql)] + 2,
                          win_prev + 1)
                start = max(win, start_prev + ii)
                win_prev, start_prev = win, start
                out.append(start + ii + 1)
            acc = None  # the window's line buffer accepts at arrival
        elif node.op == "subsample":
            st = node.attrs["stride"]
            n_par = parent.height * parent.width
            for q in range(TIMING_FRAMES * n_out):
                f, ql = divmod(q, n_out)
                r, c = divmod(ql, node.width)
                out.append(ins[0][f * n_par + r * st * parent.width + c * st])
            acc = None
        elif node.op == "head":
            for f in range(TIMING_FRAMES):
                out.append(ins[0][(f + 1) * parent.height * parent.width - 1] + node.channels + 2)
            acc = None
        else:
            latency = 2 if node.op == "mixer" and node.attrs["gates"] is not None else 1
            prev = float("-inf")
            for q in range(TIMING_FRAMES * n_out):
                t = max(max(x[q] for x in ins), prev + 1)
                acc.append(t)
                out.append(t + latency)
                prev = t
        produced[node.name] = out
        accepted[node.name] = acc
    return produced, accepted


def fifo_depths(g: Graph, units, frame_cycles):
    """FIFO depth for each input of every join (residual add, base mixer): the
    most beats its producer runs ahead of the join in the ideal timing, plus the
    FIFO's own latency, so that at the scheduled rate no fork ever waits."""
    produced, accepted = ideal_times(g, units, frame_cycles)
    fifos = {}
    for node in g:
        if node.op not in ("add", "mixer") or len(node.inputs) < 2:
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


# ---------------------------------------------------------------- resources
def _mem_blocks(width, depth):
    if width * depth <= 640:
        return 0  # small memories land in MLABs / registers
    return ceil(width / 40) * ceil(depth / 256)


def _const_mult_alms(in_bits, coef_bits):
    """Multiplier by a constant, built from shift-and-add in logic (no DSP):
    about one adder per two coefficient bits, half an ALM per result bit."""
    return max(1, in_bits * max(1, coef_bits // 2) // 2)


def _unit_resources(g: Graph, node, pe, simd):
    a = node.attrs
    parent = g[Graph.source(node.inputs[0])] if node.inputs else None
    r = dict(alm=0, m10k=0, dsp=0)
    if node.op in ("bin_conv", "int_conv"):
        k = a.get("kernel", 3) if node.op == "bin_conv" else a["weight"].shape[-1]
        pix_bits = parent.channels * parent.bit_width
        rows = (k - 1) * a["dilation"] + 1 + a["stride"] + 1
        # window: k*k read ports (duplicated RAM) and the output register
        r["m10k"] += k * k * _mem_blocks(pix_bits, rows * parent.width)
        r["alm"] += k * k * pix_bits + 60
        n_in = k * k * parent.channels
        folds = ceil(node.channels / pe) * ceil(n_in / simd)
        acc_w = node.bit_width
        if node.op == "bin_conv":
            r["alm"] += pe * (simd + 2 * acc_w) + node.channels * acc_w // 2 + 40
            r["m10k"] += _mem_blocks(pe * simd, folds)
        else:
            r["dsp"] += ceil(pe * simd / 3)  # three 9x9 multipliers per Cyclone V DSP
            r["alm"] += pe * 2 * acc_w + node.channels * acc_w // 2 + 40
            r["m10k"] += _mem_blocks(pe * simd * 8, folds)
    elif node.op == "postop":
        coef = max(abs(int(v)) for v in a["A"].tolist() + [1]).bit_length()
        r["alm"] += node.channels * (_const_mult_alms(parent.bit_width, coef) + node.bit_width)
    elif node.op == "threshold":
        r["alm"] += node.channels * parent.bit_width // 2 + node.channels
    elif node.op in ("sign", "subsample"):
        r["alm"] += node.channels + 10
    elif node.op == "add":
        r["alm"] += node.channels * node.bit_width
    elif node.op == "mixer":
        k = len(node.inputs)
        in_w = max(g[Graph.source(i)].bit_width for i in node.inputs)
        mults = k * (3 if a["gates"] is not None else 1)
        coef = max(a["lambda_frac"], a["gate_frac"]) + 2
        r["alm"] += node.channels * (mults * _const_mult_alms(in_w, coef) + k * node.bit_width)
    elif node.op == "head":
        c_in = parent.channels
        s_lo, s_hi = a["sum_range"]
        sum_w = max(abs(s_lo), abs(s_hi)).bit_length() + 1
        # classifier: one class per cycle, so C multipliers with weights read per class
        r["alm"] += c_in * sum_w * 3 + node.channels * node.bit_width
        r["dsp"] += ceil(c_in / 2)
    return r


def schedule(g: Graph, board="de10nano", target_cycles=None) -> Schedule:
    """Fold, size FIFOs and estimate; see the module docstring."""
    if board not in BOARD_BUDGETS:
        raise ValueError(f"unknown board {board!r}; known: {', '.join(BOARD_BUDGETS)}")
    budget = BOARD_BUDGETS[board]
    inp = g["input"]
    target = target_cycles or cyc.window_cycles(inp.height, inp.width)
    notes = []
    while True:
        units = {}
        for node in g:
            pe = simd = n_in = None
            parent = g[Graph.source(node.inputs[0])] if node.inputs else None
            if node.op in ("bin_conv", "int_conv"):
                k = node.attrs.get("kernel", 3) if node.op == "bin_conv" else node.attrs["weight"].shape[-1]
                n_in = k * k * parent.channels
                pe, simd = choose_folding(node.height * node.width, node.channels, n_in, target)
                c = max(cyc.mvu_cycles(node.height * node.width, node.channels, n_in, pe, simd),
                        cyc.window_cycles(parent.height, parent.width))
            elif node.op == "head":
                c = cyc.head_cycles(parent.height, parent.width, node.channels)
            elif node.op in ("subsample", "sign"):
                c = cyc.elementwise_cycles(parent.height, parent.width)
            else:
                c = cyc.elementwise_cycles(node.height, node.width)
            units[node.name] = Unit(node.name, node.op, c, pe, simd, n_in,
                                    _unit_resources(g, node, pe, simd))
        total = {k: sum(u.resources[k] for u in units.values()) for k in ("alm", "m10k", "dsp")}
        frame = cyc.pipeline_cycles([u.cycles for u in units.values()])
        fifos = fifo_depths(g, units, frame)
        for consumer, refs in fifos.items():
            for ref, depth in refs.items():
                src = g[Graph.source(ref)]
                total["m10k"] += _mem_blocks(src.channels * src.bit_width, depth)
                total["alm"] += 30
        fits = all(total[k] <= budget[k] for k in ("alm", "m10k", "dsp"))
        if fits or target > 1 << 20:
            break
        notes.append(f"target {target} cycles/frame does not fit {board} "
                     f"(estimate {total}); folding further")
        target *= 2
    if not fits:
        notes.append(f"estimate exceeds {board}'s resources even fully folded")
    return Schedule(g, board, units, fifos, frame, total, budget, notes=notes)
