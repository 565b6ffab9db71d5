"""The intended engine's mixer lanes: a Group-Net block's aggregation of its K bases and
the soft gates of the next block, fused behind the epilogue (docs/architecture.md
section 15).

The epilogue's beats arrive job after job: the K bases' values of the same ``lanes``
channels of one pixel. The mixer computes, per channel, the IR's ``mixer`` (its own
``execute``): ``agg = round_shift(sum_k lambda_k x_k, lambda_frac)``, and with gates the
K outputs ``round_shift(C_i x_i + (2**gate_frac - C_i) agg, gate_frac)``, written here
as ``agg + round_shift(C_i (x_i - agg), gate_frac)`` (the same integer: ``agg <<
gate_frac`` is a multiple of ``2**gate_frac``), one product a lane instead of two.

The lanes take their coefficients at one fraction of their own, ``fraction`` bits, so
that both shifts are wiring: a coefficient ``c`` of ``f`` fraction bits becomes ``c <<
(fraction - f)`` (:func:`at_fraction`), and ``round_shift(sum c_k x_k << d, f + d) ==
round_shift(sum c_k x_k, f)`` for any ``d >= 0`` (round half up adds ``2**(f+d-1)``,
the same half). Two run-time shifts a lane were half of the lanes' logic (274 of 533
ALMs a lane on Cyclone V); the runner scales a descriptor's coefficients once, as it
loads them.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import multiplier_loan, positive_int, registered_pieces, sum_tree
from ..fifo import block_ram_fifo
from ..skid import skid_outputs

__all__ = ["MixerLanes", "mixer_settings", "at_fraction", "FRACTION"]

#: The lanes' coefficients' fraction bits unless told otherwise: a descriptor's lambdas
#: and gates of up to 12 fraction bits (the paper's networks have 8) run on them.
FRACTION = 12


def mixer_settings(max_jobs, coef_width):
    """A descriptor's mixer: ``jobs`` bases and their ``lambdas``; with ``gated``, the
    ``gates``; both at the lanes' fraction (:func:`at_fraction`)."""
    return data.StructLayout({
        "jobs": range(1, max_jobs + 1),
        "lambdas": data.ArrayLayout(signed(coef_width), max_jobs),
        "gated": unsigned(1),
        "gates": data.ArrayLayout(signed(coef_width), max_jobs),
    })


def at_fraction(coefficient, frac, fraction, width):
    """A coefficient of ``frac`` fraction bits at ``fraction`` bits, in ``signed(width)``:
    ``coefficient << (fraction - frac)``, for a run-time ``frac``. Exact when ``frac <=
    fraction`` and the result fits ``width`` (the compiler refuses programs past them:
    ``EngineConfig.coefficient_fraction``); else it wraps."""
    amount = (fraction - Value.cast(frac))[:max(1, fraction.bit_length())]
    return (Value.cast(coefficient).as_signed() << amount)[:width].as_signed()


def _round_shift(value, shift):
    """``round_shift(value, shift)`` (half up) for a constant ``shift``: wiring and one
    addition."""
    return (value + (1 << (shift - 1))) >> shift if shift else value


