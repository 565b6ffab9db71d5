"""Compiler passes over the graph IR. Each pass takes a graph and returns it
transformed; each is checked against the integer executor before and after.

- :func:`fold_relu`: a ``relu`` whose only consumer is a ``postop`` becomes the
  post-op's ``pre_relu`` (alpha > 0 commutes with ReLU: ReLU(alpha*p) = alpha*ReLU(p)).
- :func:`fuse_gates`: a soft ``gate`` fed by the ``mixer`` of the same bases becomes
  that mixer's gated outputs (one hardware unit, eq. 7).
- :func:`analyze_ranges`: interval bounds for every tensor, so every adder and
  accumulator gets a width that cannot overflow.
- :func:`fold_thresholds`: a ``postop`` whose only consumer is a ``threshold`` (a sign or
  an n-bit quantizer) disappears into integer thresholds on its input (FINN-style):
  the post-op is monotone, so ``postop(x) >= t  <=>  (x >= T) xor invert`` for one
  integer T, found exactly by bisection over the input's range.
"""

from __future__ import annotations

import torch

from .frontend import lower
from .graph import Graph, Node, fits_int64
from .ops import op_of
from .ops.pixel import postop_value

__all__ = ["fold_relu", "fuse_gates", "fold_thresholds", "analyze_ranges", "compile_model",
           "PASSES", "run_passes",
           "postop_value", "fits_int64", "threshold_for"]


def fold_relu(g: Graph) -> Graph:
    for relu in [n for n in g if n.op == "relu"]:
        users = g.consumers(relu.name)
        if len(users) == 1 and users[0].op == "postop" and not users[0].attrs["pre_relu"]:
            post = users[0]
            post.attrs["pre_relu"] = True
            post.inputs = list(relu.inputs)
            g.remove(relu.name)
    return g


def fuse_gates(g: Graph) -> Graph:
    for gate in [n for n in g if n.op == "gate"]:
        *xs, agg_ref = gate.inputs
        mixer = g.producer(agg_ref)
        if (mixer.op != "mixer" or mixer.attrs["gates"] is not None or mixer.inputs != xs
                or agg_ref != mixer.name or len(g.consumers(mixer.name)) != 1):
            continue
        fused = Node(gate.name, "mixer", list(xs),
                     dict(mixer.attrs, gates=gate.attrs["gates"], gate_frac=gate.attrs["gate_frac"]),
                     channels=gate.channels, height=gate.height, width=gate.width,
                     kind=gate.kind, bits=gate.bits, frac=gate.frac, outputs=gate.outputs)
        g.replace(gate, fused)
        g.remove(mixer.name)
        # the mixer stood before the gate; its inputs are all earlier still
    return g


def threshold_for(A, B, shift, pre_relu, lo, hi, t):
    """``(T, invert)`` with ``postop(x) >= t  <=>  (x >= T) xor invert`` for x in [lo, hi]."""
    def hit(x):
        return postop_value(x, A, B, shift, pre_relu, False) >= t
    first, last = hit(lo), hit(hi)
    if first == last:
        # constant over the range (gamma = 0, or a threshold out of reach): verify the
        # ends agree because monotone, then fold to an always/never comparison
        return (lo, False) if first else (hi + 1, False)
    # monotone: bisect for the boundary (the predicate changes exactly once)
    a, b = lo, hi           # hit(a) == first, hit(b) == last
    while b - a > 1:
        mid = (a + b) // 2
        if hit(mid) == first:
            a = mid
        else:
            b = mid
    # x >= b  <=>  hit(x) == last
    return (b, False) if last else (b, True)


def fold_thresholds(g: Graph) -> Graph:
    """Needs input ranges (run :func:`analyze_ranges` first)."""
    for thr in [n for n in g if n.op == "threshold"]:
        post = g.producer(thr.inputs[0])
        if post.op != "postop" or post.attrs["post_relu"] or len(g.consumers(post.name)) != 1:
            continue
        src = g.producer(post.inputs[0])
        a = post.attrs
        T, inv = [], []
        for c in range(post.channels):
            row = [threshold_for(int(a["A"][c]), int(a["B"][c]), a["shift"], a["pre_relu"],
                                 src.lo, src.hi, int(t)) for t in thr.attrs["T"][c].tolist()]
            # one direction per channel: the post-op's monotonicity is the multiplier's sign
            dirs = {i for t, i in row if src.lo < t <= src.hi}
            if len(dirs) > 1:
                raise AssertionError(f"{post.name}: post-op is not monotone")
            d = dirs.pop() if dirs else False
            # a constant comparison is re-expressed in the channel's direction
            T.append([t if i == d else (src.lo if (t > src.hi) == d else src.hi + 1)
                      for t, i in row])
            inv.append(d)
        thr.attrs = dict(T=torch.tensor(T, dtype=torch.int64),
                         invert=torch.tensor(inv, dtype=torch.int64), folded_from=post.name)
        thr.inputs = list(post.inputs)
        g.remove(post.name)
    return g


def analyze_ranges(g: Graph) -> Graph:
    """Fill ``lo``/``hi`` of every tensor with bounds that cannot be exceeded (each op's
    range rule).

    Raises
    ------
    ValueError
        A tensor, or a product before a post-op's or mixer's shift, that could leave
        int64 (``INT64_SAFE_BITS``).
    """
    for node in g:
        ins = [g.producer(r) for r in node.inputs]
        node.lo, node.hi = op_of(node).value_range(node, ins)
        fits_int64(node, max(-node.lo, node.hi))
    return g


#: The graph passes, in the order :func:`run_passes` applies them: the lowered graph
#: becomes the integer graph (ReLU folded, gates fused, thresholds folded, every
#: width proven). Thresholds need ranges, and their own ranges follow from them.
PASSES = (fold_relu, fuse_gates, analyze_ranges, fold_thresholds, analyze_ranges)


def run_passes(g: Graph) -> Graph:
    """Apply :data:`PASSES` in order to a lowered graph."""
    for graph_pass in PASSES:
        g = graph_pass(g)
    return g


def compile_model(model, input_shape=None) -> Graph:
    """:func:`~.frontend.lower`, then :func:`run_passes`."""
    return run_passes(lower(model, input_shape))
