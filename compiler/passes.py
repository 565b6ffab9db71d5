"""Compiler passes over the graph IR. Each pass takes a graph and returns it
transformed; each is checked against the integer executor before and after.

- :func:`fold_postops`: ``[scale(alpha)] -> [relu] -> batchnorm`` chains become one
  fixed-point ``postop`` (alpha > 0 commutes with ReLU: ReLU(alpha*p) = alpha*ReLU(p)).
- :func:`fold_thresholds`: a ``postop`` whose only consumer is a ``sign`` becomes an
  integer ``threshold`` (FINN-style): the post-op is monotone in its input, so
  ``sign(postop(x)) = (x >= T) xor invert`` for one integer T found exactly by
  search over the input's range.
- :func:`analyze_ranges`: interval bounds for every tensor, so every adder and
  accumulator gets a width that cannot overflow.
"""

from __future__ import annotations

import torch

from ..models.quantize import INT64_SAFE_BITS, quantize_affine
from .execute import round_shift
from .graph import Graph, Node

__all__ = ["fold_postops", "fold_thresholds", "analyze_ranges", "compile_model", "postop_value"]


def postop_value(v, A, B, shift, pre_relu, post_relu):
    """Scalar reference of the post-op (Python ints)."""
    if pre_relu:
        v = max(v, 0)
    y = round_shift(A * v + B, shift)
    return max(y, 0) if post_relu else y


def fold_postops(g: Graph) -> Graph:
    for bn in [n for n in g if n.op == "batchnorm"]:
        chain = []
        ref = bn.inputs[0]
        while g[ref].op in ("scale", "relu"):
            chain.append(g[ref])
            ref = g[ref].inputs[0]
        ops = [n.op for n in reversed(chain)]
        if ops not in ([], ["scale", "relu"]):
            raise ValueError(f"{bn.name}: cannot fold {ops} into a post-op")
        a = bn.attrs["scale"]
        pre_relu = False
        if ops:
            alpha = chain[-1].attrs["alpha"]
            if (alpha < 0).any():
                raise ValueError(f"{bn.name}: negative weight scale cannot commute with ReLU")
            a = alpha * a
            pre_relu = True
        A, B, shift = quantize_affine(a, bn.attrs["shift"], bn.attrs["in_frac"], g.act_frac,
                                      g.scale_bits)
        post = Node(bn.name, "postop", [ref],
                    dict(A=A, B=B, shift=shift, pre_relu=pre_relu, post_relu=False),
                    channels=bn.channels, height=bn.height, width=bn.width)
        g.nodes[g.nodes.index(bn)] = post
        for node in chain:
            g.remove(node.name)
    return g


def _threshold_for(A, B, shift, pre_relu, lo, hi):
    """(T, invert) with sign(postop(x)) == +1  <=>  (x >= T) xor invert, for x in [lo, hi]."""
    values = [postop_value(x, A, B, shift, pre_relu, False) >= 0 for x in range(lo, hi + 1)]
    if all(values):
        return lo, False
    if not any(values):
        return hi + 1, False
    # monotone non-decreasing post-op: positives form a suffix; non-increasing: a prefix
    first_true = values.index(True)
    if all(values[first_true:]) and not any(values[:first_true]):
        return lo + first_true, False
    first_false = values.index(False)
    if all(not v for v in values[first_false:]) and all(values[:first_false]):
        return lo + first_false, True
    raise AssertionError("post-op is not monotone: cannot fold into a threshold")


def fold_thresholds(g: Graph) -> Graph:
    for post in [n for n in g if n.op == "postop"]:
        users = g.consumers(post.name)
        if len(users) != 1 or users[0].op != "sign" or post.attrs["post_relu"]:
            continue
        sign = users[0]
        src = g[post.inputs[0]]
        if src.op != "bin_conv":
            continue
        n = src.attrs["bits"][0].numel()
        T, inv = [], []
        a = post.attrs
        for c in range(post.channels):
            t, i = _threshold_for(int(a["A"][c]), int(a["B"][c]), a["shift"], a["pre_relu"], -n, n)
            T.append(t)
            inv.append(i)
        thr = Node(sign.name, "threshold", [src.name],
                   dict(T=torch.tensor(T), invert=torch.tensor(inv), folded_from=post.name),
                   channels=post.channels, height=post.height, width=post.width, kind="bits")
        g.nodes[g.nodes.index(sign)] = thr
        g.remove(post.name)
    return g


def _fits_int64(node, bound, what="value"):
    """Refuse a node whose worst case would not fit the int64 arithmetic of the
    executor and the fixed-point forward (a wrap would pass silently)."""
    if abs(int(bound)) >= 1 << INT64_SAFE_BITS:
        raise ValueError(f"{node.name}: its {what} can reach 2**{abs(int(bound)).bit_length() - 1}, "
                         f"beyond int64 arithmetic (allowed 2**{INT64_SAFE_BITS}); weights, BN "
                         "statistics or quantization settings are too extreme")


