"""Per-pixel stream units: sign, threshold, post-op (BN/scale/ReLU) and residual add.

Every unit here consumes one pixel beat (all channels) and produces one pixel beat,
at one pixel per cycle, through a single output register ("skid-free" pipeline
register: the input is accepted whenever the output register is empty or is being
taken in the same cycle). ``o.valid`` is a register, so it never depends on
``o.ready``; ``i.ready`` does depend on ``o.ready`` (combinationally), which the
stream convention allows.

Numerics follow ``docs/hw-conventions.md``: exact signed integer arithmetic, widths
from range analysis of the parameters, rounding half up by add-then-arithmetic-shift,
``round_shift(v, s) = (v + 2**(s-1)) >> s`` (``v`` for ``s = 0``). Rounding is
monotonic, so the ends of an input interval map to the ends of the output interval.
"""

import operator

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..numerics import signed_width
from .arith import const_sum, positive_int as _positive, registered_pieces
from .beats import beat_at_least, beat_counter, beat_select, check_order
from .lanes import build_lane_folded, fold_rom, folded_interval, lane_folds, lane_rom

__all__ = ["SignBits", "Threshold", "PostOp", "AffineTable", "ResidualAdd", "signed_width",
           "signed_range", "POSTOP_LANE_LATENCY", "postop_lane_latency"]


#: Pipeline registers in a lane of the channel-serial post-op (:class:`PostOp`) with few
#: steps: the per-channel constants with the input, then the product.
POSTOP_LANE_LATENCY = 2


def postop_lane_latency(folds):
    """Pipeline registers in a post-op's lane with ``folds`` steps. With enough steps
    (no cycle lost: :func:`~.lanes.folded_interval`) the multiplier's operands and its
    product are registered once more, so that registers can sit beside the DSP block: on
    ECP5 the route to and from a MULT18X18D was the critical path (7.0 ns of 11.4)."""
    deep = POSTOP_LANE_LATENCY + 2
    return deep if folds >= deep + 1 else POSTOP_LANE_LATENCY


def signed_range(width):
    """``(min, max)`` of ``signed(width)``."""
    return -(1 << (width - 1)), (1 << (width - 1)) - 1


def _ints(values, length, what):
    """Parameters arrive as numpy arrays; the RTL needs plain Python ints."""
    out = [int(v) for v in values]
    if len(out) != length:
        raise ValueError(f"{what} has {len(out)} entries, expected {length}")
    return out


def _fit(m, value, width, name):
    """``value`` sign-extended or truncated to a named ``signed(width)`` signal.

    Assignment does the resizing; the named signal keeps the Verilog readable.
    """
    fitted = Signal(signed(width), name=name)
    m.d.comb += fitted.eq(value)
    return fitted


class _PixelMap(wiring.Component):
    """One input stream, one output stream, a pure function per beat, one register."""

    latency = 1

    def _map(self, m, x):
        """Return the output payload value (shape of ``o.payload``) for input view ``x``."""
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        value = self._map(m, self.i.payload)
        # Accept into the output register when it is empty or emptying this cycle:
        # full throughput without a skid buffer, valid stays a register.
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.o.payload.eq(value), self.o.valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m


class SignBits(_PixelMap):
    """Binarize a real-valued pixel: bit ``c`` = ``x[c] >= 0`` (sign(0) = +1).

    Parameters
    ----------
    channels : int
        Channels per pixel, ``C``.
    width : int
        Width of each signed input element.

    Members
    -------
    i : ``In(stream.Signature(data.ArrayLayout(signed(width), channels)))``
        Real-valued pixels.
    o : ``Out(stream.Signature(unsigned(channels)))``
        Binary pixels, bit ``c`` = channel ``c``, 1 <-> +1.

    Latency
    -------
    1 cycle (input accepted in cycle t, ``o.valid`` in cycle t+1).

    Throughput
    ----------
    1 pixel per cycle: ``compiler.cycles.elementwise_cycles(H, W)`` per frame.
    """

    def __init__(self, channels, width):
        self.channels = channels = _positive("channels", channels)
        self.width = width = _positive("width", width)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(width), channels))),
            "o": Out(stream.Signature(unsigned(channels))),
        })

    def _map(self, m, x):
        # The sign bit of a two's complement value is 0 exactly when it is >= 0.
        return Cat(~x[c][-1] for c in range(self.channels))


