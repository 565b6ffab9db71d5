"""Graph IR: typed nodes in topological order.

A node names its op (defined once in :mod:`.ops`), its inputs (references ``"node"``
or ``"node:k"`` for the k-th output of a multi-output node), integer attributes, and
the typed tensor it produces: channels, height, width and kind -- ``"bits"`` (binary
activations, 1 <-> +1), ``"uint"`` (unsigned ``bits``-bit levels: pixels, n-bit
activations) or ``"fixed"`` (signed integers with ``frac`` fractional bits). Range
analysis fills ``lo``/``hi``, from which fixed-point widths follow.

Node names are unique identifiers for messages and waveforms and nothing else: the
graph's input and output are :attr:`Graph.input` and :attr:`Graph.output`, and no pass
looks a node up by a name it did not get from the graph.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from ..models.quantize import INT64_SAFE_BITS
from ..numerics import signed_width

__all__ = ["Node", "Graph", "signed_width", "fits_int64"]


def fits_int64(node, bound, what="value"):
    """Refuse a node whose worst case would not fit the int64 arithmetic of the
    executor and the fixed-point forward (a wrap would pass silently).

    Parameters
    ----------
    node : Node
        Named in the message.
    bound : int
        The largest magnitude the node's ``what`` can reach.
    what : str
        What ``bound`` bounds, for the message.

    Raises
    ------
    ValueError
        ``|bound|`` reaches ``2**INT64_SAFE_BITS``.
    """
    if abs(int(bound)) >= 1 << INT64_SAFE_BITS:
        raise ValueError(f"{node.name}: its {what} can reach 2**{abs(int(bound)).bit_length() - 1}, "
                         f"beyond int64 arithmetic (allowed 2**{INT64_SAFE_BITS}); weights, BN "
                         "statistics or quantization settings are too extreme")


@dataclass
class Node:
    name: str
    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    channels: int = 0
    height: int = 0
    width: int = 0
    kind: str = "fixed"
    bits: int = 0
    frac: int = 0
    outputs: int = 1
    lo: int | None = None
    hi: int | None = None

    @property
    def bit_width(self):
        """Width of one channel's value in hardware (1 for bits, ``bits`` for uint)."""
        if self.kind == "bits":
            return 1
        if self.kind == "uint":
            return self.bits
        if self.lo is None:
            raise ValueError(f"{self.name}: range analysis has not run")
        return signed_width(self.lo, self.hi)


class Graph:
    """Ordered nodes with name lookup and consumer queries."""

    def __init__(self, nodes=(), input=None, output=None):
        self._nodes = list(nodes)
        self._index = {n.name: n for n in self._nodes}
        self.input = input
        self.output = output
        #: model layer (fx node name) -> reference of the graph value equal to its
        #: fixed-point output, for locating a divergence; entries whose node a pass
        #: folded away are skipped.
        self.origins = {}
        self._consumer_index = None

    @property
    def nodes(self):
        """The nodes in topological order (a copy: change them with add/remove/replace)."""
        return list(self._nodes)

    def __iter__(self):
        return iter(list(self._nodes))

    def __len__(self):
        return len(self._nodes)

    def __getitem__(self, name) -> Node:
        return self._index[name]

    def __contains__(self, name):
        return name in self._index

    @staticmethod
    def source(ref: str) -> str:
        return ref.split(":")[0]

    def consumers(self, name):
        if self._consumer_index is not None:
            return list(self._consumer_index.get(name, ()))
        return [n for n in self._nodes if any(self.source(r) == name for r in n.inputs)]

    @contextmanager
    def unchanged(self):
        """Within, :meth:`consumers` answers from one index of every node's readers
        (a full-size network's fusion asked 1,141 times, each a scan of every node):
        for passes that read the graph and never change it."""
        index = {}
        for n in self._nodes:
            for source in dict.fromkeys(self.source(r) for r in n.inputs):
                index.setdefault(source, []).append(n)
        outer, self._consumer_index = self._consumer_index, index
        try:
            yield self
        finally:
            self._consumer_index = outer

    def add(self, node: Node) -> Node:
        if node.name in self._index:
            raise ValueError(f"duplicate node name {node.name!r}")
        self._nodes.append(node)
        self._index[node.name] = node
        return node

    def replace(self, old: Node, new: Node):
        """Put ``new`` (same name: references stay valid) in ``old``'s place."""
        if new.name != old.name:
            raise ValueError(f"replacing {old.name!r} by a node named {new.name!r}")
        self._nodes[self._nodes.index(old)] = new
        self._index[new.name] = new

    def replace_refs(self, old: str, new: str):
        for node in self._nodes:
            node.inputs = [new if r == old else r for r in node.inputs]
        if self.output == old:
            self.output = new

    def producer(self, ref) -> Node:
        return self[self.source(ref)]

    def unique_name(self, base):
        """``base``, or ``base_2``, ``base_3``... if taken."""
        name, k = base, 2
        while name in self._index:
            name, k = f"{base}_{k}", k + 1
        return name

    def remove(self, name):
        self._nodes = [n for n in self._nodes if n.name != name]
        self._index.pop(name, None)

    def ops(self):
        return [n.op for n in self._nodes]

    def summary(self):
        lines = []
        for n in self._nodes:
            rng = f" [{n.lo}, {n.hi}] w={n.bit_width}" if n.lo is not None else ""
            lines.append(f"{n.name:28s} {n.op:10s} {n.channels}x{n.height}x{n.width} "
                         f"{n.kind}{rng} <- {', '.join(n.inputs)}")
        return "\n".join(lines)