class MixerLanes(wiring.Component):
    """Aggregates each group of ``jobs`` beats and, with gates, emits the gated bases.

    Parameters
    ----------
    lanes : int
        Channels a beat.
    value_width : int
        The bases' values, the aggregate and the outputs (the compiler's proven ranges,
        the mixer's ``agg_range`` among them, fit it; outside it they wrap).
    coef_width : int
        The lambdas and gates at ``fraction`` bits (at most 18 bits: one multiplier a
        piece of the value).
    max_jobs : int
        The most bases a group has.
    fraction : int
        The coefficients' fraction bits: both shifts.

    Ports
    -----
    i : ``In(stream.Signature(ArrayLayout(signed(value_width), lanes)))``
        A group's beats, base 0 first (:class:`~.epilogue.EpilogueLanes`'s output).
    settings : ``In(mixer_settings(max_jobs, coef_width))``
        Held while groups are in the unit.
    o : ``Out(stream.Signature(ArrayLayout(signed(value_width), lanes)))``
        Per group: the ``jobs`` gated bases, base 0 first, or the aggregate alone.
    loan : ``In(multiplier_loan(lanes, value_width, coef_width))``
        The aggregate's multipliers lent (:func:`~groupnet_hw.hw.arith.multiplier_loan`),
        one a lane in pieces, while ``loan.on``: only while no beat is in the unit (the
        classifier head's products, between descriptors of the runner).

    Latency
    -------
    :attr:`latency`: cycles from a group's last beat to its first output (the input
    register, the aggregate's stages, its FIFO, the gate's four stages and the output
    register).

    Throughput
    ----------
    A beat a cycle in and out: a gated group of K beats takes K cycles each way, the
    aggregate of the next group is computed while this one's gates are.
    """

    latency = 13

    def __init__(self, *, lanes, value_width=32, coef_width=18, max_jobs=8, fraction=FRACTION):
        for name, value in (("lanes", lanes), ("value_width", value_width),
                            ("coef_width", coef_width), ("max_jobs", max_jobs),
                            ("fraction", fraction)):
            positive_int(f"MixerLanes: {name}", value)
        if coef_width > 18:
            raise ValueError(f"MixerLanes: coef_width must be at most 18 bits, not {coef_width}")
        if fraction > coef_width - 2:
            raise ValueError(f"MixerLanes: fraction must be at most coef_width - 2 "
                             f"({coef_width - 2}), not {fraction}: a gate of 1.0 is "
                             f"2**fraction")
        self.lanes, self.value_width, self.coef_width = lanes, value_width, coef_width
        self.max_jobs, self.fraction = max_jobs, fraction
        beat = data.ArrayLayout(signed(value_width), lanes)
        super().__init__({
            "i": In(stream.Signature(beat)),
            "settings": In(mixer_settings(max_jobs, coef_width)),
            "o": Out(stream.Signature(beat)),
            "loan": In(multiplier_loan(lanes, value_width, coef_width)),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, vw, st = self.lanes, self.value_width, self.settings
        acc_width = vw + self.coef_width + self.max_jobs.bit_length()
        # a group's values wait for its aggregate: the group and the next group's beats
        # taken while the aggregate goes through its stages and FIFO (9 cycles)
        m.submodules.xs = xs = block_ram_fifo(width=lanes * vw, depth=self.max_jobs + 9)
        # the aggregate at the value width: one product piece fewer a gate (section 15)
        # as many aggregates as are in flight to it (stages A to E) and one
        m.submodules.aggs = aggs = block_ram_fifo(width=lanes * vw, depth=5)

        # --- the aggregate: free-running stages behind an input register; a beat is
        # taken only when its value and its group's aggregate will have room in the
        # FIFOs, counted a cycle ahead from registers (`i.ready` is a register, and the
        # FIFO's write enable one: on ECP5 the count and the enable's fanout into the
        # FIFO's 512-bit words were the mixer's late path, 11.9 ns)
        last_a, last_b, last_c, last_d, last_e = (Signal() for _ in range(5))
        valid_a = Signal()
        x_a = Signal.like(self.i.payload)
        room = Signal()
        take = Signal()
        m.d.comb += [take.eq(self.i.valid & room), self.i.ready.eq(room)]
        k = Signal(range(self.max_jobs))
        last_now = k == st.jobs - 1
        with m.If(take):
            m.d.sync += k.eq(Mux(last_now, 0, k + 1))
        m.d.sync += [valid_a.eq(take), last_a.eq(take & last_now)]
        # in flight to the value FIFO: the beat in the register and one taken now; to
        # the aggregate FIFO: every group end from here to it and one taken now. Counted
        # as if a beat were taken, so that the count does not wait for `i.valid`
        xs_next = xs.level + valid_a + 1
        aggs_next = aggs.level + last_a + last_b + last_c + last_d + last_e + 1
        m.d.sync += room.eq((xs_next < xs.depth) & (aggs_next < aggs.depth))
        m.d.comb += [xs.w_data.eq(x_a.as_value()), xs.w_en.eq(valid_a & st.gated)]

        # the register takes the input, its base and lambda every cycle (what it holds
        # counts only with `valid_a`), so it has no enable: with `room` as its enable,
        # that register's route to the 512 bits was the mixer's late path on ECP5; the
        # lambda is picked here, no selection before the products. A lane's lambda is
        # its own register, so that a loan gives each lane its own operand
        loan = self.loan
        lams = [Signal(signed(self.coef_width), name=f"lam_a{j}") for j in range(lanes)]
        k_a = Signal.like(k)
        m.d.sync += [x_a.eq(Mux(loan.on, Value.cast(loan.x), Value.cast(self.i.payload))),
                     k_a.eq(k)]
        m.d.sync += [lam.eq(Mux(loan.on, loan.y[j], st.lambdas[k])) for j, lam in enumerate(lams)]
        # B: the products' pieces
        pieces = [registered_pieces(m, x_a[j], lams[j], None, f"lam{j}")
                  for j in range(lanes)]
        for j in range(lanes):
            m.d.comb += [loan.pieces[j][i].eq(p) for i, (p, _) in enumerate(pieces[j])]
        valid_b, first_b = Signal(), Signal()
        m.d.sync += [valid_b.eq(valid_a), first_b.eq(k_a == 0), last_b.eq(last_a)]
        # C: the sum of the group so far
        accs = [Signal(signed(acc_width), name=f"acc{j}") for j in range(lanes)]
        totals = [Signal(signed(acc_width), name=f"total{j}") for j in range(lanes)]
        m.d.sync += last_c.eq(last_b)
        for j in range(lanes):
            total = sum_tree([p << lo for p, lo in pieces[j]]) + Mux(first_b, 0, accs[j])
            with m.If(valid_b):
                m.d.sync += accs[j].eq(total)
            with m.If(last_b):
                m.d.sync += totals[j].eq(total)
        # D: the rounding constant added; E: the aggregate into its FIFO (a stage kept
        # from when the shift was a run-time one, so that the latency is unchanged)
        rounded = [Signal(signed(vw), name=f"rounded{j}") for j in range(lanes)]
        agg_e = [Signal(signed(vw), name=f"agg{j}") for j in range(lanes)]
        m.d.sync += [last_d.eq(last_c), last_e.eq(last_d)]
        with m.If(last_c):
            m.d.sync += [r.eq(_round_shift(t, self.fraction)) for r, t in zip(rounded, totals)]
        with m.If(last_d):
            m.d.sync += [a.eq(r) for a, r in zip(agg_e, rounded)]
        m.d.comb += [aggs.w_data.eq(Cat(*agg_e)), aggs.w_en.eq(last_e)]

        # --- the gates: per output, the base's value and the group's aggregate
        adv = Signal()
        i = Signal(range(self.max_jobs))
        agg = data.ArrayLayout(signed(vw), lanes)(aggs.r_data)
        x = data.ArrayLayout(signed(vw), lanes)(xs.r_data)
        # whether the output issued is its group's last, a register kept beside the
        # count (the comparison ahead of the aggregate FIFO's read was a late path)
        last_i = Signal(init=1)
        issue = adv & aggs.r_rdy & (~st.gated | xs.r_rdy)
        m.d.comb += [aggs.r_en.eq(issue & last_i), xs.r_en.eq(issue & st.gated)]
        i_next = Signal.like(i)
        m.d.comb += i_next.eq(Mux(last_i, 0, i + 1))
        with m.If(issue):
            m.d.sync += i.eq(i_next)
        m.d.sync += last_i.eq(~st.gated | (Mux(issue, i_next, i) == st.jobs - 1))
        # G1: the difference, the gate
        diff = [Signal(signed(vw + 1), name=f"diff{j}") for j in range(lanes)]
        agg1 = [Signal(signed(vw), name=f"agg1_{j}") for j in range(lanes)]
        gate = Signal(signed(self.coef_width))
        v1, gated1 = Signal(), Signal()
        with m.If(adv):
            m.d.sync += [v1.eq(issue), gated1.eq(st.gated), gate.eq(st.gates[i])]
            m.d.sync += [d.eq(x[j] - agg[j]) for j, d in enumerate(diff)]
            m.d.sync += [a.eq(agg[j]) for j, a in enumerate(agg1)]
        # G2: the products' pieces
        products = [registered_pieces(m, diff[j], gate, adv, f"gate{j}") for j in range(lanes)]
        agg2 = [Signal.like(a, name=f"agg2_{j}") for j, a in enumerate(agg1)]
        v2, gated2 = Signal(), Signal()
        with m.If(adv):
            m.d.sync += [v2.eq(v1), gated2.eq(gated1)]
            m.d.sync += [b.eq(a) for a, b in zip(agg1, agg2)]
        # G3: the pieces summed; G4: rounded and shifted; then the aggregate added into
        # the output register
        width = vw + 1 + self.coef_width + 1
        sums = [Signal(signed(width), name=f"gsum{j}") for j in range(lanes)]
        shifted = [Signal(signed(width), name=f"gshift{j}") for j in range(lanes)]
        agg3 = [Signal.like(a, name=f"agg3_{j}") for j, a in enumerate(agg2)]
        agg4 = [Signal.like(a, name=f"agg4_{j}") for j, a in enumerate(agg2)]
        v3, gated3, v4, gated4 = Signal(), Signal(), Signal(), Signal()
        with m.If(adv):
            m.d.sync += [v3.eq(v2), gated3.eq(gated2), v4.eq(v3), gated4.eq(gated3)]
            m.d.sync += [s.eq(sum_tree([p << lo for p, lo in products[j]]))
                         for j, s in enumerate(sums)]
            m.d.sync += [r.eq(_round_shift(s, self.fraction)) for r, s in zip(shifted, sums)]
            m.d.sync += [b.eq(a) for a, b in zip(agg2, agg3)]
            m.d.sync += [b.eq(a) for a, b in zip(agg3, agg4)]
        outs = []
        for j in range(lanes):
            out = Signal(signed(vw), name=f"out{j}")
            m.d.comb += out.eq(Mux(gated4, agg4[j] + shifted[j], agg4[j]))
            outs.append(out)
        m.d.comb += adv.eq(skid_outputs(m, [self.o], [outs], adv & v4, name="out"))
        return m