class Threshold(_PixelMap):
    """Per-channel threshold: bit ``c`` = ``(acc[c] >= thresholds[c]) XOR invert[c]``.

    This is the FINN-style folding of BN/ReLU/scale in front of a sign: the compiler
    turns ``sign(gamma*(acc - mu)/sigma + beta)`` into an integer threshold, with
    ``invert`` set for negative ``gamma``. Thresholds outside the accumulator's range
    (e.g. ``-n-1`` or ``n+1``, from ``gamma = 0``) are folded to constant bits, so
    every comparison stays exact.

    In a beat stream (:mod:`.beats`, ``beats > 1``) the ports carry one beat of
    ``C/beats`` lanes, lane ``i`` of beat ``j`` being channel ``order[j][i]``. A beat
    counter selects each lane's threshold and inversion; a lane with the same one in
    every beat keeps a constant (no multiplexer), the others compare against the beat's
    threshold clipped into the range's ends (:func:`.beats.beat_at_least`).

    Parameters
    ----------
    channels : int
        Channels per pixel, ``C``.
    acc_width : int
        Width of each signed accumulator element.
    thresholds : sequence of int, length ``C``
        Any integers, also outside the ``signed(acc_width)`` range.
    invert : sequence of bool or int, length ``C``
        Per channel output inversion.
    beats : int
        Beats per pixel, ``B``; it divides ``C``.
    order : sequence of ``B`` sequences of ``C/B`` ints, optional
        Channel of each lane of each beat (default ``beats.beat_order(C, 1, B)``).

    Members
    -------
    i : ``In(stream.Signature(data.ArrayLayout(signed(acc_width), C // B)))``
        Accumulator beats.
    o : ``Out(stream.Signature(unsigned(C // B)))``
        Binary beats, bit ``i`` = lane ``i``.

    Latency
    -------
    1 cycle.

    Throughput
    ----------
    1 beat per cycle: ``compiler.cycles.elementwise_cycles(H, W)`` per frame with one
    beat per pixel, ``B`` times that with ``B``.
    """

    def __init__(self, channels, acc_width, thresholds, invert, *, beats=1, order=None):
        self.channels = channels = _positive("channels", channels)
        self.acc_width = acc_width = _positive("acc_width", acc_width)
        self.thresholds = _ints(thresholds, channels, "thresholds")
        self.invert = [bool(v) for v in _ints(invert, channels, "invert")]
        self.beats = beats = _positive("beats", beats)
        self.order = check_order(channels, beats, order)
        lanes = channels // beats
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(acc_width), lanes))),
            "o": Out(stream.Signature(unsigned(lanes))),
        })

    def _map(self, m, x):
        beat = beat_counter(m, self.i, self.beats)
        bits = []
        for i in range(len(self.order[0])):
            channels = [row[i] for row in self.order]
            bit = beat_at_least(x[i], [self.thresholds[c] for c in channels],
                                self.acc_width, beat)
            inv = [self.invert[c] for c in channels]
            if len(set(inv)) == 1:
                bits.append(~bit if inv[0] else bit)
            else:
                bits.append(bit ^ beat_select(inv, beat, 1))
        return Cat(bits)


