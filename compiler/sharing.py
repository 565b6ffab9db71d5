"""Time-sharing the K bases of a block on one set of units.

Side by side, every base of a Group-Net block has its own units: K thresholds, K
windows, K matrix-vector units... Time-shared, the K isomorphic base chains become one
chain over their channels concatenated (base-major, K*C channels): per-pixel units
(thresholds, post-ops, adds) take the K bases' constants side by side and fold over
the wider pixel, and each convolution becomes a *grouped* convolution whose
matrix-vector unit runs the K bases one after the other with the base index as the
outer fold (:class:`groupnet_hw.hw.mvu.BinaryMVU` ``groups``): one set of PE x SIMD
lanes and one fold sequencer instead of K, the K weight sets in one ROM. A tensor the
bases share (the block input) is repeated K times (wiring only); the mixer that joins
the bases takes them packed, and a gated mixer hands the next block's K inputs on
packed (``packed_in`` / ``packed_out``).

The merge is structural: a *base group* is the K subgraphs that feed the K inputs of
one mixer and nothing else, isomorphic node by node (same op, shape and non-per-channel
attributes: each op's ``stack``). No node name is looked at.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from .graph import Graph, Node
from .ops import op_of
from .passes import analyze_ranges

__all__ = ["BaseGroup", "base_groups", "share_bases"]


@dataclass
class BaseGroup:
    """K isomorphic base subgraphs joined by ``mixer``.

    Attributes
    ----------
    mixer : str
        The joining mixer.
    bases : list of list of str
        Per base, its nodes in graph order (position ``i`` of every base is the same
        op on the same shape).
    slots : list of list of tuple
        Per position, per input slot, where the K inputs come from: ``("internal",
        j)`` (position ``j`` of the same base), ``("shared", ref)`` (one tensor all
        bases read) or ``("origin", node)`` (output ``k`` of a K-output mixer for base
        ``k``).
    stacked : list of dict
        Per position, the merged node's attributes (the op's ``stack``).
    """

    mixer: str
    bases: list
    slots: list
    stacked: list


def _ancestors(g, ref):
    seen, todo = set(), [Graph.source(ref)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(Graph.source(r) for r in g[name].inputs)
    return seen


def _same_tensor(nodes):
    a = nodes[0]
    return all((n.op, n.channels, n.height, n.width, n.kind, n.bits, n.frac, n.outputs,
                len(n.inputs)) == (a.op, a.channels, a.height, a.width, a.kind, a.bits, a.frac,
                                   a.outputs, len(a.inputs)) for n in nodes)


def _slot(g, refs, where, exclusive):
    """Classify the K references of one input slot (see :class:`BaseGroup`)."""
    srcs = [Graph.source(r) for r in refs]
    if all(s in exclusive[k] for k, s in enumerate(srcs)):
        positions = {where[s] for s in srcs}
        if len(positions) == 1 and all(":" not in r for r in refs):
            return ("internal", positions.pop())
        return None
    if any(s in ex for s in srcs for ex in exclusive):
        return None
    if len(set(refs)) == 1:
        return ("shared", refs[0])
    k_outputs = len(refs)
    if (len(set(srcs)) == 1 and g[srcs[0]].op == "mixer" and g[srcs[0]].outputs == k_outputs
            and refs == [f"{srcs[0]}:{k}" for k in range(k_outputs)]):
        return ("origin", srcs[0])
    return None


def _group_of(g, mixer):
    """The base group joined by ``mixer``, or ``None`` if its bases cannot be shared."""
    tails = mixer.inputs
    k_bases = len(tails)
    if mixer.attrs.get("packed_in") or k_bases < 2 or any(":" in r for r in tails):
        return None
    anc = [_ancestors(g, r) for r in tails]
    exclusive = [a - set().union(*(b for j, b in enumerate(anc) if j != k))
                 for k, a in enumerate(anc)]
    if any(not ex for ex in exclusive):
        return None
    order = {n.name: i for i, n in enumerate(g)}
    bases = []
    for k, ex in enumerate(exclusive):
        # a base's nodes feed nothing but the base and (its tail) the mixer
        for name in ex:
            outside = [c.name for c in g.consumers(name) if c.name not in ex]
            if outside and (outside != [mixer.name] or name != tails[k]):
                return None
        bases.append(sorted(ex, key=order.__getitem__))
    if len({len(b) for b in bases}) != 1:
        return None
    where = {name: i for b in bases for i, name in enumerate(b)}
    slots, stacked = [], []
    for i in range(len(bases[0])):
        nodes = [g[b[i]] for b in bases]
        if not _same_tensor(nodes):
            return None
        attrs = op_of(nodes[0]).stack(nodes)
        if attrs is None:
            return None
        row = []
        for s in range(len(nodes[0].inputs)):
            slot = _slot(g, [n.inputs[s] for n in nodes], where, exclusive)
            if slot is None:
                return None
            row.append(slot)
        slots.append(row)
        stacked.append(attrs)
    for row in slots:
        for kind, what in row:
            if kind == "origin":
                # every output of the origin mixer must be read inside this group only
                for k in range(k_bases):
                    readers = [n.name for n in g if f"{what}:{k}" in n.inputs]
                    if any(r not in exclusive[k] for r in readers):
                        return None
    return BaseGroup(mixer.name, bases, slots, stacked)


def base_groups(g: Graph):
    """Every base group of ``g`` whose bases can be time-shared, in graph order."""
    return [grp for node in g if node.op == "mixer"
            for grp in [_group_of(g, node)] if grp is not None]


def _merge(g: Graph, grp: BaseGroup):
    k_bases = len(grp.bases)
    first = [g[name] for name in grp.bases[0]]
    merged, repeats, new_nodes = [], {}, []
    for i, proto in enumerate(first):
        name = g.unique_name(f"{proto.name}_shared")
        inputs = []
        for kind, what in grp.slots[i]:
            if kind == "internal":
                inputs.append(merged[what])
            elif kind == "origin":
                inputs.append(what)
            else:
                if what not in repeats:
                    src = g.producer(what)
                    rep = Node(g.unique_name(f"{Graph.source(what)}_repeat"), "repeat", [what],
                               {"times": k_bases}, channels=k_bases * src.channels,
                               height=src.height, width=src.width, kind=src.kind,
                               bits=src.bits, frac=src.frac)
                    g.add(rep)   # reserves the name; placed below
                    repeats[what] = rep.name
                    new_nodes.append(rep)
                inputs.append(repeats[what])
        node = Node(name, proto.op, inputs, grp.stacked[i], channels=k_bases * proto.channels,
                    height=proto.height, width=proto.width, kind=proto.kind, bits=proto.bits,
                    frac=proto.frac)
        g.add(node)
        merged.append(name)
        new_nodes.append(node)
    for what in {what for row in grp.slots for kind, what in row if kind == "origin"}:
        origin = g[what]
        origin.channels *= k_bases
        origin.outputs = 1
        origin.attrs["packed_out"] = True
    mixer = g[grp.mixer]
    tail = merged[grp.bases[0].index(Graph.source(mixer.inputs[0]))]
    mixer.inputs = [tail]
    mixer.attrs["packed_in"] = True
    # The merged chain sits right before the mixer: everything it reads is an ancestor
    # of the mixer, hence earlier in the order.
    gone = {name for base in grp.bases for name in base}
    added = {n.name for n in new_nodes}
    order = []
    for node in g.nodes:
        if node.name in gone or node.name in added:
            continue
        if node.name == grp.mixer:
            order.extend(new_nodes)
        order.append(node)
    out = Graph(order, input=g.input, output=g.output)
    out.origins = {layer: ref for layer, ref in g.origins.items()
                   if Graph.source(ref) not in gone and not (
                       ":" in ref and g[Graph.source(ref)].attrs.get("packed_out"))}
    return out


def share_bases(g: Graph, mixers=None) -> Graph:
    """A copy of ``g`` with the base groups joined by ``mixers`` (names; default every
    shareable group) time-shared, ranges analysed again.

    Raises
    ------
    ValueError
        One of ``mixers`` does not join a shareable base group.
    """
    g = copy.deepcopy(g)
    wanted = None if mixers is None else set(mixers)
    done = set()
    while True:
        groups = [grp for grp in base_groups(g)
                  if (wanted is None or grp.mixer in wanted) and grp.mixer not in done]
        if not groups:
            break
        g = _merge(g, groups[0])
        done.add(groups[0].mixer)
    if wanted is not None and wanted - done:
        raise ValueError(f"no time-shareable bases join at {', '.join(sorted(wanted - done))}")
    return analyze_ranges(g)
