"""Beat streams: a pixel's channels travelling as several consecutive beats.

A unit that sees one pixel every few cycles need not hold a whole pixel: the pixel of
``C`` channels can travel as ``B`` consecutive beats of ``C/B`` channels, and the unit
then holds (and computes on) one beat. Layout of a tensor with ``C`` channels in ``G``
groups (``G = K`` time-shared bases packed side by side, else 1), ``Cg = C/G`` channels
per group and ``L = Cg/B`` lanes per group per beat: lane ``g*L + l`` of beat ``j`` is
channel ``g*Cg + j*L + l`` (:func:`beat_order`). Pixels are in raster order, a pixel's
``B`` beats consecutive, frames back to back; there is no marker signal, units count
beats.

:class:`BeatPack` turns a beat stream back into whole pixels, :class:`BeatPad`
lengthens every pixel with zero beats (an option-A shortcut with fewer channels per
group than the add it joins); :func:`beat_counter` and :func:`beat_select` are the
pieces the per-pixel units use to take beats (:mod:`.elementwise`,
:mod:`.multithreshold`, :mod:`.subsample`).
"""

from __future__ import annotations

import operator

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import at_least, positive_int as _positive

__all__ = ["beat_order", "check_order", "beat_counter", "beat_select", "beat_at_least",
           "BeatPack", "BeatPad"]


def beat_order(channels, groups, beats):
    """The channel each lane of each beat carries, for the layout of this module.

    Parameters
    ----------
    channels : int
        Channels per pixel, ``C``.
    groups : int
        Groups ``G`` side by side in a pixel (the ``K`` bases of a time-shared layer),
        each of ``Cg = C/G`` consecutive channels.
    beats : int
        Beats per pixel, ``B``; it divides ``Cg``.

    Returns
    -------
    list of ``B`` lists of ``G*L`` ints
        ``order[j][g*L + l] = g*Cg + j*L + l`` with ``L = Cg/B``: channel carried by lane
        ``g*L + l`` of beat ``j``.

    Raises
    ------
    ValueError
        If ``groups`` does not divide ``channels`` or ``beats`` does not divide
        ``channels // groups``.
    """
    channels = _positive("channels", channels)
    groups = _positive("groups", groups)
    beats = _positive("beats", beats)
    if channels % groups:
        raise ValueError(f"groups ({groups}) does not divide channels ({channels})")
    per_group = channels // groups
    if per_group % beats:
        raise ValueError(f"beats ({beats}) does not divide the {per_group} channels per "
                         f"group ({channels} channels in {groups} groups)")
    lanes = per_group // beats
    return [[g * per_group + j * lanes + l for g in range(groups) for l in range(lanes)]
            for j in range(beats)]


def check_order(channels, beats, order=None):
    """Validate a beat order (``None``: ``beat_order(channels, 1, beats)``).

    Parameters
    ----------
    channels, beats : int
        ``C`` and ``B``; ``B`` divides ``C``.
    order : sequence of ``B`` sequences of ``C/B`` ints, optional
        Any permutation of ``range(C)`` split into ``B`` equal lists: ``order[j][i]`` is
        the channel on lane ``i`` of beat ``j``.

    Returns
    -------
    list of list of int
        ``order`` as plain Python ints.

    Raises
    ------
    ValueError
        If ``beats`` does not divide ``channels`` or ``order`` is not such a split.
    """
    channels = _positive("channels", channels)
    beats = _positive("beats", beats)
    if channels % beats:
        raise ValueError(f"beats ({beats}) does not divide channels ({channels})")
    if order is None:
        return beat_order(channels, 1, beats)
    rows = [[operator.index(c) for c in row] for row in order]
    lanes = channels // beats
    if len(rows) != beats or any(len(row) != lanes for row in rows):
        raise ValueError(f"order must be {beats} lists of {lanes} channels, "
                         f"not lists of lengths {[len(row) for row in rows]}")
    if sorted(c for row in rows for c in row) != list(range(channels)):
        raise ValueError(f"order must hold every channel 0..{channels - 1} exactly once")
    return rows


def beat_counter(m, s, beats):
    """Beat of the pixel on stream ``s``: a counter ``0 .. beats-1`` that advances on
    every handshake of ``s`` and wraps after ``beats`` (a constant 0 for one beat).

    Parameters
    ----------
    m : Module
    s : stream interface
        The counted stream (its ``valid & ready``).
    beats : int

    Returns
    -------
    Value
        ``unsigned`` counter (``Const(0, 1)`` when ``beats == 1``).
    """
    if beats == 1:
        return Const(0, 1)
    beat = Signal(range(beats), name="beat")
    with m.If(s.valid & s.ready):
        m.d.sync += beat.eq(Mux(beat == beats - 1, 0, beat + 1))
    return beat


def beat_select(table, beat, shape):
    """A lane's per-beat constant ``table[beat]``: a plain constant when every beat has
    the same one (no multiplexer), else a small ROM indexed by ``beat`` (as
    :func:`.lanes.lane_rom`).

    Parameters
    ----------
    table : sequence of int
        The lane's constant in each beat.
    beat : Value
        Beat counter (:func:`beat_counter`).
    shape : shape-like
        Shape of the constants.
    """
    table = [int(v) for v in table]
    if len(set(table)) == 1:
        return Const(table[0], shape)
    return Array(Const(v, shape) for v in table)[beat]