class PostOp(_PixelMap):
    """Per-channel affine requantization: ReLU, folded BN/scale, rounding, ReLU.

    For each channel ``c``::

        v = max(acc[c], 0) if pre_relu else acc[c]
        y = round_shift(scale[c] * v + bias[c], shift)
        y = max(y, 0) if post_relu else y

    ``scale`` may be negative or zero (BN with gamma < 0 or gamma = 0). Intermediate
    widths come from interval analysis over the full ``signed(acc_width)`` input range,
    so nothing overflows. ``out_width`` is the compiler's (possibly tighter) bound on
    ``y``; results are truncated to it, which is exact whenever the compiler's range
    analysis holds.

    Parameters
    ----------
    channels : int
        Channels per pixel, ``C``.
    acc_width : int
        Width of each signed input element.
    scale, bias : sequence of int, length ``C``
        Fixed-point multiplier and offset (offset already at the product's scale).
    shift : int
        Right shift after the affine step, ``>= 0``.
    pre_relu, post_relu : bool
        ReLU before the multiplication / after the rounding.
    out_width : int
        Width of each signed output element.
    lanes : int, optional
        Channel-serial: ``lanes`` channels per cycle with the per-channel constants read
        from a small ROM (:mod:`.lanes`), for frame intervals that leave the unit idle.
        ``None`` (default): every channel in parallel with constant multipliers.

    Members
    -------
    i : ``In(stream.Signature(data.ArrayLayout(signed(acc_width), channels)))``
    o : ``Out(stream.Signature(data.ArrayLayout(signed(out_width), channels)))``

    Attributes
    ----------
    inner_widths : list of int
        Per channel width of ``scale*v + bias + 2**(shift-1)`` (exact bound).
    y_ranges : list of (int, int)
        Per channel exact range of ``y`` over all inputs of ``signed(acc_width)``.

    Latency
    -------
    1 cycle; with ``lanes``, ``ceil(C/lanes) + 1 + L`` cycles, ``L`` the lane's
    registers (:func:`postop_lane_latency`: 2, or 4 from 5 steps).

    Throughput
    ----------
    1 pixel per cycle: ``compiler.cycles.elementwise_cycles(H, W)`` per frame; with
    ``lanes``, one pixel per ``max(ceil(C/lanes) + 1, L + 2)`` cycles (3 with one step:
    :func:`~.lanes.folded_interval`) and ``i.ready`` is a register.
    """

    def __init__(self, channels, acc_width, scale, bias, shift, pre_relu, post_relu,
                 out_width, lanes=None):
        self.channels = channels = _positive("channels", channels)
        self.acc_width = acc_width = _positive("acc_width", acc_width)
        self.out_width = out_width = _positive("out_width", out_width)
        shift = operator.index(shift)
        if shift < 0:
            raise ValueError(f"shift must be >= 0, not {shift}")
        self.scale = _ints(scale, channels, "scale")
        self.bias = _ints(bias, channels, "bias")
        self.shift = shift
        self.pre_relu = bool(pre_relu)
        self.post_relu = bool(post_relu)
        self.lanes = None if lanes is None else min(_positive("lanes", lanes), channels)
        if self.lanes is not None:
            folds = lane_folds(channels, self.lanes)
            #: Pipeline registers in a lane (:func:`postop_lane_latency`).
            self.lane_latency = postop_lane_latency(folds)
            self.latency = folds + 1 + self.lane_latency
            self.interval = folded_interval(channels, self.lanes, self.lane_latency)

        lo, hi = signed_range(acc_width)
        if self.pre_relu:
            lo = 0
        half = (1 << (shift - 1)) if shift else 0
        self.inner_widths, self.y_ranges = [], []
        for s, b in zip(self.scale, self.bias):
            t_lo = min(s * lo, s * hi) + b + half
            t_hi = max(s * lo, s * hi) + b + half
            self.inner_widths.append(signed_width(t_lo, t_hi))
            y_lo, y_hi = t_lo >> shift, t_hi >> shift
            if self.post_relu:
                y_lo, y_hi = max(y_lo, 0), max(y_hi, 0)
            self.y_ranges.append((y_lo, y_hi))

        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(acc_width), channels))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(out_width), channels))),
        })

    def elaborate(self, platform):
        if self.lanes is None:
            return super().elaborate(platform)
        m = Module()
        half = (1 << (self.shift - 1)) if self.shift else 0
        offsets = [b + half for b in self.bias]
        scale_shape = signed(max(signed_width(v, v) for v in self.scale))
        bias_shape = signed(max(signed_width(v, v) for v in offsets))
        inner = signed(max(self.inner_widths))

        deep = self.lane_latency > POSTOP_LANE_LATENCY

        def delayed(m, value, name):
            r = Signal.like(value, name=name, reset_less=True)
            m.d.sync += r.eq(value)
            return r

        def lane(m, fold, p, xs, step):
            # Free-running register stages: the per-channel constants and the input
            # (ROM look-up), then the product, then the offset, shift and ReLU; in one
            # cycle they were 13.6 ns on ECP5. Deep, the product's operands and result
            # are registered once more, with only the DSP block between them. The
            # registers are data only (the lane's step flags say when they are valid), so
            # they have no reset: plain flip-flops, which a flow can move into the DSP
            # block's own input and output registers.
            x = xs[0]
            v = Mux(x[-1], 0, x) if self.pre_relu else x
            v_r = Signal(signed(len(Value.cast(x)) + 1), name=f"v_lane{p}", reset_less=True)
            a_r = Signal(scale_shape, name=f"scale_lane{p}", reset_less=True)
            b_r = Signal(bias_shape, name=f"offset_lane{p}", reset_less=True)
            m.d.sync += [v_r.eq(v),
                         a_r.eq(lane_rom(self.scale, self.lanes, p, fold, scale_shape)),
                         b_r.eq(lane_rom(offsets, self.lanes, p, fold, bias_shape))]
            if deep:
                v_r, a_r = delayed(m, v_r, f"v_op_lane{p}"), delayed(m, a_r, f"scale_op_lane{p}")
                b_r = delayed(m, b_r, f"offset_op_lane{p}")
            # in pieces of one multiplier each, every piece registered straight after it
            prod = Signal(signed(len(v_r) + len(a_r)), name=f"prod_lane{p}")
            m.d.comb += prod.eq(sum(r << lo for r, lo in
                                    registered_pieces(m, v_r, a_r, None, f"prod_lane{p}")))
            b_r2 = Signal(bias_shape, name=f"offset2_lane{p}", reset_less=True)
            m.d.sync += b_r2.eq(b_r)
            if deep:
                prod, b_r2 = delayed(m, prod, f"prod_d_lane{p}"), delayed(m, b_r2, f"offset3_lane{p}")
            t = Signal(inner, name=f"t_lane{p}")
            m.d.comb += t.eq(prod + b_r2)
            y = t >> self.shift
            return [Mux(y[-1], 0, y) if self.post_relu else y]

        build_lane_folded(m, [self.i], [self.o], self.channels, self.lanes, lane,
                          lane_latency=self.lane_latency)
        return m

    def _map(self, m, x):
        half = (1 << (self.shift - 1)) if self.shift else 0
        ys = []
        for c in range(self.channels):
            v = Mux(x[c][-1], 0, x[c]) if self.pre_relu else x[c]
            t = Signal(signed(self.inner_widths[c]), name=f"t{c}")
            # The rounding half is folded into the bias constant: one adder, not two.
            m.d.comb += t.eq(const_sum([(self.scale[c], v)], self.bias[c] + half))
            y = t >> self.shift
            if self.post_relu:
                y = Mux(y[-1], 0, y)
            ys.append(y)
        return Cat(_fit(m, y, self.out_width, f"y{c}") for c, y in enumerate(ys))


