"""Ops that join branches: residual add, base aggregation (with optional gates),
stand-alone soft gate. Their inputs get compiler-sized FIFOs."""

from __future__ import annotations

import torch

from ...hw.arith import const_product_width, multiplier_cost
from ...hw.beats import BeatPad
from ...hw.elementwise import ResidualAdd
from ...hw.mixer import BaseMixer
from .. import cycles as cyc
from ..graph import fits_int64
from .base import Op, register, same_attrs
from .pixel import round_shift

__all__ = ["AddOp", "Mixer", "Gate"]


def _pad_order(channels, b_channels, groups):
    """Lane of ``b`` feeding each of ``channels`` lanes (``None``: zero) when ``b`` is
    zero-padded to ``channels`` within each of ``groups`` groups."""
    per, b_per = channels // groups, b_channels // groups
    return [g * b_per + c if c < b_per else None for g in range(groups) for c in range(per)]


@register
class AddOp(Op):
    """``a + b``, ``b`` zero-padded to ``a``'s channels (option-A shortcut); with
    ``groups`` (time-shared bases: K blocks' adds side by side) within each group.

    Attributes: ``groups`` (optional, default 1).
    """

    name = "add"
    join = True
    paceable = True

    def beat_input(self, node, unit):
        return "through"

    def timing(self, node, parent, ins, unit):
        b_beats = unit.input_beats(1)
        if b_beats == unit.beats:
            return super().timing(node, parent, ins, unit)
        # An option-A shortcut in beats has fewer per pixel: a BeatPad passes them, then
        # zero beats that wait for nothing. Accepted: every beat of `a`; of `b`, its own.
        latency, interval = self.latency(node, unit), self.interval(node, unit)
        out, acc, acc_b, prev = [], [], [], float("-inf")
        for q in range(len(ins[0])):
            p, j = divmod(q, unit.beats)
            t = max(ins[0][q], prev + interval)
            if j < b_beats:
                t = max(t, ins[1][p * b_beats + j])
                acc_b.append(t)
            acc.append(t)
            out.append(t + latency)
            prev = t
        return out, (acc, acc_b)

    def execute(self, node, ins):
        a, b = ins
        order = _pad_order(a.shape[1], b.shape[1], node.attrs.get("groups", 1))
        if None in order:
            padded = b.new_zeros(b.shape[0], a.shape[1], *b.shape[2:])
            for c, j in enumerate(order):
                if j is not None:
                    padded[:, c] = b[:, j]
            b = padded
        return a + b

    def stack(self, nodes):
        attrs = same_attrs([n.attrs for n in nodes])
        if attrs is None or attrs.get("groups", 1) != 1:
            return None
        return dict(attrs, groups=len(nodes))

    def value_range(self, node, ins):
        b_lo, b_hi = ins[1].lo, ins[1].hi
        if ins[1].channels < node.channels:
            b_lo, b_hi = min(b_lo, 0), max(b_hi, 0)
        return ins[0].lo + b_lo, ins[0].hi + b_hi

    def resource_features(self, g, node, parent, unit):
        # channels of a shortcut narrower than the output (option A) pass without adder
        b = g.producer(node.inputs[1])
        if unit.beats > 1:
            # beats: a shortcut's missing beats are zeros the adder adds (BeatPad's
            # multiplexer in front of it)
            lanes = node.channels // unit.beats
            padded = unit.input_beats(1) < unit.beats
            return {"one": 1, "add_bits": lanes * node.bit_width,
                    "pass_bits": lanes * b.bit_width if padded else 0}
        return {"one": 1, "add_bits": b.channels * node.bit_width,
                "pass_bits": (node.channels - b.channels) * node.bit_width}

    def build(self, ctx, node, unit):
        a, b = (ctx.graph.producer(r) for r in node.inputs)
        groups = node.attrs.get("groups", 1)
        if unit.beats > 1:
            # every beat of `b` has `a`'s lanes; beats past its own are zeros
            lanes = node.channels // unit.beats
            u = ctx.add(node, ResidualAdd(lanes, a.bit_width, lanes, b.bit_width,
                                          node.bit_width, paced=unit.paced))
            if unit.input_beats(1) == unit.beats:
                return [u.a, u.b], [u.o]
            pad = ctx.add(node, BeatPad(ctx.tensor_shape(b), unit.input_beats(1), unit.beats),
                          "_pad")
            ctx.connect_raw(pad.o, u.b)
            return [u.a, pad.i], [u.o]
        if groups == 1 or b.channels == node.channels:
            u = ctx.add(node, ResidualAdd(node.channels, a.bit_width, b.channels, b.bit_width,
                                          node.bit_width, paced=unit.paced))
            return [u.a, u.b], [u.o]
        # padding within each group: b's lanes are spread out, zeros in between
        u = ctx.add(node, ResidualAdd(node.channels, a.bit_width, node.channels, b.bit_width,
                                      node.bit_width, paced=unit.paced))
        sink = ctx.stream(ctx.tensor_shape(b), f"{node.name}_b")
        ctx.connect_lanes(sink, u.b, _pad_order(node.channels, b.channels, groups),
                          b.bit_width)
        return [u.a, sink], [u.o]


