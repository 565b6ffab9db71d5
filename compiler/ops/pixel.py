"""Per-pixel ops: ReLU, fixed-point post-op, (multi-)threshold, subsample."""

from __future__ import annotations

import torch

from .. import cycles as cyc
from .base import TIMING_FRAMES, Op, const_mult_alms, register

__all__ = ["round_shift", "postop_value", "Relu", "PostOp", "Threshold", "Subsample"]


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


@register
class Relu(Op):
    """max(x, 0)."""

    name = "relu"

    def execute(self, node, ins):
        return ins[0].clamp(min=0)

    def value_range(self, node, ins):
        return max(ins[0].lo, 0), max(ins[0].hi, 0)

    def build(self, ctx, node, unit):
        from ...hw.elementwise import PostOp as PostOpUnit
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

    def execute(self, node, ins):
        a = node.attrs
        v = ins[0].clamp(min=0) if a["pre_relu"] else ins[0]
        out = round_shift(_per_channel(a["A"]) * v + _per_channel(a["B"]), a["shift"])
        return out.clamp(min=0) if a["post_relu"] else out

    def value_range(self, node, ins):
        from ..passes import fits_int64
        a = node.attrs
        lo, hi = ins[0].lo, ins[0].hi
        if a["pre_relu"]:
            lo, hi = max(lo, 0), max(hi, 0)
        fits_int64(node, int(a["A"].abs().max()) * max(-lo, hi) + int(a["B"].abs().max()),
                   "product before the shift")
        ends = [postop_value(v, int(A), int(B), a["shift"], False, a["post_relu"])
                for A, B in zip(a["A"].tolist(), a["B"].tolist()) for v in (lo, hi)]
        return min(ends), max(ends)

    def resources(self, g, node, parent, unit):
        coef = max(abs(int(v)) for v in node.attrs["A"].tolist() + [1]).bit_length()
        return dict(alm=node.channels * (const_mult_alms(parent.bit_width, coef) + node.bit_width),
                    m10k=0, dsp=0)

    def build(self, ctx, node, unit):
        from ...hw.elementwise import PostOp as PostOpUnit
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

    def execute(self, node, ins):
        a = node.attrs
        x = ins[0].unsqueeze(2)                                   # N, C, 1, H, W
        t = a["T"].view(1, *a["T"].shape, 1, 1)                   # 1, C, L, 1, 1
        hit = (x >= t) ^ a["invert"].view(1, -1, 1, 1, 1).bool()
        return hit.sum(dim=2).to(torch.int64)

    def value_range(self, node, ins):
        return 0, node.attrs["T"].shape[1]

    def resources(self, g, node, parent, unit):
        levels = node.attrs["T"].shape[1]
        return dict(alm=node.channels * levels * (parent.bit_width // 2 + 1), m10k=0, dsp=0)

    def build(self, ctx, node, unit):
        a = node.attrs
        parent = ctx.parent(node)
        invert = [bool(v) for v in a["invert"].tolist()]
        if a["T"].shape[1] == 1:
            from ...hw.elementwise import Threshold as ThresholdUnit
            u = ctx.add(node, ThresholdUnit(node.channels, ctx.width_of(parent),
                                            a["T"][:, 0].tolist(), invert))
        else:
            from ...hw.multithreshold import MultiThreshold
            u = ctx.add(node, MultiThreshold(node.channels, ctx.width_of(parent), node.bits,
                                             a["T"].tolist(), invert))
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

    def cycles(self, node, parent, unit):
        return cyc.elementwise_cycles(parent.height, parent.width)

    def timing(self, node, parent, ins, unit):
        st = node.attrs["stride"]
        n_out, n_par = node.height * node.width, parent.height * parent.width
        out = []
        for q in range(TIMING_FRAMES * n_out):
            f, ql = divmod(q, n_out)
            r, c = divmod(ql, node.width)
            out.append(ins[0][f * n_par + r * st * parent.width + c * st])
        return out, None

    def build(self, ctx, node, unit):
        from ...hw.subsample import Subsample as SubsampleUnit
        parent = ctx.parent(node)
        u = ctx.add(node, SubsampleUnit(ctx.tensor_shape(parent), parent.height, parent.width,
                                        node.attrs["stride"]))
        return [u.i], [u.o]