class AffineTable:
    """A :class:`PostOp`'s work done in an MVU (:mod:`.mvu`, FINN's MVAU with an
    activation): per channel ``y = round_shift(scale[c]*relu?(x) + bias[c], shift)``,
    then ReLU if ``post_relu``, on the MVU's finished channels.

    Parameters
    ----------
    scale, bias : sequence of int, length ``C``
    shift : int
    pre_relu, post_relu : bool
    out_width : int
        As :class:`PostOp`'s: the results are truncated to ``signed(out_width)``, which
        is exact whenever the compiler's range analysis holds.

    Attributes
    ----------
    channels : int
    out_shape : Shape
        ``signed(out_width)``.
    stages : int
        Registers it adds in the MVU: 2 (the product, then the value).
    """

    stages = 2

    def __init__(self, scale, bias, shift, pre_relu, post_relu, out_width):
        self.channels = len(scale)
        self.scale = _ints(scale, self.channels, "scale")
        self.bias = _ints(bias, self.channels, "bias")
        self.shift = operator.index(shift)
        if self.shift < 0:
            raise ValueError(f"shift must be >= 0, not {self.shift}")
        self.pre_relu, self.post_relu = bool(pre_relu), bool(post_relu)
        self.out_shape = signed(_positive("out_width", out_width))

    def elaborate(self, m, finished, channels, fold, adv, width):
        """Each PE's value, combinational from the table's product register, in an MVU
        whose PE ``p`` holds channel ``channels[f][p]`` (``None``: padding) of output
        fold ``f`` in ``finished[p]`` (``signed(width)``, registered on ``adv`` from the
        stage at fold ``fold``). The product is registered (on ``adv``) with nothing
        but the multiplier in front: with one fold its constant's shift-and-add (or a
        DSP block, :func:`~.arith.const_multiply`), with several DSP blocks whose
        operands are registers (one per piece of a wide value,
        :func:`~.arith.registered_pieces`), the channel's constants being a ROM word per
        fold read beside the result register. The rounding half is in the offset: one adder after
        the product."""
        half = (1 << (self.shift - 1)) if self.shift else 0
        offsets = [b + half for b in self.bias]
        vs = [Mux(x[-1], 0, x) if self.pre_relu else x for x in finished]
        prods, offs = [], []
        if len(channels) == 1:
            for p, c in enumerate(channels[0]):
                k, off = (0, 0) if c is None else (self.scale[c], offsets[c])
                prod = Signal(signed(width + 1 + signed_width(k, k)), name=f"prod{p}",
                              reset_less=True)
                with m.If(adv):
                    m.d.sync += prod.eq(const_sum([(k, vs[p])]))
                prods.append(prod)
                offs.append(Const(off, signed(signed_width(off, off))))
        else:
            sw = max(signed_width(v, v) for v in self.scale)
            bw = max(signed_width(v, v) for v in offsets)
            lanes = fold_rom(m, "postop_constants", channels, [sw, bw],
                             lambda c: [self.scale[c], offsets[c]], fold, adv)
            for p, (scale, offset) in enumerate(lanes):
                # in pieces of one multiplier each, registered straight after it, as
                # data without a reset: a DSP block's own registers (hw.dsp_registers)
                pieces = registered_pieces(m, vs[p], scale.as_signed(), adv, f"prod{p}")
                prod = Signal(signed(width + 1 + sw), name=f"prod{p}_sum")
                m.d.comb += prod.eq(sum(r << lo for r, lo in pieces))
                off = Signal(signed(bw), name=f"offset{p}", reset_less=True)
                with m.If(adv):
                    m.d.sync += off.eq(offset.as_signed())
                prods.append(prod)
                offs.append(off)
        values = []
        for p, (prod, off) in enumerate(zip(prods, offs)):
            t = Signal(signed(max(len(prod), len(off)) + 1), name=f"t{p}")
            m.d.comb += t.eq(prod + off)
            y = t >> self.shift
            values.append(Mux(y[-1], 0, y) if self.post_relu else y)
        return values