def beat_at_least(x, table, width, beat):
    """``x >= table[beat]``, exactly, for a ``signed(width)`` lane ``x``, one bit.

    A threshold below ``x``'s range is always reached and one above it never: each is
    clipped into ``[lo, hi + 1]``, which keeps every comparison and lets a lane whose
    thresholds differ only beyond the range share one. A lane with one threshold in
    every beat is :func:`.arith.at_least` on a constant (a constant bit when out of
    range); otherwise one comparator against the beat's threshold
    (:func:`beat_select`).

    Parameters
    ----------
    x : Value
        ``signed(width)`` lane.
    table : sequence of int
        The lane's threshold in each beat; any integers.
    width : int
    beat : Value
        Beat counter (:func:`beat_counter`).
    """
    table = [int(t) for t in table]
    if len(set(table)) == 1:
        return at_least(x, table[0], width)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    clipped = [min(max(t, lo), hi + 1) for t in table]
    if len(set(clipped)) == 1:
        return at_least(x, clipped[0], width)
    # hi + 1 needs a bit more than x's own range
    shape = signed(width + 1 if max(clipped) > hi else width)
    return Value.cast(x).as_signed() >= beat_select(clipped, beat, shape)


class BeatPack(wiring.Component):
    """Collect a pixel's ``B`` beats into one pixel.

    Beats ``0 .. B-2`` of a pixel shift into collect registers; the last beat loads the
    output register together with them, each lane going to the place of its channel.
    The input is accepted every cycle except when a pixel's last beat meets a full
    output register the consumer does not take this cycle: ``i.ready`` depends on
    ``o.ready`` for the last beat only.

    Parameters
    ----------
    lane_width : int
        Bits per channel (lanes are raw bit fields).
    channels : int
        Channels per pixel, ``C``.
    beats : int
        Beats per pixel, ``B``; it divides ``C``. 1: one register, a plain pipeline stage.
    order : sequence of ``B`` sequences of ``C/B`` ints, optional
        ``order[j][i]``: channel on lane ``i`` of beat ``j``, any permutation of
        ``range(C)`` split into ``B`` equal lists (default ``beat_order(C, 1, B)``).

    Members
    -------
    i : ``In(stream.Signature(unsigned(lane_width * C // B)))``
        Beats; lane ``i`` at bits ``i*lane_width ..``.
    o : ``Out(stream.Signature(unsigned(lane_width * C)))``
        Pixels; channel ``c`` at bits ``c*lane_width ..``. ``o.valid`` is a register.

    Attributes
    ----------
    latency : int
        1: a pixel is on ``o`` the cycle after its last beat is accepted.

    Latency
    -------
    1 cycle from the pixel's last beat.

    Throughput
    ----------
    One beat per cycle: ``B`` cycles per pixel, ``height*width*B`` per frame.
    """

    latency = 1

    def __init__(self, lane_width, channels, beats, order=None):
        self.lane_width = lane_width = _positive("lane_width", lane_width)
        self.channels = channels = _positive("channels", channels)
        self.beats = beats = _positive("beats", beats)
        self.order = check_order(channels, beats, order)
        super().__init__({
            "i": In(stream.Signature(unsigned(lane_width * channels // beats))),
            "o": Out(stream.Signature(unsigned(lane_width * channels))),
        })

    def elaborate(self, platform):
        m = Module()
        w, B = self.lane_width, self.beats
        lanes = self.channels // B
        beat = beat_counter(m, self.i, B)
        last = beat == B - 1
        # A shift register rather than a register per beat: one enable for all of them,
        # no decoder, and beat j sits in collect[j] once beat B-1 arrives.
        collect = [Signal(lanes * w, name=f"collect{j}") for j in range(B - 1)]
        beat_values = [*collect, self.i.payload]
        place = [None] * self.channels
        for j, row in enumerate(self.order):
            for i, c in enumerate(row):
                place[c] = beat_values[j][i * w:(i + 1) * w]

        m.d.comb += self.i.ready.eq(~last | ~self.o.valid | self.o.ready)
        take = self.i.valid & self.i.ready
        with m.If(take & ~last):
            m.d.sync += [a.eq(b) for a, b in zip(collect, collect[1:] + [self.i.payload])]
        with m.If(take & last):
            m.d.sync += [self.o.payload.eq(Cat(place)), self.o.valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m


class BeatPad(wiring.Component):
    """Lengthen each pixel of a beat stream with zero beats.

    Per pixel, ``in_beats`` beats pass through, then ``out_beats - in_beats`` beats of
    zero bits follow without taking input: a shortcut with fewer channels per group
    than the residual add it joins (ResNet option A), zero-padded at the top of each
    group.

    Parameters
    ----------
    shape : shape-like
        Beat (payload) shape.
    in_beats, out_beats : int
        Beats per pixel in and out, ``1 <= in_beats <= out_beats``.

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
        While passing, ``o.valid``/``o.payload`` are ``i``'s and ``i.ready`` is
        ``o.ready``; while padding ``o.valid = 1``, ``o.payload = 0``, ``i.ready = 0``.

    Attributes
    ----------
    latency : int
        0: combinational.

    Latency
    -------
    0 cycles.

    Throughput
    ----------
    One output beat per cycle: ``out_beats`` cycles per pixel.
    """

    latency = 0

    def __init__(self, shape, in_beats, out_beats):
        self.in_beats = in_beats = _positive("in_beats", in_beats)
        self.out_beats = out_beats = _positive("out_beats", out_beats)
        if in_beats > out_beats:
            raise ValueError(f"in_beats ({in_beats}) exceeds out_beats ({out_beats})")
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        # Counted on the output: padding beats have no input handshake.
        beat = beat_counter(m, self.o, self.out_beats)
        passing = beat < self.in_beats
        m.d.comb += [
            self.o.valid.eq(Mux(passing, self.i.valid, 1)),
            Value.cast(self.o.payload).eq(Mux(passing, Value.cast(self.i.payload), 0)),
            self.i.ready.eq(passing & self.o.ready),
        ]
        return m
