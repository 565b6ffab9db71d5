"""Per-tensor fractional bits from calibration (docs/architecture.md section 3).

Every real-valued tensor of the fixed-point forward is realized by a batch norm
(:class:`~.layers.BatchNorm`, its ``out_frac`` buffer). Calibration runs the float
model on sample images, records each batch norm's largest output magnitude and picks:

- for a batch norm whose only readers are activations (sign or n-bit quantizer):
  :data:`THRESHOLD_FRAC` bits. Such a value never exists in hardware -- the compiler
  folds it into integer thresholds on the accumulator -- so precision costs nothing
  and the thresholds become as exact as the multiplier allows;
- for the others (residual paths, aggregations, gates, the classifier's input): the
  most fractional bits that keep the calibrated range (times :data:`HEADROOM`) within a
  signed :data:`ACT_BITS`-bit value. Tensors joined by an add, an aggregation or a gate
  must share one format, so they form classes (union-find over the traced graph) that
  take the smallest of their members' choices.

Fractional bits set precision only: hardware widths come from the compiler's worst-case
range analysis, so no input can overflow whatever calibration saw. 14 bits keep the
default digits model's float/fixed agreement at 99.8 % while its estimate still fits the
DE10-Nano at 512 cycles per frame (16 bits: same agreement, 1,024 cycles; 12 bits:
98.7 %).
"""

from __future__ import annotations

import math

import torch

from .layers import (Add, Aggregation, BatchNorm, BinaryActivation, NBitActivation,
                     OptionAShortcut, SoftGate)
from .tracing import traced

__all__ = ["calibrate", "calibrate_untrained", "ACT_BITS", "THRESHOLD_FRAC", "HEADROOM"]

#: Signed width budget of a real-valued activation that exists in hardware.
ACT_BITS = 14
#: Fractional bits of values that only feed thresholds (free in hardware).
THRESHOLD_FRAC = 16
#: Margin over the calibrated maximum (unseen inputs may go further).
HEADROOM = 2.0
_MAX_FRAC = 16


class _Classes:
    def __init__(self):
        self.parent = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


@torch.no_grad()
def calibrate(model, images, act_bits=ACT_BITS, headroom=HEADROOM):
    """Set every batch norm's ``out_frac`` from the float activations on ``images``.

    Parameters
    ----------
    model : torch.nn.Module
        A network of library layers, in eval mode.
    images : torch.Tensor
        uint8 calibration images (the training split: never the test split).

    Returns
    -------
    dict
        batch-norm module path -> chosen fractional bits.
    """
    gm = traced(model)
    peaks = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, BatchNorm):
            def hook(mod, inp, out, name=name):
                peaks[name] = max(peaks.get(name, 0.0), float(out.detach().abs().max()))
            hooks.append(module.register_forward_hook(hook))
    try:
        was_training = model.training
        model.eval()
        for start in range(0, len(images), 256):
            model(images[start:start + 256])
        model.train(was_training)
    finally:
        for h in hooks:
            h.remove()

    # readers of every traced value; classes of values that must share a format
    readers, classes = {}, _Classes()
    for node in gm.graph.nodes:
        for arg in _flat(node.args):
            if hasattr(arg, "op"):
                readers.setdefault(arg, []).append(node)
    for node in gm.graph.nodes:
        if node.op == "call_function":                     # getitem of a layer's outputs
            classes.union(node, node.args[0])
        if node.op != "call_module":
            continue
        layer = gm.get_submodule(node.target)
        if isinstance(layer, (Add, Aggregation, SoftGate, OptionAShortcut)):
            for arg in _flat(node.args):
                if hasattr(arg, "op"):
                    classes.union(arg, node)

    thresholds_only, choice = set(), {}
    for node in gm.graph.nodes:
        if node.op != "call_module" or not isinstance(gm.get_submodule(node.target), BatchNorm):
            continue
        users = readers.get(node, [])
        if users and all(u.op == "call_module" and isinstance(
                gm.get_submodule(u.target), (BinaryActivation, NBitActivation)) for u in users):
            thresholds_only.add(node)
            continue
        peak = peaks.get(node.target, 0.0) * headroom
        magnitude = math.ceil(math.log2(peak)) if peak > 0 else 0
        choice[node] = max(0, min(_MAX_FRAC, act_bits - 1 - magnitude))
    shared = {}
    for node, frac in choice.items():
        root = classes.find(node)
        shared[root] = min(shared.get(root, frac), frac)
    result = {}
    for node in list(thresholds_only) + list(choice):
        frac = THRESHOLD_FRAC if node in thresholds_only else shared[classes.find(node)]
        gm.get_submodule(node.target).out_frac.fill_(frac)
        result[node.target] = frac
    return result


def calibrate_untrained(model, images, act_bits=ACT_BITS, headroom=HEADROOM):
    """Batch-norm statistics measured on ``images`` (their plain average), then
    :func:`calibrate`: an untrained model (random weights) whose activations have the
    scale a trained one's would, for measuring hardware rather than accuracy.
    Returns what :func:`calibrate` returns; ``model`` ends in eval mode."""
    import torch
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.reset_running_stats()
            mod.momentum = None            # the plain average of what it sees
    model.train()
    with torch.no_grad():
        model(images)
    model.eval()
    return calibrate(model, images, act_bits, headroom)
