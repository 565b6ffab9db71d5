"""Dataflow schedule: the search over implementation choices, and its result.

Every graph node becomes one streaming unit (binary and integer convolutions
become a sliding window plus a matrix-vector unit). The schedule

- picks PE x SIMD for each matrix-vector unit: the least parallelism that meets the
  target frame interval (by default the input stream's own rate, one pixel per
  cycle), relaxing the target until the estimate fits the board;
- sizes the FIFOs on every fork (base fan-out, residual skip) from the worst-case
  lookahead of the branches that rejoin, so no back-pressure pattern can deadlock;
- predicts cycles per frame per node and for the pipeline (its slowest node),
  and estimates resources (Cyclone V ALMs, M10K blocks, DSP blocks).

Each of those implementation decisions is one pass of :mod:`.decisions`, run in the
order :data:`.decisions.DECISIONS` lists over a candidate: one graph folded for one
frame interval with one choice of line buffers and of streams. This module is the
search: it tries candidates (base mappings x line-buffer modes x stream kinds x frame
intervals) and keeps the best; each candidate is decided once (:class:`GraphSearch`
memoises them across the line-buffer modes). Each op's cycle, timing and resource
model is its definition's (:mod:`.ops`). The K bases of a block are mapped side by
side or time-shared on one set of units (:mod:`.sharing`), whichever is faster within
the budget; the report states it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from itertools import combinations

from ..devices import get_board
from ..hw.fifo import FIFO_RAM_KINDS, FIFOChoices
from . import cycles as cyc
from .decisions import (DECISIONS, FIFO_LATENCY, FIFO_MARGIN, FIFO_MIN_DEPTH, FRONT,
                        IN_PLACE_SLACK, Candidate, GraphContext, Unit, board_usage, decide,
                        fifo_depths, ideal_times, through_fifo)
from .graph import Graph
from .ops import op_of
from .ops.window import choose_folding
from .resources import block_ram_blocks
from .sharing import base_groups, share_bases

# Unit, the FIFO sizing and board_usage live with the decisions that set them
# (:mod:`.decisions`); they are re-exported here, where their users import them.
__all__ = ["Schedule", "ScheduleOptions", "schedule", "search", "GraphSearch",
           "choose_folding", "fifo_depths", "ideal_times", "check_fits", "memory_floor",
           "Unit", "board_usage", "through_fifo", "FIFO_LATENCY", "FIFO_MARGIN",
           "FIFO_MIN_DEPTH", "IN_PLACE_SLACK"]

#: Fraction of each resource the schedule may fill (``--max-util``): place and route
#: needs headroom, and the host link is not in the estimate.
DEFAULT_MAX_UTIL = 0.9


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

    def fifo_choices(self, consumer, slot):
        """The :class:`groupnet_hw.hw.fifo.FIFOChoices` of the FIFO in front of input
        ``slot`` of node ``consumer`` (its depth, memory and output register, decided by
        :func:`.decisions.fifo_sizes`, :func:`.decisions.fifo_memories` and
        :func:`.decisions.registered_fifo_reads`), or ``None`` where that input has no
        FIFO: the one place these decisions become a FIFO's record."""
        ref = self.graph[consumer].inputs[slot]
        depth = self.fifos.get(consumer, {}).get(ref)
        if not depth:
            return None
        return FIFOChoices(depth, self.fifo_ram(consumer, ref),
                           out_register=slot in self.units[consumer].registered_fifos)

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

#: :func:`schedule`'s ``streams``.
STREAM_CHOICES = ("pixels", "beats", "auto")

#: Choices of :func:`schedule`'s ``line_buffers``.
LINE_BUFFER_CHOICES = ("auto", "logic", "block", "serial")


