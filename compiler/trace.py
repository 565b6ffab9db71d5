"""Trace a :class:`~groupnet_hw.models.groupnet.GroupNet` into the graph IR.

The traced graph still carries the float pieces (alpha scales, ReLUs, batch
norms) as separate nodes; :mod:`.passes` folds them into fixed-point post-ops
and integer thresholds.
"""

from __future__ import annotations

import torch

from ..models.binary import weight_alpha
from ..models.groupnet import GroupNet, bn_affine
from ..models.quantize import quantize_scalar, quantize_weights_pow2
from .cycles import conv_out_size
from .graph import Graph, Node

__all__ = ["trace"]


def trace(model: GroupNet) -> Graph:
    """Return the (unfolded) graph of ``model``; node names match the model's
    quantized-eval trace so a mismatch can be located by name."""
    cfg, q = model.config, model.quant
    g = Graph()
    size = cfg.image_size
    g.add(Node("input", "input", [], channels=cfg.in_channels, height=size, width=size, kind="u8"))

    w_q, w_frac = quantize_weights_pow2(model.stem.conv.weight.detach(), q.weight_bits)
    g.add(Node("stem.conv", "int_conv", ["input"],
               dict(weight=w_q, stride=1, dilation=1, padding=1, frac=q.input_frac + w_frac),
               channels=cfg.stem_channels, height=size, width=size))
    scale, shift = bn_affine(model.stem.bn)
    g.add(Node("stem", "batchnorm", ["stem.conv"],
               dict(scale=scale, shift=shift, in_frac=q.input_frac + w_frac),
               channels=cfg.stem_channels, height=size, width=size))

    inputs = ["stem"] * cfg.bases
    channels = cfg.stem_channels
    for n, block in enumerate(model.blocks):
        outs = []
        for i, base in enumerate(block.bases):
            name = f"block{n}.base{i}"
            src = inputs[i]
            c_out = base.out_channels
            h_in = size
            prev = src
            for c, (conv, bn) in enumerate(((base.conv1, base.bn1), (base.conv2, base.bn2)), 1):
                c_in = conv.in_channels
                h_out = conv_out_size(h_in, conv.kernel_size, conv.stride, conv.dilation, conv.padding)
                dims = dict(channels=c_out, height=h_out, width=h_out)
                g.add(Node(f"{name}.sign{c}", "sign", [prev], channels=c_in, height=h_in,
                           width=h_in, kind="bits"))
                g.add(Node(f"{name}.conv{c}", "bin_conv", [f"{name}.sign{c}"],
                           dict(bits=(conv.weight.detach() >= 0).to(torch.int64),
                                stride=conv.stride, dilation=conv.dilation,
                                padding=conv.padding, kernel=conv.kernel_size), **dims))
                g.add(Node(f"{name}.conv{c}.alpha", "scale", [f"{name}.conv{c}"],
                           dict(alpha=weight_alpha(conv.weight.detach()).flatten().double()), **dims))
                g.add(Node(f"{name}.conv{c}.relu", "relu", [f"{name}.conv{c}.alpha"], **dims))
                scale, shift = bn_affine(bn)
                post = f"{name}.act1" if c == 1 else f"{name}.post2"
                g.add(Node(post, "batchnorm", [f"{name}.conv{c}.relu"],
                           dict(scale=scale, shift=shift, in_frac=0), **dims))
                prev, h_in = post, h_out
            skip = src
            if base.stride > 1:
                skip = f"{name}.skip"
                g.add(Node(skip, "subsample", [src], dict(stride=base.stride),
                           channels=channels, height=h_in, width=h_in))
            g.add(Node(f"{name}.out", "add", [prev, skip], channels=c_out, height=h_in, width=h_in))
            outs.append(f"{name}.out")
        size = conv_out_size(size, 3, block.bases[0].stride, 1, 1)
        channels = block.bases[0].out_channels
        nxt = model.blocks[n + 1] if n + 1 < len(model.blocks) else None
        gated = nxt is not None
        attrs = dict(lambdas=quantize_scalar(block.lambdas.detach(), q.lambda_frac),
                     lambda_frac=q.lambda_frac, gates=None, gate_frac=q.gate_frac)
        if gated:
            attrs["gates"] = quantize_scalar(torch.sigmoid(nxt.gate_theta.detach()), q.gate_frac)
        g.add(Node(f"block{n}.mix", "mixer", outs, attrs, channels=channels, height=size,
                   width=size, outputs=cfg.bases if gated else 1))
        inputs = [f"block{n}.mix:{i}" for i in range(cfg.bases)] if gated else None
        last = f"block{n}.mix"

    pool = size * size
    w_q, w_frac = quantize_weights_pow2(model.fc.weight.detach().double() / pool, q.weight_bits)
    bias = quantize_scalar(model.fc.bias.detach(), w_frac + q.act_frac)
    g.add(Node("head", "head", [last], dict(weight=w_q, bias=bias, frac=w_frac + q.act_frac),
               channels=cfg.num_classes, height=1, width=1))
    g.output = "head"
    g.act_frac = q.act_frac
    g.scale_bits = q.scale_bits
    return g
