"""The graph's ends: the input pixel stream and the pooled classifier head."""

from __future__ import annotations

import torch

from .. import cycles as cyc
from .base import TIMING_FRAMES, Op, register
from .window import _pack_bits, _packed_times

__all__ = ["Input", "Head"]


@register
class Input(Op):
    """uint8 pixels, one pixel (all channels) per beat, raster order."""

    name = "input"

    def execute(self, node, ins):
        (pixels,) = ins
        if pixels.dim() == 3:
            pixels = pixels.unsqueeze(1)
        return pixels.to(torch.int64)

    def value_range(self, node, ins):
        return 0, (1 << node.bits) - 1

    def resource_features(self, g, node, parent, unit):
        return {}

    def timing(self, node, parent, ins, unit):
        raise AssertionError("the schedule sets the input's timing")

    def build(self, ctx, node, unit):
        return [], [ctx.input_stream]


@register
class Head(Op):
    """Global sum pooling, then ``logits = W @ sums + bias`` (one beat per frame).

    Attributes: ``weight`` int64 [classes, C], ``bias`` int64 [classes], ``frac``
    (fractional bits of the logits).
    """

    name = "head"

    def execute(self, node, ins):
        sums = ins[0].sum(dim=(2, 3))
        return sums @ node.attrs["weight"].t() + node.attrs["bias"]

    def value_range(self, node, ins):
        x = ins[0]
        a = node.attrs
        pixels = x.height * x.width
        s_lo, s_hi = pixels * x.lo, pixels * x.hi
        a["sum_range"] = (s_lo, s_hi)
        w = a["weight"]
        los = (torch.clamp(w, min=0) * s_lo + torch.clamp(w, max=0) * s_hi).sum(1) + a["bias"]
        his = (torch.clamp(w, min=0) * s_hi + torch.clamp(w, max=0) * s_lo).sum(1) + a["bias"]
        return int(los.min()), int(his.max())

    def folding(self, node, parent, target):
        # the fewest multiplier lanes whose classifier keeps up with the frame interval
        C = parent.channels
        for lanes in range(1, C + 1):
            if cyc.head_cycles(parent.height, parent.width, node.channels,
                               cyc.lane_folds(C, lanes)) <= target:
                return lanes, None, None
        return C, None, None

    def beat_input(self, node, unit):
        return "pack"       # the pool takes whole pixels

    def cycles(self, node, parent, unit):
        # input beats are collected at one a cycle
        return max(cyc.head_cycles(parent.height, parent.width, node.channels,
                                   cyc.lane_folds(parent.channels, unit.pe)),
                   parent.height * parent.width * unit.input_beats(0))

    def timing(self, node, parent, ins, unit):
        pixels = _packed_times(ins[0], unit.input_beats(0))
        n_par = parent.height * parent.width
        latency = node.channels * cyc.lane_folds(parent.channels, unit.pe) + cyc.HEAD_PIPELINE
        return [pixels[(f + 1) * n_par - 1] + latency for f in range(TIMING_FRAMES)], None

    def resource_features(self, g, node, parent, unit):
        s_lo, s_hi = node.attrs["sum_range"]
        sum_w = max(abs(s_lo), abs(s_hi)).bit_length() + 1
        return {"one": 1, "sum_bits": parent.channels * sum_w, "mults": unit.pe,
                "mult_bits": unit.pe * sum_w, "out_bits": node.channels * node.bit_width,
                "pack_bits": _pack_bits(g, parent, unit)}

    def build(self, ctx, node, unit):
        head = ctx.add(node, ctx.head)  # the accelerator's: its logits are the output port
        return [ctx.packed(ctx.parent(node), node, head.i)], [head.o]