def _mixer_features(g, node, unit, lambdas, gates, channels=None):
    """Features of a :class:`~groupnet_hw.hw.mixer.BaseMixer`: its shift-add adder bits
    (per lane), the held inputs and the output registers."""
    a = node.attrs
    in_w = max(g.producer(i).bit_width for i in node.inputs)
    k = len(lambdas)
    channels = channels or node.channels
    lanes = unit.pe or channels
    per_lane = sum(multiplier_cost(in_w, int(v))["adder_bits"] for v in lambdas) + k * in_w
    outs = 1
    if gates is not None:
        one = 1 << a["gate_frac"]
        for gv in gates.tolist():
            per_lane += sum(multiplier_cost(in_w + 2, v)["adder_bits"] for v in (gv, one - gv))
            per_lane += 2 * (in_w + 2)
        outs = len(gates)
    f = {"one": 1, "adder_bits": lanes * per_lane,
         "out_bits": outs * channels * node.bit_width}
    if unit.pe:
        # the held inputs (loaded or shifted by a step: a multiplexer per bit), and with
        # two steps or more the results of the steps before the last, kept apart from
        # the output registers (a shift register, no multiplexer) (hw.lanes)
        folds = cyc.lane_folds(channels, lanes)
        f["held_bits"] = k * channels * in_w
        f["kept_bits"] = outs * (folds - 1) * lanes * node.bit_width if folds >= 2 else 0
        if cyc.mixer_lane_latency(folds, gates is not None) > cyc.MIXER_LANE_LATENCY:
            # the deep lane's operand registers (plain flip-flops)
            f["pipe_bits"] = lanes * k * in_w
    else:
        # the full-rate pipeline's registers: every constant product, then with gates
        # the aggregate and the own products again, then the aggregate's share of each
        # gate and the own products once more (hw.mixer)
        bits = sum(const_product_width(in_w, int(c)) for c in lambdas)
        if gates is not None:
            one = 1 << a["gate_frac"]
            bits += in_w + 2 + sum(3 * const_product_width(in_w, gv)
                                   + const_product_width(in_w + 2, one - gv) for gv in gates.tolist())
        f["stage_bits"] = channels * bits
        # and a skid beside every output register (hw.skid)
        f["skid_bits"] = f["out_bits"]
    return f



def _gated_range(node, gates, gate_frac, ins, agg_lo, agg_hi):
    one = 1 << gate_frac
    # C*g + (one - C)*agg with 0 <= C <= one
    fits_int64(node, one * (max(max(-x.lo, x.hi) for x in ins) + max(-agg_lo, agg_hi)),
               "gated sum before the shift")
    los, his = [], []
    for c_i, x in zip(gates, ins):
        los.append(round_shift(c_i * x.lo + (one - c_i) * agg_lo, gate_frac))
        his.append(round_shift(c_i * x.hi + (one - c_i) * agg_hi, gate_frac))
    return min(los + [agg_lo]), max(his + [agg_hi])


