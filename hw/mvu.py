"""Folded matrix-vector units (MVUs): one output pixel per input window.

All units share one fold sequencer and pipeline (:class:`_FoldedMVU`); they
differ only in the lane operation applied to each (output fold, input fold)
step: XNOR-popcount for binary layers, signed sums of n-bit activations for
binary weights on n-bit layers, multiply-accumulate for the full-precision
first layer. The pipeline is four sub-components, each with its ports, latency and
throughput: the issue controller and input buffer (:class:`_Issue`), the weight ROM
(:class:`_WeightROM`), the terms and their adder tree (:class:`_AdderTree`) and the
accumulators, activation and output registers (:class:`_Collector`).

A unit's constructor takes the math (lanes, channels, weights, input lanes) as its
parameters and the implementation choices (folding, groups, in-place read, fused
activation, beats, extra registers) as one record, :class:`MVUChoices`, which the
compiler's op builds from its schedule's unit.

Folding follows FINN: ``pe`` output channels are computed in parallel, each
over ``simd`` input lanes per cycle, so one input vector takes
``ceil(c_out/pe) * ceil(n_in/simd)`` steps, in output-fold-major order. The
weight word of step ``(nf, sf)`` lives at address ``nf*in_folds + sf`` of a
ROM with one ``pe*simd``-lane word per step.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields
from math import ceil

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..numerics import signed_width
from .arith import reduce_levels, sum_tree
from .skid import skid_outputs

__all__ = ["MVUChoices", "BinaryMVU", "BinaryWeightMVU", "IntegerMVU", "POPCOUNT_CHUNK",
           "binary_tree_terms", "TREE_LEVELS_PER_STAGE", "TREE_LAST_STAGE_TERMS", "tree_stages",
           "ISSUE_MUX_SLICES", "mvu_operand_stage", "mvu_latency", "MVU_PARTS"]


#: Adder-tree levels between two pipeline registers in a matrix-vector unit: two
#: levels of small adders plus routing stay under 10 ns on ECP5.
TREE_LEVELS_PER_STAGE = 2


#: Terms the adder tree's last register stage may hold: their sum and the accumulator's
#: add are the only adders after it.
TREE_LAST_STAGE_TERMS = 2


def tree_stages(terms):
    """Pipeline stages of a matrix-vector unit's adder tree over ``terms`` terms: one
    register for the terms themselves, then one per :data:`TREE_LEVELS_PER_STAGE`
    levels until at most :data:`TREE_LAST_STAGE_TERMS` are left; their sum feeds the
    accumulator. (When the last stage summed four terms and the accumulator added a
    third carry chain, that was the ECP5 critical path: 10.5 ns, 7.5 of it routing.)"""
    stages, n = 1, terms
    while n > TREE_LAST_STAGE_TERMS:
        for _ in range(TREE_LEVELS_PER_STAGE):
            n = -(-n // 2) if n > 1 else n
        stages += 1
    return stages


#: A binary MVU whose issue multiplexer picks from more input slices than this registers
#: its operands once more (:func:`mvu_operand_stage`).
ISSUE_MUX_SLICES = 4


def mvu_operand_stage(slices, integer=False, registered_rom=False):
    """Whether an MVU registers its operands once more before the terms: the integer MVU
    always (its multipliers are DSP blocks, with registers on both sides), a binary one
    whose issue multiplexer picks the step's slice from more than
    :data:`ISSUE_MUX_SLICES` (``groups * ceil(n_in/simd)``): the multiplexer sits by
    the input buffer, the XNORs by the weights, and on ECP5 the route between them
    (9 ns of 10.4 for a 15-way multiplexer) was the critical path; and one whose weight
    ROM is block RAM where its read is late (``registered_rom``,
    ``compiler.resources.rom_read_register``): on ECP5 a DP16KD's read data into the
    XNORs and popcount was the critical path (13.2 ns, 5.6 of it the block's
    clock-to-output)."""
    return integer or slices > ISSUE_MUX_SLICES or bool(registered_rom)


def mvu_latency(ii, terms, operand_stage=False, activation_stages=0, product_stage=False):
    """Cycles from accepting an input vector to its result on the MVU's output: its
    ``ii`` steps, the weight ROM read, the multipliers' operand register
    (``operand_stage``: the integer MVU's), the adder tree's pipeline stages, with
    ``product_stage`` one more for the products (registered in the DSP block, then
    again in the fabric), the result register after the accumulator and an
    activation's registers (thresholds in the MVU: 1, the level; a post-op: 2, the
    product and the value)."""
    return (ii + 2 + int(operand_stage) + int(product_stage) + tree_stages(terms)
            + activation_stages)


#: Bits per popcount chunk: one 6-input lookup per result bit (an FPGA LUT6).
POPCOUNT_CHUNK = 6


def chunk_counts(m, bits, name="pc"):
    """Number of ones in ``bits`` (a Signal or slice), as an unsigned Value.

    Each 6-bit chunk is counted by a 64-entry ROM read combinationally (three
    LUT6s on an FPGA, one array load in a Verilated model) and the 3-bit counts
    are summed by a balanced adder tree: ``ceil(n/6) - 1`` adders instead of the
    ``n - 1`` of a tree over single bits. Pure combinational logic.
    """
    n = len(bits)
    rom = Memory(shape=unsigned(POPCOUNT_CHUNK.bit_length()), depth=1 << POPCOUNT_CHUNK,
                 init=[bin(v).count("1") for v in range(1 << POPCOUNT_CHUNK)])
    m.submodules[name] = rom
    counts = []
    for lo in range(0, n, POPCOUNT_CHUNK):
        port = rom.read_port(domain="comb")
        m.d.comb += port.addr.eq(bits[lo:lo + POPCOUNT_CHUNK])  # zero-extends the last chunk
        counts.append(port.data)
    return counts


def binary_tree_terms(simd):
    """Terms a binary MVU's pipelined tree starts from: chunk counts summed in pairs."""
    chunks = -(-simd // POPCOUNT_CHUNK)
    return -(-chunks // 2)


def popcount(m, bits, name="pc"):
    """Number of ones in ``bits``: the sum of :func:`chunk_counts` (combinational)."""
    return sum_tree(chunk_counts(m, bits, name))


@dataclass(frozen=True)
class MVUChoices:
    """How a matrix-vector unit computes, as opposed to what: the implementation choices
    the schedule makes for it (``compiler.decisions.Unit``), handed to the unit whole.

    The math (``n_in``, ``c_out``, the weights, the input lanes) stays with the unit's
    constructor; nothing here changes a result, only the cycles, the latency and the
    hardware. An op builds the record from its schedule's unit in one place
    (``compiler.ops.window._Conv.mvu_choices``). Each unit implements the fields of
    its ``CHOICES``; a field it does not implement must keep its default.

    Parameters
    ----------
    pe : int
        Output channels computed in parallel, ``1 <= pe <= c_out/groups/beats``.
    simd : int
        Input lanes per cycle and PE, ``1 <= simd <= n_in``.
    groups : int
        Time-shared groups (a grouped convolution: the K bases of a Group-Net block on
        one unit), a divisor of ``c_out``.
    in_place : bool
        Read every step's input slice from ``i.payload`` and take the vector with its
        last step, instead of copying it into an input buffer with its first.
    activation : ThresholdTable or AffineTable, optional
        The per-channel table the unit applies to its finished channels (its consumer's
        work, FINN's MVAU with an activation), or ``None``: an object with ``channels``,
        ``out_shape``, ``stages`` and ``elaborate``
        (:class:`~groupnet_hw.hw.multithreshold.ThresholdTable`,
        :class:`~groupnet_hw.hw.elementwise.AffineTable`).
    beats : int
        Beats per output vector, a divisor of ``c_out/groups``.
    registered_rom : bool
        The weight ROM's word and the step's input slice registered once more (block RAM
        whose read data leaves late).
    registered_products : bool
        The multipliers' products registered once more in the fabric (integer MVU).

    Raises
    ------
    ValueError
        A field of the wrong type or out of its range: one line. What depends on the
        math (``pe`` against ``c_out``, ``simd`` against ``n_in``) the unit checks.
    """

    pe: int
    simd: int
    groups: int = 1
    in_place: bool = False
    activation: object = None
    beats: int = 1
    registered_rom: bool = False
    registered_products: bool = False

    def __post_init__(self):
        # numpy integers and booleans welcome (the schedule's arithmetic), stored as
        # Python's, so that two equal records compare equal
        for name in ("pe", "simd", "groups", "beats"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
            try:
                value = operator.index(value)
            except TypeError:
                raise ValueError(f"{name} must be a positive integer, not {value!r}") from None
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value}")
            object.__setattr__(self, name, value)
        for name in ("in_place", "registered_rom", "registered_products"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{name} must be a bool, not {value!r}")
            object.__setattr__(self, name, bool(value))
        table = self.activation
        if table is not None and not all(hasattr(table, a) for a in _ACTIVATION_API):
            raise ValueError(f"activation must be a per-channel table with "
                             f"{', '.join(_ACTIVATION_API)}, not {table!r}")


#: What an MVU uses of its activation table (:class:`MVUChoices`).
_ACTIVATION_API = ("channels", "out_shape", "stages", "elaborate")


def _checked(choices):
    """``choices`` if it is an :class:`MVUChoices` (the units read it before anything)."""
    if not isinstance(choices, MVUChoices):
        raise ValueError(f"choices must be an MVUChoices, not {choices!r}")
    return choices


@dataclass(frozen=True)
class _Folding:
    """The fold geometry of an MVU (module docstring): which output channels and input
    lanes each step computes. Shared by the unit and its sub-components.

    Output folds run beat by beat, within a beat group by group
    (``hw.beats.beat_order``); a fold never spans two groups or beats."""

    n_in: int
    c_out: int
    pe: int
    simd: int
    groups: int = 1
    beats: int = 1

    @property
    def beat_lanes(self):
        """Channels of each group in one beat."""
        return self.c_out // self.groups // self.beats

    @property
    def sub_folds(self):
        """Output folds of one group in one beat."""
        return ceil(self.beat_lanes / self.pe)

    @property
    def beat_folds(self):
        """Output folds of one beat: every group's, one group after the other."""
        return self.groups * self.sub_folds

    @property
    def out_folds(self):
        """Output folds over all groups and beats."""
        return self.beats * self.beat_folds

    @property
    def in_folds(self):
        return ceil(self.n_in / self.simd)

    @property
    def ii(self):
        """Steps (cycles) per input vector."""
        return self.out_folds * self.in_folds

    @property
    def beat_steps(self):
        """Steps per output beat."""
        return self.beat_folds * self.in_folds

    def lane_of(self, fold, p):
        """``(beat, lane)`` PE ``p`` computes in output fold ``fold``, or ``None`` for a
        padding PE (beyond its group's channels in the beat)."""
        beat, rest = divmod(fold, self.beat_folds)
        g, s = divmod(rest, self.sub_folds)
        lane = s * self.pe + p
        return (beat, g * self.beat_lanes + lane) if lane < self.beat_lanes else None

    def channel_of(self, fold, p):
        """Output channel computed by PE ``p`` in output fold ``fold``, or ``None`` for a
        padding PE (beyond its group's channels)."""
        at = self.lane_of(fold, p)
        if at is None:
            return None
        beat, lane = at
        g, l = divmod(lane, self.beat_lanes)
        return g * (self.c_out // self.groups) + beat * self.beat_lanes + l

    def step_layout(self):
        """The flags that travel with a step through the pipeline: ``valid`` (a step is
        in the stage), ``first`` and ``last`` (input fold: start a fresh accumulation;
        the PE channels are finished), ``final`` (the beat's last step), ``nf`` (the
        output fold) and, with beats, ``pos`` (the fold's position in its beat)."""
        fields = {"valid": 1, "first": 1, "last": 1, "final": 1,
                  "nf": range(self.out_folds)}
        if self.beats > 1:
            fields["pos"] = range(self.beat_folds)
        return data.StructLayout(fields)


def _flag_registers(layout, name):
    """Registers for a step's flags (``layout``, :meth:`_Folding.step_layout`), one per
    field, and the view of them as one value of the layout. One register per field, not
    one of the layout: Yosys merges two one-bit registers with the same input (``first``
    and ``last`` with one input fold) but not two bits of one register (on Cyclone V
    that was 4 flip-flops more per MVU)."""
    regs = {n: Signal(field.shape, name=f"{name}_{n}") for n, field in layout}
    return regs, data.View(layout, Cat(*regs.values()))


def _register_flags(m, adv, flags, name):
    """``flags`` (a view of :meth:`_Folding.step_layout`) registered on ``adv``, with a
    reset (they say what is valid); returns the view of the registers."""
    regs, view = _flag_registers(flags.shape(), name)
    with m.If(adv):
        m.d.sync += [r.eq(flags[n]) for n, r in regs.items()]
    return view


def _register_stage(m, adv, groups, flags, name, flag_name):
    """One pipeline stage of an MVU's terms: every term of every group and the step's
    flags registered on ``adv``; the data without a reset (the flags say what is
    valid). Returns the registers, shaped as ``groups``, and the flags' registers."""
    regs = [[Signal(Value.cast(t).shape(), name=f"{name}{k}_{j}", reset_less=True)
             for j, t in enumerate(g)] for k, g in enumerate(groups)]
    with m.If(adv):
        m.d.sync += [r.eq(t) for rg, g in zip(regs, groups) for r, t in zip(rg, g)]
    return regs, _register_flags(m, adv, flags, flag_name)


#: Submodule names of a matrix-vector unit's parts (one unit to the resource model,
#: which counts its cells together: ``toolchain.synth``'s per-module synthesis flattens
#: them into the unit).
MVU_PARTS = ("issue", "rom", "tree", "collector")


class _Issue(wiring.Component):
    """An MVU's issue controller and input buffer: which slice of the input vector and
    which weight word each step uses.

    A step counter walks the ``ii`` steps of a vector in output-fold-major order; it
    addresses the weight ROM (:class:`_WeightROM`) and picks the step's input slice:
    step 0 straight from ``i.payload`` on the accepting cycle, the others from the
    input buffer, a copy of the vector taken then. In place (``in_place``) there is no
    buffer: every step reads ``i.payload``, which the producer holds until the vector is
    taken with its last step. A grouped unit with an operand stage registers its
    group's whole vector and picks the step's slice from it in the operand stage (two
    small multiplexers, not one across the buffer).

    Parameters
    ----------
    folding : _Folding
    in_shape : shape
        The unit's input payload: ``groups`` vectors of ``n_in`` lanes, group-major.
    lane_width : int
        Bits of one input lane.
    in_place : bool
    operand_stage : bool
        Register the step's input slice and flags once more (:func:`mvu_operand_stage`).

    Members
    -------
    i : ``In(stream.Signature(in_shape))``
        The unit's input.
    adv : ``In(1)``
        The pipeline advances (the collector's register): steps issue, stages move.
    addr : ``Out(range(ii))``
        The weight word of the step being issued (combinational, from the counter).
    x : ``Out(simd*lane_width)``
        The step's input slice, lanes beyond ``n_in`` zero.
    flags : ``Out(folding.step_layout())``
        The step's flags, aligned with ``x``.

    Latency
    -------
    ``1 + operand_stage`` cycles of ``adv`` from a step's issue to its ``x`` and
    ``flags``; the weight ROM's word of ``addr`` takes as many.

    Throughput
    ----------
    One step per cycle of ``adv``; a vector every ``ii`` steps. ``i.ready`` depends on
    ``adv`` and the counters only: buffered, it is high while no vector is buffered
    (the vector is taken with its first step), in place only with the last step.
    """

    def __init__(self, folding, in_shape, lane_width, in_place, operand_stage):
        self.folding = folding
        self.lane_width = lane_width
        self.in_place = in_place
        self.operand_stage = operand_stage
        super().__init__({
            "i": In(stream.Signature(in_shape)),
            "adv": In(1),
            "addr": Out(range(folding.ii)),
            "x": Out(folding.simd * lane_width),
            "flags": Out(folding.step_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        f, xl, adv = self.folding, self.lane_width, self.adv
        simd, sfs, nfs, steps, bfs = f.simd, f.in_folds, f.out_folds, f.ii, f.beat_folds
        x_slice_width = simd * xl
        # Beats: the output register loads at the last step of each beat (`end`) and the
        # collect registers by the fold's position in its beat (`pos`); with one beat
        # these are the vector's final step and its output fold.
        if f.beats > 1:
            step_pos, step_end = Signal(range(bfs)), Signal()

        # Zero lanes beyond n_in (per group): with the ROM padding they contribute nothing.
        payload = Value.cast(self.i.payload)
        group_bits = f.n_in * xl
        x_in = Cat(*(Cat(payload[g * group_bits:(g + 1) * group_bits],
                         Const(0, (sfs * simd - f.n_in) * xl))
                     for g in range(f.groups)))

        # A grouped MVU with an operand stage picks its input slice in two steps: the
        # group at issue, the slice within the group in the operand stage.
        two_level = f.groups > 1 and self.operand_stage
        issue_width = sfs * x_slice_width if two_level else x_slice_width
        # Issue-stage registers, beside the weight ROM's read register.
        s1_flags, s1 = _flag_registers(f.step_layout(), "s1")
        s1_x = Signal(issue_width)
        s1_sf = Signal(range(sfs))  # the step's slice within s1_x (two-level issue)

        accept = Signal()
        issue_x = Signal(issue_width)
        step_sf = Signal(range(sfs))
        step_first = Signal()
        step_last = Signal()
        step_final = Signal()
        step_nf = Signal(range(nfs))

        if steps == 1:
            # Fully parallel: every accepted vector is one step; no buffer, no counters.
            m.d.comb += [
                self.i.ready.eq(adv),
                accept.eq(self.i.valid & adv),
                issue_x.eq(x_in),
                step_first.eq(1), step_last.eq(1), step_final.eq(1),
            ]
            issuing = accept
        else:
            busy = Signal()  # the buffered vector still has steps to issue
            # In place, every step reads the payload the producer holds; `busy` is then
            # constant 1, so that the issue multiplexers below always pick "the buffer".
            x_buf = x_in if self.in_place else Signal(len(x_in))
            addr = Signal(range(steps))
            sf = Signal(range(sfs))
            nf = Signal(range(nfs))
            issuing = Signal()
            if self.in_place:
                m.d.comb += [
                    busy.eq(1),
                    # the vector is taken with its last step: the producer may refill
                    # its register only then
                    self.i.ready.eq(adv & step_final),
                    accept.eq(self.i.valid & self.i.ready),
                    issuing.eq(self.i.valid & adv),
                ]
            else:
                m.d.comb += [
                    # Step 0 is issued straight from the payload on the accepting
                    # cycle, so the next vector is taken right after the previous
                    # one's last step and the II stays exactly `steps`.
                    self.i.ready.eq(adv & ~busy),
                    accept.eq(self.i.valid & self.i.ready),
                    issuing.eq(accept | (busy & adv)),
                ]
            m.d.comb += [
                self.addr.eq(addr),
                step_first.eq(sf == 0),
                step_last.eq(sf == sfs - 1),
                step_final.eq(addr == steps - 1),
                step_nf.eq(nf),
                step_sf.eq(sf),
            ]
            if f.groups > 1:
                # The input slice of a step is its group's: `group` moves on after the
                # group's last output fold in the beat. With an operand stage the group
                # is picked here (a `groups`-way multiplexer into a register of the
                # group's whole vector) and the slice in the operand stage (`sfs`-way):
                # on ECP5 one 15-way multiplexer across the buffer was the critical path,
                # its select fanned out beside 720 buffer bits.
                group = Signal(range(f.groups))
                gnf = Signal(range(f.sub_folds))
                offset = group if two_level else group * sfs + sf
                m.d.comb += issue_x.eq(Mux(busy, x_buf.word_select(offset, issue_width),
                                           x_in[:issue_width]))
                with m.If(issuing & step_last):
                    with m.If(step_final):
                        m.d.sync += [group.eq(0), gnf.eq(0)]
                    with m.Elif(gnf == f.sub_folds - 1):
                        # with beats the groups come round again in the next beat
                        m.d.sync += [gnf.eq(0),
                                     group.eq(Mux(group == f.groups - 1, 0, group + 1))
                                     if f.beats > 1 else group.eq(group + 1)]
                    with m.Else():
                        m.d.sync += gnf.eq(gnf + 1)
            elif sfs == 1:
                m.d.comb += issue_x.eq(Mux(busy, x_buf, x_in))
            else:
                m.d.comb += issue_x.eq(Mux(busy, x_buf.word_select(sf, x_slice_width),
                                           x_in[:x_slice_width]))
            if f.beats > 1:
                # position of the output fold in its beat, and the beat's last step
                with m.If(issuing & step_last):
                    with m.If(step_final | (step_pos == bfs - 1)):
                        m.d.sync += step_pos.eq(0)
                    with m.Else():
                        m.d.sync += step_pos.eq(step_pos + 1)
                m.d.comb += step_end.eq(step_last & (step_pos == bfs - 1))
            # The buffer loads whenever the unit is idle (the vector taken is the one
            # there when `accept`), and the issue multiplexer selects on `busy`: both
            # fan out across the input width from a register, not from `accept`, which
            # waits on the producer's `valid` (on ECP5 that was the critical path). An
            # idle cycle issues nothing, so what it selects does not matter.
            if not self.in_place:
                with m.If(~busy):
                    m.d.sync += x_buf.eq(x_in)
            with m.If(issuing):
                # Counters rest at 0 between vectors, which is where the
                # accepting cycle expects them.
                with m.If(step_final):
                    m.d.sync += [addr.eq(0), sf.eq(0), nf.eq(0)]
                    if not self.in_place:
                        m.d.sync += busy.eq(0)
                with m.Else():
                    m.d.sync += addr.eq(addr + 1)
                    if not self.in_place:
                        m.d.sync += busy.eq(1)
                    if sfs == 1:
                        m.d.sync += nf.eq(nf + 1)
                    else:
                        with m.If(step_last):
                            m.d.sync += [sf.eq(0), nf.eq(nf + 1)]
                        with m.Else():
                            m.d.sync += sf.eq(sf + 1)

        with m.If(adv):
            m.d.sync += [
                s1_flags["valid"].eq(issuing),
                s1_x.eq(issue_x),
                s1_flags["first"].eq(step_first),
                s1_flags["last"].eq(step_last),
                s1_flags["final"].eq(step_end if f.beats > 1 else step_final),
                s1_flags["nf"].eq(step_nf),
                s1_sf.eq(step_sf),
            ]
            if f.beats > 1:
                m.d.sync += s1_flags["pos"].eq(step_pos)

        x, flags = s1_x, s1
        if self.operand_stage:
            # The step's slice registered once more, with nothing but wire after it (the
            # weight word likewise, in the ROM reader): the placer can put the issue
            # registers by the issue multiplexer and these by the terms. On ECP5 the
            # routes from the read registers to a MULT18X18D (6.2 ns of 10.7) and from a
            # 15-way issue multiplexer to the XNORs (9 ns of 10.4) were critical paths.
            # Data only (the flags say what is valid), without a reset: on ECP5 such
            # registers move into the multipliers' DSP blocks with their enable
            # (hw.dsp_registers), as do the adder tree's first stage.
            x = Signal(x_slice_width, name="operand_x", reset_less=True)
            x_step = s1_x.word_select(s1_sf, x_slice_width) if two_level else s1_x
            with m.If(adv):
                m.d.sync += x.eq(x_step)
            flags = _register_flags(m, adv, s1, "operand_f")
        m.d.comb += [self.x.eq(x), self.flags.eq(flags)]
        return m


class _WeightROM(wiring.Component):
    """An MVU's weight ROM and its read: one word of every PE's lanes per step.

    Parameters
    ----------
    words : list of int
        The ROM's words, one per step (:meth:`_FoldedMVU._rom_words`), in a
        :class:`~amaranth.lib.memory.Memory` named ``weights`` (block RAM where the flow
        maps it there).
    width : int
        Bits per word (``pe*simd*lane``).
    registered : bool
        Register the read data once more (the operand stage, :func:`mvu_operand_stage`),
        without a reset: a block RAM's late read data (ECP5 DP16KD: 5.6 ns of a 10 ns
        period) then meets no logic in its cycle, and on ECP5 the register moves into a
        multiplier's DSP block (``toolchain.dsp_registers``).

    Members
    -------
    addr : ``In(range(len(words)))``
        The word to read (the issue controller's step).
    adv : ``In(1)``
        The read port's enable: a stalled read keeps its data, so the word stays
        aligned with its step.
    data : ``Out(width)``
        The word read.

    Latency
    -------
    ``1 + registered`` cycles of ``adv`` from ``addr`` to ``data``, as the issue
    controller's slice.

    Throughput
    ----------
    One word per cycle.
    """

    def __init__(self, words, width, registered):
        self.words = words
        self.registered = registered
        super().__init__({
            "addr": In(range(len(words))),
            "adv": In(1),
            "data": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.weights = rom = Memory(shape=unsigned(len(self.data)),
                                            depth=len(self.words), init=self.words)
        rd = rom.read_port()
        m.d.comb += [rd.addr.eq(self.addr), rd.en.eq(self.adv)]
        word = rd.data
        if self.registered:
            word = Signal(len(rd.data), name="operand_w", reset_less=True)
            with m.If(self.adv):
                m.d.sync += word.eq(rd.data)
        m.d.comb += self.data.eq(word)
        return m


class _AdderTree(wiring.Component):
    """An MVU's terms and their pipelined adder tree: each PE's partial of a step.

    Every PE's terms of the step (XNOR-popcount chunks, masked activations, products:
    the unit's ``pe_terms``), and the terms shared by all PEs (``shared_terms``), are
    registered, optionally twice (``product_stage``), then summed
    :data:`TREE_LEVELS_PER_STAGE` adder levels per pipeline stage until the last stage
    registers at most :data:`TREE_LAST_STAGE_TERMS` (:func:`tree_stages`); their sum,
    combined with the shared sum (``combine``), is the PE's partial. All stages advance
    on ``adv`` with the step's flags; the data registers have no reset.

    Parameters
    ----------
    folding : _Folding
    lane_width, w_lane_width : int
        Bits of an input lane and of a weight lane.
    pe_terms : callable ``(m, p, x, w) -> list of values``
        PE ``p``'s terms from the step's input slice ``x`` and its weight lanes ``w``.
    shared_terms : callable ``(m, x) -> list of values or None``
    combine : callable ``(pe_sum, shared_sum) -> value``
        A PE's partial from its terms' sum and the shared sum (``None`` without shared
        terms). Pure arithmetic: it also gives the partial's shape.
    term_shapes : ``(list of shapes, list of shapes or None)``
        The shapes of one PE's terms and of the shared terms, which the terms must have
        (the ports are shaped from them before the terms are built).
    product_stage : bool
        Register the terms once more (the integer MVU's products: in the DSP block,
        then in the fabric).

    Members
    -------
    x : ``In(simd*lane_width)``
    w : ``In(pe*simd*w_lane_width)``
        The step's operands, from the issue controller and the ROM reader.
    flags : ``In(folding.step_layout())``
    adv : ``In(1)``
    partial : ``Out(data.ArrayLayout(partial_shape, pe))``
        Each PE's partial of the step in the last stage (combinational from its
        registers).
    out_flags : ``Out(folding.step_layout())``
        That step's flags.

    Attributes
    ----------
    stages : int
        Register stages, :func:`tree_stages` of the most terms, and one more with
        ``product_stage``.
    partial_shape : Shape

    Latency
    -------
    ``stages`` cycles of ``adv`` from the operands to ``partial``.

    Throughput
    ----------
    One step per cycle.
    """

    def __init__(self, folding, lane_width, w_lane_width, pe_terms, shared_terms, combine,
                 term_shapes, product_stage):
        self.folding = folding
        self._pe_terms, self._shared_terms, self._combine = pe_terms, shared_terms, combine
        self.term_shapes = term_shapes
        self.product_stage = product_stage
        pe_shapes, shared_shapes = term_shapes
        self._tree_stages = tree_stages(max(len(pe_shapes), len(shared_shapes or ())))
        self.stages = self._tree_stages + int(product_stage)
        # The partial's shape, from the same adders on stand-in signals (no hardware).
        pe_sum = _last_stage_sum(pe_shapes, self._tree_stages)
        shared_sum = (_last_stage_sum(shared_shapes, self._tree_stages)
                      if shared_shapes is not None else None)
        self.partial_shape = Value.cast(combine(pe_sum, shared_sum)).shape()
        self.w_width = folding.simd * w_lane_width
        super().__init__({
            "x": In(folding.simd * lane_width),
            "w": In(folding.pe * self.w_width),
            "flags": In(folding.step_layout()),
            "adv": In(1),
            "partial": Out(data.ArrayLayout(self.partial_shape, folding.pe)),
            "out_flags": Out(folding.step_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        adv, pe, ww = self.adv, self.folding.pe, self.w_width
        x = Value.cast(self.x)
        terms = [self._pe_terms(m, p, x, Value.cast(self.w)[p * ww:(p + 1) * ww])
                 for p in range(pe)]
        shared = self._shared_terms(m, x)
        built = ([Value.cast(t).shape() for t in terms[0]],
                 None if shared is None else [Value.cast(t).shape() for t in shared])
        if built != (list(self.term_shapes[0]), None if self.term_shapes[1] is None
                     else list(self.term_shapes[1])):
            raise AssertionError(f"terms of shapes {built}, declared {self.term_shapes}")
        groups = terms + ([shared] if shared is not None else [])
        flags = self.flags
        if self.product_stage:
            # The products once more, as they are: the first register (the DSP block's
            # own, hw.dsp_registers) sits in a DSP row, this one where the placer puts
            # it, by the tree. On ECP5 the CIFAR-size stem's 54 multipliers spread along
            # the DSP rows, and a product register's route to the first adders was 5.7
            # ns of a 10.4 ns critical path.
            groups, flags = _register_stage(m, adv, groups, flags, "product", "product_f")
        stages = self._tree_stages
        for depth in range(stages):
            regs, flags = _register_stage(m, adv, groups, flags, f"t{depth}_", f"f{depth}")
            groups = (regs if depth == stages - 1 else
                      [reduce_levels(rg, TREE_LEVELS_PER_STAGE) for rg in regs])
        # the last stage's few terms are summed on the way into the accumulator
        shared_sum = sum_tree(groups[-1]) if shared is not None else None
        m.d.comb += [self.partial[p].eq(self._combine(sum_tree(groups[p]), shared_sum))
                     for p in range(pe)]
        m.d.comb += self.out_flags.eq(flags)
        return m


def _last_stage_sum(shapes, stages):
    """The sum of the last of ``stages`` tree stages over terms of ``shapes``, built on
    stand-in signals, for its shape (:class:`_AdderTree`)."""
    terms = [Signal(s) for s in shapes]
    for _ in range(stages - 1):
        terms = reduce_levels(terms, TREE_LEVELS_PER_STAGE)
    return sum_tree(terms)


class _Collector(wiring.Component):
    """An MVU's accumulators, activation and output: from each step's partials to the
    output beats, and the pipeline's advance.

    - accumulate: every PE adds its partial to its accumulator (from ``acc_start`` at
      the first input fold) and the finished value is registered (the result stage);
    - activation (optional): the finished channels through the table's own registers,
      then registered (``activation.stages`` in all);
    - collect: the last input fold of an output fold stores the finished channels, and
      the last step of a beat loads the output register with the beat's channels (for
      ``beat_steps >= 2`` both enables are registers, computed a cycle ahead like
      ``adv``); with one step per beat the output register has a one-beat skid
      (``hw.skid``) instead.

    ``adv`` stalls the pipeline only when a beat's final step meets an output register
    that is still full. It depends on registers of this collector only, never on
    ``o.ready``, at no cost in cycles: with two steps or more per beat, on the output
    register; with one, on the skid.

    Parameters
    ----------
    folding : _Folding
    partial_shape : Shape
        A PE's partial (:class:`_AdderTree`).
    acc_shape : Shape
        The accumulators'.
    acc_start : int
        Constant the accumulation of every output channel starts from.
    acc_width : int
        Finished channels are ``signed(acc_width)``.
    finish : callable ``(total) -> value``
        Accumulator value -> finished channel.
    activation : ThresholdTable or AffineTable, optional
    out_shape : Shape
        One output lane: ``signed(acc_width)``, or the activation's ``out_shape``.

    Members
    -------
    partial : ``In(data.ArrayLayout(partial_shape, pe))``
    flags : ``In(folding.step_layout())``
        The step in the adder tree's last stage.
    adv : ``Out(1, init=1)``
        The pipeline advances (a register): every stage of the unit moves on it.
    o : ``Out(stream.Signature(data.ArrayLayout(out_shape, c_out // beats)))``
        The unit's output.

    Latency
    -------
    ``2 + activation.stages`` cycles (2 without an activation) from a beat's last
    partial to its output beat: the result register, the activation's stages, the
    output register.

    Throughput
    ----------
    One partial per cycle; an output beat every ``beat_steps`` cycles, one per cycle
    with the skid.
    """

    def __init__(self, folding, partial_shape, acc_shape, acc_start, acc_width, finish,
                 activation, out_shape):
        self.folding = folding
        self.acc_shape, self.acc_start, self.acc_width = acc_shape, acc_start, acc_width
        self._finish = finish
        self.activation = activation
        super().__init__({
            "partial": In(data.ArrayLayout(partial_shape, folding.pe)),
            "flags": In(folding.step_layout()),
            "adv": Out(1, init=1),
            "o": Out(stream.Signature(data.ArrayLayout(out_shape,
                                                       folding.c_out // folding.beats))),
        })

    def elaborate(self, platform):
        m = Module()
        f, adv = self.folding, self.adv
        pe, sfs, nfs, bfs = f.pe, f.in_folds, f.out_folds, f.beat_folds
        s = self.flags
        s_valid, s_first, s_last, s_final, s_nf = s.valid, s.first, s.last, s.final, s.nf
        s_pos = s.pos if f.beats > 1 else s_nf

        totals = []
        finished = []
        accs = [Signal(self.acc_shape, name=f"acc{p}") for p in range(pe)] if sfs > 1 else None
        for p in range(pe):
            partial = self.partial[p]
            if accs is None:
                total = partial + self.acc_start if self.acc_start else partial
            else:
                total = partial + Mux(s_first, self.acc_start, accs[p])
            totals.append(total)
            done = Signal(signed(self.acc_width), name=f"done{p}")
            m.d.comb += done.eq(self._finish(total))
            finished.append(done)

        if accs is not None:
            with m.If(adv & s_valid & ~s_last):
                m.d.sync += [acc.eq(total) for acc, total in zip(accs, totals)]

        # Result stage: the finished channels are registered next to the adders before
        # they fan out to the collect and output registers, which spread over the
        # device (on ECP5 that route was most of the critical path).
        finished_regs = [Signal(signed(self.acc_width), name=f"result{p}", reset_less=True)
                         for p in range(pe)]
        r_valid, r_last, r_final = Signal(), Signal(), Signal()
        r_nf = Signal(range(nfs), name="r_nf")
        r_pos = Signal(range(bfs), name="r_pos") if f.beats > 1 else r_nf
        with m.If(adv):
            m.d.sync += [r.eq(d) for r, d in zip(finished_regs, finished)]
            m.d.sync += [r_valid.eq(s_valid), r_last.eq(s_last), r_final.eq(s_final),
                         r_nf.eq(s_nf)]
            if f.beats > 1:
                m.d.sync += r_pos.eq(s_pos)
        finished = finished_regs
        if self.activation is not None:
            # Activation stages: the finished channels through the activation's own
            # registers (its constants are read beside the result register), then the
            # output registered (the comparators or the offset's adder are as deep as an
            # adder, and the result register fans out to them, not to the collect
            # registers). The flags follow; the stages below see the last as the result.
            channels = [[f.channel_of(fold, p) for p in range(pe)] for fold in range(nfs)]
            values = self.activation.elaborate(m, finished, channels, s_nf, adv,
                                               self.acc_width)
            for k in range(self.activation.stages):
                flags = (r_valid, r_last, r_final, r_nf) + ((r_pos,) if f.beats > 1 else ())
                nxt = [Signal.like(v, name=f"act{k}_f{i}") for i, v in enumerate(flags)]
                with m.If(adv):
                    m.d.sync += [n.eq(v) for n, v in zip(nxt, flags)]
                (s_valid, s_last, s_final, s_nf, *s_pos) = flags
                (r_valid, r_last, r_final, r_nf, *r_pos) = nxt
                s_pos = s_pos[0] if s_pos else s_nf
                r_pos = r_pos[0] if r_pos else r_nf
            finished = [Signal(self.o.payload.shape().elem_shape, name=f"level{p}")
                        for p in range(pe)]
            with m.If(adv):
                m.d.sync += [r.eq(v) for r, v in zip(finished, values)]

        def fold_enables(step, last, end, pos):
            """The output register's enable and each collected fold's, for a result
            taken (`step`) with these flags (`end`: the beat's last, `pos`: the fold's
            position in its beat)."""
            return step & end, [step & last & ~end & (pos == k) for k in range(bfs - 1)]

        if f.beat_steps >= 2:
            # A beat's result reaches the output register at most every `beat_steps` >= 2
            # cycles, by which time a consumer that took the previous one at once has
            # emptied the register: waiting for it to be empty, not for `o.ready`, costs
            # no cycle and keeps the far consumer's `ready` off `adv`, which enables
            # every pipeline register of the unit (on ECP5 that fan-out was routing-bound).
            # `adv` is then itself a register, computed a cycle ahead from the next state
            # of the three it depends on, so no logic sits in front of its fan-out.
            r_valid_next, r_final_next, o_valid_next = Signal(), Signal(), Signal()
            m.d.comb += [
                r_valid_next.eq(Mux(adv, s_valid, r_valid)),
                r_final_next.eq(Mux(adv, s_final, r_final)),
                o_valid_next.eq(Mux(adv & r_valid & r_final, 1,
                                    Mux(self.o.ready, 0, self.o.valid))),
            ]
            adv_next = Signal()
            m.d.comb += adv_next.eq(~(r_valid_next & r_final_next & o_valid_next))
            m.d.sync += adv.eq(adv_next)
            # The collect registers' and the output register's enables, likewise one
            # register each: from `adv` through the fold decoder they were the critical
            # path (10.1 ns, 9.1 of it routing to the collect registers).
            r_last_next, r_pos_next = Signal(), Signal.like(r_pos)
            m.d.comb += [r_last_next.eq(Mux(adv, s_last, r_last)),
                         r_pos_next.eq(Mux(adv, s_pos, r_pos))]
            load_next, collect_next = fold_enables(adv_next & r_valid_next, r_last_next,
                                                   r_final_next, r_pos_next)
            load_output = Signal()
            collect_fold = [Signal(name=f"collect_fold{k}") for k in range(bfs - 1)]
            m.d.sync += load_output.eq(load_next)
            m.d.sync += [en.eq(nxt) for en, nxt in zip(collect_fold, collect_next)]
        else:
            # A beat every cycle: the output register has a skid (`hw.skid`), and the
            # pipeline advances while the skid is empty, a register, instead of on the
            # consumer's `ready` (on ECP5 a FIFO's level through `ready` to every enable
            # of the unit was the whole-board design's critical path, 12.8 ns).
            # One fold per beat and one group: PE p computes lane p, and PE = lanes.
            room = skid_outputs(m, [self.o], [finished], adv & r_valid & r_final)
            m.d.comb += adv.eq(room)
            return m

        # Channels of a beat's output folds but its last wait here for the last.
        collect = [Signal(self.o.payload.shape().elem_shape, name=f"collect{c}")
                   for c in range((bfs - 1) * pe)]
        for k, enable in enumerate(collect_fold):
            with m.If(enable):
                m.d.sync += [collect[k * pe + p].eq(finished[p]) for p in range(pe)]

        with m.If(load_output):
            m.d.sync += self.o.valid.eq(1)
            for fold in range(bfs):
                for p in range(pe):
                    at = f.lane_of(fold, p)     # folds 0..bfs-1: beat 0's lanes
                    if at is not None:
                        src = collect[fold * pe + p] if fold < bfs - 1 else finished[p]
                        m.d.sync += self.o.payload[at[1]].eq(src)
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        return m


class _FoldedMVU(wiring.Component):
    """Fold sequencer and pipeline shared by the MVUs.

    Subclasses set the lane geometry (``_x_lane_width``, ``_w_lane_width``,
    ``_w_pad``), the accumulator shape and start value (``_acc_shape``,
    ``_acc_start``) and implement ``_pe_terms`` (the terms whose sum is one PE's
    contribution of one step), ``_term_shapes`` (their shapes, and the shared terms'),
    ``_tree_terms`` (how many) and ``_finish`` (accumulator -> output value).
    They may implement ``_shared_terms``, a sum that depends on the input slice
    only, built once per step, and ``_combine`` (PE sum and shared sum -> partial).
    ``CHOICES`` names the fields of :class:`MVUChoices` a subclass implements.

    The unit is four sub-components, all advancing together on ``adv``:

    - ``issue`` (:class:`_Issue`): the step counter addresses the weight ROM; its input
      slice (from ``i.payload`` on the accepting cycle, from the input buffer
      afterwards) is registered next to the ROM's synchronous read data, and with an
      operand stage once more;
    - ``rom`` (:class:`_WeightROM`): the weight word of the step, with an operand stage
      registered once more;
    - ``tree`` (:class:`_AdderTree`): the terms are registered, then summed
      ``TREE_LEVELS_PER_STAGE`` adder levels per pipeline stage until the last stage
      registers at most ``TREE_LAST_STAGE_TERMS`` (:func:`tree_stages`);
    - ``collector`` (:class:`_Collector`): the accumulators, the result register, the
      activation, the collect and output registers, and ``adv`` itself.

    The pipeline stalls only when a beat's final step meets an output register that is
    still full. The stall depends on registers of the unit only, never on ``o.ready``,
    at no cost in cycles: with two steps or more per beat, on the output register; with
    one, on a one-beat skid beside it (``hw.skid``).
    """

    #: The fields of :class:`MVUChoices` the unit implements; any other must keep its
    #: default.
    CHOICES = frozenset(f.name for f in fields(MVUChoices))

    def __init__(self, n_in, c_out, in_shape, acc_width, choices):
        _checked(choices)
        for fd in fields(MVUChoices):
            if fd.name not in self.CHOICES and getattr(choices, fd.name) != fd.default:
                raise ValueError(f"{type(self).__name__} does not implement "
                                 f"{fd.name}={getattr(choices, fd.name)!r}")
        if n_in < 1 or c_out < 1:
            raise ValueError(f"n_in and c_out must be positive, not {n_in}, {c_out}")
        pe, simd, groups, beats = choices.pe, choices.simd, choices.groups, choices.beats
        if c_out % groups:
            raise ValueError(f"groups must divide c_out={c_out}, not {groups}")
        c_group = c_out // groups
        if c_group % beats:
            raise ValueError(f"beats must divide c_out/groups={c_group}, not {beats}")
        if not pe <= c_group // beats:
            raise ValueError(f"pe must be in [1, c_out/groups/beats={c_group // beats}], "
                             f"not {pe}")
        if not simd <= n_in:
            raise ValueError(f"simd must be in [1, n_in={n_in}], not {simd}")
        #: The implementation choices (:class:`MVUChoices`).
        self.choices = choices
        #: The fold geometry the sub-components share.
        self.folding = folding = _Folding(n_in, c_out, pe, simd, groups, beats)
        self.n_in = n_in
        self.c_out = c_out
        self.groups = groups
        self.pe = pe
        self.simd = simd
        self.acc_width = acc_width
        #: Beats per output vector (``hw.beats.beat_order(c_out, groups, beats)``).
        self.beats = beats
        #: Channels of each group in one beat.
        self.beat_lanes = folding.beat_lanes
        #: Read every step's slice from ``i.payload`` and take the vector with its last
        #: step, instead of copying it into an input buffer with its first: for a
        #: producer whose output register holds the vector anyway (a serial window).
        self.in_place = choices.in_place
        #: What the MVU applies to its finished channels before it collects them (FINN's
        #: MVAU with an activation), or ``None``: a per-channel table with ``channels``,
        #: ``out_shape``, ``stages`` (registers it adds, the output register included)
        #: and ``elaborate`` (:class:`~groupnet_hw.hw.multithreshold.ThresholdTable`,
        #: :class:`~groupnet_hw.hw.elementwise.AffineTable`).
        activation = choices.activation
        if activation is not None and activation.channels != c_out:
            raise ValueError(f"activation has {activation.channels} channels, expected {c_out}")
        self.activation = activation
        #: Output folds of one group in one beat (a fold never spans two groups or beats).
        self.sub_folds = folding.sub_folds
        #: Output folds of one beat: every group's, one group after the other.
        self.beat_folds = folding.beat_folds
        #: Output folds over all groups and beats.
        self.out_folds = folding.out_folds
        self.in_folds = folding.in_folds
        #: Initiation interval: cycles per input vector in steady state.
        self.ii = folding.ii
        #: Cycles per output beat in steady state.
        self.beat_steps = folding.beat_steps
        #: A register stage between the read registers and the terms
        #: (:func:`mvu_operand_stage`).
        self.operand_stage = mvu_operand_stage(groups * self.in_folds, self._integer,
                                               choices.registered_rom and self.ii > 1)
        #: The terms (products) registered twice before the tree: in the DSP block,
        #: then in the fabric (``compiler.resources.LATE_DSP_OUTPUT``).
        self.product_stage = choices.registered_products
        #: Cycles from the input handshake to the first cycle the output (its first beat)
        #: is valid; beat ``j`` follows ``j * beat_steps`` cycles later at full rate.
        self.latency = mvu_latency(self.beat_steps, self._tree_terms(), self.operand_stage,
                                   activation.stages if activation is not None else 0,
                                   self.product_stage)
        #: One output lane: the accumulator, or the activation's value.
        self.out_shape = signed(acc_width) if activation is None else activation.out_shape
        self._in_shape = in_shape
        super().__init__({
            "i": In(stream.Signature(in_shape)),
            "o": Out(stream.Signature(data.ArrayLayout(self.out_shape, c_out // beats))),
        })

    # -- weight ROM ---------------------------------------------------------

    def _rom_words(self, weights):
        """Pack ``weights[c_out, n_in]`` into one int per step, padding the
        lanes beyond ``n_in`` with ``_w_pad`` and padding PEs with zero (those
        channels are computed and dropped)."""
        wl = self._w_lane_width
        lane_mask = (1 << wl) - 1
        weights = np.asarray(weights).astype(object)
        words = []
        for nf in range(self.out_folds):
            for sf in range(self.in_folds):
                word = 0
                for p in range(self.pe):
                    c = self.folding.channel_of(nf, p)
                    for s in range(self.simd):
                        j = sf * self.simd + s
                        if j >= self.n_in:
                            lane = self._w_pad
                        else:
                            lane = 0 if c is None else int(weights[c, j])
                        word |= (lane & lane_mask) << ((p * self.simd + s) * wl)
                words.append(word)
        return words

    # -- hooks --------------------------------------------------------------

    def _shared_terms(self, m, x_slice):
        """Terms of a sum that depends on the input slice only (one per step, for
        every PE), or ``None``."""
        return None

    def _pe_terms(self, m, pe_index, x_slice, w_slice):
        """The terms whose sum is one PE's partial of one step."""
        raise NotImplementedError

    def _term_shapes(self):
        """``(shapes of one PE's terms, shapes of the shared terms or None)``, as
        ``_pe_terms`` and ``_shared_terms`` build them."""
        raise NotImplementedError

    def _combine(self, pe_sum, shared_sum):
        """One PE's partial from its terms' sum and the shared sum (pure arithmetic)."""
        return pe_sum

    #: Constant the accumulation of every output channel starts from.
    _acc_start = 0
    #: Multiply-accumulate MVU: its terms are DSP products.
    _integer = False

    def _finish(self, acc):
        raise NotImplementedError

    # -- the pipeline -------------------------------------------------------

    def elaborate(self, platform):
        m = Module()
        fold = self.folding
        m.submodules.issue = issue = _Issue(fold, self._in_shape, self._x_lane_width,
                                            self.in_place, self.operand_stage)
        m.submodules.rom = rom = _WeightROM(self._rom_words(self._weights),
                                            fold.pe * fold.simd * self._w_lane_width,
                                            registered=self.operand_stage)
        m.submodules.tree = tree = _AdderTree(
            fold, self._x_lane_width, self._w_lane_width, self._pe_terms, self._shared_terms,
            self._combine, self._term_shapes(), self.product_stage)
        m.submodules.collector = collector = _Collector(
            fold, tree.partial_shape, self._acc_shape, self._acc_start, self.acc_width,
            self._finish, self.activation, self.out_shape)
        wiring.connect(m, wiring.flipped(self.i), issue.i)
        wiring.connect(m, wiring.flipped(self.o), collector.o)
        # one enable for every stage: the collector's register
        adv = collector.adv
        m.d.comb += [issue.adv.eq(adv), rom.adv.eq(adv), tree.adv.eq(adv)]
        m.d.comb += [rom.addr.eq(issue.addr),
                     tree.x.eq(issue.x), tree.w.eq(rom.data), tree.flags.eq(issue.flags),
                     collector.partial.eq(tree.partial), collector.flags.eq(tree.out_flags)]
        return m


class BinaryMVU(_FoldedMVU):
    """XNOR-popcount matrix-vector unit for binary convolutions.

    For every input vector ``x`` (bit ``j`` = lane ``j`` of the flattened
    window, ``j = tap*C_in + channel``) emits one beat with, for each output
    channel ``c``, ``out[c] = 2*popcount(~(x ^ w[c])) - n_in`` over the
    ``n_in`` real lanes (bit 1 <-> +1).

    Parameters
    ----------
    n_in : int
        Input lanes (``k*k*C_in``).
    c_out : int
        Output channels.
    weights : numpy.ndarray
        ``[c_out, n_in]`` array of {0, 1} (1 <-> +1). Stored in a ROM
        (:class:`amaranth.lib.memory.Memory`, synchronous read port) of
        ``ceil(c_out/pe)*ceil(n_in/simd)`` words of ``pe*simd`` bits; word
        ``nf*in_folds + sf`` bit ``p*simd + s`` is
        ``weights[nf*pe + p, sf*simd + s]``. Lanes beyond ``n_in`` hold 1 and
        meet input bits forced to 0, so their XNOR is 0; channels beyond
        ``c_out`` are computed and dropped.
    choices : MVUChoices
        How the unit computes (every field but ``registered_products``: a binary MVU
        has no products):

        - ``pe``, ``simd``: output channels computed in parallel,
          ``1 <= pe <= c_out/groups/beats``, each over ``simd`` input lanes per cycle,
          ``1 <= simd <= n_in``;
        - ``groups``: time-shared groups (a grouped convolution: the K bases of a
          Group-Net block on one unit). The input vector is ``groups`` vectors of
          ``n_in`` lanes, group-major; output channel ``c`` reads group
          ``c // (c_out/groups)`` only. The output folds of each group
          (``ceil(c_out/groups/pe)``) run one group after the other, and the ROM holds
          every group's weights: ``ii = groups*ceil(c_out/groups/pe)*in_folds``;
        - ``in_place``: read every step's input slice from ``i.payload`` and take the
          vector with its last step (``i.ready`` only then), instead of copying it into
          an input buffer when it is taken with its first: no buffer, for a producer
          that holds the vector in its output register anyway (a serial sliding window,
          :class:`~groupnet_hw.hw.window.SlidingWindow`). Same results and, with the
          input always valid, the same cycles; the producer gets the vector back
          ``ii - 1`` cycles later;
        - ``activation``: a per-channel table of ``c_out`` channels applied to every
          finished channel before it is collected (FINN's MVAU with thresholds): the
          levels of a :class:`~groupnet_hw.hw.multithreshold.ThresholdTable` or the
          post-op values of an :class:`~groupnet_hw.hw.elementwise.AffineTable`, in the
          table's ``stages`` registers more of latency and no cycle more per vector.
          With one output fold its constants are constants; with several, a ROM word
          per output fold;
        - ``beats``: beats per output vector (a divisor of ``c_out/groups``): the output
          stream carries each vector as ``beats`` beats of ``c_out/beats`` channels in
          the layout of :func:`groupnet_hw.hw.beats.beat_order` (beat ``j``: channels
          ``j*L .. j*L+L-1`` of every group, ``L = c_out/groups/beats``), each sent as
          soon as its output folds are done, so that the unit holds a beat, not a
          vector. The folds run beat by beat, within a beat group by group; the cycles
          per vector do not change;
        - ``registered_rom``: register the weight ROM's word and the step's input slice
          once more before the XNORs (the operand stage, one cycle more of latency), for
          a ROM the flow puts in block RAM: its read data leaves the block late (ECP5
          DP16KD: 5.6 ns of a 10 ns period) and must not meet the popcount in the same
          cycle. Set by the compiler (``compiler.resources.rom_read_register``); no
          effect with one step per vector.

    Members
    -------
    i : ``In(stream.Signature(unsigned(groups*n_in)))``
        One input vector per beat.
    o : ``Out(stream.Signature(data.ArrayLayout(out_shape, c_out // beats)))``
        ``beats`` beats per input vector (one by default: all ``c_out`` dot products);
        ``out_shape`` is ``signed(acc_width)``, or with an activation its ``out_shape``.

    Attributes
    ----------
    acc_width : int
        Minimal signed width holding ``[-n_in, n_in]``.
    out_folds, in_folds : int
        ``groups*ceil(c_out/groups/pe)`` and ``ceil(n_in/simd)``.
    ii : int
        Initiation interval, ``out_folds*in_folds``.
    latency : int
        ``ii + 2 + tree_stages`` and the activation's stages
        (:func:`mvu_latency`).

    Latency
    -------
    ``latency`` cycles: a vector accepted in cycle ``t`` (in place: whose first step
    is issued in cycle ``t``) is valid on ``o`` from cycle ``t + latency``. With the
    input always valid and the output always ready, vector ``k`` is accepted in cycle
    ``k*ii``: ``V`` vectors span
    ``(V-1)*ii + latency + 1`` cycles, first and last handshake included.

    Throughput
    ----------
    One vector every ``ii = ceil(c_out/pe)*ceil(n_in/simd)`` cycles
    (:func:`groupnet_hw.compiler.cycles.mvu_cycles`), including ``ii = 1``.
    ``o.valid`` is a register. ``i.ready`` is a function of the unit's own registers,
    never of ``o.ready``: with one step per beat the output register has a one-beat
    skid (``hw.skid``), so the unit holds one beat more.
    """

    CHOICES = _FoldedMVU.CHOICES - {"registered_products"}

    def __init__(self, n_in, c_out, weights, choices):
        choices = _checked(choices)
        weights = np.asarray(weights)
        if weights.shape != (c_out, n_in):
            raise ValueError(f"weights must have shape {(c_out, n_in)}, not {weights.shape}")
        if not np.isin(weights, (0, 1)).all():
            raise ValueError("binary weights must be 0 or 1")
        self._weights = weights.astype(np.int64)
        self._x_lane_width = 1
        self._w_lane_width = 1
        self._w_pad = 1
        # Accumulate matches (popcount), not +-1 sums: narrower, and the padding
        # lanes are simply absent from it. The count starts from -ceil(n_in/2), so
        # that 2*popcount - n_in is a shift and a constant low bit, not one more
        # adder after the accumulator (ECP5's critical path ran through it).
        self._acc_start = -((n_in + 1) // 2)
        self._acc_shape = signed(signed_width(self._acc_start, n_in // 2))
        super().__init__(n_in, c_out, unsigned(choices.groups * n_in),
                         signed_width(-n_in, n_in), choices)

    def _tree_terms(self):
        return binary_tree_terms(self.simd)

    def _term_shapes(self):
        # chunk counts (a ROM's read data each) summed in pairs, as _pe_terms does
        counts = [Signal(unsigned(POPCOUNT_CHUNK.bit_length()))
                  for _ in range(-(-self.simd // POPCOUNT_CHUNK))]
        return [Value.cast(t).shape() for t in reduce_levels(counts, 1)], None

    def _pe_terms(self, m, pe_index, x_slice, w_slice):
        # A named signal, not an expression: every chunk the popcount slices out
        # of an expression would re-emit the whole XNOR vector in the netlist.
        matches = Signal(len(x_slice))
        m.d.comb += matches.eq(~(x_slice ^ w_slice))
        # One adder level before the first register: a chunk-count ROM read straight
        # into a register becomes a synchronous ROM, which Yosys 0.70's memory_libmap
        # (YoWASP build) aborts on.
        return reduce_levels(chunk_counts(m, matches, name=f"popcount{pe_index}"), 1)

    def _finish(self, acc):
        # 2*(popcount - ceil(n_in/2)) + (n_in odd) == 2*popcount - n_in
        return Cat(Const(1, 1), acc).as_signed() if self.n_in % 2 else acc << 1


class BinaryWeightMVU(_FoldedMVU):
    """Binary-weight matrix-vector unit for n-bit activations.

    For every input vector ``x`` of unsigned ``in_bits``-bit activation
    levels (lane ``j = tap*C_in + channel``, as the window emits) emits one
    beat with, for each output channel ``c``,
    ``out[c] = sum_j (x[j] if w[c, j] else -x[j])`` (weight bit 1 <-> +1).

    Implementation: ``out[c] = 2*sum_j (x[j] AND w[c, j]) - sum_j x[j]``. The
    masked sum is an unsigned adder tree whose first level absorbs the AND
    gates, with no per-lane negation (two's complement negation would cost a
    carry chain per lane, or a correction term per PE), and ``sum_j x[j]``
    depends on the input only, so one tree per step serves all ``pe`` PEs.
    Each PE adds one subtractor; the doubling is wiring.

    Parameters
    ----------
    n_in : int
        Input lanes (``k*k*C_in``).
    c_out : int
        Output channels.
    weights : numpy.ndarray
        ``[c_out, n_in]`` array of {0, 1} (1 <-> +1), in a ROM laid out as in
        :class:`BinaryMVU` (``pe*simd`` bits per word). Lanes beyond ``n_in``
        meet input lanes forced to 0, so they add 0 to both sums whatever
        their weight bit (0); channels beyond ``c_out`` are computed and
        dropped.
    in_bits : int
        Width ``n`` of each unsigned input lane (levels ``0 .. 2**n - 1``).
    choices : MVUChoices
        As in :class:`BinaryMVU` (every field but ``registered_products``).

    Members
    -------
    i : ``In(stream.Signature(data.ArrayLayout(unsigned(in_bits), groups*n_in)))``
        One input vector per beat.
    o : ``Out(stream.Signature(data.ArrayLayout(out_shape, c_out)))``
        One beat per input vector, all ``c_out`` sums, or their activation values.

    Attributes
    ----------
    acc_width : int
        Minimal signed width holding ``[-B, B]``, ``B = n_in*(2**in_bits - 1)``;
        every partial sum of the accumulation is within that bound too.
    out_folds, in_folds, ii, latency : int
        As in :class:`BinaryMVU`.

    Latency
    -------
    ``latency`` cycles, as :class:`BinaryMVU`.

    Throughput
    ----------
    One vector every ``ii = ceil(c_out/pe)*ceil(n_in/simd)`` cycles
    (:func:`groupnet_hw.compiler.cycles.mvu_cycles`), as :class:`BinaryMVU`.
    """

    CHOICES = _FoldedMVU.CHOICES - {"registered_products"}

    def __init__(self, n_in, c_out, weights, in_bits, choices):
        choices = _checked(choices)
        weights = np.asarray(weights)
        if weights.shape != (c_out, n_in):
            raise ValueError(f"weights must have shape {(c_out, n_in)}, not {weights.shape}")
        if not np.isin(weights, (0, 1)).all():
            raise ValueError("binary weights must be 0 or 1")
        in_bits = operator.index(in_bits)   # numpy integers welcome, floats not
        if in_bits < 1:
            raise ValueError(f"in_bits must be positive, not {in_bits}")
        self._weights = weights.astype(np.int64)
        self.in_bits = in_bits
        self._x_lane_width = in_bits
        self._w_lane_width = 1
        self._w_pad = 0
        bound = n_in * ((1 << in_bits) - 1)
        acc_width = signed_width(-bound, bound)
        self._acc_shape = signed(acc_width)
        super().__init__(n_in, c_out, data.ArrayLayout(unsigned(in_bits), choices.groups * n_in),
                         acc_width, choices)

    def _lanes(self, x_slice):
        b = self.in_bits
        return [x_slice[s * b:(s + 1) * b] for s in range(self.simd)]

    def _tree_terms(self):
        return self.simd

    def _term_shapes(self):
        # masked lanes per PE, the lanes themselves shared
        lanes = [unsigned(self.in_bits)] * self.simd
        return lanes, lanes

    def _shared_terms(self, m, x_slice):
        return list(self._lanes(x_slice))

    def _pe_terms(self, m, pe_index, x_slice, w_slice):
        return [x & w_slice[s].replicate(self.in_bits)
                for s, x in enumerate(self._lanes(x_slice))]

    def _combine(self, pe_sum, shared_sum):
        # Unsigned minus unsigned is signed in Amaranth: no manual sign extension.
        return (pe_sum << 1) - shared_sum

    def _finish(self, acc):
        return acc


class IntegerMVU(_FoldedMVU):
    """Multiply-accumulate matrix-vector unit for the full-precision first layer.

    For every input vector ``x`` emits ``out[c] = sum_j w[c, j] * x[j]``.

    Parameters
    ----------
    n_in : int
        Input lanes (``k*k*C_in``).
    c_out : int
        Output channels.
    weights : numpy.ndarray
        ``[c_out, n_in]`` integer array, stored as ``signed(weight_width)``
        lanes in a ROM laid out as in :class:`BinaryMVU`. Lanes beyond ``n_in``
        and channels beyond ``c_out`` hold 0.
    in_width : int
        Width of each input lane.
    in_signed : bool
        Whether input lanes are two's complement.
    choices : MVUChoices
        As in :class:`BinaryMVU` but for ``groups`` (one group: the input is one vector),
        and ``registered_products``: register the products once more before the adder
        tree: the first register is the DSP block's own (on ECP5 ``hw.dsp_registers``
        moves it in), this one the placer puts by the tree. One cycle more of latency,
        none per vector. Set by the compiler (``compiler.resources.LATE_DSP_OUTPUT``).
        ``registered_rom`` changes nothing: the operands are always registered once more.

    Members
    -------
    i : ``In(stream.Signature(data.ArrayLayout(unsigned(in_width) or signed(in_width), n_in)))``
        One input vector per beat.
    o : ``Out(stream.Signature(data.ArrayLayout(out_shape, c_out)))``
        One beat per input vector, all ``c_out`` dot products, or their activation values.

    Attributes
    ----------
    weight_width : int
        Minimal signed width holding every weight.
    acc_width : int
        Minimal signed width holding ``[-B, B]``,
        ``B = max_c sum_j |w[c, j]| * max|x|``; every partial sum of the
        accumulation is within that bound too, so nothing can overflow.
    out_folds, in_folds, ii : int
        As in :class:`BinaryMVU`.
    latency : int
        ``ii + 3 + tree_stages`` (:func:`mvu_latency` with the operand
        stage), one more with ``registered_products``.

    Latency
    -------
    ``latency`` cycles, ``ii + 3 + tree_stages``: one more than :class:`BinaryMVU`, for
    the register in front of the multipliers; with ``registered_products`` one more
    again.

    Throughput
    ----------
    One vector every ``ii = ceil(c_out/pe)*ceil(n_in/simd)`` cycles, as
    :class:`BinaryMVU`.
    """

    _integer = True
    CHOICES = _FoldedMVU.CHOICES - {"groups"}

    def __init__(self, n_in, c_out, weights, in_width, in_signed, choices):
        weights = np.asarray(weights)
        if weights.shape != (c_out, n_in):
            raise ValueError(f"weights must have shape {(c_out, n_in)}, not {weights.shape}")
        if not np.issubdtype(weights.dtype, np.integer):
            raise TypeError(f"weights must be integers, not {weights.dtype}")
        if in_width < 1:
            raise ValueError(f"in_width must be positive, not {in_width}")
        # Python ints: the bound must not wrap in a fixed-width numpy dtype.
        w_int = [[int(v) for v in row] for row in weights]
        self._weights = np.array(w_int, dtype=object).reshape(c_out, n_in)
        self.in_width = in_width
        self.in_signed = bool(in_signed)
        self.weight_width = signed_width(min(min(r) for r in w_int), max(max(r) for r in w_int))
        x_max = (1 << (in_width - 1)) if in_signed else (1 << in_width) - 1
        bound = max(sum(abs(v) for v in row) for row in w_int) * x_max
        lane = signed(in_width) if in_signed else unsigned(in_width)
        self._x_lane_width = in_width
        self._w_lane_width = self.weight_width
        self._w_pad = 0
        acc_width = signed_width(-bound, bound)
        self._acc_shape = signed(acc_width)
        super().__init__(n_in, c_out, data.ArrayLayout(lane, n_in), acc_width, choices)

    @staticmethod
    def product_width_of(w_min, w_max, in_width, in_signed):
        """Bits of one product term: an ``in_width``-bit input lane times a weight of
        the minimal signed width holding ``[w_min, w_max]`` (what the resource model
        counts for the products' fabric copy)."""
        lane = signed(in_width) if in_signed else unsigned(in_width)
        return (Signal(lane) * Signal(signed(signed_width(w_min, w_max)))).shape().width

    def _tree_terms(self):
        return self.simd

    def _term_shapes(self):
        lane = signed(self.in_width) if self.in_signed else unsigned(self.in_width)
        product = (Signal(lane) * Signal(signed(self.weight_width))).shape()
        return [product] * self.simd, None

    def _pe_terms(self, m, pe_index, x_slice, w_slice):
        xl, wl = self.in_width, self.weight_width
        products = []
        for s in range(self.simd):
            x = x_slice[s * xl:(s + 1) * xl]
            if self.in_signed:
                x = x.as_signed()
            products.append(x * w_slice[s * wl:(s + 1) * wl].as_signed())
        return products

    def _finish(self, acc):
        return acc
