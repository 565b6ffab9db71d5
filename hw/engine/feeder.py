"""The intended engine's epilogue feeder: the base arrays' sums, one output fold at a time,
into epilogue beats with their channels' constants (docs/architecture.md section 15).

An output fold is ``pe`` channels of every array's job; the epilogue has ``lanes``
lanes (``pe`` or a power-of-two fraction of it), so the fold becomes ``arrays * pe /
lanes`` beats, job after job and each job's channels part after part, each with its
channels' constants: one word of the constant buffer at ``(k * out_folds + nf) * parts
+ p`` (``parts = pe / lanes``), kept there for the whole descriptor. Side elements (the
residual add's other operand) arrive as a stream in the same order. Fewer lanes than
``pe`` keep up with every layer whose output folds take ``arrays * parts`` cycles or
more (a 3x3 layer of 64 channels on 64 SIMD lanes takes 9 folds an output fold).
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith import positive_int

from .epilogue import epilogue_layout, epilogue_settings

__all__ = ["EpilogueFeeder", "constants_layout"]


def constants_layout(pe, const_width, value_width, max_levels):
    """A constant buffer word: ``pe`` channels' post-op ``a`` and ``b``, thresholds
    ``t`` and invert bits (the feeder's words hold its ``lanes`` channels)."""
    return data.StructLayout({
        "a": data.ArrayLayout(signed(const_width), pe),
        "b": data.ArrayLayout(signed(const_width), pe),
        "t": data.ArrayLayout(data.ArrayLayout(signed(value_width), max(1, max_levels)), pe),
        "invert": unsigned(pe),
    })


class EpilogueFeeder(wiring.Component):
    """Turns each output fold's ``arrays x pe`` sums into ``arrays * pe / lanes`` epilogue
    beats.

    Parameters
    ----------
    arrays, pe : int
        The base arrays' shape.
    lanes : int, optional
        The epilogue's lanes: ``pe`` (default) or ``pe`` divided by a power of two.
    sum_width : int
        The arrays' sums (``BaseArrays.sum_width``).
    const_width, value_width, max_levels : int
        The epilogue's (:class:`~.epilogue.EpilogueLanes`).
    max_out_folds : int
        The most output folds a job has: the constant buffer holds
        ``arrays * max_out_folds`` words.

    Ports
    -----
    constants : ``In(stream.Signature(StructLayout({"addr", "c": constants_layout(lanes, ...)})))``
        Constant words written at ``(k * out_folds + nf) * pe / lanes + p``, always
        accepted; write them only while ``idle``.
    settings : ``In(epilogue_settings(max_levels))``
        The descriptor's stages, held while not ``idle``.
    out_folds : ``In(range(1, max_out_folds + 1))``
    sums : ``In(stream.Signature(ArrayLayout(signed(sum_width), arrays * pe)))``
        From :class:`~.arrays.BaseArrays`.
    side : ``In(stream.Signature(ArrayLayout(signed(value_width), lanes)))``
        A beat's side elements, in the beats' order; read only when ``settings.add``.
    o : ``Out(stream.Signature(epilogue_layout(lanes, sum_width, ...)))``
        To :class:`~.epilogue.EpilogueLanes`.
    idle : ``Out(1)``

    Attributes
    ----------
    latency : int
        Cycles from a fold's sums being taken to its first beat on ``o``: the held
        fold, the constants' read, the FIFO's write and output registers.

    Latency
    -------
    :attr:`latency`.

    Throughput
    ----------
    A beat a cycle: an output fold every ``arrays * pe / lanes`` cycles. The sums wait
    in a one-fold register, so the arrays stall only when their folds come faster.
    """

    latency = 4

    def __init__(self, *, arrays, pe, sum_width, lanes=None, const_width=32, value_width=32,
                 max_levels=1, max_out_folds=32):
        lanes = pe if lanes is None else lanes
        for name, value in (("arrays", arrays), ("pe", pe), ("sum_width", sum_width),
                            ("lanes", lanes), ("const_width", const_width),
                            ("value_width", value_width), ("max_levels", max_levels),
                            ("max_out_folds", max_out_folds)):
            positive_int(f"EpilogueFeeder: {name}", value)
        parts = pe // lanes
        if pe % lanes or parts & (parts - 1):
            raise ValueError(f"EpilogueFeeder: lanes ({lanes}) must be pe ({pe}) divided by "
                             "a power of two")
        self.arrays, self.pe, self.lanes, self.parts = arrays, pe, lanes, parts
        self.max_out_folds = max_out_folds
        self.const_layout = constants_layout(lanes, const_width, value_width, max_levels)
        self.beat_layout = epilogue_layout(lanes, sum_width, const_width, value_width,
                                           max_levels)
        super().__init__({
            "constants": In(stream.Signature(data.StructLayout({
                "addr": range(arrays * max_out_folds * parts), "c": self.const_layout}))),
            "settings": In(epilogue_settings(max_levels)),
            "out_folds": In(range(1, max_out_folds + 1)),
            "sums": In(stream.Signature(data.ArrayLayout(signed(sum_width), arrays * pe))),
            "side": In(stream.Signature(data.ArrayLayout(signed(value_width), lanes))),
            "o": Out(stream.Signature(self.beat_layout)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        arrays, lanes, parts = self.arrays, self.lanes, self.parts
        m.submodules.buffer = buffer = Memory(shape=self.const_layout,
                                              depth=arrays * self.max_out_folds * parts,
                                              init=[])
        wp = buffer.write_port()
        m.d.comb += [wp.addr.eq(self.constants.payload.addr),
                     wp.data.eq(self.constants.payload.c), wp.en.eq(self.constants.valid),
                     self.constants.ready.eq(1)]
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=len(self.o.payload.as_value()),
                                                    depth=4)

        # the fold being split: its sums held, the job k, its part p and fold nf counted
        held = Signal(self.sums.payload.shape())
        full = Signal()
        k = Signal(range(arrays))
        p = Signal(range(parts))
        nf = Signal(range(self.max_out_folds))
        base = Signal(range(arrays * self.max_out_folds))     # k * out_folds
        m.d.comb += self.sums.ready.eq(~full)
        with m.If(self.sums.valid & ~full):
            m.d.sync += [held.eq(self.sums.payload), full.eq(1)]

        # a beat goes out when the side element is there (if the stage reads one) and
        # the FIFO has room for it and the read in flight
        in_flight = Signal()
        needs_side = self.settings.add
        room = fifo.level + in_flight < 4
        go = full & room & (self.side.valid | ~needs_side)
        m.d.comb += self.side.ready.eq(full & room & needs_side)
        rp = buffer.read_port()
        # parts is a power of two: the word's address is (base + nf) shifted, p below
        shift = (parts - 1).bit_length()
        m.d.comb += [rp.addr.eq(((base + nf) << shift) | p), rp.en.eq(go)]
        with m.If(go):
            with m.If(p != parts - 1):
                m.d.sync += p.eq(p + 1)
            with m.Elif(k == arrays - 1):
                m.d.sync += [p.eq(0), k.eq(0), base.eq(0), full.eq(0)]
                with m.If(nf == self.out_folds - 1):
                    m.d.sync += nf.eq(0)
                with m.Else():
                    m.d.sync += nf.eq(nf + 1)
            with m.Else():
                m.d.sync += [p.eq(0), k.eq(k + 1), base.eq(base + self.out_folds)]

        # a cycle later: the constants read, the beat assembled (job k's part p: the
        # held sums' (k * parts + p)-th run of lanes)
        x_r = Signal(data.ArrayLayout(self.sums.payload.shape().elem_shape, lanes))
        side_r = Signal(self.side.payload.shape())
        m.d.sync += in_flight.eq(go)
        width = len(x_r.as_value())
        with m.If(go):
            with m.Switch(k * parts + p):
                for j in range(arrays * parts):
                    with m.Case(j):
                        m.d.sync += x_r.as_value().eq(
                            held.as_value()[j * width:(j + 1) * width])
            m.d.sync += side_r.eq(self.side.payload)
        beat = Signal(self.beat_layout)
        m.d.comb += [beat.x.eq(x_r), beat.a.eq(rp.data.a), beat.b.eq(rp.data.b),
                     beat.t.eq(rp.data.t), beat.invert.eq(rp.data.invert),
                     beat.side.eq(side_r), beat.settings.eq(self.settings),
                     fifo.w_data.eq(beat.as_value()), fifo.w_en.eq(in_flight),
                     self.o.payload.as_value().eq(fifo.r_data), self.o.valid.eq(fifo.r_rdy),
                     fifo.r_en.eq(self.o.ready),
                     self.idle.eq(~full & ~in_flight & (fifo.level == 0))]
        return m
