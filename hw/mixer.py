"""Base aggregation and soft gate of a Group-Net group (paper eq. 2/3 and eq. 7).

The K binary bases of a group run as K parallel pixel streams. At the end of each
block their outputs ``G_k`` are combined: the aggregate ``sum_j lambda_j G_j`` feeds
the next stage, and, between blocks, each base gets its own soft-gated input

    x_k = C_k * G_k + (1 - C_k) * sum_j lambda_j G_j,      C_k = sigmoid(theta_k)

in fixed point: ``lambda_j = lambdas[j] / 2**lambda_shift`` and
``C_k = gates[k] / 2**gate_shift``.
"""

import operator

from amaranth.hdl import Cat, Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import const_product_width, const_sum, const_terms, registered_levels, sum_tree
from .lanes import build_lane_folded, folded_interval, lane_folds
from .elementwise import _fit, _ints, _positive, signed_range, signed_width
from .skid import skid_outputs

__all__ = ["BaseMixer", "MIXER_LANE_LATENCY", "mixer_latency", "mixer_lane_latency"]


def mixer_latency(gated):
    """Cycles from the full-rate base mixer taking a pixel to its output
    (:class:`BaseMixer`): the constant products, the aggregate, and with gates the
    aggregate's share of each gate and the gated sums, each registered."""
    return 4 if gated else 2


#: Pipeline registers in a lane of the channel-serial base mixer (:class:`BaseMixer`)
#: with few steps: the K constant products, their sum (the aggregate), then the gates
#: into the output register. Products and sum in one cycle were the ECP5 critical path
#: of the time-shared K=5 design (11.9 ns).
MIXER_LANE_LATENCY = 2


def mixer_lane_latency(folds, gated):
    """Pipeline registers in a base mixer's lane with ``folds`` steps. With enough steps
    a deeper pipeline costs no cycle (:func:`~.lanes.folded_interval`), no adder chain
    is more than two levels deep and a product's DSP block has registers on both sides
    with nothing else: the operands, the products, half the sum, the aggregate (4), then
    half of each gate's sum (5 with gates); below that, :data:`MIXER_LANE_LATENCY`."""
    deep = 5 if gated else 4
    return deep if folds >= deep + 1 else MIXER_LANE_LATENCY


