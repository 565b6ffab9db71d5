"""Per-pixel ops: ReLU, fixed-point post-op, (multi-)threshold, subsample."""

from __future__ import annotations

import torch

from ...hw.arith import compared_bits, multiplier_cost, multiplier_pieces
from ...hw.beats import beat_order
# the hardware units, named apart from the ops of the same name defined here
from ...hw.elementwise import AffineTable, PostOp as PostOpUnit, Threshold as ThresholdUnit
from ...hw.multithreshold import MultiThreshold, ThresholdTable
from ...hw.subsample import Subsample as SubsampleUnit
from ...numerics import signed_width
from .. import cycles as cyc
from ..graph import fits_int64
from .base import TIMING_FRAMES, Op, op_of, register, same_attrs

__all__ = ["round_shift", "postop_value", "Relu", "PostOp", "Threshold", "Subsample", "Repeat"]


def round_shift(v, s):
    """Round half up of v / 2**s by add-then-arithmetic-shift (ints or integer tensors)."""
    return (v + (1 << (s - 1))) >> s if s else v


def postop_value(v, A, B, shift, pre_relu, post_relu):
    """Scalar reference of the post-op (Python ints)."""
    if pre_relu:
        v = max(v, 0)
    y = round_shift(A * v + B, shift)
    return max(y, 0) if post_relu else y


def _per_channel(t):
    return t.view(1, -1, 1, 1)


#: Attributes that record where a node came from, not what it computes.
PROVENANCE = ("folded_from",)


def _stack_per_channel(attrs, per_channel):
    """``stack`` of an op, from its nodes' attribute dicts: the ``per_channel``
    attributes (tensors, channel first) concatenated, the others in agreement."""
    rest = same_attrs([{k: v for k, v in a.items() if k not in per_channel + PROVENANCE}
                       for a in attrs])
    if rest is None or len({tuple(a[per_channel[0]].shape[1:]) for a in attrs}) != 1:
        return None
    return dict(rest, **{k: torch.cat([a[k] for a in attrs]) for k in per_channel})


def _fused_wiring(ctx, node):
    """A unit whose work its producer's MVU does (``Unit.fused``): the MVU outputs the
    unit's values already, so the unit is a wire."""
    s = ctx.stream(ctx.tensor_shape(node), f"{node.name}_fused")
    return [s], [s]


@register
class Relu(Op):
    """max(x, 0)."""

    name = "relu"

    def execute(self, node, ins):
        return ins[0].clamp(min=0)

    def value_range(self, node, ins):
        return max(ins[0].lo, 0), max(ins[0].hi, 0)

    def stack(self, nodes):
        return same_attrs([n.attrs for n in nodes])

    def build(self, ctx, node, unit):
        parent = ctx.parent(node)
        u = ctx.add(node, PostOpUnit(node.channels, ctx.width_of(parent), [1] * node.channels,
                                     [0] * node.channels, 0, True, False, node.bit_width))
        return [u.i], [u.o]