def analyze_ranges(g: Graph) -> Graph:
    """Fill ``lo``/``hi`` of every non-bit tensor with bounds that cannot be exceeded.

    Raises
    ------
    ValueError
        A tensor, or a product before a post-op's or mixer's shift, that could leave
        int64 (``INT64_SAFE_BITS``).
    """
    for node in g:
        a = node.attrs
        ins = [g[Graph.source(r)] for r in node.inputs]
        if node.op == "input":
            node.lo, node.hi = 0, 255
        elif node.op == "int_conv":
            w = a["weight"].reshape(a["weight"].shape[0], -1)
            x_lo, x_hi = min(ins[0].lo, 0), max(ins[0].hi, 0)  # zero padding
            los = (torch.clamp(w, min=0) * x_lo + torch.clamp(w, max=0) * x_hi).sum(1)
            his = (torch.clamp(w, min=0) * x_hi + torch.clamp(w, max=0) * x_lo).sum(1)
            node.lo, node.hi = int(los.min()), int(his.max())
        elif node.op == "bin_conv":
            n = a["bits"][0].numel()
            node.lo, node.hi = -n, n
        elif node.op == "postop":
            lo, hi = ins[0].lo, ins[0].hi
            if a["pre_relu"]:
                lo, hi = max(lo, 0), max(hi, 0)
            _fits_int64(node, int(a["A"].abs().max()) * max(-lo, hi) + int(a["B"].abs().max()),
                        "product before the shift")
            ends = [postop_value(v, int(A), int(B), a["shift"], False, a["post_relu"])
                    for A, B in zip(a["A"].tolist(), a["B"].tolist()) for v in (lo, hi)]
            node.lo, node.hi = min(ends), max(ends)
        elif node.op == "subsample":
            node.lo, node.hi = ins[0].lo, ins[0].hi
        elif node.op == "add":
            b_lo, b_hi = ins[1].lo, ins[1].hi
            if ins[1].channels < node.channels:
                b_lo, b_hi = min(b_lo, 0), max(b_hi, 0)
            node.lo, node.hi = ins[0].lo + b_lo, ins[0].hi + b_hi
        elif node.op == "mixer":
            lam = a["lambdas"].tolist()
            lo = sum(min(l * x.lo, l * x.hi) for l, x in zip(lam, ins))
            hi = sum(max(l * x.lo, l * x.hi) for l, x in zip(lam, ins))
            _fits_int64(node, max(-lo, hi), "weighted sum before the shift")
            agg_lo, agg_hi = round_shift(lo, a["lambda_frac"]), round_shift(hi, a["lambda_frac"])
            a["agg_range"] = (agg_lo, agg_hi)
            if a["gates"] is None:
                node.lo, node.hi = agg_lo, agg_hi
            else:
                one = 1 << a["gate_frac"]
                los, his = [], []
                # C*g + (one - C)*agg with 0 <= C <= one
                _fits_int64(node, one * (max(max(-x.lo, x.hi) for x in ins)
                                         + max(-agg_lo, agg_hi)), "gated sum before the shift")
                for c_i, x in zip(a["gates"].tolist(), ins):
                    los.append(round_shift(c_i * x.lo + (one - c_i) * agg_lo, a["gate_frac"]))
                    his.append(round_shift(c_i * x.hi + (one - c_i) * agg_hi, a["gate_frac"]))
                node.lo, node.hi = min(los + [agg_lo]), max(his + [agg_hi])
        elif node.op == "head":
            x = ins[0]
            pixels = x.height * x.width
            s_lo, s_hi = pixels * x.lo, pixels * x.hi
            a["sum_range"] = (s_lo, s_hi)
            w = a["weight"]
            los = (torch.clamp(w, min=0) * s_lo + torch.clamp(w, max=0) * s_hi).sum(1) + a["bias"]
            his = (torch.clamp(w, min=0) * s_hi + torch.clamp(w, max=0) * s_lo).sum(1) + a["bias"]
            node.lo, node.hi = int(los.min()), int(his.max())
        elif node.op in ("sign", "threshold"):
            node.lo, node.hi = 0, 1
        else:
            raise ValueError(f"{node.name}: no range rule for op {node.op!r}")
        _fits_int64(node, max(-node.lo, node.hi))
    return g


def compile_model(model) -> Graph:
    """trace -> fold_postops -> fold_thresholds -> analyze_ranges."""
    from .trace import trace
    return analyze_ranges(fold_thresholds(fold_postops(trace(model))))
