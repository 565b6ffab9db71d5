"""The accelerator: the dataflow graph of a schedule
(:class:`~groupnet_hw.compiler.schedule.Schedule`) assembled from stream units.

Each graph node becomes one unit (a binary or integer convolution becomes a
sliding window feeding a matrix-vector unit); a tensor read by several nodes
goes through a :class:`~.fork.Broadcast`; the schedule's FIFOs sit on the fork
branches that rejoin later (residual skips, base outputs before the mixer), so
no back-pressure pattern can deadlock the pipeline.

The hardware side knows no IR op: the schedule builds each node's units
(:class:`Accelerator` lists what it reads of a schedule), so that ``hw`` imports nothing
from ``compiler``.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Shape, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .beats import BeatPack, beat_order
from .fifo import StreamFIFO
from .fork import Broadcast
from .head import ClassifierHead

__all__ = ["Accelerator", "BuildContext", "output_layout", "tensor_shape"]


def output_layout(n_classes, logit_width):
    return data.StructLayout({
        "logits": data.ArrayLayout(signed(logit_width), n_classes),
        "cls": unsigned(max(1, (n_classes - 1).bit_length())),
    })


def tensor_shape(node, beats=1):
    """Stream payload shape of one pixel of ``node``'s tensor, or of one of its ``beats``
    beats (``node.channels // beats`` lanes, :mod:`groupnet_hw.compiler.beats`)."""
    lanes = node.channels // beats
    if node.kind == "bits":
        return unsigned(lanes)
    if node.kind == "uint":
        if node.channels == 1 and node.op == "input":
            return unsigned(node.bits)  # grey pixels: the host link's byte stream
        return data.ArrayLayout(unsigned(node.bits), lanes)
    return data.ArrayLayout(signed(node.bit_width), lanes)


class BuildContext:
    """What an op's ``build`` (:mod:`groupnet_hw.compiler.ops`) may use: the module under
    construction, the graph, and the widths units chose."""

    def __init__(self, m, sched, input_stream, head):
        self.m = m
        self.graph = sched.graph
        #: node name -> its Unit (folding, beats)
        self.units = sched.units
        self.input_stream = input_stream
        self.head = head
        #: node name -> accumulator width its MVU chose (wider than range analysis)
        self.acc_width = {}
        #: submodule name -> name of the node whose unit it is
        self.owners = {}

    def add(self, node, unit, suffix=""):
        name = node.name.replace(".", "_") + suffix
        self.m.submodules[name] = unit
        self.owners[name] = node.name
        return unit

    def parent(self, node):
        return self.graph.producer(node.inputs[0])

    def width_of(self, node):
        """Lane width of ``node``'s stream: its MVU's accumulator, else its range."""
        return self.acc_width.get(node.name, node.bit_width)

    def tensor_shape(self, node):
        """Payload shape of ``node``'s output stream: a pixel, or a beat where the
        schedule sends it as beats (``Unit.beats``)."""
        return tensor_shape(node, self.units[node.name].beats)

    def pixel_shape(self, node):
        """Payload shape of one whole pixel of ``node``'s tensor."""
        return tensor_shape(node)

    def packed(self, src, consumer, sink):
        """The stream ``src``'s output connects to for ``consumer``'s input ``sink``,
        which takes whole pixels: ``sink`` itself, or where the schedule sends ``src``'s
        tensor as beats (``Unit.beats``), a :class:`~.beats.BeatPack` in front of it
        collecting them (one register of latency; counted as ``consumer``'s)."""
        unit = self.units[src.name]
        if unit.beats == 1:
            return sink
        pack = self.add(consumer, BeatPack(self.lane_width(src), src.channels, unit.beats,
                                           beat_order(src.channels, unit.beat_groups,
                                                      unit.beats)), "_pack")
        self.connect_raw(pack.o, sink)
        return pack.i

    def connect_raw(self, src, dst):
        """Hand-shake and a raw bit copy (same lane order on both sides)."""
        self.m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready),
                          _bits(dst.payload).eq(_bits(src.payload))]

    def stream(self, shape, name):
        """A fresh stream interface, for an op whose unit is only wiring (a lane
        permutation, a packing of several streams into one)."""
        return stream.Signature(shape).create(path=(name,))

    def connect_lanes(self, src, dst, order, lane_width):
        """Hand-shake and a lane map: lane ``i`` of ``dst``'s payload is lane
        ``order[i]`` of ``src``'s (``None``: zero); every lane is ``lane_width`` bits."""
        bits = _bits(src.payload)
        lanes = [Const(0, lane_width) if j is None else bits[j * lane_width:(j + 1) * lane_width]
                 for j in order]
        self.m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready),
                          _bits(dst.payload).eq(Cat(*lanes))]

    def unpack(self, src, dsts, lanes):
        """Feed ``dsts`` (inputs of one join unit, which takes them all in the same
        cycle: one shared ``ready``) from one stream whose payload holds their
        ``lanes`` lanes each, one after the other."""
        self.m.d.comb += src.ready.eq(dsts[0].ready)
        for k, dst in enumerate(dsts):
            self.m.d.comb += dst.valid.eq(src.valid)
            self.m.d.comb += [dst.payload[c].eq(src.payload[k * lanes + c]) for c in range(lanes)]

    def pack(self, srcs, dst, lanes):
        """Drive ``dst`` from ``srcs`` (outputs of one unit that become valid in the
        same cycle and, taken together, stay in step), their ``lanes`` lanes each one
        after the other."""
        self.m.d.comb += dst.valid.eq(srcs[0].valid)
        for k, src in enumerate(srcs):
            self.m.d.comb += src.ready.eq(dst.ready)
            self.m.d.comb += [dst.payload[k * lanes + c].eq(src.payload[c]) for c in range(lanes)]

    def lane_width(self, node):
        """Bits of one channel in ``node``'s stream payload."""
        return Shape.cast(tensor_shape(node)).width // node.channels

    def drain(self, stream_):
        """Accept and discard every beat of an output nothing reads."""
        self.m.d.comb += stream_.ready.eq(1)