class BaseMixer(wiring.Component):
    """Join K base streams; emit the lambda-aggregate, or K soft-gated streams.

    For every pixel and channel ``c``::

        agg[c] = round_shift(sum_j lambdas[j] * G_j[c], lambda_shift)
        x_k[c] = round_shift(gates[k] * G_k[c] + (2**gate_shift - gates[k]) * agg[c],
                             gate_shift)                  # only if gates is given

    ``gates[k] = 0`` gives ``x_k = agg`` and ``gates[k] = 2**gate_shift`` gives
    ``x_k = G_k`` exactly (the paper's C = 0 / C = 1 limits).

    Parameters
    ----------
    bases : int
        Number of bases, ``K >= 1``.
    channels : int
        Channels per pixel, ``C``.
    in_width : int
        Element width of every input stream.
    lambdas : sequence of int, length ``K``
        Aggregation coefficients, any sign.
    lambda_shift : int
        Fixed-point shift of ``lambdas``, ``>= 0``.
    gates : sequence of int, length ``K``, optional
        Soft gate values in ``[0, 2**gate_shift]``. ``None`` (the last block of the
        network) gives a single aggregate output stream.
    gate_shift : int
        Fixed-point shift of ``gates``, ``>= 0``.
    out_width : int, optional
        Element width of the output stream(s). Default: the exact bound derived from
        ``in_width`` and the coefficients (attribute ``out_width``). A smaller value
        from the compiler's range analysis truncates, exact when that analysis holds.
    lanes : int, optional
        Channel-serial: ``lanes`` channels per cycle (:mod:`.lanes`); the coefficients
        are the same for every channel, so each lane keeps shift-add multipliers.
        ``None`` (default): every channel in parallel.

    Members
    -------
    i : ``In(stream.Signature(data.ArrayLayout(signed(in_width), channels))).array(bases)``
        One stream per base. Joined: a pixel is taken from all K streams in the same
        cycle, once all are valid.
    o : ``Out(stream.Signature(data.ArrayLayout(signed(out_width), channels)))``
        Without gates: the aggregate.
    o : ``Out(stream.Signature(data.ArrayLayout(signed(out_width), channels))).array(bases)``
        With gates: ``x_k`` on ``o[k]``. Forked: each output holds its beat until
        taken, independently of the others. At full rate (no ``lanes``) each output
        has a one-beat skid (``hw.skid``): the next pixel moves on while an output
        still holds the current one, and the stages stop once a skid is full; with
        ``lanes`` the next pixel moves to the outputs once all K have taken the
        current one.

    Attributes
    ----------
    agg_range : (int, int)
        Exact range of ``agg`` over all inputs of ``signed(in_width)``.
    agg_width : int
        Exact width of ``agg``.
    out_width : int
        Element width of the output stream(s).
    latency : int
        2 without gates (the constant products, then the aggregate in the output
        register), 4 with gates (products, aggregate, the aggregate's share of each
        gate, gated output registers; :func:`mixer_latency`); ``ceil(C/lanes) + 1 + lane_latency`` with ``lanes``
        (the lanes register the products, then the aggregate, before the gates).
    lane_latency : int
        With ``lanes``: pipeline registers in a lane,
        :func:`mixer_lane_latency` ``(ceil(C/lanes), gated)``.

    Latency
    -------
    ``latency`` cycles from the cycle in which all K inputs are taken to the cycle in
    which the output(s) are valid.

    Throughput
    ----------
    1 pixel per cycle with all outputs ready:
    ``compiler.cycles.elementwise_cycles(H, W)`` per frame, and every ``i[k].ready`` is
    the inputs' valids and a register, never an output's ``ready``; with ``lanes``, one
    pixel per ``folded_interval(C, lanes, lane_latency)`` (:mod:`.lanes`) cycles, and
    every ``i[k].ready`` is a register.
    """

    def __init__(self, bases, channels, in_width, lambdas, lambda_shift, gates=None,
                 gate_shift=0, out_width=None, lanes=None):
        self.bases = bases = _positive("bases", bases)
        self.channels = channels = _positive("channels", channels)
        self.in_width = in_width = _positive("in_width", in_width)
        lambda_shift, gate_shift = operator.index(lambda_shift), operator.index(gate_shift)
        if lambda_shift < 0 or gate_shift < 0:
            raise ValueError("shifts must be >= 0")
        self.lambdas = _ints(lambdas, bases, "lambdas")
        self.lambda_shift = lambda_shift
        self.gate_shift = gate_shift
        self.gates = None if gates is None else _ints(gates, bases, "gates")
        if self.gates is not None:
            for g in self.gates:
                if not 0 <= g <= 1 << gate_shift:
                    raise ValueError(f"gate {g} outside [0, 2**{gate_shift}]")

        lo, hi = signed_range(in_width)
        half = (1 << (lambda_shift - 1)) if lambda_shift else 0
        s_lo = sum(min(lam * lo, lam * hi) for lam in self.lambdas) + half
        s_hi = sum(max(lam * lo, lam * hi) for lam in self.lambdas) + half
        self._sum_width = signed_width(s_lo, s_hi)
        self.agg_range = (s_lo >> lambda_shift, s_hi >> lambda_shift)
        self.agg_width = signed_width(*self.agg_range)

        self.latency = mixer_latency(self.gates is not None)
        if self.gates is None:
            exact = self.agg_width
        else:
            one = 1 << gate_shift
            g_half = (1 << (gate_shift - 1)) if gate_shift else 0
            a_lo, a_hi = self.agg_range
            self._x_widths, x_widths = [], []
            for g in self.gates:
                # g >= 0 and one - g >= 0: the extremes are at the extremes of G and agg.
                t_lo = g * lo + (one - g) * a_lo + g_half
                t_hi = g * hi + (one - g) * a_hi + g_half
                self._x_widths.append(signed_width(t_lo, t_hi))
                x_widths.append(signed_width(t_lo >> gate_shift, t_hi >> gate_shift))
            exact = max(x_widths)
        self.out_width = exact if out_width is None else _positive("out_width", out_width)
        self.lanes = None if lanes is None else min(_positive("lanes", lanes), channels)
        if self.lanes is not None:
            folds = lane_folds(channels, self.lanes)
            #: Pipeline registers in a lane (:func:`mixer_lane_latency`).
            self.lane_latency = mixer_lane_latency(folds, self.gates is not None)
            self.latency = folds + 1 + self.lane_latency
            self.interval = folded_interval(channels, self.lanes, self.lane_latency)

        in_sig = stream.Signature(data.ArrayLayout(signed(in_width), channels))
        out_sig = stream.Signature(data.ArrayLayout(signed(self.out_width), channels))
        super().__init__({
            "i": In(in_sig).array(bases),
            "o": Out(out_sig) if self.gates is None else Out(out_sig).array(bases),
        })

    def _elaborate_folded(self, m):
        gated = self.gates is not None
        half = (1 << (self.lambda_shift - 1)) if self.lambda_shift else 0

        # With enough steps the lane's sums are cut after two adder levels as well
        # (no cycle lost: mixer_lane_latency); the whole gate sum after
        # the aggregate was the ECP5 critical path of the time-shared K=5 design.
        deep = self.lane_latency > MIXER_LANE_LATENCY

        def lane(m, fold, p, values, step):
            # Three cycles of arithmetic, registered in between: the K constant products
            # (taken with the step), their sum (the aggregate), then the gates into the
            # output register. Products and sum together were the critical path of the
            # time-shared K=5 design on ECP5 (11.9 ns); so was a gate built whole after
            # the aggregate (both shift-add products and their sum: 12.0 ns), so the
            # gate's product with its own base is taken in the first cycle too.
            def load(register, value):
                # The products are taken with the step; deep, their operands are, and
                # the products run free.
                if deep:
                    m.d.sync += register.eq(value)
                else:
                    with m.If(step):
                        m.d.sync += register.eq(value)

            if deep:
                # The bases' values registered once more before the products, with
                # nothing else behind them, so that the registers can sit beside a
                # product's DSP block (on ECP5 the route from the held pixel to a
                # MULT18X18D and on was a critical path).
                operands = []
                for k, v in enumerate(values):
                    r = Signal.like(v, name=f"operand_r{p}_{k}")
                    with m.If(step):
                        m.d.sync += r.eq(v)
                    operands.append(r)
                values = operands
            products = []
            for k, (lam, v) in enumerate(zip(self.lambdas, values)):
                prod = Signal(signed(const_product_width(self.in_width, lam)), name=f"prod_r{p}_{k}")
                load(prod, const_sum([(lam, v)]))
                products.append(prod)
            total = Signal(signed(self._sum_width), name=f"sum_lane{p}")
            sum_terms = const_terms([(1, prod) for prod in products], half)
            if deep:
                sum_terms = registered_levels(m, sum_terms, 2, f"sum_r{p}")
            m.d.comb += total.eq(sum_tree(sum_terms))
            agg_r = Signal(signed(self.agg_width), name=f"agg_r{p}")
            m.d.sync += agg_r.eq(total >> self.lambda_shift)
            if not gated:
                return [agg_r]
            one = 1 << self.gate_shift
            g_half = (1 << (self.gate_shift - 1)) if self.gate_shift else 0
            outs = []
            for k, (g, v) in enumerate(zip(self.gates, values)):
                # C_k * G_k, then delayed to meet the aggregate of the same channel
                own = Signal(signed(const_product_width(self.in_width, g)), name=f"own_r{p}_{k}")
                load(own, const_sum([(g, v)]))
                for d in range(2 if deep else 1):
                    delayed = Signal.like(own, name=f"own_d{d}_{p}_{k}")
                    m.d.sync += delayed.eq(own)
                    own = delayed
                t = Signal(signed(self._x_widths[k]), name=f"gate{k}_t_lane{p}")
                gate_terms = const_terms([(1, own), (one - g, agg_r)], g_half)
                if deep:
                    gate_terms = registered_levels(m, gate_terms, 2, f"gate{k}_r{p}")
                m.d.comb += t.eq(sum_tree(gate_terms))
                outs.append(t >> self.gate_shift)
            return outs

        outputs = list(self.o) if gated else [self.o]
        build_lane_folded(m, list(self.i), outputs, self.channels, self.lanes, lane,
                          lane_latency=self.lane_latency)
        return m

    def elaborate(self, platform):
        m = Module()
        if self.lanes is not None:
            return self._elaborate_folded(m)
        inputs = list(self.i)
        gated = self.gates is not None
        outputs = list(self.o) if gated else [self.o]
        half = (1 << (self.lambda_shift - 1)) if self.lambda_shift else 0

        # Stage P registers every constant product of the pixel (lambda_j * G_j and, with
        # gates, C_k * G_k), stage A the aggregate (and the own products, delayed), with
        # gates stage G the aggregate's share of each gate, and the output registers the
        # gated sums (without gates, the aggregate). The K
        # inputs come from K FIFOs spread over the device; products and aggregate in the
        # cycle that takes them were the ECP5 critical path of a beat design (11.5 ns,
        # 7.2 of it routing). The stages advance together on `adv`, a register (the
        # outputs' skids are empty, `hw.skid`): neither the inputs' valids nor the
        # outputs' readies reach the enables of the product registers, which on the
        # whole-board ECP5 design were 1,273 late clock enables.
        adv, take, p_valid = Signal(), Signal(), Signal()
        m.d.comb += take.eq(Cat(s.valid for s in inputs).all() & adv)
        m.d.comb += [s.ready.eq(take) for s in inputs]

        def registered_products(c, coefficients, name):
            """``coefficient * G_k[c]`` of every base, each registered as the stages advance."""
            regs = []
            for k, (coefficient, s) in enumerate(zip(coefficients, inputs)):
                r = Signal(signed(const_product_width(self.in_width, coefficient)),
                           name=f"{name}{c}_{k}")
                with m.If(adv):
                    m.d.sync += r.eq(const_sum([(coefficient, s.payload[c])]))
                regs.append(r)
            return regs

        with m.If(adv):
            m.d.sync += p_valid.eq(take)
        aggs, owns = [], []
        for c in range(self.channels):
            prods = registered_products(c, self.lambdas, "prod")
            total = Signal(signed(self._sum_width), name=f"sum{c}")
            m.d.comb += total.eq(const_sum([(1, r) for r in prods], half))
            agg = Signal(signed(self.agg_width), name=f"agg{c}")
            m.d.comb += agg.eq(total >> self.lambda_shift)
            aggs.append(agg)
            if gated:
                owns.append(registered_products(c, self.gates, "own"))

        if not gated:
            ys = [_fit(m, a, self.out_width, f"y{c}") for c, a in enumerate(aggs)]
            m.d.comb += adv.eq(skid_outputs(m, outputs, [ys], adv & p_valid))
            return m

        a_valid = Signal()
        a_agg = [Signal(signed(self.agg_width), name=f"s1_agg{c}") for c in range(self.channels)]
        a_own = [[Signal.like(r, name=f"s1_own{c}_{k}") for k, r in enumerate(own_c)]
                 for c, own_c in enumerate(owns)]
        with m.If(adv):
            m.d.sync += [a_valid.eq(p_valid), *(r.eq(a) for r, a in zip(a_agg, aggs)),
                         *(r.eq(o) for rs, os in zip(a_own, owns) for r, o in zip(rs, os))]
        # Stage G registers the aggregate's share of each gate, (1 - C_k) * agg plus the
        # rounding half, and the own products once more; the output registers take one
        # adder per element. Share and sum in one cycle were the whole-board ECP5
        # critical path once the skids had taken the enables off it (10.94 ns).
        one = 1 << self.gate_shift
        g_half = (1 << (self.gate_shift - 1)) if self.gate_shift else 0
        a_lo, a_hi = self.agg_range
        g_valid = Signal()
        with m.If(adv):
            m.d.sync += g_valid.eq(a_valid)
        values = []
        for k, gate in enumerate(self.gates):
            share_width = signed_width((one - gate) * a_lo + g_half, (one - gate) * a_hi + g_half)
            xs = []
            for c in range(self.channels):
                share = Signal(signed(share_width), name=f"s2_share{c}_{k}")
                own = Signal.like(a_own[c][k], name=f"s2_own{c}_{k}")
                with m.If(adv):
                    m.d.sync += [share.eq(const_sum([(one - gate, a_agg[c])], g_half)),
                                 own.eq(a_own[c][k])]
                t = Signal(signed(self._x_widths[k]), name=f"gate{k}_t{c}")
                m.d.comb += t.eq(own + share)
                xs.append(_fit(m, t >> self.gate_shift, self.out_width, f"x{k}_{c}"))
            values.append(xs)
        m.d.comb += adv.eq(skid_outputs(m, outputs, values, adv & g_valid))
        return m
