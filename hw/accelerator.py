"""The accelerator: the dataflow graph of a :class:`~groupnet_hw.compiler.schedule.Schedule`
assembled from stream units.

Each graph node becomes one unit (a binary or integer convolution becomes a
sliding window feeding a matrix-vector unit); a tensor read by several nodes
goes through a :class:`~.fork.Broadcast`; the schedule's FIFOs sit on the fork
branches that rejoin later (residual skips, base outputs before the mixer), so
no back-pressure pattern can deadlock the pipeline.
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Module, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..compiler.execute import flat_weight
from ..compiler.graph import Graph
from .elementwise import PostOp, ResidualAdd, SignBits, Threshold
from .fifo import StreamFIFO
from .fork import Broadcast
from .head import ClassifierHead
from .mixer import BaseMixer
from .mvu import BinaryMVU, IntegerMVU
from .subsample import Subsample
from .window import SlidingWindow

__all__ = ["Accelerator", "output_layout"]


def output_layout(n_classes, logit_width):
    return data.StructLayout({
        "logits": data.ArrayLayout(signed(logit_width), n_classes),
        "cls": unsigned(max(1, (n_classes - 1).bit_length())),
    })


def _tensor_shape(node):
    if node.kind == "bits":
        return unsigned(node.channels)
    if node.kind == "u8":
        if node.channels != 1:
            raise NotImplementedError("only single-channel (grey) input images are supported")
        return unsigned(8)
    return data.ArrayLayout(signed(node.bit_width), node.channels)


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

    Attributes
    ----------
    i : In(stream.Signature(unsigned(8)))
        Image pixels, raster order, ``n_pixels`` per frame, back to back.
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
        inp, head = g["input"], g["head"]
        self.n_pixels = inp.height * inp.width
        self.n_classes = head.channels
        self.logit_frac = head.attrs["frac"]
        pooled = g[Graph.source(head.inputs[0])]
        self._head_in_width = pooled.bit_width
        # the head's own bound (from its input width) sets the port width
        probe = ClassifierHead(pooled.channels, pooled.bit_width, pooled.height, pooled.width,
                               head.attrs["weight"].tolist(), head.attrs["bias"].tolist())
        self.logit_width = probe.logit_width
        self._head = probe  # used as the head unit in elaborate()
        # Its use is the Accelerator's own elaboration, which warns if it never happens.
        probe._MustUse__silence = True
        super().__init__({
            "i": In(stream.Signature(unsigned(8))),
            "o": Out(stream.Signature(output_layout(self.n_classes, self.logit_width))),
        })

    def _build_unit(self, m, node):
        """Instantiate the unit(s) of one node; returns (input streams, output streams)."""
        g = self.sched.graph
        a = node.attrs
        unit = self.sched.units[node.name]
        ins = [g[Graph.source(r)] for r in node.inputs]
        name = node.name.replace(".", "_")

        def add(sub, suffix=""):
            m.submodules[name + suffix] = sub
            return sub

        if node.op in ("int_conv", "bin_conv"):
            src = ins[0]
            weight = a["weight"] if node.op == "int_conv" else a["bits"]
            k = weight.shape[-1]
            window = add(SlidingWindow(_tensor_shape(src), src.height, src.width, kernel=k,
                                       stride=a["stride"], dilation=a["dilation"],
                                       padding=a["padding"],
                                       pad_value=0 if node.op == "int_conv" else (1 << src.channels) - 1),
                         "_window")
            flat = flat_weight(weight).numpy()
            n_in = flat.shape[1]
            if node.op == "bin_conv":
                mvu = add(BinaryMVU(n_in, node.channels, unit.pe, unit.simd, flat), "_mvu")
            else:
                mvu = add(IntegerMVU(n_in, node.channels, unit.pe, unit.simd, flat.astype(np.int64)),
                          "_mvu")
            # the window's taps are already in the MVU's lane order (tap-major, channel-minor)
            m.d.comb += [mvu.i.valid.eq(window.o.valid), window.o.ready.eq(mvu.i.ready),
                         _bits(mvu.i.payload).eq(_bits(window.o.payload))]
            self._acc_width[node.name] = mvu.acc_width
            return [window.i], [mvu.o]
        if node.op == "sign":
            u = add(SignBits(ins[0].channels, ins[0].bit_width))
        elif node.op == "threshold":
            u = add(Threshold(node.channels, self._acc_width[ins[0].name],
                              a["T"].tolist(), [bool(v) for v in a["invert"].tolist()]))
        elif node.op == "postop":
            acc_w = self._acc_width.get(ins[0].name, ins[0].bit_width)
            u = add(PostOp(node.channels, acc_w, a["A"].tolist(), a["B"].tolist(), a["shift"],
                           a["pre_relu"], a["post_relu"], node.bit_width))
        elif node.op == "subsample":
            u = add(Subsample(_tensor_shape(ins[0]), ins[0].height, ins[0].width, a["stride"]))
        elif node.op == "add":
            u = add(ResidualAdd(node.channels, ins[0].bit_width, ins[1].channels,
                                ins[1].bit_width, node.bit_width))
            return [u.a, u.b], [u.o]
        elif node.op == "mixer":
            gated = a["gates"] is not None
            u = add(BaseMixer(len(ins), node.channels, max(x.bit_width for x in ins),
                              a["lambdas"].tolist(), a["lambda_frac"],
                              gates=a["gates"].tolist() if gated else None,
                              gate_shift=a["gate_frac"], out_width=node.bit_width))
            return list(u.i), (list(u.o) if gated else [u.o])
        elif node.op == "head":
            u = add(self._head)
        else:
            raise NotImplementedError(f"{node.name}: no hardware unit for op {node.op!r}")
        return [u.i], [u.o]

    def elaborate(self, platform):
        m = Module()
        g = self.sched.graph
        self._acc_width = {}
        sinks, sources = {}, {}
        for node in g:
            if node.op == "input":
                sources[node.name] = [None]  # filled by self.i below
                continue
            sinks[node.name], sources[node.name] = self._build_unit(m, node)

        # fan-out: one Broadcast per tensor read by several inputs
        readers = {}
        for node in g:
            for slot, ref in enumerate(node.inputs):
                readers.setdefault(ref, []).append((node.name, slot))
        for ref, users in readers.items():
            src_name, _, k = ref.partition(":")
            src_node = g[src_name]
            shape = _tensor_shape(src_node)
            if src_node.op == "input":
                producer = self.i
            else:
                producer = sources[src_name][int(k) if k else 0]
            if len(users) == 1:
                outs = [producer]
            else:
                fork = Broadcast(shape, len(users))
                m.submodules[f"fork_{ref.replace('.', '_').replace(':', '_')}"] = fork
                _connect(m, producer, fork.i)
                outs = list(fork.o)
            for (user, slot), out in zip(users, outs):
                depth = self.sched.fifos.get(user, {}).get(ref)
                if depth:
                    fifo = StreamFIFO(shape, depth)
                    m.submodules[f"fifo_{user}_{slot}".replace(".", "_")] = fifo
                    _connect(m, out, fifo.i)
                    out = fifo.o
                _connect(m, out, sinks[user][slot])
        _connect(m, sources["head"][0], self.o)
        return m