class ResidualAdd(wiring.Component):
    """Join two pixel streams and add them channel by channel (residual shortcut).

    ``out[c] = a[c] + (b[c] if c < b_channels else 0)``: a shortcut with fewer
    channels is zero-padded at the top (ResNet option A). One beat is consumed from
    each input per output beat; both inputs are taken in the same cycle.

    Parameters
    ----------
    channels : int
        Channels of ``a`` and of the output.
    a_width : int
        Element width of ``a``.
    b_channels : int
        Channels of ``b``, ``1 <= b_channels <= channels``.
    b_width : int
        Element width of ``b``.
    out_width : int
        Element width of the output (the compiler's bound; ``max(a_width, b_width) + 1``
        always suffices). Sums are truncated to it.
    paced : bool
        Take a beat only into an empty output register, never in the cycle the consumer
        takes the last one: the input enables (the FIFOs' read enables, which fan out to
        their whole output registers) then depend on registers only. Costs nothing where
        pixels come at most every other cycle (``docs/hw-conventions.md``).

    Members
    -------
    a : ``In(stream.Signature(data.ArrayLayout(signed(a_width), channels)))``
    b : ``In(stream.Signature(data.ArrayLayout(signed(b_width), b_channels)))``
    o : ``Out(stream.Signature(data.ArrayLayout(signed(out_width), channels)))``

    Latency
    -------
    1 cycle from the cycle in which both inputs are valid (and the output can take).

    Throughput
    ----------
    1 pixel per cycle: ``compiler.cycles.elementwise_cycles(H, W)`` per frame; one
    every 2 cycles when ``paced``.
    """

    latency = 1

    def __init__(self, channels, a_width, b_channels, b_width, out_width, paced=False):
        self.channels = channels = _positive("channels", channels)
        self.a_width = a_width = _positive("a_width", a_width)
        self.b_channels = b_channels = _positive("b_channels", b_channels)
        self.b_width = b_width = _positive("b_width", b_width)
        self.out_width = out_width = _positive("out_width", out_width)
        if b_channels > channels:
            raise ValueError(f"b_channels ({b_channels}) exceeds channels ({channels})")
        self.paced = bool(paced)
        self.interval = 2 if self.paced else 1
        super().__init__({
            "a": In(stream.Signature(data.ArrayLayout(signed(a_width), channels))),
            "b": In(stream.Signature(data.ArrayLayout(signed(b_width), b_channels))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(out_width), channels))),
        })

    def elaborate(self, platform):
        m = Module()
        a, b = self.a.payload, self.b.payload
        sums = [_fit(m, a[c] + b[c] if c < self.b_channels else a[c], self.out_width,
                     f"sum{c}") for c in range(self.channels)]
        # Join: take both beats together or neither, so the streams never slip apart.
        take = Signal()
        room = ~self.o.valid if self.paced else ~self.o.valid | self.o.ready
        m.d.comb += take.eq(self.a.valid & self.b.valid & room)
        m.d.comb += [self.a.ready.eq(take), self.b.ready.eq(take)]
        with m.If(take):
            m.d.sync += [self.o.payload.eq(Cat(sums)),
                         self.o.valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m