@register
class PostOp(Op):
    """``round_shift(A*(relu?(x)) + B, shift)``, then relu?: folded alpha, ReLU and BN.

    Attributes: ``A``, ``B`` (int64 per channel), ``shift``, ``pre_relu``, ``post_relu``.
    """

    name = "postop"
    lane_foldable = True

    def beat_input(self, node, unit):
        # in its MVU it is wiring; on its own its per-channel constants follow pixels
        return "through" if unit.fused else None

    def lane_latency_of(self, node, folds):
        return cyc.postop_lane_latency(folds)

    def execute(self, node, ins):
        a = node.attrs
        v = ins[0].clamp(min=0) if a["pre_relu"] else ins[0]
        out = round_shift(_per_channel(a["A"]) * v + _per_channel(a["B"]), a["shift"])
        return out.clamp(min=0) if a["post_relu"] else out

    def value_range(self, node, ins):
        a = node.attrs
        lo, hi = ins[0].lo, ins[0].hi
        if a["pre_relu"]:
            lo, hi = max(lo, 0), max(hi, 0)
        fits_int64(node, int(a["A"].abs().max()) * max(-lo, hi) + int(a["B"].abs().max()),
                   "product before the shift")
        ends = [postop_value(v, int(A), int(B), a["shift"], False, a["post_relu"])
                for A, B in zip(a["A"].tolist(), a["B"].tolist()) for v in (lo, hi)]
        return min(ends), max(ends)

    def stack(self, nodes):
        # One shift for all: A*2**d and B*2**d with shift + d round exactly as before
        # ((A*v + B)*2**d + 2**(s+d-1) >> s+d  ==  (A*v + B + 2**(s-1)) >> s).
        shift = max(n.attrs["shift"] for n in nodes)
        scaled = [dict(n.attrs, shift=shift, A=n.attrs["A"] << (shift - n.attrs["shift"]),
                       B=n.attrs["B"] << (shift - n.attrs["shift"])) for n in nodes]
        return _stack_per_channel(scaled, ("A", "B"))

    def activation(self, node):
        a = node.attrs
        return AffineTable(a["A"].tolist(), a["B"].tolist(), a["shift"], a["pre_relu"],
                           a["post_relu"], node.bit_width)

    def activation_features(self, node, acc_width, folds, pe):
        # The product register (``act_mult_bits``) and the offset's adder
        # (``act_adder_bits``, with one fold also the constants' shift-and-add); with
        # several folds a DSP block per PE (per piece of a wide value) and a ROM of every
        # PE's scale and offset
        a = node.attrs
        half = (1 << (a["shift"] - 1)) if a["shift"] else 0
        scales, offsets = a["A"].tolist(), [b + half for b in a["B"].tolist()]
        sw = max(signed_width(v, v) for v in scales)
        bw = max(signed_width(v, v) for v in offsets)
        adder = pe * (acc_width + 1 + sw + 1)
        if folds == 1:
            costs = [multiplier_cost(acc_width + 1, k) for k in scales]
            return {"act_mults": sum(c["dsp"] for c in costs),
                    "act_adder_bits": adder + sum(c["adder_bits"] for c in costs),
                    "act_mult_bits": pe * (acc_width + 1 + sw)}
        # a value wider than one multiplier is multiplied in pieces, each registered,
        # and the pieces are summed with the offset (hw.arith.registered_pieces)
        pieces = multiplier_pieces(acc_width)
        return {"act_mults": pe * len(pieces),
                "act_adder_bits": adder + pe * (len(pieces) - 1) * (acc_width + 1 + sw),
                "act_mult_bits": pe * sum(hi - lo + 1 + sw for lo, hi in pieces),
                "act_rom_depth": folds, "act_rom_width": pe * (sw + bw)}

    def resource_features(self, g, node, parent, unit):
        if unit.fused:
            return {}       # its producer's MVU does the work (``activation_features``)
        a = node.attrs
        in_w = parent.bit_width
        f = {"one": 1, "out_bits": node.channels * node.bit_width}
        if unit.pe:
            coef = max(signed_width(v, v) for v in a["A"].tolist())
            bias = max(signed_width(v, v) for v in a["B"].tolist())
            folds = cyc.lane_folds(node.channels, unit.pe)
            # The held pixel shifts down `lanes` channels a step: a 2:1 multiplexer (load
            # or shift) per bit below the top step, whose bits only load or clear (the
            # flip-flop's own enable and reset). A ROM of `folds` words per lane and
            # constant bit: one LUT4 per 16 words; of 2 words, the fold counter's bit.
            # `lane_folded`: the sequencer, beside the full-rate unit's fixed cost. With
            # two steps or more the results of the steps before the last are kept apart
            # from the output register (hw.lanes: the step enable then ignores `ready`).
            kept = (folds - 1) * unit.pe * node.bit_width if folds >= 2 else 0
            if cyc.postop_lane_latency(folds) > cyc.POSTOP_LANE_LATENCY:
                # the deep lane's second operand and product registers (plain flip-flops)
                f["pipe_bits"] = unit.pe * 2 * (in_w + 1 + coef + bias)
            f.update(held_bits=folds * unit.pe * (in_w + node.bit_width), kept_bits=kept,
                     mults=unit.pe,
                     shift_in_bits=(folds - 1) * unit.pe * in_w, lane_folded=1,
                     mult_bits=unit.pe * (in_w + coef),
                     rom_bits=unit.pe * -(-folds // 16) * (coef + bias) if folds > 2 else 0)
        else:
            costs = [multiplier_cost(in_w, int(v)) for v in a["A"].tolist()]
            f.update(adder_bits=sum(c["adder_bits"] for c in costs) + node.channels * in_w,
                     mults=sum(c["dsp"] for c in costs))
        return f

    def build(self, ctx, node, unit):
        if unit.fused:
            return _fused_wiring(ctx, node)
        a = node.attrs
        u = ctx.add(node, PostOpUnit(node.channels, ctx.width_of(ctx.parent(node)),
                                     a["A"].tolist(), a["B"].tolist(), a["shift"],
                                     a["pre_relu"], a["post_relu"], node.bit_width,
                                     lanes=unit.pe))
        return [u.i], [u.o]


@register
class Threshold(Op):
    """FINN-style multi-threshold: ``out[c] = sum_j ((x[c] >= T[c, j]) xor invert[c])``.

    One threshold per channel is a sign (binary output, ``kind="bits"``); ``2**n - 1``
    give an n-bit activation level (``kind="uint"``). Attributes: ``T`` int64
    [C, L], ``invert`` int64 [C].
    """

    name = "threshold"

    def beat_input(self, node, unit):
        return "through"

    def execute(self, node, ins):
        a = node.attrs
        x = ins[0].unsqueeze(2)                                   # N, C, 1, H, W
        t = a["T"].view(1, *a["T"].shape, 1, 1)                   # 1, C, L, 1, 1
        hit = (x >= t) ^ a["invert"].view(1, -1, 1, 1, 1).bool()
        return hit.sum(dim=2).to(torch.int64)

    def value_range(self, node, ins):
        return 0, node.attrs["T"].shape[1]

    def stack(self, nodes):
        return _stack_per_channel([n.attrs for n in nodes], ("T", "invert"))

    def activation(self, node):
        return ThresholdTable(node.attrs["T"].tolist(), node.attrs["invert"].tolist())

    def activation_features(self, node, acc_width, folds, pe):
        # one fold: constant thresholds, compared on the bits they need; several: every
        # PE compares with ROM words of the accumulator's width and one more
        levels = node.attrs["T"].shape[1]
        if folds == 1:
            return {"act_compare_bits": sum(compared_bits(t, acc_width) for row in
                                            node.attrs["T"].tolist() for t in set(row))}
        return {"act_compare_bits": pe * levels * (acc_width + 1), "act_rom_depth": folds,
                "act_rom_width": pe * (levels * (acc_width + 1) + 1)}

    def resource_features(self, g, node, parent, unit):
        if unit.fused:
            return {}       # its producer's MVU compares (``activation_features``)
        # Thresholds outside the input's range become constant bits (no comparator);
        # a multi-threshold compares every level and counts them by binary search.
        T = node.attrs["T"]
        w = op_of(parent).lane_width(g, parent)
        # `x >= t` compares only the bits of x above t's trailing zeros (hw.arith.at_least);
        # a channel's equal thresholds (clipped levels), and equal thresholds on equal
        # wires, are one comparator after Yosys merges them.
        sources = op_of(parent).channel_sources(g, parent)
        live = sum(compared_bits(t, w) for _, t in
                   {(sources[c], t) for c, row in enumerate(T.tolist()) for t in row})
        kind = "compare" if T.shape[1] == 1 else "multi_compare"
        if unit.beats > 1:
            # a lane compares with its channel's thresholds in every beat: with one
            # constant for all, as one channel; else against the beat's (a multiplexer
            # of constants, counted as the full compare)
            order = beat_order(node.channels, unit.beat_groups, unit.beats)
            live = 0
            for lane in range(node.channels // unit.beats):
                rows = {tuple(T[order[j][lane]].tolist()) for j in range(unit.beats)}
                live += (sum(compared_bits(t, w) for t in set(next(iter(rows))))
                         if len(rows) == 1 else T.shape[1] * (w + 1))
        return {"one": 1, f"{kind}_bits": live,
                "out_bits": node.channels // unit.beats * node.bit_width}

    def build(self, ctx, node, unit):
        if unit.fused:
            return _fused_wiring(ctx, node)
        a = node.attrs
        parent = ctx.parent(node)
        invert = [bool(v) for v in a["invert"].tolist()]
        beats = {"beats": unit.beats,
                 "order": beat_order(node.channels, unit.beat_groups, unit.beats)}
        if a["T"].shape[1] == 1:
            u = ctx.add(node, ThresholdUnit(node.channels, ctx.width_of(parent),
                                            a["T"][:, 0].tolist(), invert, **beats))
        else:
            u = ctx.add(node, MultiThreshold(node.channels, ctx.width_of(parent), node.bits,
                                             a["T"].tolist(), invert, **beats))
        return [u.i], [u.o]


@register
class Subsample(Op):
    """Keep rows and columns that are multiples of ``stride`` (option-A shortcut)."""

    name = "subsample"

    def execute(self, node, ins):
        s = node.attrs["stride"]
        return ins[0][:, :, ::s, ::s]

    def value_range(self, node, ins):
        return ins[0].lo, ins[0].hi

    def stack(self, nodes):
        return same_attrs([n.attrs for n in nodes])

    def beat_input(self, node, unit):
        return "through"

    def cycles(self, node, parent, unit):
        return cyc.elementwise_cycles(parent.height, parent.width) * unit.beats

    def timing(self, node, parent, ins, unit):
        st, beats = node.attrs["stride"], unit.beats
        n_out, n_par = node.height * node.width, parent.height * parent.width
        out = []
        for q in range(TIMING_FRAMES * n_out):
            f, ql = divmod(q, n_out)
            r, c = divmod(ql, node.width)
            p = f * n_par + r * st * parent.width + c * st
            out.extend(ins[0][p * beats + j] for j in range(beats))
        return out, None

    def build(self, ctx, node, unit):
        parent = ctx.parent(node)
        u = ctx.add(node, SubsampleUnit(ctx.tensor_shape(parent), parent.height, parent.width,
                                        node.attrs["stride"], beats=unit.beats))
        return [u.i], [u.o]


@register
class Repeat(Op):
    """The input's channels ``times`` times over: what a block's K bases read of a tensor
    they share, once they are time-shared as one K*C-channel chain (:mod:`..sharing`).
    Only wiring in hardware.

    Attributes: ``times``.
    """

    name = "repeat"

    def execute(self, node, ins):
        return ins[0].repeat(1, node.attrs["times"], 1, 1)

    def value_range(self, node, ins):
        return ins[0].lo, ins[0].hi

    def full_rate_latency(self, node):
        return 0

    def beat_input(self, node, unit):
        return "through"

    def beat_groups(self, node, in_groups):
        return node.attrs["times"] * in_groups[0]

    def channel_sources(self, g, node):
        parent = g.producer(node.inputs[0])
        sources = op_of(parent).channel_sources(g, parent)
        return [sources[c % parent.channels] for c in range(node.channels)]

    def resource_features(self, g, node, parent, unit):
        return {}

    def build(self, ctx, node, unit):
        parent = ctx.parent(node)
        sink = ctx.stream(ctx.tensor_shape(parent), f"{node.name}_i")
        source = ctx.stream(ctx.tensor_shape(node), f"{node.name}_o")
        if unit.beats > 1:
            # beat j of the copies carries beat j of the input in every group
            in_groups = ctx.units[parent.name].beat_groups
            lanes = node.channels // unit.beat_groups // unit.beats
            order = [(g % in_groups) * lanes + l
                     for g in range(unit.beat_groups) for l in range(lanes)]
        else:
            order = [c % parent.channels for c in range(node.channels)]
        ctx.connect_lanes(sink, source, order, ctx.lane_width(parent))
        return [sink], [source]
