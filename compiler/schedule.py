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
bases of a block are mapped side by side or time-shared on one set of units
(:mod:`.sharing`), whichever is faster within the budget; the report states it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from itertools import combinations

from ..devices import get_board, get_family
from ..hw.fifo import FIFO_RAM_KINDS
from . import cycles as cyc
from .beats import assign_beats
from .graph import Graph
from .ops import TIMING_FRAMES, op_of
from .ops.window import choose_folding
from .resources import (CELLS, LATE_BLOCK_READ, block_ram_blocks, estimate_unit,
                        fifo_in_block_ram, fork_features, logic_sites, stream_fifo_features)
from .sharing import base_groups, share_bases

__all__ = ["Schedule", "schedule", "choose_folding", "fifo_depths", "ideal_times",
           "check_fits", "memory_floor"]

#: Fraction of each resource the schedule may fill (``--max-util``): place and route
#: needs headroom, and the host link is not in the estimate.
DEFAULT_MAX_UTIL = 0.9


def board_usage(cells: dict, family: str) -> dict:
    """Budgeted resources (the keys of a device's ``limits``,
    :class:`groupnet_hw.devices.Device`) from estimated cells."""
    aluts_per_alm = get_family(family).aluts_per_alm
    if aluts_per_alm:
        # Cyclone V: ALMs, of ALUTs and MLABs (ten ALMs each)
        return dict(alm=-(-cells["lut"] * 10 // int(aluts_per_alm * 10)) + 10 * cells["lutram"],
                    ff=cells["ff"], m10k=cells["bram"], dsp=cells["dsp"])
    usage = dict(lut=logic_sites(cells, family), ff=cells["ff"], ebr=cells["bram"],
                 dsp=cells["dsp"])
    if family == "ecp5":
        usage["lutram"] = cells["lutram"]
    return usage

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
    #: How a convolution's line buffer is built (``groupnet_hw.hw.window.LINE_RAM_KINDS``).
    line_ram: str = "logic"
    #: The unit takes at most one pixel every two cycles, so that its enables depend on
    #: its own registers only (:meth:`~.ops.base.Op.paced`).
    paced: bool = False
    #: The MVU reads its serial window's register in place, without an input buffer
    #: (:meth:`~.ops.base.Op.reads_in_place`).
    in_place: bool = False
    #: The MVU's weight ROM is block RAM whose read it registers once more, on the
    #: board's family (:meth:`~.ops.base.Op.registers_rom`).
    registered_rom: bool = False
    #: The MVU registers its multipliers' products once more in the fabric, on the
    #: board's family (:meth:`~.ops.base.Op.registers_products`).
    registered_products: bool = False
    #: The MVU applies its consumer's work to its results (FINN's MVAU with an
    #: activation: :meth:`~.ops.base.Op.activation`), in this many register stages
    #: (0: it does not).
    activation: int = 0
    #: The unit's work is done in its producer's MVU: no unit of its own.
    fused: bool = False
    #: Beats per pixel of the unit's output stream (:mod:`.beats`; 1: whole pixels), and
    #: the groups of their layout (``groupnet_hw.hw.beats.beat_order``).
    beats: int = 1
    beat_groups: int = 1
    #: A join's input slots whose FIFO registers its block RAM's read data once more
    #: (``groupnet_hw.hw.fifo.StreamFIFO``'s ``out_register``; one cycle more of latency).
    registered_fifos: tuple = ()
    #: Beats per pixel of each input's stream (its producer's ``beats``; empty: all 1).
    in_beats: tuple = ()

    def input_beats(self, slot=0):
        """Beats per pixel of input ``slot``'s stream."""
        return self.in_beats[slot] if slot < len(self.in_beats) else 1


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
    cells: dict = field(default_factory=dict)
    max_util: float = DEFAULT_MAX_UTIL
    #: consumer node name -> {input ref: "block"}: FIFOs whose memory is marked for block
    #: RAM (:data:`groupnet_hw.hw.fifo.FIFO_RAM_KINDS`); every other is "auto".
    fifo_rams: dict = field(default_factory=dict)

    def fifo_ram(self, consumer, ref):
        """How the FIFO in front of ``consumer``'s input ``ref`` builds its memory."""
        return self.fifo_rams.get(consumer, {}).get(ref, "auto")

    def build_node(self, ctx, node):
        """Build ``node``'s hardware unit(s) into an accelerator under construction (its
        op's ``build`` with the node's :class:`Unit`): how
        :class:`groupnet_hw.hw.accelerator.Accelerator`, which knows no IR op, builds
        each node.

        Parameters
        ----------
        ctx : groupnet_hw.hw.accelerator.BuildContext
        node : Node
            A node of :attr:`graph`.

        Returns
        -------
        tuple of list
            ``(sinks, sources)``: the unit's input streams, one per input of ``node``,
            and its output streams, one per output.
        """
        return op_of(node).build(ctx, node, self.units[node.name])

    @property
    def clock_mhz(self):
        return self.budget["clock_mhz"]

    @property
    def frames_per_second(self):
        return self.clock_mhz * 1e6 / self.frame_cycles

    def bottleneck(self):
        return max(self.units.values(), key=lambda u: u.cycles).name

    def fits(self):
        """Whether every budgeted resource is within ``max_util`` of the board's limit."""
        return all(self.resources[k] <= int(v * self.max_util)
                   for k, v in self.budget["limits"].items())

    def time_shared(self):
        """``{mixer: K}``: the blocks whose K bases run time-shared, by the mixer
        that joins them."""
        return {n.name: len(n.attrs["lambdas"]) for n in self.graph
                if n.op == "mixer" and n.attrs.get("packed_in")}

    def block_line_buffers(self):
        """Units whose line buffer is in block RAM."""
        return [u.name for u in self.units.values() if u.line_ram in ("block", "serial")]

    def serial_line_buffers(self):
        """Units whose line buffer is one serial block-RAM memory (of those in block RAM)."""
        return [u.name for u in self.units.values() if u.line_ram == "serial"]

    def line_buffers_text(self):
        n = len(self.block_line_buffers())
        serial = len(self.serial_line_buffers())
        if not n:
            return "logic"
        return f"block RAM ({n} windows{f', {serial} serial' if serial else ''})"

    def mapping_text(self):
        """How the bases are mapped, in words."""
        shared = self.time_shared()
        if not shared:
            return "bases side by side"
        blocks = sum(n.op == "mixer" for n in self.graph)
        ks = sorted(set(shared.values()))
        return (f"bases time-shared in {len(shared)} of {blocks} blocks (K = "
                f"{', '.join(map(str, ks))} on one set of units each)")

    def streams_text(self):
        """How tensors travel between units, in words."""
        beats = [u for u in self.units.values() if u.beats > 1]
        if not beats:
            return "whole pixels between units"
        return f"{len(beats)} of {len(self.units)} units' outputs as beats"

    def to_dict(self):
        return {
            "board": self.board,
            "device": self.budget["device"],
            "clock_mhz": self.clock_mhz,
            "base_mapping": self.base_mapping,
            "time_shared": self.time_shared(),
            "block_line_buffers": self.block_line_buffers(),
            "frame_cycles": self.frame_cycles,
            "frames_per_second": round(self.frames_per_second, 1),
            "bottleneck": self.bottleneck(),
            "family": self.budget["family"],
            "resources": self.resources,
            "budget": dict(self.budget["limits"]),
            "max_util": self.max_util,
            "cells": self.cells,
            "units": [
                {"name": u.name, "op": u.op, "pe": u.pe, "simd": u.simd, "cycles": u.cycles,
                 "line_ram": u.line_ram, "in_place": u.in_place, "paced": u.paced,
                 "registered_rom": u.registered_rom,
                 "registered_products": u.registered_products,
                 "registered_fifos": list(u.registered_fifos),
                 "activation": u.activation, "fused": u.fused, "beats": u.beats,
                 "resources": u.resources}
                for u in self.units.values()],
            "fifos": {k: v for k, v in self.fifos.items()},
            "fifo_rams": {k: v for k, v in self.fifo_rams.items()},
            "notes": self.notes,
        }

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2)