@register
class Mixer(Op):
    """Aggregation ``agg = round_shift(sum_j lambda_j G_j, lambda_frac)`` of K bases; with
    ``gates`` it outputs the next block's K gated inputs
    ``x_i = round_shift(C_i G_i + (2**gate_frac - C_i) agg, gate_frac)`` instead (eq. 7).

    Attributes: ``lambdas`` int64 [K], ``lambda_frac``, ``gates`` (int64 [K] or None),
    ``gate_frac``; ``packed_in`` / ``packed_out`` (optional): the K bases arrive as one
    K*C-channel tensor (base-major) / the K gated outputs leave as one, as the bases'
    time-shared chain (:mod:`..sharing`) carries them.
    """

    name = "mixer"
    join = True
    lane_foldable = True

    def beat_input(self, node, unit):
        return "through"    # its lanes are channels of every base: beats are pixels

    def beat_groups(self, node, in_groups):
        return len(node.attrs["lambdas"]) if node.attrs.get("packed_out") else 1

    def lane_latency_of(self, node, folds):
        return cyc.mixer_lane_latency(folds, gated=node.attrs["gates"] is not None)

    @staticmethod
    def _bases(node, ins):
        """The K base tensors of the inputs, unpacked."""
        if not node.attrs.get("packed_in"):
            return list(ins)
        return list(ins[0].chunk(len(node.attrs["lambdas"]), dim=1))

    def lane_channels(self, node):
        # a lane handles one channel of every base
        return node.channels // len(node.attrs["lambdas"]) if node.attrs.get("packed_out") \
            else node.channels

    def execute(self, node, ins):
        a = node.attrs
        ins = self._bases(node, ins)
        agg = round_shift(sum(int(l) * x for l, x in zip(a["lambdas"], ins)), a["lambda_frac"])
        if a["gates"] is None:
            return agg
        one = 1 << a["gate_frac"]
        outs = [round_shift(int(c) * x + (one - int(c)) * agg, a["gate_frac"])
                for c, x in zip(a["gates"], ins)]
        return torch.cat(outs, dim=1) if a.get("packed_out") else outs

    def value_range(self, node, ins):
        a = node.attrs
        if a.get("packed_in"):
            ins = list(ins) * len(a["lambdas"])     # the packed tensor's range, per base
        lam = a["lambdas"].tolist()
        lo = sum(min(l * x.lo, l * x.hi) for l, x in zip(lam, ins))
        hi = sum(max(l * x.lo, l * x.hi) for l, x in zip(lam, ins))
        fits_int64(node, max(-lo, hi), "weighted sum before the shift")
        agg_lo, agg_hi = round_shift(lo, a["lambda_frac"]), round_shift(hi, a["lambda_frac"])
        a["agg_range"] = (agg_lo, agg_hi)
        if a["gates"] is None:
            return agg_lo, agg_hi
        return _gated_range(node, a["gates"].tolist(), a["gate_frac"], ins, agg_lo, agg_hi)

    def full_rate_latency(self, node):
        return cyc.mixer_latency(node.attrs["gates"] is not None)

    def resource_features(self, g, node, parent, unit):
        return _mixer_features(g, node, unit, node.attrs["lambdas"].tolist(),
                               node.attrs["gates"], self.lane_channels(node) // unit.beats)

    def build(self, ctx, node, unit):
        a = node.attrs
        ins = [ctx.graph.producer(r) for r in node.inputs]
        gated = a["gates"] is not None
        k, channels = len(a["lambdas"]), self.lane_channels(node) // unit.beats
        u = ctx.add(node, BaseMixer(k, channels, max(x.bit_width for x in ins),
                                    a["lambdas"].tolist(), a["lambda_frac"],
                                    gates=a["gates"].tolist() if gated else None,
                                    gate_shift=a["gate_frac"], out_width=node.bit_width,
                                    lanes=unit.pe))
        sinks, sources = list(u.i), (list(u.o) if gated else [u.o])
        if a.get("packed_in"):
            # BaseMixer takes its K inputs in one cycle (one ready): one packed stream
            sink = ctx.stream(ctx.tensor_shape(ins[0]), f"{node.name}_i")
            ctx.unpack(sink, sinks, channels)
            sinks = [sink]
        if a.get("packed_out"):
            # ...and fills its K outputs in one cycle: one packed stream out
            source = ctx.stream(ctx.tensor_shape(node), f"{node.name}_o")
            ctx.pack(sources, source, channels)
            sources = [source]
        return sinks, sources


@register
class Gate(Op):
    """Stand-alone soft gate of eq. 7 on inputs ``G_0..G_{K-1}, agg``:
    ``x_i = round_shift(C_i G_i + (2**gate_frac - C_i) agg, gate_frac)``. The
    ``fuse_gates`` pass merges a gate into the aggregation of the same bases; this op
    remains where the gate's inputs are not those bases (the authors' in-place defect).

    Attributes: ``gates`` int64 [K], ``gate_frac``.
    """

    name = "gate"
    join = True
    lane_foldable = True

    def lane_latency_of(self, node, folds):
        return cyc.mixer_lane_latency(folds, gated=True)

    def execute(self, node, ins):
        a = node.attrs
        one = 1 << a["gate_frac"]
        *xs, agg = ins
        return [round_shift(int(c) * x + (one - int(c)) * agg, a["gate_frac"])
                for c, x in zip(a["gates"], xs)]

    def value_range(self, node, ins):
        *xs, agg = ins
        return _gated_range(node, node.attrs["gates"].tolist(), node.attrs["gate_frac"], xs,
                            agg.lo, agg.hi)

    def full_rate_latency(self, node):
        return cyc.mixer_latency(gated=True)

    def resource_features(self, g, node, parent, unit):
        k = len(node.inputs) - 1
        return _mixer_features(g, node, unit, [0] * k + [2], node.attrs["gates"])

    def build(self, ctx, node, unit):
        # A gated mixer whose lambdas pick the last input unchanged (agg = agg << f >> f)
        # is exactly a stand-alone gate; its extra output is left unread.
        a = node.attrs
        ins = [ctx.graph.producer(r) for r in node.inputs]
        k = len(ins) - 1
        lf = 1
        u = ctx.add(node, BaseMixer(k + 1, node.channels, max(x.bit_width for x in ins),
                                    [0] * k + [1 << lf], lf,
                                    gates=a["gates"].tolist() + [0],
                                    gate_shift=a["gate_frac"], out_width=node.bit_width,
                                    lanes=unit.pe))
        ctx.drain(u.o[k])
        return list(u.i), list(u.o)[:k]