@dataclass(frozen=True)
class ScheduleOptions:
    """Every option of :func:`schedule` (see its parameters), checked once; the search
    and the passes (:mod:`.decisions`) read them from here.

    ``folding`` is kept as ``((node name, (pe, simd)), ...)`` in the order given, so
    that the record cannot change while the search runs.

    Raises
    ------
    ValueError
        An option out of its choices or range, or an unknown board: one line.
    """

    board: str = "de10nano"
    target_cycles: int | None = None
    fps: float | None = None
    max_util: float = DEFAULT_MAX_UTIL
    folding: tuple | None = None
    bases: str = "auto"
    line_buffers: str = "auto"
    fuse_activations: bool = True
    fifos: str = "auto"
    streams: str = "auto"

    def __post_init__(self):
        for name, allowed in (("bases", BASE_MAPPINGS), ("line_buffers", LINE_BUFFER_CHOICES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, "
                                 f"not {getattr(self, name)!r}")
        get_board(self.board)               # rejects an unknown board in one line
        for name, allowed in (("streams", STREAM_CHOICES), ("fifos", FIFO_RAM_KINDS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, "
                                 f"not {getattr(self, name)!r}")
        if not 0 < self.max_util <= 1:
            raise ValueError(f"max_util must be in (0, 1], not {self.max_util}")
        if self.fps is not None and self.fps <= 0:
            raise ValueError(f"fps must be positive, not {self.fps}")
        if self.folding:
            items = self.folding.items() if isinstance(self.folding, dict) else self.folding
            object.__setattr__(self, "folding", tuple(
                (name, tuple(value) if isinstance(value, list) else value)
                for name, value in items))
        else:
            object.__setattr__(self, "folding", None)

    def frame_target(self, clock_mhz):
        """The frame interval asked for: ``target_cycles``, or the one of ``fps`` at
        ``clock_mhz``; ``None`` (or 0): the fastest that fits."""
        if self.fps is not None:
            return max(1, int(clock_mhz * 1e6 // self.fps))
        return self.target_cycles


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
    options = ScheduleOptions(board=board, target_cycles=target_cycles, fps=fps,
                              max_util=max_util, folding=folding, bases=bases,
                              line_buffers=line_buffers, fuse_activations=fuse_activations,
                              fifos=fifos, streams=streams)
    return search(g, options)


def search(g: Graph, options: ScheduleOptions) -> Schedule:
    """:func:`schedule` with its options checked: each line-buffer mode with the best
    base mapping (:class:`BaseMappings`), the best of those kept and the others that
    differ in its notes."""
    family = get_board(options.board).family
    modes = [options.line_buffers]
    if options.line_buffers == "auto":
        modes = ["logic"] + (["block", "serial"] if _block_lines(g, family) else [])
    mappings = BaseMappings(g, options)
    errors, candidates = [], []
    for mode in modes:
        try:
            candidates.append(mappings.best(mode))
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


#: Up to this many blocks with shareable bases, ``bases="auto"`` tries every mix.
MAX_MIXED_GROUPS = 3


class BaseMappings:
    """The mappings of one network's bases :func:`schedule` tries (``bases``,
    :mod:`.sharing`): each mapped graph is built, and searched (:class:`GraphSearch`),
    once for every line-buffer mode.

    Parameters
    ----------
    g : Graph
        The network, its bases side by side.
    options : ScheduleOptions
    """

    def __init__(self, g: Graph, options: ScheduleOptions):
        self.graph, self.options = g, options
        self._graphs, self._searches, self._groups = {(): g}, {}, None

    def groups(self):
        """The mixers of the blocks whose bases can be time-shared."""
        if self._groups is None:
            self._groups = [grp.mixer for grp in base_groups(self.graph)]
        return self._groups

    def graph_of(self, mixers):
        """The network with the blocks of ``mixers`` time-shared (``()``: none;
        ``None``: every block whose bases can be)."""
        if mixers not in self._graphs:
            self._graphs[mixers] = share_bases(self.graph, mixers)
        return self._graphs[mixers]

    def search_of(self, mixers) -> GraphSearch:
        """The :class:`GraphSearch` of :meth:`graph_of` ``mixers`` (raises its
        ``ValueError`` each time it is asked for, as a mode's error)."""
        if mixers not in self._searches:
            self._searches[mixers] = GraphSearch(self.graph_of(mixers), self.options)
        return self._searches[mixers]

    def best(self, line_buffers) -> Schedule:
        """:func:`schedule` with one choice of line buffers: the base mapping the
        ``bases`` option asks for, or (``auto``) the best of every mix of shared and
        side-by-side blocks for a few blocks, beyond that of the two uniform mappings
        (each trial is a whole folding search)."""
        bases = self.options.bases
        if bases == "parallel" or (bases == "auto" and self.options.folding):
            return self.search_of(()).fold(line_buffers)
        groups = self.groups()
        if not groups:
            if bases == "shared":
                raise ValueError("this network has no blocks whose bases can be time-shared "
                                 "(K = 1, or no mixer joins isomorphic bases)")
            return self.search_of(()).fold(line_buffers)
        if bases == "shared":
            shared = self.search_of(None).fold(line_buffers)
            shared.base_mapping = "shared"
            return shared
        if len(groups) <= MAX_MIXED_GROUPS:
            subsets = [c for n in range(len(groups) + 1) for c in combinations(groups, n)]
        else:
            subsets = [(), tuple(groups)]
        errors, candidates = [], []
        for subset in subsets:
            self.graph_of(subset)           # a graph that cannot be built fails the mode
            try:
                sched = self.search_of(subset).fold(line_buffers)
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


class GraphSearch:
    """The folding search of one graph as it is (bases already mapped): the frame
    interval to fold for, each candidate decided by :data:`.decisions.DECISIONS`.

    A candidate of a frame interval is decided once (:meth:`plan`): the search asks for
    an interval again (the fastest, after a search that found nothing fits), and two
    line-buffer modes ask for the same candidate wherever neither put a line buffer
    where the other did not.

    Parameters
    ----------
    g : Graph
    options : ScheduleOptions

    Raises
    ------
    ValueError
        The graph's weights and line buffers alone exceed the board's RAM
        (:func:`check_fits`), or the ``folding`` option does not fit the graph.
    """

    def __init__(self, g: Graph, options: ScheduleOptions):
        budget = get_board(options.board).budget()
        check_fits(g, options.board)
        override = _folding_override(g, dict(options.folding or ()))
        self.context = GraphContext(g, options, budget, override,
                                    options.frame_target(budget["clock_mhz"]))
        #: (target, every unit's line_ram) -> the decided candidate kept at that target
        self._decided = {}

    def plan(self, line_buffers, target) -> Candidate:
        """The candidate kept at frame interval ``target`` with ``line_buffers``: in
        pixels, in beats, or (``streams="auto"``) the better of the two
        (:meth:`.decisions.Candidate.rank`)."""
        front = decide(Candidate(self.context, target, line_buffers=line_buffers), FRONT)
        key = (target, front.line_rams())
        if key not in self._decided:
            self._decided[key] = self._decide(front)
        return self._decided[key]

    def _decide(self, front):
        """The rest of the decisions, from ``front`` (:data:`.decisions.FRONT` run),
        for the stream kinds the ``streams`` option asks for."""
        rest = DECISIONS[len(FRONT):]
        streams = self.context.options.streams
        # the beat variant starts from the same folding (its passes change its units)
        beats = decide(front.fork(streams="beats"), rest) if streams != "pixels" else None
        if beats is not None and streams == "beats":
            return beats
        pixels = decide(front, rest)
        return pixels if beats is None else min(pixels, beats, key=Candidate.rank)

    def fold(self, line_buffers) -> Schedule:
        """:func:`schedule` of the graph with line buffers in block RAM (``line_buffers``
        "block" or "serial", :func:`schedule`'s ``line_buffers``) wherever the family's
        block RAM takes them: at the frame interval asked for, else the fastest that
        fits the board."""
        ctx, options = self.context, self.context.options
        g, board, max_util, budget = ctx.graph, options.board, options.max_util, ctx.budget
        target_cycles = ctx.target_cycles

        def plan(target):
            return self.plan(line_buffers, target)

        notes = []
        inp = g[g.input]
        first = cyc.window_cycles(inp.height, inp.width)
        if target_cycles:
            chosen = plan(target_cycles)
            if not chosen.fits():
                clock = budget["clock_mhz"]
                msg = (f"{target_cycles} cycles/frame ({clock * 1e6 / target_cycles:,.0f}"
                       f" frames/s at {clock:g} MHz) does not fit {board} at "
                       f"{max_util:.0%} utilization: {chosen.over()}")
                if options.fps is not None:
                    raise ValueError(msg + "; lower --fps, raise --max-util or use a larger board")
                notes.append(msg)
        else:
            # The fastest design that fits: double the interval until it fits, then bisect
            # between the last that did not and the first that did. Every unit is folded to
            # just meet the interval, so nothing is spent on units that are not the bottleneck.
            lo, hi, chosen = None, first, plan(first)
            if chosen.frame > first:
                # time-shared bases cannot reach the input rate: start from the fastest the
                # design can do, every other unit folded to it
                first = hi = chosen.frame
                chosen = plan(first)
            at_first = chosen
            while not chosen.fits() and hi < 1 << 22:
                lo, hi = hi, hi * 2
                chosen = plan(hi)
            if not chosen.fits():
                folded = ("with every other unit fully folded and the --folding units as given"
                          if ctx.override else "even fully folded")
                notes.append(f"does not fit {board} at {max_util:.0%} utilization {folded} "
                             f"({chosen.over()}); scheduled at its fastest, {first} cycles/frame, "
                             "instead: it needs a larger device")
                chosen = plan(first)
            elif lo is not None:
                while hi - lo > max(1, lo // 16):
                    mid = (lo + hi) // 2
                    trial = plan(mid)
                    if trial.fits():
                        hi, chosen = mid, trial
                    else:
                        lo = mid
                notes.append(f"folded to {chosen.frame} cycles/frame, the fastest that fits "
                             f"{board} at {max_util:.0%} utilization ({first} would need: "
                             f"{at_first.over()})")
        # copies: the candidate is memoised, and another mode's schedule may hold it too
        return Schedule(g, board, {name: replace(u) for name, u in chosen.units.items()},
                        {k: dict(v) for k, v in chosen.fifos.items()}, chosen.frame,
                        dict(chosen.usage), budget, notes=notes, cells=dict(chosen.cells),
                        max_util=max_util,
                        fifo_rams={k: dict(v) for k, v in chosen.fifo_rams.items()})


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