# ---------------------------------------------------------------- FIFO sizing
#: Cycles from a beat written into an empty :class:`~groupnet_hw.hw.fifo.StreamFIFO` to
#: the beat being valid on its output (its docstring's latency).
FIFO_LATENCY = 2


def through_fifo(times, latency=FIFO_LATENCY):
    """Output times of a FIFO written at ``times``: ``latency`` after the write, at most
    one beat per cycle (the join's own ``timing`` then decides when it is taken)."""
    out, prev = [], float("-inf")
    for t in times:
        prev = max(t + latency, prev + 1)
        out.append(prev)
    return out


def ideal_times(g: Graph, units, frame_cycles=None, *, inputs=None, fifo_latency=FIFO_LATENCY):
    """Cycle at which every output beat of every node appears when no FIFO is ever
    full, with input pixels arriving at the pipeline's steady rate (each op's
    ``timing``, from the latencies of the components' docstrings), and every input of
    a join (which has a FIFO, :func:`fifo_depths`) passing through its FIFO's latency.

    Parameters
    ----------
    frame_cycles : float
        The frame interval: input pixel ``p`` arrives at ``p * frame_cycles / pixels``.
    inputs : sequence, optional
        Arrival times of the input pixels of :data:`TIMING_FRAMES` frames instead.
    fifo_latency : int
        Latency of the FIFOs in front of the joins (0: left out), one more where the
        join's unit registers the FIFO's output (``Unit.registered_fifos``).

    Returns ``(produced, accepted)``: node name -> output times, and node name ->
    times at which it accepts each input beat (for joins, all inputs together).
    """
    inp = g[g.input]
    n_in = inp.height * inp.width
    produced, accepted = {}, {}
    for node in g:
        if node.name == g.input:
            produced[node.name] = list(inputs) if inputs is not None else \
                [p * frame_cycles / n_in for p in range(TIMING_FRAMES * n_in)]
            continue
        ins = [produced[Graph.source(r)] for r in node.inputs]
        if op_of(node).join and len(node.inputs) >= 2 and fifo_latency:
            registered = units[node.name].registered_fifos
            ins = [through_fifo(x, fifo_latency + (slot in registered))
                   for slot, x in enumerate(ins)]
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
        for slot, ref in enumerate(node.inputs):
            pushed = produced[Graph.source(ref)]
            # one list for all inputs, or (an op whose inputs differ in beats) one each
            taken = accepted[node.name]
            if isinstance(taken, tuple):
                taken = taken[slot]
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
    exceed the board's on-chip RAM (streaming dataflow keeps all of them on chip).

    Raises
    ------
    ValueError
        one line: what the network needs and what the board has.
    """
    need = memory_floor(g)
    have = get_board(board).device.ram_bits
    if need > have:
        raise ValueError(
            f"the network needs at least {need / 8 / 2**20:.1f} MiB of on-chip weights and line "
            f"buffers, but {board} has {have / 8 / 2**20:.2f} MiB of block RAM: it does not fit "
            "this board yet (hardware for networks this size, with weights streamed from DRAM, is a "
            "later step)")


def _folding_override(g: Graph, folding):
    """Validate ``{node name: (pe, simd)}`` against the graph's matrix-vector units."""
    if not folding:
        return {}
    convs = [n.name for n in g if n.op in ("bin_conv", "int_conv")]
    out = {}
    for name, value in folding.items():
        if name not in convs:
            raise ValueError(f"folding: {name!r} is not a convolution of this network; "
                             f"known: {', '.join(convs)}")
        pe, simd = value
        node = g[name]
        groups = node.attrs.get("groups", 1)
        n_in = node.attrs["kernel"] ** 2 * g.producer(node.inputs[0]).channels // groups
        c_group = node.channels // groups
        if not (1 <= pe <= c_group and 1 <= simd <= n_in):
            raise ValueError(f"folding: {name}: PE must be in 1..{c_group} and SIMD in "
                             f"1..{n_in}, not {pe} x {simd}")
        out[name] = (int(pe), int(simd), n_in)
    return out


