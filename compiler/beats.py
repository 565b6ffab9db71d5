"""Beat streams: which tensors travel as beats narrower than a pixel, and how many.

A folded design sees a pixel every few hundred cycles, yet every per-pixel unit
between two convolutions (residual add, base mixer, threshold), every skip FIFO and
every MVU's output register holds whole pixels: on the time-shared CIFAR-size network
at K = 5 those pixels are K*C channels of 13 to 26 bits, and they were most of the
design. With beat streams (FINN's SIMD-wide streams) a tensor's pixel travels as ``B``
consecutive beats of ``L`` channels of every group (:func:`groupnet_hw.hw.beats.beat_order`):
an MVU sends each beat as soon as its folds are done, the per-pixel units work beat by
beat, a FIFO is ``B`` times deeper and ``B`` times narrower (block RAM filled by depth,
not by width), and the window or head that reads the tensor collects the beats into
pixels (:class:`~groupnet_hw.hw.beats.BeatPack`; after a threshold those are one bit a
channel).

A tensor travels as beats when its producer can send them (an MVU with at most ``L``
PEs per group, or a unit passing its inputs' beats through) and every reader can take
them (:meth:`~.ops.base.Op.beat_input`): a component of the graph either all in beats
or all in pixels, decided here as a fixed point. ``L`` is one per component (so that
the adds and mixers see equal beats on all inputs): the smallest divisor of every
tensor's channels per group that is at least every MVU's PE in it.
"""

from __future__ import annotations

from math import gcd

from .graph import Graph
from .ops import op_of

__all__ = ["assign_beats"]


def _groups(g):
    """Groups of every tensor's beat layout (:meth:`~.ops.base.Op.beat_groups`)."""
    groups = {}
    for node in g:
        ins = [groups[Graph.source(r)] for r in node.inputs]
        groups[node.name] = op_of(node).beat_groups(node, ins)
    return groups


def assign_beats(g, units):
    """Set ``Unit.beats``, ``Unit.beat_groups`` and ``Unit.in_beats`` of every node of
    ``g`` folded as ``units``; returns the number of nodes whose output travels as more
    than one beat per pixel.

    Tensors joined by units passing beats through form components; each component
    whose producers all can send beats and whose readers all can take them gets the
    fewest channels per group in a beat that every tensor's channels per group are a
    multiple of and no MVU's PE exceeds (an MVU's folds never span two beats)."""
    groups = _groups(g)
    role = {n.name: op_of(n).beat_input(n, units[n.name]) for n in g}
    source = {n.name: op_of(n).beat_source(n, units[n.name]) for n in g}
    beat = {name: source[name] or role[name] == "through" for name in role}
    # A unit passing beats through needs all its inputs and its output in beats; a unit
    # that takes only pixels needs its inputs in pixels. Clearing only ever clears, so
    # this ends.
    changed = True
    while changed:
        changed = False
        for node in g:
            srcs = [Graph.source(r) for r in node.inputs]
            if role[node.name] == "through" and not (beat[node.name] and all(beat[s] for s in srcs)):
                clear = srcs + [node.name]
            elif role[node.name] is None:
                clear = srcs
            else:
                continue
            for name in clear:
                if beat[name]:
                    beat[name] = False
                    changed = True
    # components: a unit passing beats joins its inputs and its output
    parent = {name: name for name, b in beat.items() if b}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for node in g:
        if beat[node.name] and role[node.name] == "through":
            for r in node.inputs:
                parent[find(Graph.source(r))] = find(node.name)
    members = {}
    for name in parent:
        members.setdefault(find(name), []).append(name)
    lanes_of = {}
    for names in members.values():
        common, need = 0, 1
        for name in names:
            node = g[name]
            common = gcd(common, node.channels // groups[name]
                         if node.channels % groups[name] == 0 else 0)
            if source[name]:
                need = max(need, units[name].pe)
        lanes = next((d for d in range(need, common + 1) if common % d == 0), None)
        for name in names:
            lanes_of[name] = lanes
    count = 0
    for node in g:
        unit = units[node.name]
        unit.beat_groups = groups[node.name]
        lanes = lanes_of.get(node.name)
        unit.beats = node.channels // groups[node.name] // lanes if lanes else 1
        count += unit.beats > 1
    for node in g:
        units[node.name].in_beats = tuple(units[Graph.source(r)].beats for r in node.inputs)
    return count
