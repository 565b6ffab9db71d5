"""Multi-threshold unit: n-bit activation levels from accumulators (FINN's MultiThreshold).

A batch norm (and ReLU, and the clip of the n-bit quantizer) in front of an n-bit
activation folds into ``2**n - 1`` integer thresholds per channel
(``docs/architecture.md`` section 3): the output level is the number of thresholds the
accumulator reaches, ``sum_j ((acc >= T_j) XOR invert)``.
"""

import operator

from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream
from amaranth.lib.wiring import In, Out

from .arith import at_least
from .beats import beat_at_least, beat_counter, beat_select, check_order
from .elementwise import _PixelMap, _positive
from .lanes import fold_rom

__all__ = ["MultiThreshold", "ThresholdTable", "thermometer_count"]


class ThresholdTable:
    """Per-channel thresholds of an n-bit activation: ``level[c] = sum_j ((x >= T[c][j])
    XOR invert[c])``, the table a :class:`MultiThreshold` or an MVU with an activation
    (:mod:`groupnet_hw.hw.mvu`) compares against.

    Parameters
    ----------
    thresholds : sequence of sequences of int, ``C`` x ``2**n - 1``
        Any integers, in any order.
    invert : sequence of bool or int, length ``C``
    channels, bits : int, optional
        Expected ``C`` and ``n`` (checked); by default taken from ``thresholds``.

    Attributes
    ----------
    channels, bits, levels : int
        ``C``, ``n`` and ``2**n - 1``.
    thresholds : list of list of int
        As given (Python ints: numpy scalars would wrap, and RTL constants need ints).
    sorted : list of list of int
        Each channel's thresholds in ascending order: a level is a count, which does not
        depend on their order, and sorted they form a thermometer code.
    invert : list of bool
    """

    def __init__(self, thresholds, invert, channels=None, bits=None):
        rows = [[operator.index(t) for t in row] for row in thresholds]
        channels = len(rows) if channels is None else channels
        if bits is None:
            bits = (len(rows[0]) + 1).bit_length() - 1 if rows else 1
        if not 1 <= bits <= 8:
            raise ValueError(f"bits must be in 1..8, not {bits}")
        levels = (1 << bits) - 1
        if len(rows) != channels:
            raise ValueError(f"thresholds has {len(rows)} rows, expected {channels}")
        for c, row in enumerate(rows):
            if len(row) != levels:
                raise ValueError(f"thresholds[{c}] has {len(row)} entries, expected {levels}")
        invert = [operator.index(v) for v in invert]
        if len(invert) != channels:
            raise ValueError(f"invert has {len(invert)} entries, expected {channels}")
        self.channels, self.bits, self.levels = channels, bits, levels
        self.thresholds = rows
        self.sorted = [sorted(row) for row in rows]
        self.invert = [bool(v) for v in invert]
        self.out_shape = unsigned(bits)

    #: Registers the table adds in an MVU (:mod:`groupnet_hw.hw.mvu`): the level's.
    stages = 1

    def elaborate(self, m, finished, channels, fold, adv, width):
        """Each PE's level, combinational, in an MVU whose PE ``p`` holds channel
        ``channels[f][p]`` (``None``: padding) of output fold ``f`` in ``finished[p]``
        (``signed(width)``, registered on ``adv`` from the stage at fold ``fold``): the
        count of the channel's thresholds reached, by binary search over the sorted
        thresholds, inverted for the channels that count the complement. With one fold
        the thresholds are constants, compared only on the bits they need; with several
        they are a ROM word per fold, every PE's thresholds clipped into
        ``[lo, hi + 1]`` (always / never reached) in ``width + 1`` bits and its invert
        bit, read beside the result register so that the two are aligned."""
        levels = []
        if len(channels) == 1:
            for p, c in enumerate(channels[0]):
                if c is None:
                    levels.append(Const(0, self.out_shape))
                    continue
                hit = Cat(at_least(finished[p], t, width) for t in self.sorted[c])
                count = Cat(thermometer_count(hit, 0, self.bits))
                levels.append(~count if self.invert[c] else count)
            return levels
        tw, n = width + 1, self.levels
        lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        lanes = fold_rom(m, "thresholds", channels, [tw] * n + [1],
                         lambda c: [min(max(t, lo), hi + 1) for t in self.sorted[c]]
                         + [self.invert[c]], fold, adv)
        for p, fields in enumerate(lanes):
            hit = Signal(n, name=f"hit{p}")
            m.d.comb += hit.eq(Cat(finished[p] >= t.as_signed() for t in fields[:n]))
            count = Signal(self.bits, name=f"count{p}")
            m.d.comb += count.eq(Cat(thermometer_count(hit, 0, self.bits)))
            levels.append(Mux(fields[n], ~count, count))
        return levels


