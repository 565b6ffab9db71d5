"""Integer-graph executor: the project's one source of numerical truth.

Runs a graph on torch int64 tensors (NCHW), each node by its op's ``execute``
(:mod:`.ops`). Convolutions gather windows in the hardware's order (tap-major,
channel-minor) and compute binary dots as ``2*popcount(xnor) - N`` on 0/1 bits,
independently of the model's float64 convolution of +-1 values. With ``check_ranges``
every value is checked against the bounds of range analysis.
"""

from __future__ import annotations

import torch

from .graph import Graph
from .ops import op_of
from .ops.pixel import round_shift
from .ops.window import flat_weight, window_patches

__all__ = ["execute", "window_patches", "flat_weight", "round_shift", "RangeViolation"]


class RangeViolation(AssertionError):
    pass


def execute(g: Graph, pixels, check_ranges=False):
    """Run ``g`` on uint8 images ([N, H, W] or [N, C, H, W]).

    Returns
    -------
    dict
        Node name -> value (multi-output nodes: list of tensors); the logits
        [N, n_classes] are ``values[g.output]``.
    """
    values = {}

    def get(ref):
        name, _, k = ref.partition(":")
        v = values[name]
        return v[int(k)] if k else v

    for node in g:
        ins = [pixels] if node.name == g.input else [get(r) for r in node.inputs]
        out = op_of(node).execute(node, ins)
        values[node.name] = out
        if check_ranges and node.lo is not None:
            for t in (out if isinstance(out, list) else [out]):
                if t.numel() and (int(t.min()) < node.lo or int(t.max()) > node.hi):
                    raise RangeViolation(f"{node.name}: values [{int(t.min())}, {int(t.max())}] "
                                         f"outside analysed range [{node.lo}, {node.hi}]")
    return values