def _connect(m, src, dst):
    """Hand-shake ``src`` -> ``dst``; element-wise payload copy sign-extends
    fixed-point lanes when the two sides chose different widths."""
    m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready)]
    s_shape, d_shape = src.payload.shape(), dst.payload.shape()
    if (isinstance(s_shape, data.ArrayLayout) and isinstance(d_shape, data.ArrayLayout)
            and s_shape.length == d_shape.length and s_shape != d_shape):
        m.d.comb += [dst.payload[c].eq(src.payload[c]) for c in range(s_shape.length)]
    else:
        m.d.comb += _bits(dst.payload).eq(_bits(src.payload))


def _bits(payload):
    return payload.as_value() if isinstance(payload, data.View) else payload


class Accelerator(wiring.Component):
    """Streaming Group-Net accelerator built from a schedule.

    Parameters
    ----------
    sched : Schedule
        Folded, FIFO-sized integer graph (:func:`groupnet_hw.compiler.schedule.schedule`).
        What is read of it:

        - ``graph``: the nodes in topological order, with ``input``, ``output``,
          ``producer(ref)`` and per node ``name``, ``op``, ``inputs`` (references ``"node"`` or
          ``"node:k"``) and the tensor's ``channels``, ``height``, ``width``, ``kind``,
          ``bits``, ``bit_width``; the output node's ``attrs`` ``weight``, ``bias`` and
          ``frac`` (the classifier head);
        - ``units``: node name -> its unit's output layout (``beats``, ``beat_groups``)
          and the head's ``pe``;
        - ``fifo_choices(consumer, slot)``: the :class:`~.fifo.FIFOChoices` of the FIFO
          in front of that input, or ``None`` where it has none;
        - ``build_node(ctx, node)``: builds the node's unit(s) into the
          :class:`BuildContext` ``ctx`` and returns ``(sinks, sources)``, its input
          streams (one per input) and output streams (one per output).

    Attributes
    ----------
    i : In(stream.Signature(tensor_shape(input node)))
        Image pixels, raster order, ``n_pixels`` per frame, back to back: ``unsigned(8)``
        for grey images, ``data.ArrayLayout(unsigned(8), C)`` (channel c in bits
        8c..8c+7) for RGB.
    o : Out(stream.Signature(output_layout(n_classes, logit_width)))
        One beat per frame: integer logits (scale ``2**-logit_frac``) and the class.
    n_pixels, n_classes, logit_width, logit_frac : int

    Throughput
    ----------
    ``sched.frame_cycles`` cycles per frame (the slowest unit's), at one input pixel
    per cycle at most.
    """

    def __init__(self, sched):
        g = sched.graph
        self.sched = sched
        inp, head = g[g.input], g[g.output]
        self.n_pixels = inp.height * inp.width
        self.in_channels = inp.channels
        self.n_classes = head.channels
        self.logit_frac = head.attrs["frac"]
        pooled = g.producer(head.inputs[0])
        self._head_in_width = pooled.bit_width
        # the head's own bound (from its input width) sets the port width
        self.logit_width = ClassifierHead.logit_width_for(
            pooled.bit_width, pooled.height * pooled.width, head.attrs["weight"].tolist(),
            head.attrs["bias"].tolist())
        super().__init__({
            "i": In(stream.Signature(tensor_shape(inp))),
            "o": Out(stream.Signature(output_layout(self.n_classes, self.logit_width))),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.sched.graph
        ctx = BuildContext(m, self.sched, self.i, self._classifier_head())
        #: submodule name -> ``(node name, role)``, role "unit", "fork" (of the node's
        #: output) or "fifo" (in front of the node): what per-module synthesis
        #: counts are attributed to when the resource model is calibrated.
        self.module_owners = owners = {}
        sinks, sources = {}, {}
        for node in g:
            sinks[node.name], sources[node.name] = self.sched.build_node(ctx, node)

        # fan-out: one Broadcast per tensor read by several inputs
        readers = {}
        for node in g:
            for slot, ref in enumerate(node.inputs):
                readers.setdefault(ref, []).append((node.name, slot))
        for ref, users in readers.items():
            src_name, _, k = ref.partition(":")
            shape = tensor_shape(g[src_name], self.sched.units[src_name].beats)
            producer = sources[src_name][int(k) if k else 0]
            if len(users) == 1:
                outs = [producer]
            else:
                fork = Broadcast(shape, len(users))
                fork_name = f"fork_{ref.replace('.', '_').replace(':', '_')}"
                m.submodules[fork_name] = fork
                owners[fork_name] = (src_name, "fork", int(k) if k else 0)
                _connect(m, producer, fork.i)
                outs = list(fork.o)
            for (user, slot), out in zip(users, outs):
                choices = self.sched.fifo_choices(user, slot)
                if choices is not None:
                    fifo = StreamFIFO(shape, choices)
                    fifo_name = f"fifo_{user}_{slot}".replace(".", "_")
                    m.submodules[fifo_name] = fifo
                    owners[fifo_name] = (user, "fifo", slot)
                    _connect(m, out, fifo.i)
                    out = fifo.o
                _connect(m, out, sinks[user][slot])
        _connect(m, sources[g.output][0], self.o)
        owners.update({name: (node, "unit", None) for name, node in ctx.owners.items()})
        return m

    def _classifier_head(self):
        """The head unit of the output node, whose output is this accelerator's ``o``."""
        g = self.sched.graph
        head = g[g.output]
        pooled = g.producer(head.inputs[0])
        unit = ClassifierHead(pooled.channels, pooled.bit_width, pooled.height, pooled.width,
                              head.attrs["weight"].tolist(), head.attrs["bias"].tolist(),
                              lanes=self.sched.units[head.name].pe)
        assert unit.logit_width == self.logit_width     # one rule: logit_width_for
        return unit
