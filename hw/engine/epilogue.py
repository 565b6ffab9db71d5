"""The intended engine's epilogue lanes: the fixed-point stages after a convolution, a
channel a lane, with the constants in the beat (docs/architecture.md section 15).

The core of section 13 runs a descriptor's epilogue on its 64-bit scalar datapath, a
channel and job at a time (20 % of ResNet-18's frame there). Here ``lanes`` channels
take the stages side by side, pipelined for 100 MHz, one beat a cycle. Like the base
arrays the unit does no addressing: its feeder puts every lane's value, its channel's
constants and side element, and the descriptor's stage settings into the beat, so the
same lanes run any descriptor's channels in any order.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import positive_int, registered_pieces, sum_tree
from ..skid import skid_outputs, staged

__all__ = ["EpilogueLanes", "epilogue_settings", "epilogue_layout", "scale_width",
           "compared_halves", "joined_halves", "level_count"]

#: Bits of the post-op's shift.
SHIFT_BITS = 6
#: Signed bits of a post-op scale ``a`` at most: one multiplier's operand (ECP5's 18 x 18,
#: a Cyclone V DSP block's 18 x 19), the sum being the other; a 32-bit scale took two
#: multipliers and their sum's stage a lane. The compiler refuses wider scales
#: (``EngineConfig.scale_bits``); the paper's networks' are 12 bits.
SCALE_BITS = 18


def scale_width(const_width):
    """Bits of a post-op scale ``a`` for constants of ``const_width`` bits."""
    return min(const_width, SCALE_BITS)


def epilogue_settings(max_levels):
    """The stages a beat takes (a descriptor's ``stages``, as the reference model applies
    them, ``sim/engine_model.py:_epilogue``): ``postop`` (``pre_relu``, the product,
    ``shift``, ``post_relu``), ``add``, ``relu``, ``threshold`` to ``levels`` levels."""
    return data.StructLayout({
        "postop": unsigned(1), "pre_relu": unsigned(1), "post_relu": unsigned(1),
        "shift": unsigned(SHIFT_BITS), "add": unsigned(1), "relu": unsigned(1),
        "threshold": unsigned(1), "levels": unsigned(max(1, max_levels).bit_length()),
    })


def epilogue_layout(lanes, x_width, const_width, value_width, max_levels):
    """One beat: per lane its value ``x`` (a convolution's sum), its channel's post-op
    constants ``a`` and ``b``, side element ``side``, thresholds ``t`` and invert bit
    ``invert``; and the ``settings`` (:func:`epilogue_settings`)."""
    return data.StructLayout({
        "x": data.ArrayLayout(signed(x_width), lanes),
        "a": data.ArrayLayout(signed(scale_width(const_width)), lanes),
        "b": data.ArrayLayout(signed(const_width), lanes),
        "side": data.ArrayLayout(signed(value_width), lanes),
        "t": data.ArrayLayout(data.ArrayLayout(signed(value_width), max(1, max_levels)),
                              lanes),
        "invert": unsigned(lanes),
        "settings": epilogue_settings(max_levels),
    })


class EpilogueLanes(wiring.Component):
    """``lanes`` channels through the post-op, residual add, ReLU and threshold stages.

    Per lane, in the reference model's order (the IR ops ``postop``, ``add``, ``relu``,
    ``threshold``; each stage only where ``settings`` selects it):

    1. post-op: ``v = max(x, 0)`` with ``pre_relu``, ``y = round_shift(a * v + b,
       shift)`` (round half up: ``(a * v + b + 2**(shift-1)) >> shift``), ``max(y, 0)``
       with ``post_relu``; without the post-op ``y = x``;
    2. add: ``y + side``; 3. relu: ``max(y, 0)``;
    4. threshold: ``sum_j ((y >= t[j]) ^ invert)`` over the first ``levels`` thresholds,
       the output a level count; without it the output is ``y``.

    Pipeline, a stage a register: the operands; the product's pieces (``hw.arith.
    registered_pieces``: each piece one DSP multiplier with its register) and ``b`` plus
    the rounding constant; the pieces summed; the offset added; the shift and
    ``post_relu``; the side added and the ReLU; each threshold's comparison of the upper
    and the lower half of the bits; the halves' results joined; the invert bits, the
    levels in use and their count into the output register, which has a one-beat skid
    (``hw.skid``) whose data registers load on every advance.

    Parameters
    ----------
    lanes : int
        Channels a beat.
    x_width : int
        A lane's input (the arrays' sums are ``BaseArrays.sum_width`` bits).
    const_width : int
        The post-op's ``b``, and its ``a`` up to :data:`SCALE_BITS` (:func:`scale_width`).
    value_width : int
        The values after the shift, the side elements, the thresholds and the output:
        the compiler keeps every value the stages make within ``signed(value_width)``
        (its proven ranges); outside it they wrap.
    max_levels : int
        Thresholds a channel may have (1 for binary activations, 15 for 4-bit levels).

    Ports
    -----
    i : ``In(stream.Signature(epilogue_layout(...)))``
    o : ``Out(stream.Signature(data.ArrayLayout(signed(value_width), lanes)))``

    Latency
    -------
    :attr:`latency` = 9 cycles from a beat's acceptance to its result on ``o`` with
    ``o.ready`` high.

    Throughput
    ----------
    One beat (``lanes`` channels) a cycle. ``i.ready`` is a register.
    """

    latency = 9

    def __init__(self, *, lanes, x_width=18, const_width=32, value_width=32, max_levels=1):
        for name, value in (("lanes", lanes), ("x_width", x_width),
                            ("const_width", const_width), ("value_width", value_width),
                            ("max_levels", max_levels)):
            positive_int(f"EpilogueLanes: {name}", value)
        self.lanes, self.x_width, self.const_width = lanes, x_width, const_width
        self.value_width, self.max_levels = value_width, max_levels
        super().__init__({
            "i": In(stream.Signature(epilogue_layout(lanes, x_width, const_width,
                                                     value_width, max_levels))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(value_width), lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, levels = self.lanes, self.max_levels
        adv = Signal()
        m.d.comb += self.i.ready.eq(adv)

        stage = staged(m, adv)

        # 0: the operands
        op = stage(self.i.payload, "op", False)
        valid = stage(self.i.valid, "op_valid", True)
        st = op.settings

        # 1: the product's pieces; b and the rounding constant; the rest carried on
        v = [Mux(st.pre_relu & op.x[j][-1], 0, op.x[j]) for j in range(lanes)]
        narrow_x = self.x_width <= scale_width(self.const_width)
        pieces = []
        for j in range(lanes):
            wide, narrow = (op.a[j], v[j]) if narrow_x else (v[j], op.a[j])
            pieces.append(registered_pieces(m, wide, narrow, adv, f"prod{j}"))
        # 2**(shift-1), 0 for no shift; no wider than the product
        prod_width = self.x_width + scale_width(self.const_width) + 1
        rounding = (Const(1, 1) << st.shift)[1:prod_width]
        offsets = [stage(op.b[j] + rounding, f"offset{j}", False) for j in range(lanes)]
        xs = [stage(op.x[j], f"x1_{j}", False) for j in range(lanes)]
        carried = stage(_fields(op, ("side", "t", "invert", "settings")), "carry1", False)
        valid = stage(valid, "valid1", True)

        # 2: the pieces summed
        products = [stage(sum_tree([p << lo for p, lo in pieces[j]]), f"product{j}", False)
                    for j in range(lanes)]
        offsets = [stage(o, f"offset2_{j}", False) for j, o in enumerate(offsets)]
        xs = [stage(x, f"x2_{j}", False) for j, x in enumerate(xs)]
        carried = stage(carried, "carry2", False)
        valid = stage(valid, "valid2", True)
        st = carried.settings

        # 3: the offset added (or the value as it is, without a post-op)
        sums = [stage(Mux(st.postop, products[j] + offsets[j], xs[j]), f"sum{j}", False)
                for j in range(lanes)]
        carried = stage(carried, "carry3", False)
        valid = stage(valid, "valid3", True)
        st = carried.settings

        # 4: the shift, post_relu, then the value's width: the post-op's result before
        # its ReLU need not fit it (the proven range is the result's after it)
        vw = self.value_width
        ys = []
        for j in range(lanes):
            shifted = Signal(sums[j].shape(), name=f"shifted{j}")
            m.d.comb += shifted.eq(Mux(st.postop, sums[j] >> st.shift, sums[j]))
            y = Signal(signed(vw), name=f"y_next{j}")
            m.d.comb += y.eq(Mux(st.postop & st.post_relu & shifted[-1], 0, shifted))
            ys.append(stage(y, f"y{j}", False))
        carried = stage(carried, "carry4", False)
        valid = stage(valid, "valid4", True)
        st = carried.settings

        # 5: the side added, ReLU
        zs = []
        for j in range(lanes):
            added = Signal(signed(vw), name=f"added{j}")
            m.d.comb += added.eq(Mux(st.add, ys[j] + carried.side[j], ys[j]))
            zs.append(stage(Mux(st.relu & added[-1], 0, added), f"z{j}", False))
        carried = stage(carried, "carry5", False)
        valid = stage(valid, "valid5", True)
        st = carried.settings

        # 6, 7: each threshold compared, a half of the value's bits in each stage (on
        # ECP5 the whole comparison was the layer datapath's late path, 11.4 ns); the
        # invert bits and the level count are applied in the next stage (with them in
        # the comparison's stage it was the epilogue's, 10.3 ns)
        parts = [stage(compared_halves(zs[j], carried.t[j], levels), f"halves{j}", False)
                 for j in range(lanes)]
        zs = [stage(z, f"z6_{j}", False) for j, z in enumerate(zs)]
        invert = stage(carried.invert, "invert6", False)
        st = stage(carried.settings, "settings6", False)
        valid = stage(valid, "valid6", True)
        hits = [stage(joined_halves(p, levels), f"hits{j}", False) for j, p in enumerate(parts)]
        zs = [stage(z, f"z7_{j}", False) for j, z in enumerate(zs)]
        invert = stage(invert, "invert7", False)
        st = stage(st, "settings7", False)
        valid = stage(valid, "valid7", True)

        # 8: the levels counted, into the output register (whose data registers load on
        # every advance: their enables do not wait for the valid bit)
        outs = [Mux(st.threshold, level_count(hits[j], invert[j], st.levels, levels), zs[j])
                for j in range(lanes)]
        m.d.comb += adv.eq(skid_outputs(m, [self.o], [outs], adv & valid, name="out",
                                        advance=adv))
        return m


def compared_halves(z, thresholds, levels):
    """Each of ``levels`` thresholds against ``z``, a half of the bits at a time: per
    threshold the upper halves' signed ``>`` and ``==`` and the lower halves' unsigned
    ``>=`` (joined by :func:`joined_halves` a stage later: on ECP5 the whole
    comparison in one stage was a late path)."""
    half = len(Value.cast(z)) // 2
    bits = []
    for k in range(levels):
        t = Value.cast(thresholds[k])
        bits += [z[half:].as_signed() > t[half:].as_signed(), z[half:] == t[half:],
                 z[:half] >= t[:half]]
    return Cat(*bits)


def joined_halves(parts, levels):
    """``z >= t`` per threshold from :func:`compared_halves`'s bits."""
    return Cat(*(parts[3 * k] | (parts[3 * k + 1] & parts[3 * k + 2]) for k in range(levels)))


def level_count(hits, invert, levels_in_use, levels):
    """The level: how many of the first ``levels_in_use`` thresholds are met, each
    result flipped by the channel's ``invert`` bit (the IR's ``threshold``)."""
    return sum_tree([(hits[k] ^ invert) & (k < levels_in_use) for k in range(levels)])


def _fields(view, names):
    """The fields ``names`` of a struct view, as a view of just those fields (to carry
    them down the pipeline in one register)."""
    layout = data.StructLayout({n: view.shape()[n].shape for n in names})
    return layout(Cat(*(view[n] for n in names)))
