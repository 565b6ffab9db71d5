"""Graph IR: typed nodes in topological order.

A node names its op, its inputs (references ``"node"`` or ``"node:k"`` for the
k-th output of a multi-output node), integer attributes, and the tensor it
produces: channels, height, width and kind (``"u8"`` pixels, ``"bits"`` binary
activations with 1 <-> +1, ``"int"`` fixed-point integers). Range analysis fills
``lo``/``hi`` and ``width`` (signed bits).

Op vocabulary (attributes in brackets):

=============  ================================================================
input          uint8 image [height, width]
int_conv       full-precision conv on integers [weight (Cout,Cin,k,k), stride,
               dilation, padding; zero padding]
bin_conv       XNOR-popcount conv on bits [bits (Cout,Cin,k,k), stride,
               dilation, padding; +1 padding]; dot = 2*popcount(xnor) - N
scale          multiply by float alpha per channel (before folding)
relu           max(x, 0) (before folding)
batchnorm      float per-channel affine [scale, shift, in_frac] (before folding)
postop         round_shift(A*(relu?(x)) + B, shift), then relu? [A, B, shift,
               pre_relu, post_relu]
sign           bits = x >= 0
threshold      bits = (x >= T) xor invert [T, invert]
subsample      keep rows/cols that are multiples of stride
add            a + zero-channel-padded b
mixer          agg = round_shift(sum lambda_j G_j, lambda_frac); gated: outputs
               x_i = round_shift(C_i G_i + (2^gf - C_i) agg, gate_frac)
head           sum pool, logits = W @ sums + bias; output logits [n_classes]
=============  ================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Node", "Graph", "signed_width"]


def signed_width(lo: int, hi: int) -> int:
    """Bits of the smallest signed two's-complement type holding [lo, hi]."""
    def bits(v):
        return (v if v >= 0 else ~v).bit_length() + 1
    return max(bits(int(lo)), bits(int(hi)))


@dataclass
class Node:
    name: str
    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    channels: int = 0
    height: int = 0
    width: int = 0
    kind: str = "int"
    outputs: int = 1
    lo: int | None = None
    hi: int | None = None

    @property
    def bit_width(self):
        """Width of one channel's value in hardware (1 for bits, 8 for pixels)."""
        if self.kind == "bits":
            return 1
        if self.kind == "u8":
            return 8
        if self.lo is None:
            raise ValueError(f"{self.name}: range analysis has not run")
        return signed_width(self.lo, self.hi)


class Graph:
    """Ordered nodes with name lookup and consumer queries."""

    def __init__(self, nodes=(), output=None):
        self.nodes = list(nodes)
        self.output = output

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self):
        return len(self.nodes)

    def __getitem__(self, name) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def __contains__(self, name):
        return any(n.name == name for n in self.nodes)

    @staticmethod
    def source(ref: str) -> str:
        return ref.split(":")[0]

    def consumers(self, name):
        return [n for n in self.nodes if any(self.source(r) == name for r in n.inputs)]

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def replace_refs(self, old: str, new: str):
        for node in self.nodes:
            node.inputs = [new if r == old else r for r in node.inputs]
        if self.output == old:
            self.output = new

    def remove(self, name):
        self.nodes = [n for n in self.nodes if n.name != name]

    def ops(self):
        return [n.op for n in self.nodes]

    def summary(self):
        lines = []
        for n in self.nodes:
            rng = f" [{n.lo}, {n.hi}] w={n.bit_width}" if n.lo is not None else ""
            lines.append(f"{n.name:28s} {n.op:10s} {n.channels}x{n.height}x{n.width} "
                         f"{n.kind}{rng} <- {', '.join(n.inputs)}")
        return "\n".join(lines)