#: How a block's K bases map to hardware (``schedule(..., bases=)``, ``build --bases``).
BASE_MAPPINGS = ("auto", "parallel", "shared")

#: An MVU reads its serial window in place (no input buffer) where that lengthens the
#: frame interval by at most this fraction of it: the window refills only after the
#: vector's last step, ``kernel**2 + 1`` cycles more per vector, which on a design whose
#: MVUs all take the same thousands of cycles a vector (the CIFAR-size network's
#: stages, fully folded) no MVU could otherwise afford, while the buffers are a whole
#: window of K*C channels each.
IN_PLACE_SLACK = 256

#: :func:`schedule`'s ``streams``.
STREAM_CHOICES = ("pixels", "beats", "auto")


def schedule(g: Graph, board="de10nano", target_cycles=None, *, fps=None,
             max_util=DEFAULT_MAX_UTIL, folding=None, bases="auto",
             line_buffers="auto", fuse_activations=True, fifos="auto",
             streams="auto") -> Schedule:
    """Fold, size FIFOs and estimate; see the module docstring.

    Parameters
    ----------
    board : str
        A key of :data:`groupnet_hw.devices.BOARDS`.
    target_cycles : int, optional
        Frame interval to fold for. Default: the fastest that fits the board, starting
        from the input rate (one pixel per cycle).
    fps : float, optional
        Frames per second to reach at the board clock (sets ``target_cycles``); a
        ``ValueError`` says what it would take when the board cannot.
    max_util : float
        Fraction of each budgeted resource the design may use.
    folding : dict, optional
        ``{node name: (pe, simd)}`` overriding the chosen folding of those convolutions
        (names of the side-by-side graph: with ``folding``, ``auto`` keeps the bases
        side by side).
    bases : {"auto", "parallel", "shared"}
        How each block's K bases map to hardware: ``parallel``, side by side (K sets of
        units); ``shared``, time-shared on one set of units with the base index as the
        outer fold (:mod:`.sharing`; every block whose bases can be); ``auto``, every
        mix of shared and side-by-side blocks (the two uniform mappings beyond
        :data:`MAX_MIXED_GROUPS` blocks) scheduled and the best kept: the faster frame
        interval that fits, then the smaller design, where two intervals differ by at
        most 1/:data:`IN_PLACE_SLACK` the smaller design (:func:`_best`).
    line_buffers : {"auto", "logic", "block", "serial"}
        Where the convolutions' line buffers go: ``logic`` (flip-flops or distributed
        RAM, as Yosys maps a many-port memory); ``block``, block RAM for every line
        buffer the device's block RAM takes (one memory per ring row and window column;
        Cyclone V's M10K takes one only when it fills 5 % of its blocks, an image row of
        at least 512 bits); ``serial``, block RAM as one memory read a tap per cycle
        wherever the MVU takes a window at most every ``kernel**2 + 3`` cycles, so that
        it costs no cycle (fewer blocks, and M10K takes even 8-pixel rows that way),
        elsewhere as ``block``; ``auto``, each scheduled and the best kept, as for
        ``bases``.
    fifos : {"auto", "block"}
        How the join FIFOs' memories are built: ``auto``, as the flow maps them, except
        that where the family's distributed RAM is over budget (ECP5's DPR16X4) FIFOs are
        marked for block RAM, those that free the most distributed RAM per block first,
        until it fits or the block RAM does not; ``block``, every FIFO marked for block RAM
        (where the family's block RAM takes it).
    fuse_activations : bool
        Do a threshold's or a post-op's work in the MVU in front of it, where that MVU
        feeds nothing else (FINN's MVAU with an activation): no unit of its own, and
        the MVU holds its results instead of accumulators (``build
        --no-fuse-activations`` turns it off, to measure it).
    streams : {"pixels", "beats", "auto"}
        How tensors travel between units: ``pixels``, a whole pixel per beat;
        ``beats``, as beats of a few channels of every base wherever the producer and
        every reader can (:mod:`.beats`: the MVUs send beats, the adds, mixers and
        thresholds work beat by beat, FIFOs are deeper and narrower, windows and the
        head collect pixels); ``auto``, at every frame interval tried, both and the
        better kept (fitting, then faster, then smaller).
    """
    if bases not in BASE_MAPPINGS:
        raise ValueError(f"bases must be one of {', '.join(BASE_MAPPINGS)}, not {bases!r}")
    if line_buffers not in LINE_BUFFER_CHOICES:
        raise ValueError(f"line_buffers must be one of {', '.join(LINE_BUFFER_CHOICES)}, "
                         f"not {line_buffers!r}")
    family = get_board(board).family       # rejects an unknown board in one line
    if streams not in STREAM_CHOICES:
        raise ValueError(f"streams must be one of {', '.join(STREAM_CHOICES)}, not {streams!r}")
    if fifos not in FIFO_RAM_KINDS:
        raise ValueError(f"fifos must be one of {', '.join(FIFO_RAM_KINDS)}, not {fifos!r}")
    modes = [line_buffers]
    if line_buffers == "auto":
        modes = ["logic"] + (["block", "serial"]
                             if _block_lines(g, family) else [])
    errors, candidates = [], []
    for mode in modes:
        try:
            candidates.append(_map_bases(g, board, target_cycles, fps, max_util, folding,
                                         bases, mode, (fuse_activations, fifos, streams)))
        except ValueError as e:      # --fps out of reach this way
            errors.append(e)
    if not candidates:
        raise errors[0]
    best = _best(candidates)
    seen = [_line_rams(best)]
    for other in candidates:
        # a mode that put no line buffer where the others did not is the same design
        if _line_rams(other) not in seen:
            seen.append(_line_rams(other))
            best.notes.append(f"line buffers in {other.line_buffers_text()} instead: "
                              f"{other.frame_cycles} cycles/frame, {_usage_text(other)}"
                              f"{'' if other.fits() else ' (does not fit)'}")
    return best


