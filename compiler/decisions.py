"""The implementation decisions of a dataflow schedule: one pass each, run in order.

A :class:`Candidate` is one graph (its bases already mapped, :mod:`.sharing`) folded
for one frame interval, with one choice of line buffers and one of streams; the search
(:func:`.schedule.schedule`) tries candidates and keeps the best. :func:`decide` runs
:data:`DECISIONS` over a candidate; each pass sets the fields it owns, of every
:class:`Unit` or of the candidate, from the graph, the options and what the passes
before it set:

1. :func:`folding`: PE x SIMD of every MVU, the lanes of every lane-foldable unit and
   which units run paced (``pe``, ``simd``, ``n_in``, ``paced``).
2. :func:`late_reads`: MVUs whose block-RAM weight ROM or whose multipliers' products
   the family registers once more (``registered_rom``, ``registered_products``).
3. :func:`line_buffers`: each window's line buffer in logic, block RAM or one serial
   block RAM (``line_ram``).
4. :func:`unit_cycles`: each unit's cycles per frame from the decisions so far
   (``cycles``).
5. :func:`fused_activations`: thresholds and post-ops done in the MVU in front of them,
   where that costs no more (in a beat candidate wherever it can) (``fused``,
   ``activation``, ``cycles``).
6. :func:`beat_streams`: the tensors that travel as beats narrower than a pixel, and
   the units passing beats through folded to them (``beats``, ``beat_groups``,
   ``in_beats``; ``pe``, ``paced``, ``cycles``).
7. :func:`in_place_reads`: MVUs that read their serial window in place, without an
   input buffer (``in_place``, ``cycles``).
8. :func:`unit_resources`: each unit's resource estimate (``resources``).
9. :func:`fifo_sizes`: the frame interval and the depth of every join's FIFOs
   (:attr:`Candidate.frame`, :attr:`Candidate.fifos`).
10. :func:`fifo_memories`: the FIFOs marked for block RAM (:attr:`Candidate.fifo_rams`).
11. :func:`registered_fifo_reads`: the join inputs whose block-RAM FIFO read is
    registered once more (``registered_fifos``; :attr:`Candidate.fifos` and
    :attr:`Candidate.fifo_rams` sized again with that latency).
12. :func:`resource_totals`: the units', FIFOs' and forks' cells summed and counted as
    the board budgets them (:attr:`Candidate.cells`, :attr:`Candidate.usage`).

The order is the dependence: pacing and foldings first (every later rule reads them),
the ROM and product registers before the line buffers (as the units were built when
one loop decided all three), cycles once those are known, fusing by the units' cost
at those cycles, beats after fusing (a fused post-op passes its MVU's beats on),
in-place reads by the frame interval all of that sets, the FIFOs last, sized from the
units' final timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..devices import get_family
from . import cycles as cyc
from .beats import assign_beats
from .graph import Graph
from .ops import TIMING_FRAMES, op_of
from .resources import (CELLS, LATE_BLOCK_READ, estimate_unit, fifo_in_block_ram,
                        fork_features, logic_sites, stream_fifo_features)

if TYPE_CHECKING:           # the options record is the search's (it imports this module)
    from .schedule import ScheduleOptions

__all__ = ["DECISIONS", "Candidate", "GraphContext", "Unit", "decide", "folding",
           "late_reads", "line_buffers", "unit_cycles", "fused_activations",
           "beat_streams", "in_place_reads", "unit_resources", "fifo_sizes",
           "fifo_memories", "registered_fifo_reads", "resource_totals", "fifo_depths",
           "ideal_times", "through_fifo", "board_usage", "FIFO_LATENCY", "FIFO_MARGIN",
           "FIFO_MIN_DEPTH", "IN_PLACE_SLACK"]

#: An MVU reads its serial window in place (no input buffer) where that lengthens the
#: frame interval by at most this fraction of it: the window refills only after the
#: vector's last step, ``kernel**2 + 1`` cycles more per vector, which on a design whose
#: MVUs all take the same thousands of cycles a vector (the CIFAR-size network's
#: stages, fully folded) no MVU could otherwise afford, while the buffers are a whole
#: window of K*C channels each.
IN_PLACE_SLACK = 256

FIFO_MARGIN = 2
#: StreamFIFO (SyncFIFOBuffered) passes one beat per cycle only from depth 3 on.
FIFO_MIN_DEPTH = 3
#: Cycles from a beat written into an empty :class:`~groupnet_hw.hw.fifo.StreamFIFO` to
#: the beat being valid on its output (its docstring's latency).
FIFO_LATENCY = 2


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


# ---------------------------------------------------------------- the candidate
@dataclass
class GraphContext:
    """What every candidate of one graph shares: the graph, the options, the board's
    budget and the facts of the graph the passes read.

    Parameters
    ----------
    graph : Graph
        The graph to schedule, its bases already mapped.
    options : ScheduleOptions
        :func:`.schedule.schedule`'s options.
    budget : dict
        The board's budget (:meth:`groupnet_hw.devices.Board.budget`).
    override : dict
        ``{node name: (pe, simd, n_in)}``: the checked ``folding`` option.
    target_cycles : int, optional
        The frame interval the caller asked for (``target_cycles``, or from ``fps``):
        no in-place read may lengthen the frame beyond it. ``None``: the search's own.
    """

    graph: Graph
    options: "ScheduleOptions"
    budget: dict
    override: dict = field(default_factory=dict)
    target_cycles: int | None = None
    #: The board's family (``budget["family"]``).
    family: str = field(init=False)
    #: Each budgeted resource's limit at ``options.max_util``.
    limits: dict = field(init=False)
    #: Node name -> the producer of its first input (``None`` for the graph's input).
    parents: dict = field(init=False)
    #: Tensor ref -> how many inputs read it (more than one: a fork).
    readers: dict = field(init=False)

    def __post_init__(self):
        g = self.graph
        self.family = self.budget["family"]
        self.limits = {k: int(v * self.options.max_util)
                       for k, v in self.budget["limits"].items()}
        self.parents = {node.name: g.producer(node.inputs[0]) if node.inputs else None
                        for node in g}
        self.readers = {}
        for node in g:
            for ref in node.inputs:
                self.readers[ref] = self.readers.get(ref, 0) + 1


@dataclass
class Candidate:
    """One configuration the search tries, and what the passes decide of it.

    Parameters
    ----------
    context : GraphContext
    target : int
        The frame interval every unit is folded to meet.
    line_buffers : {"logic", "block", "serial"}
        Where the windows' line buffers may go (:func:`line_buffers`).
    streams : {"pixels", "beats"}
        How tensors travel between units (:func:`beat_streams`).
    """

    context: GraphContext
    target: int
    line_buffers: str = "logic"
    streams: str = "pixels"
    #: Node name -> its :class:`Unit` (set by :func:`folding`).
    units: dict = field(default_factory=dict)
    #: Cycles per frame of the pipeline, its slowest unit (:func:`fifo_sizes`).
    frame: int | None = None
    #: Consumer node name -> {input ref: FIFO depth} (:func:`fifo_sizes`).
    fifos: dict = field(default_factory=dict)
    #: Consumer node name -> {input ref: "block"} (:func:`fifo_memories`).
    fifo_rams: dict = field(default_factory=dict)
    #: Estimated cells of the whole design (:func:`resource_totals`).
    cells: dict = field(default_factory=dict)
    #: The budgeted resources of the whole design (:func:`resource_totals`).
    usage: dict = field(default_factory=dict)

    @property
    def graph(self):
        return self.context.graph

    @property
    def options(self):
        return self.context.options

    @property
    def family(self):
        return self.context.family

    @property
    def limits(self):
        return self.context.limits

    def parent(self, node):
        """The producer of ``node``'s first input (``None`` for the graph's input)."""
        return self.context.parents[node.name]

    def fork(self, **changes):
        """A copy with ``changes`` whose units are copies (its passes change them, not
        this candidate's)."""
        return replace(self, units={name: replace(u) for name, u in self.units.items()},
                       **changes)

    def line_rams(self):
        """Every unit's ``line_ram``: after :data:`FRONT`, the only decision in which two
        candidates of one graph and target with different ``line_buffers`` can differ
        (no later pass reads ``line_buffers``), so equal ones decide the same design."""
        return tuple(u.line_ram for u in self.units.values())

    def fits(self):
        """Whether the design is within every budgeted resource's limit."""
        return all(self.usage[k] <= v for k, v in self.limits.items())

    def over(self):
        """The resources over their limits, in words."""
        return ", ".join(f"{k} {self.usage[k]:,} > {v:,}" for k, v in self.limits.items()
                         if self.usage[k] > v)

    def rank(self):
        """Sort key of two candidates at one target: fitting first, then the shorter
        frame interval, then the smaller design; of two that do not fit, the one least
        over its tightest budget."""
        fractions = [self.usage[k] / v for k, v in self.limits.items()]
        if not self.fits():
            return (True, max(fractions), self.frame)
        return (False, self.frame, sum(fractions))


def decide(candidate, passes=None):
    """Run ``passes`` (default :data:`DECISIONS`) over ``candidate`` in order.

    Returns
    -------
    Candidate or None
        ``candidate``, decided; ``None`` where a pass found it is no design of its own
        (beat streams where no tensor can travel as beats): the rest is not run.
    """
    for decision in DECISIONS if passes is None else passes:
        if decision(candidate) is False:
            return None
    return candidate


# ---------------------------------------------------------------- the passes
def folding(c: Candidate):
    """Fold every unit to just meet the target (the ``folding`` option's MVUs as given)
    and pace those that can run at one pixel every two cycles: new units."""
    override = c.context.override
    c.units = {}
    for node in c.graph:
        op = op_of(node)
        pe, simd, n_in = override.get(node.name) or op.folding(node, c.parent(node), c.target)
        c.units[node.name] = Unit(node.name, node.op, 0, pe, simd, n_in,
                                  paced=op.paced(node, c.target))


def late_reads(c: Candidate):
    """Register once more, where the family's block RAM or DSP output is late, an MVU's
    weight ROM read and its multipliers' products (:meth:`~.ops.base.Op.registers_rom`,
    :meth:`~.ops.base.Op.registers_products`)."""
    for node in c.graph:
        op, unit = op_of(node), c.units[node.name]
        unit.registered_rom = op.registers_rom(node, unit, c.family)
        unit.registered_products = op.registers_products(node, unit, c.family)


def line_buffers(c: Candidate):
    """Put each line buffer in block RAM (one memory per ring row and window column) or
    one serial block RAM memory where the candidate's ``line_buffers`` asks and the
    family's block RAM takes it (:meth:`~.ops.base.Op.block_line_ram`)."""
    if c.line_buffers == "logic":
        return
    for node in c.graph:
        unit = c.units[node.name]
        unit.line_ram = op_of(node).block_line_ram(
            node, c.parent(node), unit, c.family, serial=c.line_buffers == "serial") or "logic"


def unit_cycles(c: Candidate):
    """Each unit's cycles per frame, from its folding and line buffer."""
    for node in c.graph:
        c.units[node.name].cycles = op_of(node).cycles(node, c.parent(node), c.units[node.name])


def fused_activations(c: Candidate):
    """Do a threshold's or a post-op's work in the MVU in front of it (the ``fuse_activations``
    option): where that costs nothing (:func:`_fuse_activations`), and with beat streams
    everywhere it can."""
    if c.options.fuse_activations:
        _fuse_activations(c, always=c.streams == "beats")


def beat_streams(c: Candidate):
    """With ``streams="beats"``, send what can go as beats as beats (:mod:`.beats`) and
    fold each per-pixel unit passing beats through to the channels of a beat. False
    where no tensor can: the candidate is the one in pixels."""
    if c.streams != "beats":
        return None
    g, units, override = c.graph, c.units, c.context.override
    if not assign_beats(g, units):
        return False
    for node in g:
        op, unit, parent = op_of(node), units[node.name], c.parent(node)
        if unit.beats > 1 and op.beat_input(node, unit) == "through":
            # a per-pixel unit now folds the channels of a beat
            if op.lane_foldable and not unit.fused and node.name not in override:
                unit.pe = op.folding(node, parent, c.target, beats=unit.beats)[0]
            unit.paced = op.paced(node, c.target, unit.beats)
        unit.cycles = op.cycles(node, parent, unit)
    return None


def in_place_reads(c: Candidate):
    """Let an MVU read its serial window in place (:meth:`~.ops.base.Op.reads_in_place`)
    where that costs at most 1/:data:`IN_PLACE_SLACK` of the frame interval the other
    units set (not merely of the target: that would trade frames for flip-flops), and
    never beyond a target the caller gave (``--fps`` is a promise)."""
    frame = cyc.pipeline_cycles([u.cycles for u in c.units.values()])
    slack = frame + frame // IN_PLACE_SLACK
    limit = max(frame, min(slack, c.context.target_cycles or slack))
    for node in c.graph:
        op, unit = op_of(node), c.units[node.name]
        if op.reads_in_place(node, unit, limit):
            unit.in_place = True
            unit.cycles = op.cycles(node, c.parent(node), unit)


def unit_resources(c: Candidate):
    """Each unit's cells, by the calibrated model (:mod:`.resources`)."""
    for node in c.graph:
        unit = c.units[node.name]
        unit.resources = estimate_unit(
            op_of(node).resource_features(c.graph, node, c.parent(node), unit),
            node.op, c.family)


def fifo_sizes(c: Candidate):
    """The frame interval (the slowest unit) and every join FIFO's depth
    (:func:`fifo_depths`)."""
    c.frame = cyc.pipeline_cycles([u.cycles for u in c.units.values()])
    c.fifos = fifo_depths(c.graph, c.units, c.frame)


def fifo_memories(c: Candidate):
    """Mark FIFOs for block RAM (the ``fifos`` option): all of them in ``block``; in
    ``auto`` only where the family's distributed RAM is over its budget, the most
    distributed RAM freed per block first, while the block RAM stays within its budget
    (the other units' and the FIFOs' own counted)."""
    g, fifos, family, units, limits = c.graph, c.fifos, c.family, c.units, c.limits
    refs = [(consumer, ref) for consumer, rs in fifos.items() for ref in rs]

    def cells(consumer, ref, ram):
        src = Graph.source(ref)
        feats = stream_fifo_features(g, g[src], fifos[consumer][ref], ram, units[src].beats)
        return estimate_unit(feats, "fifo", family)

    if c.options.fifos == "block":
        chosen = refs
    elif "lutram" not in limits:
        chosen = []
    else:
        auto = {k: cells(*k, "auto") for k in refs}
        lutram = sum(u.resources.get("lutram", 0) for u in units.values()) + \
            sum(cell["lutram"] for cell in auto.values())
        bram = sum(u.resources.get("bram", 0) for u in units.values()) + \
            sum(cell["bram"] for cell in auto.values())
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
    c.fifo_rams = {}
    for consumer, ref in chosen:
        c.fifo_rams.setdefault(consumer, {})[ref] = "block"


#: Rounds of :func:`registered_fifo_reads`: registering deepens FIFOs, which can move
#: another FIFO to block RAM.
REGISTER_ROUNDS = 3


def registered_fifo_reads(c: Candidate):
    """A FIFO in block RAM whose read is late (:data:`..resources.LATE_BLOCK_READ`)
    registers it, one cycle later: the depths are sized again with that latency (deeper
    only, so still block RAM) and the memories marked again, until nothing changes."""
    for _ in range(REGISTER_ROUNDS):
        if not _register_block_fifos(c):
            break
        c.fifos = fifo_depths(c.graph, c.units, c.frame)
        fifo_memories(c)


def resource_totals(c: Candidate):
    """The design's cells (units, join FIFOs, forks) and its budgeted resources."""
    g, units, family = c.graph, c.units, c.family
    extra = []
    for consumer, refs in c.fifos.items():
        for ref, depth in refs.items():
            ram = c.fifo_rams.get(consumer, {}).get(ref, "auto")
            src = Graph.source(ref)
            registered = any(g[consumer].inputs[slot] == ref
                             for slot in units[consumer].registered_fifos)
            extra.append(estimate_unit(stream_fifo_features(g, g[src], depth, ram,
                                                            units[src].beats, registered),
                                       "fifo", family))
    for ref, n in c.context.readers.items():
        if n > 1:
            src = g[Graph.source(ref)]
            bits = src.channels * src.bit_width // units[src.name].beats
            extra.append(estimate_unit(fork_features(bits, n), "fork", family))
    cells = dict.fromkeys(CELLS, 0)
    for r in [u.resources for u in units.values()] + extra:
        for k in CELLS:
            cells[k] += r.get(k, 0)
    c.cells, c.usage = cells, board_usage(cells, family)


#: The passes, in the order :func:`decide` runs them (the module docstring's list).
DECISIONS = (folding, late_reads, line_buffers, unit_cycles, fused_activations,
             beat_streams, in_place_reads, unit_resources, fifo_sizes, fifo_memories,
             registered_fifo_reads, resource_totals)

#: The passes up to the line buffers: what tells two candidates' inputs to the rest
#: apart (the search's memo key, :meth:`Candidate.line_rams`), cheap to run.
FRONT = DECISIONS[:DECISIONS.index(line_buffers) + 1]


# ---------------------------------------------------------------- pass helpers
def _fuse_activations(c: Candidate, always=False):
    """Mark every unit whose work its producer's MVU can do (thresholds, a post-op; the
    MVU feeding nothing else) ``fused``, and that MVU's unit ``activation``: where the
    fused MVU's estimate has no more DSP blocks, and no more LUTs and flip-flops
    together, than the two units it replaces. (A post-op in an MVU multiplies ``PE``
    channels at a time, where the unit on its own runs on as few lanes as its interval
    allows: on a DSP-bound board that decides; at full rate the MVU's product register
    can outweigh the unit's output register.) ``always``: wherever it can (with beat
    streams, :mod:`.beats`, a post-op unit of its own would keep its MVU's output, and
    every tensor joined to it, in whole pixels)."""
    g, units, parents, readers = c.graph, c.units, c.context.parents, c.context.readers

    def cells(node, unit):
        feats = op_of(node).resource_features(g, node, parents[node.name], unit)
        cell = estimate_unit(feats, node.op, c.family)
        return cell["dsp"], cell["lut"] + cell["carry"] + cell["ff"]

    for node in g:
        parent = parents[node.name]
        table = op_of(node).activation(node) if parent is not None else None
        if (table is None or not op_of(parent).takes_activation
                or readers.get(node.inputs[0]) != 1 or units[node.name].fused):
            continue
        mvu = units[parent.name]
        fused = replace(mvu, activation=table.stages)
        if not always:
            (dsp, logic), (dsp0, logic0), (dsp1, logic1) = (
                cells(parent, fused), cells(parent, mvu), cells(node, units[node.name]))
            if dsp > dsp0 + dsp1 or logic > logic0 + logic1:
                continue
        units[parent.name] = fused          # same cycles: the stages add latency only
        unit = units[node.name]
        unit.fused = True
        unit.cycles = op_of(node).cycles(node, parent, unit)


def _register_block_fifos(c: Candidate):
    """Set every join's ``registered_fifos``: the input slots whose FIFO memory the family
    builds in block RAM with a late read (:data:`..resources.LATE_BLOCK_READ`). True
    where that changed anything."""
    g, units, family = c.graph, c.units, c.family
    changed = False
    for consumer, refs in c.fifos.items():
        slots = ()
        if family in LATE_BLOCK_READ:
            ram = c.fifo_rams.get(consumer, {})
            slots = tuple(
                slot for slot, ref in enumerate(g[consumer].inputs) if ref in refs and
                fifo_in_block_ram(stream_fifo_features(
                    g, g[Graph.source(ref)], refs[ref], ram.get(ref, "auto"),
                    units[Graph.source(ref)].beats), family))
        unit = units[consumer]
        changed |= slots != unit.registered_fifos
        unit.registered_fifos = slots
    return changed


# ---------------------------------------------------------------- FIFO sizing
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