class MultiThreshold(_PixelMap):
    """Per-channel multi-threshold: ``out[c] = sum_j ((acc[c] >= T[c][j]) XOR invert[c])``.

    The n-bit generalisation of :class:`~groupnet_hw.hw.elementwise.Threshold`. ``invert``
    is set for channels whose batch norm has ``gamma < 0``; thresholds outside the
    accumulator's range (``gamma = 0``, or levels the range never reaches) become constant
    comparisons, so every level stays exact. A channel's thresholds need not be sorted.

    In a beat stream (:mod:`.beats`, ``beats > 1``) the ports carry one beat of
    ``C/beats`` lanes, lane ``i`` of beat ``j`` being channel ``order[j][i]``. A beat
    counter selects each lane's sorted thresholds and inversion: the ``k``-th smallest
    threshold of a lane is a constant where it is the same in every beat (after clipping
    into the range's ends, :func:`.beats.beat_at_least`), a small ROM otherwise, and
    each beat's list being sorted, the comparisons stay a thermometer code.

    Implementation: the level is a count, which does not depend on the order of the
    thresholds, so they are sorted at construction. Sorted, the comparisons form a
    thermometer code, and its count is read by binary search: bit ``n-1`` is the
    comparison with the ``2**(n-1)``-th smallest threshold, and it selects which half
    answers the lower bits. That is ``2**n - n - 1`` one-bit multiplexers per channel
    instead of an adder tree over ``2**n - 1`` bits. An inverted channel counts the
    complementary comparisons, ``(2**n - 1) - count``, which is ``~count`` in ``n`` bits.

    Parameters
    ----------
    channels : int
        Channels per pixel, ``C``.
    acc_width : int
        Width of each signed accumulator element.
    bits : int
        Output bits ``n`` (1..8): ``2**n - 1`` thresholds per channel, levels
        ``0 .. 2**n - 1``.
    thresholds : sequence of sequences of int, ``C`` x ``2**n - 1``
        Any integers, also outside the ``signed(acc_width)`` range, in any order.
    invert : sequence of bool or int, length ``C``
        Per channel inversion of every comparison.
    beats : int
        Beats per pixel, ``B``; it divides ``C``.
    order : sequence of ``B`` sequences of ``C/B`` ints, optional
        Channel of each lane of each beat (default ``beats.beat_order(C, 1, B)``).

    Members
    -------
    i : ``In(stream.Signature(data.ArrayLayout(signed(acc_width), C // B)))``
        Accumulator beats.
    o : ``Out(stream.Signature(data.ArrayLayout(unsigned(bits), C // B)))``
        Activation levels, lane ``i`` of beat ``j`` = channel ``order[j][i]`` (channel
        ``i`` with one beat).

    Latency
    -------
    1 cycle (input accepted in cycle t, ``o.valid`` in cycle t+1).

    Throughput
    ----------
    1 beat per cycle: ``compiler.cycles.elementwise_cycles(H, W)`` per frame with one
    beat per pixel, ``B`` times that with ``B``.

    Notes
    -----
    Resources per channel: one ``acc_width``-bit comparator per in-range threshold (none
    for the constant ones), ``2**n - n - 1`` one-bit multiplexers and, if inverted, ``n``
    inverters; plus the ``C*n``-bit output register. With beats, per lane: the same, but
    a comparator (``acc_width + 1`` bits at most) and a ``B``-way constant multiplexer
    for each threshold that differs between beats, and a beat counter per unit.
    """

    def __init__(self, channels, acc_width, bits, thresholds, invert, *, beats=1,
                 order=None):
        self.channels = channels = _positive("channels", channels)
        self.acc_width = acc_width = _positive("acc_width", acc_width)
        self.bits = bits = _positive("bits", bits)
        if bits > 8:
            raise ValueError(f"bits must be at most 8, not {bits}")
        table = ThresholdTable(thresholds, invert, channels=channels, bits=bits)
        self.thresholds, self.invert = table.thresholds, table.invert
        self.beats = beats = _positive("beats", beats)
        self.order = check_order(channels, beats, order)
        lanes = channels // beats
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(acc_width), lanes))),
            "o": Out(stream.Signature(data.ArrayLayout(unsigned(bits), lanes))),
        })

    def _map(self, m, x):
        beat = beat_counter(m, self.i, self.beats)
        outs = []
        for i in range(len(self.order[0])):
            channels = [row[i] for row in self.order]
            rows = [sorted(self.thresholds[c]) for c in channels]
            hits = [beat_at_least(x[i], [row[k] for row in rows], self.acc_width, beat)
                    for k in range(len(rows[0]))]
            # Named: each comparison feeds a multiplexer select or data input, and an
            # expression would be emitted again at every use in the Verilog.
            hit = Signal(len(hits), name=f"hit{i}")
            m.d.comb += hit.eq(Cat(hits))
            count = Signal(unsigned(self.bits), name=f"count{i}")
            m.d.comb += count.eq(Cat(thermometer_count(hit, 0, self.bits)))
            inv = [self.invert[c] for c in channels]
            if len(set(inv)) == 1:
                outs.append(~count if inv[0] else count)
            else:
                outs.append(Mux(beat_select(inv, beat, 1), ~count, count))
        return Cat(outs)


def thermometer_count(hit, start, bits):
    """Bits (LSB first) of the number of ones in ``hit[start : start + 2**bits - 1]``.

    ``hit`` is a thermometer code (ones, then zeros): its middle bit is the count's top
    bit and chooses the half that holds the boundary.
    """
    if bits == 0:
        return []
    half = 1 << (bits - 1)
    top = hit[start + half - 1]
    lower = thermometer_count(hit, start, bits - 1)
    upper = thermometer_count(hit, start + half, bits - 1)
    return [Mux(top, u, l) for u, l in zip(upper, lower)] + [top]