def _line_rams(sched):
    """How each unit's line buffer is built, with the base mapping: what tells two
    schedules of :func:`schedule`'s line-buffer modes apart."""
    return sched.base_mapping, {u.name: u.line_ram for u in sched.units.values()}


#: Choices of :func:`schedule`'s ``line_buffers``.
LINE_BUFFER_CHOICES = ("auto", "logic", "block", "serial")


def _block_lines(g, family):
    """Whether any convolution's line buffer could go to the family's block RAM (as one
    memory per ring row and window column, or as one serial memory)."""
    for node in g:
        parent = g.producer(node.inputs[0]) if node.inputs else None
        for kind in ("block", "serial"):
            memory = op_of(node).line_memory(node, parent, kind) if parent else None
            if memory and block_ram_blocks(memory[0], memory[1], family) is not None:
                return True
    return False


def _register_block_fifos(g, units, fifos, rams, family):
    """Set every join's ``registered_fifos``: the input slots whose FIFO memory the family
    builds in block RAM with a late read (:data:`..resources.LATE_BLOCK_READ`). True
    where that changed anything."""
    changed = False
    for consumer, refs in fifos.items():
        slots = ()
        if family in LATE_BLOCK_READ:
            ram = rams.get(consumer, {})
            slots = tuple(
                slot for slot, ref in enumerate(g[consumer].inputs) if ref in refs and
                fifo_in_block_ram(stream_fifo_features(
                    g, g[Graph.source(ref)], refs[ref], ram.get(ref, "auto"),
                    units[Graph.source(ref)].beats), family))
        unit = units[consumer]
        changed |= slots != unit.registered_fifos
        unit.registered_fifos = slots
    return changed


