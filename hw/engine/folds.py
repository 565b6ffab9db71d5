"""The intended engine's fold issuer: a pixel's window words and a weight chunk in, the
base arrays' folds out (docs/architecture.md section 15).

The window of an output pixel is gathered once (``simd``-lane words, every array's word
of a fold side by side) and then read once per PE fold: ``out_folds x in_folds`` folds,
each a window word and that fold's weight word, output-fold-major, as the weights are
packed. Two window buffers let the next pixel's window arrive while this one's folds
are issued, so a gatherer that delivers a window in at most ``out_folds x in_folds``
cycles keeps the arrays busy every cycle.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith import positive_int

from .arrays import fold_layout

__all__ = ["FoldIssuer"]

#: Folds the issuer may have read ahead of the arrays: the output FIFO's depth.
AHEAD = 4


class FoldIssuer(wiring.Component):
    """Issues every (output fold, input fold) of each window to the base arrays.

    Parameters
    ----------
    arrays, pe, simd, planes : int
        The base arrays' shape (:class:`~.arrays.BaseArrays`).
    max_in_folds : int
        The most window words a pixel has (each window buffer's depth).
    max_weight_words : int
        The weight buffer's depth: ``out_folds x in_folds`` words of a chunk.

    Ports
    -----
    window : ``In(stream.Signature(StructLayout({"x": ArrayLayout(simd*planes, arrays),
    "mask": simd, "last": 1})))``
        A pixel's window words in order, each with the lanes that hold elements (a
        tap's or the window's tail is 0), ``last`` on its final one; their number is
        the pixel's ``in_folds``. Accepted while a window buffer is free.
    weights : ``In(stream.Signature(StructLayout({"addr", "w": ArrayLayout(pe*simd,
    arrays)})))``
        Weight words written at ``addr`` (fold ``(nf, sf)`` at ``nf * in_folds + sf``),
        always accepted; write them only while ``idle``.
    out_folds : ``In(range(1, ...))``
        PE folds a pixel (``ceil(C_out / pe)``).
    levels : ``In(1)``, with ``planes > 1``
        The windows hold n-bit levels (:func:`~.arrays.fold_layout`).
    idle : ``Out(1)``
        No window is held and no fold is on its way.
    o : ``Out(stream.Signature(fold_layout(arrays, pe, simd, planes)))``
        To :class:`~.arrays.BaseArrays`.

    Attributes
    ----------
    latency : int
        4: cycles from the acceptance of a window's last word to its first fold on
        ``o`` (the buffer's flag, the reads, the FIFO's write and output registers).

    Latency
    -------
    :attr:`latency`.

    Throughput
    ----------
    One fold a cycle while ``o`` is ready; ``o.ready`` reaches no read address: reads
    run at most :data:`AHEAD` folds ahead, counted from registers.
    """

    latency = 4

    def __init__(self, *, arrays, pe, simd, planes=1, max_in_folds=96, max_weight_words=3072):
        for name, value in (("arrays", arrays), ("pe", pe), ("simd", simd),
                            ("planes", planes), ("max_in_folds", max_in_folds),
                            ("max_weight_words", max_weight_words)):
            positive_int(f"FoldIssuer: {name}", value)
        self.arrays, self.pe, self.simd, self.planes = arrays, pe, simd, planes
        self.max_in_folds, self.max_weight_words = max_in_folds, max_weight_words
        self.fold_layout = fold_layout(arrays, pe, simd, planes)
        ports = {
            "window": In(stream.Signature(data.StructLayout({
                "x": data.ArrayLayout(unsigned(simd * planes), arrays),
                "mask": unsigned(simd), "last": 1}))),
            "weights": In(stream.Signature(data.StructLayout({
                "addr": range(max_weight_words),
                "w": data.ArrayLayout(unsigned(pe * simd), arrays)}))),
            "out_folds": In(range(1, max_weight_words + 1)),
            "idle": Out(1),
            "o": Out(stream.Signature(self.fold_layout)),
        }
        if planes > 1:
            ports["levels"] = In(1)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        depth, simd = self.max_in_folds, self.simd
        x_width = self.arrays * simd * self.planes
        # a window word and its mask
        m.submodules.windows = windows = Memory(shape=unsigned(x_width + simd),
                                                depth=2 * depth, init=[])
        m.submodules.weight_buffer = weight_buffer = Memory(
            shape=unsigned(self.arrays * self.pe * simd), depth=self.max_weight_words, init=[])
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=len(self.o.payload.as_value()),
                                                    depth=AHEAD)

        # weights: a write port as a stream
        wp = weight_buffer.write_port()
        m.d.comb += [wp.addr.eq(self.weights.payload.addr), wp.data.eq(self.weights.payload.w),
                     wp.en.eq(self.weights.valid), self.weights.ready.eq(1)]

        # windows in: two buffers; `held[h]` while buffer h holds a whole window
        held = Signal(2)
        words = [Signal(range(depth + 1), name=f"words{h}") for h in range(2)]
        w_half, w_addr = Signal(), Signal(range(depth))
        win_wp = windows.write_port()
        take = self.window.valid & self.window.ready
        m.d.comb += [self.window.ready.eq(~held.bit_select(w_half, 1)),
                     win_wp.addr.eq(Mux(w_half, depth, 0) + w_addr),
                     win_wp.data.eq(Cat(self.window.payload.x, self.window.payload.mask)),
                     win_wp.en.eq(take)]
        set_held = Signal(2)
        with m.If(take):
            with m.If(self.window.payload.last):
                m.d.comb += set_held.eq(Mux(w_half, 0b10, 0b01))
                m.d.sync += [w_half.eq(~w_half), w_addr.eq(0),
                             words[0].eq(Mux(w_half, words[0], w_addr + 1)),
                             words[1].eq(Mux(w_half, w_addr + 1, words[1]))]
            with m.Else():
                m.d.sync += w_addr.eq(w_addr + 1)

        # folds out: (nf, sf) over the held window, reads at most AHEAD folds ahead
        r_half = Signal()
        nf = Signal.like(self.out_folds)
        sf = Signal(range(depth))
        w_base = Signal(range(self.max_weight_words))
        in_folds = Mux(r_half, words[1], words[0])
        in_flight = Signal()
        room = fifo.level + in_flight < AHEAD
        issue = held.bit_select(r_half, 1) & room
        last_sf = sf == in_folds - 1
        last_fold = last_sf & (nf == self.out_folds - 1)
        clear_held = Signal(2)
        win_rp = windows.read_port()
        wt_rp = weight_buffer.read_port()
        m.d.comb += [win_rp.addr.eq(Mux(r_half, depth, 0) + sf), win_rp.en.eq(issue),
                     wt_rp.addr.eq(w_base + sf), wt_rp.en.eq(issue)]
        with m.If(issue):
            with m.If(~last_sf):
                m.d.sync += sf.eq(sf + 1)
            with m.Elif(~last_fold):
                m.d.sync += [sf.eq(0), nf.eq(nf + 1), w_base.eq(w_base + in_folds)]
            with m.Else():
                m.d.sync += [sf.eq(0), nf.eq(0), w_base.eq(0), r_half.eq(~r_half)]
                m.d.comb += clear_held.eq(Mux(r_half, 0b10, 0b01))
        m.d.sync += held.eq((held | set_held) & ~clear_held)

        # the read data a cycle later, with the flags the issue registered
        first_r, last_r = Signal(), Signal()
        m.d.sync += [in_flight.eq(issue), first_r.eq(sf == 0), last_r.eq(last_sf)]
        beat = Signal(self.fold_layout)
        m.d.comb += [
            beat.x.as_value().eq(win_rp.data[:x_width]), beat.w.as_value().eq(wt_rp.data),
            beat.mask.eq(win_rp.data[x_width:]),
            beat.first.eq(first_r), beat.last.eq(last_r),
            fifo.w_data.eq(beat.as_value()), fifo.w_en.eq(in_flight),
            self.o.payload.as_value().eq(fifo.r_data), self.o.valid.eq(fifo.r_rdy),
            fifo.r_en.eq(self.o.ready),
            self.idle.eq(~held.any() & ~in_flight & (fifo.level == 0)),
        ]
        if self.planes > 1:
            m.d.comb += beat.levels.eq(self.levels)
        return m