def _fifo_rams(g, fifos, family, mode, units, limits):
    """``{consumer: {ref: "block"}}``: the FIFOs to mark for block RAM (:func:`schedule`'s
    ``fifos``). In ``auto``, only where the family's distributed RAM is over its budget:
    FIFOs move to block RAM, the most distributed RAM freed per block first, while the
    block RAM stays within its budget (the other units' and the FIFOs' own counted)."""
    refs = [(c, r) for c, rs in fifos.items() for r in rs]

    def cells(consumer, ref, ram):
        src = Graph.source(ref)
        feats = stream_fifo_features(g, g[src], fifos[consumer][ref], ram, units[src].beats)
        return estimate_unit(feats, "fifo", family)

    if mode == "block":
        chosen = refs
    elif "lutram" not in limits:
        chosen = []
    else:
        auto = {k: cells(*k, "auto") for k in refs}
        lutram = sum(u.resources.get("lutram", 0) for u in units.values()) + \
            sum(c["lutram"] for c in auto.values())
        bram = sum(u.resources.get("bram", 0) for u in units.values()) + \
            sum(c["bram"] for c in auto.values())
        moves = []
        for k in refs:
            block = cells(*k, "block")
            freed, cost = auto[k]["lutram"] - block["lutram"], block["bram"] - auto[k]["bram"]
            if freed > 0:
                moves.append((freed / max(cost, 1), freed, cost, k))
        chosen = []
        for _, freed, cost, k in sorted(moves, reverse=True):
            if lutram <= limits["lutram"]:
                break
            if bram + cost > limits["ebr"]:
                continue
            chosen.append(k)
            lutram, bram = lutram - freed, bram + cost
    out = {}
    for consumer, ref in chosen:
        out.setdefault(consumer, {})[ref] = "block"
    return out


def _fuse_activations(g, units, parents, readers, family, always=False):
    """Mark every unit whose work its producer's MVU can do (thresholds, a post-op; the
    MVU feeding nothing else) ``fused``, and that MVU's unit ``activation``: where the
    fused MVU's estimate has no more DSP blocks, and no more LUTs and flip-flops
    together, than the two units it replaces. (A post-op in an MVU multiplies ``PE``
    channels at a time, where the unit on its own runs on as few lanes as its interval
    allows: on a DSP-bound board that decides; at full rate the MVU's product register
    can outweigh the unit's output register.) ``always``: wherever it can (with beat
    streams, :mod:`.beats`, a post-op unit of its own would keep its MVU's output, and
    every tensor joined to it, in whole pixels)."""

    def cells(node, unit):
        feats = op_of(node).resource_features(g, node, parents[node.name], unit)
        c = estimate_unit(feats, node.op, family)
        return c["dsp"], c["lut"] + c["carry"] + c["ff"]

    for node in g:
        parent = parents[node.name]
        table = op_of(node).activation(node) if parent is not None else None
        if (table is None or not op_of(parent).takes_activation
                or readers.get(node.inputs[0]) != 1 or units[node.name].fused):
            continue
        mvu = units[parent.name]
        fused = replace(mvu, activation=table.stages)
        (dsp, logic), (dsp0, logic0), (dsp1, logic1) = (
            cells(parent, fused), cells(parent, mvu), cells(node, units[node.name]))
        if not always and (dsp > dsp0 + dsp1 or logic > logic0 + logic1):
            continue
        units[parent.name] = fused          # same cycles: the stages add latency only
        unit = units[node.name]
        unit.fused = True
        unit.cycles = op_of(node).cycles(node, parent, unit)


def _map_bases(g, board, target_cycles, fps, max_util, folding, bases, line_ram,
               options=(True, "auto", "pixels")):
    """:func:`schedule` with one choice of line buffers."""
    if bases == "parallel" or (bases == "auto" and folding):
        return _fold(g, board, target_cycles, fps, max_util, folding, line_ram, options)
    groups = [grp.mixer for grp in base_groups(g)]
    if not groups:
        if bases == "shared":
            raise ValueError("this network has no blocks whose bases can be time-shared "
                             "(K = 1, or no mixer joins isomorphic bases)")
        return _fold(g, board, target_cycles, fps, max_util, folding, line_ram, options)
    if bases == "shared":
        shared = _fold(share_bases(g), board, target_cycles, fps, max_util, folding, line_ram, options)
        shared.base_mapping = "shared"
        return shared
    # Every mix of shared and side-by-side blocks for a few blocks; beyond that the two
    # uniform mappings (each trial is a whole folding search).
    if len(groups) <= MAX_MIXED_GROUPS:
        subsets = [c for n in range(len(groups) + 1) for c in combinations(groups, n)]
    else:
        subsets = [(), tuple(groups)]
    errors, candidates = [], []
    for subset in subsets:
        graph = share_bases(g, subset) if subset else g
        try:
            sched = _fold(graph, board, target_cycles, fps, max_util, folding, line_ram, options)
        except ValueError as e:      # --fps out of reach with this mapping
            errors.append(e)
            continue
        sched.base_mapping = ("parallel" if not subset else
                              "shared" if len(subset) == len(groups) else "mixed")
        candidates.append(sched)
    if not candidates:
        raise errors[0]
    best = _best(candidates)
    runner_up = sorted((c for c in candidates if c is not best), key=_preference)
    if runner_up:
        o = runner_up[0]
        best.notes.append(f"{o.mapping_text()} instead: {o.frame_cycles} cycles/frame, "
                          f"{_usage_text(o)}{'' if o.fits() else ' (does not fit)'}")
    return best


#: Up to this many blocks with shareable bases, ``bases="auto"`` tries every mix.
MAX_MIXED_GROUPS = 3


def _usage_text(sched):
    return ", ".join(f"{k} {sched.resources[k]:,}" for k in sched.budget["limits"])


def _preference(sched):
    """Sort key of two mappings of one network: fitting first, then the shorter frame
    interval, then the smaller design (sum of the budgeted resources' fractions); of
    two that do not fit, the one least over its tightest budget."""
    if not sched.fits():
        return (True, max(_fractions(sched)), sched.frame_cycles)
    return (False, sched.frame_cycles, sum(_fractions(sched)))


def _fractions(sched):
    return [sched.resources[k] / v for k, v in sched.budget["limits"].items()]


def _best(candidates):
    """The mapping :func:`schedule` keeps of several of one network: of those that fit,
    the smallest (sum of the budgeted resources' fractions) of those within
    1/:data:`IN_PLACE_SLACK` of the shortest frame interval, the slack an in-place MVU
    may already cost (a mapping whose MVUs read their serial windows in place is as
    fast, not slower, for those few cycles: FINN's CNV folding is 32,771 cycles with
    serial line buffers at half the LUTs of 32,768 in logic); where none fits,
    :func:`_preference`'s least over budget."""
    fitting = [c for c in candidates if c.fits()]
    if not fitting:
        return min(candidates, key=_preference)
    fastest = min(c.frame_cycles for c in fitting)
    as_fast = [c for c in fitting if c.frame_cycles <= fastest + fastest // IN_PLACE_SLACK]
    return min(as_fast, key=lambda c: (sum(_fractions(c)), c.frame_cycles))


def _fold(g: Graph, board, target_cycles, fps, max_util, folding, line_ram="logic",
          options=(True, "auto", "pixels")) -> Schedule:
    """:func:`schedule` of one graph as it is (bases already mapped), with line buffers
    in block RAM (``line_ram`` "block" or "serial", :func:`schedule`'s ``line_buffers``)
    wherever the family's block RAM takes them; ``options``: :func:`schedule`'s
    ``(fuse_activations, fifos)``."""
    fuse, fifo_mode, streams = options
    budget = get_board(board).budget()      # rejects an unknown board in one line
    if not 0 < max_util <= 1:
        raise ValueError(f"max_util must be in (0, 1], not {max_util}")
    check_fits(g, board)
    family = budget["family"]
    limits = {k: int(v * max_util) for k, v in budget["limits"].items()}
    override = _folding_override(g, folding)
    inp = g[g.input]
    first = cyc.window_cycles(inp.height, inp.width)
    if fps is not None:
        if fps <= 0:
            raise ValueError(f"fps must be positive, not {fps}")
        target_cycles = max(1, int(budget["clock_mhz"] * 1e6 // fps))
    notes = []
    parents = {node.name: g.producer(node.inputs[0]) if node.inputs else None for node in g}
    readers = {}        # tensor ref -> inputs reading it
    for node in g:
        for ref in node.inputs:
            readers[ref] = readers.get(ref, 0) + 1

    def fold_units(target):
        units = {}
        for node in g:
            op = op_of(node)
            parent = parents[node.name]
            pe, simd, n_in = override.get(node.name) or op.folding(node, parent, target)
            unit = Unit(node.name, node.op, 0, pe, simd, n_in, paced=op.paced(node, target))
            unit.registered_rom = op.registers_rom(node, unit, family)
            unit.registered_products = op.registers_products(node, unit, family)
            if line_ram != "logic":
                unit.line_ram = op.block_line_ram(node, parent, unit, family,
                                                  serial=line_ram == "serial") or "logic"
            unit.cycles = op.cycles(node, parent, unit)
            units[node.name] = unit
        if fuse:
            _fuse_activations(g, units, parents, readers, family)
        return units

    def beat_units(units, target):
        """Send what can go as beats as beats (:mod:`.beats`); False where nothing can."""
        if not assign_beats(g, units):
            return False
        for node in g:
            op, unit, parent = op_of(node), units[node.name], parents[node.name]
            if unit.beats > 1 and op.beat_input(node, unit) == "through":
                # a per-pixel unit now folds the channels of a beat
                if op.lane_foldable and not unit.fused and node.name not in override:
                    unit.pe = op.folding(node, parent, target, beats=unit.beats)[0]
                unit.paced = op.paced(node, target, unit.beats)
            unit.cycles = op.cycles(node, parent, unit)
        return True

    def rank(planned):
        usage = planned[4]
        fractions = [usage[k] / limits[k] for k in limits]
        if not fits(usage):
            return (True, max(fractions), planned[2])
        return (False, planned[2], sum(fractions))

    def plan(target):
        units = fold_units(target)
        # the beat variant starts from the same folding (estimate changes its units)
        copies = {name: replace(u) for name, u in units.items()}
        pixels = estimate(units)
        if streams == "pixels":
            return pixels
        units = copies
        if fuse:
            _fuse_activations(g, units, parents, readers, family, always=True)
        if not beat_units(units, target):
            return pixels
        beats = estimate(units)
        return beats if streams == "beats" else min(pixels, beats, key=rank)

    def estimate(units):
        cells = dict.fromkeys(CELLS, 0)
        frame = cyc.pipeline_cycles([u.cycles for u in units.values()])
        for node in g:
            op, unit, parent = op_of(node), units[node.name], parents[node.name]
            # in place only where it costs at most 1/IN_PLACE_SLACK of the frame interval
            # the other units set (not merely of the target: that would trade frames for
            # flip-flops), and never beyond a target the caller gave (--fps is a promise)
            slack = frame + frame // IN_PLACE_SLACK
            if op.reads_in_place(node, unit, max(frame, min(slack, target_cycles or slack))):
                unit.in_place = True
                unit.cycles = op.cycles(node, parent, unit)
            unit.resources = estimate_unit(op.resource_features(g, node, parent, unit),
                                           node.op, family)
        frame = cyc.pipeline_cycles([u.cycles for u in units.values()])
        fifos = fifo_depths(g, units, frame)
        rams = _fifo_rams(g, fifos, family, fifo_mode, units, limits)
        for _ in range(3):
            # a FIFO in block RAM whose read is late registers it, one cycle later: the
            # depths are sized again with that latency (deeper only, so still block RAM)
            if not _register_block_fifos(g, units, fifos, rams, family):
                break
            fifos = fifo_depths(g, units, frame)
            rams = _fifo_rams(g, fifos, family, fifo_mode, units, limits)
        extra = []
        for consumer, refs in fifos.items():
            for ref, depth in refs.items():
                ram = rams.get(consumer, {}).get(ref, "auto")
                src = Graph.source(ref)
                registered = any(g[consumer].inputs[slot] == ref
                                 for slot in units[consumer].registered_fifos)
                extra.append(estimate_unit(stream_fifo_features(g, g[src], depth, ram,
                                                                units[src].beats, registered),
                                           "fifo", family))
        for ref, n in readers.items():
            if n > 1:
                src = g[Graph.source(ref)]
                bits = src.channels * src.bit_width // units[src.name].beats
                extra.append(estimate_unit(fork_features(bits, n), "fork", family))
        for r in [u.resources for u in units.values()] + extra:
            for k in CELLS:
                cells[k] += r.get(k, 0)
        return units, (fifos, rams), frame, cells, board_usage(cells, family)

    def fits(usage):
        return all(usage[k] <= limits[k] for k in limits)

    def over(usage):
        return ", ".join(f"{k} {usage[k]:,} > {limits[k]:,}" for k in limits
                         if usage[k] > limits[k])

    if target_cycles:
        chosen = plan(target_cycles)
        if not fits(chosen[4]):
            msg = (f"{target_cycles} cycles/frame ({budget['clock_mhz'] * 1e6 / target_cycles:,.0f}"
                   f" frames/s at {budget['clock_mhz']:g} MHz) does not fit {board} at "
                   f"{max_util:.0%} utilization: {over(chosen[4])}")
            if fps is not None:
                raise ValueError(msg + "; lower --fps, raise --max-util or use a larger board")
            notes.append(msg)
    else:
        # The fastest design that fits: double the interval until it fits, then bisect
        # between the last that did not and the first that did. Every unit is folded to
        # just meet the interval, so nothing is spent on units that are not the bottleneck.
        lo, hi, chosen = None, first, plan(first)
        if chosen[2] > first:
            # time-shared bases cannot reach the input rate: start from the fastest the
            # design can do, every other unit folded to it
            first = hi = chosen[2]
            chosen = plan(first)
        at_first = chosen[4]
        while not fits(chosen[4]) and hi < 1 << 22:
            lo, hi = hi, hi * 2
            chosen = plan(hi)
        if not fits(chosen[4]):
            folded = ("with every other unit fully folded and the --folding units as given"
                      if override else "even fully folded")
            notes.append(f"does not fit {board} at {max_util:.0%} utilization {folded} "
                         f"({over(chosen[4])}); scheduled at its fastest, {first} cycles/frame, "
                         "instead: it needs a larger device")
            chosen = plan(first)
        elif lo is not None:
            while hi - lo > max(1, lo // 16):
                mid = (lo + hi) // 2
                trial = plan(mid)
                if fits(trial[4]):
                    hi, chosen = mid, trial
                else:
                    lo = mid
            notes.append(f"folded to {chosen[2]} cycles/frame, the fastest that fits {board} "
                         f"at {max_util:.0%} utilization ({first} would need: "
                         f"{over(at_first)})")
    units, (fifos, rams), frame, cells, usage = chosen
    return Schedule(g, board, units, fifos, frame, usage, budget, notes=notes, cells=cells,
                    max_util=max_util, fifo_rams=rams)
