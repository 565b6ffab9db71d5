"""The intended engine's fold issuer: a pixel's window words and weight chunks in, the
base arrays' folds out (docs/architecture.md section 15).

The window of an output pixel is gathered once (``simd``-lane words, every array's word
of a fold side by side) and then read once per PE fold: ``out_folds x in_folds`` folds,
each a window word and that fold's weight word, output-fold-major, as the weights are
packed. Two window buffers let the next pixel's window arrive while this one's folds
are issued, so a gatherer that delivers a window in at most ``out_folds x in_folds``
cycles keeps the arrays busy every cycle. Two weight buffers (halves) do the same for
weight chunks: the next chunk is written while this one's windows are issued, and its
first fold follows this chunk's last without a gap.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith import positive_int

from .arrays import fold_layout

__all__ = ["FoldIssuer"]

class FoldIssuer(wiring.Component):
    """Issues every (output fold, input fold) of each window to the base arrays.

    Weights come in *chunks*: a chunk is the weight words of some PE folds (a
    descriptor's, or one of the output-channel chunks of weight streaming, section 12
    *Tiling*) with its geometry and the number of windows it is issued for. The weight
    buffer has two halves. A chunk's words are written into the *load half* and the
    chunk is committed by a beat on ``chunk``; the halves are loaded and issued in
    turn, so chunk ``n + 1`` is written while chunk ``n`` is issued. A committed chunk
    becomes *active* when the chunk before it has issued every fold of its last window
    (in the cycle after, so the arrays see no gap between the two when the later one
    was committed by then). Windows are taken in order: the active chunk's ``windows``
    windows, then the next chunk's.

    Parameters
    ----------
    arrays, pe, simd, planes : int
        The base arrays' shape (:class:`~.arrays.BaseArrays`).
    max_in_folds : int
        The most window words a pixel has (each window buffer's depth).
    max_weight_words : int
        Each weight half's depth: the most ``out_folds x in_folds`` words a chunk has.
        The weight buffer holds two halves, so it takes twice this many words of
        ``arrays x pe x simd`` bits (block RAM twice a single buffer's).
    max_windows : int
        The most windows a chunk is issued for (an output map's pixels).

    Ports
    -----
    window : ``In(stream.Signature(StructLayout({"x": ArrayLayout(simd*planes, arrays),
    "mask": simd, "last": 1})))``
        A pixel's window words in order, each with the lanes that hold elements (a
        tap's or the window's tail is 0), ``last`` on its final one; a window has its
        chunk's ``in_folds`` words. Accepted while a window buffer is free.
    weights : ``In(stream.Signature(StructLayout({"addr", "w": ArrayLayout(pe*simd,
    arrays), "en": arrays})))``
        Weight words of the next chunk, written into the load half at ``addr`` (fold
        ``(nf, sf)`` at ``nf * in_folds + sf``), each array's word where its bit of
        ``en`` is set (each base's weights are a DRAM section of their own, loaded one
        base after another). Accepted while ``free``, so a word can never land in a half
        that holds a chunk.
    chunk : ``In(stream.Signature(StructLayout({"out_folds", "in_folds", "windows"[,
    "levels"]})))``
        Commits the words written since the previous commit as a chunk: its PE folds
        a pixel (``ceil(C_out / pe)`` of the chunk's channels), window words a pixel,
        windows (at least 1) and, with ``planes > 1``, whether its windows hold n-bit
        levels (:func:`~.arrays.fold_layout`). Accepted while ``free``; give it after
        the chunk's last weight word (in the same cycle at the earliest).
    free : ``Out(1)``
        A register: the load half holds no chunk, so ``weights`` and ``chunk`` are
        accepted. It falls when a chunk is committed while the other half holds one,
        and rises in the cycle after that one's last fold is read.
    idle : ``Out(1)``
        No chunk is committed, no window is held and no fold is on its way.
    o : ``Out(stream.Signature(fold_layout(arrays, pe, simd, planes)))``
        To :class:`~.arrays.BaseArrays`.

    Attributes
    ----------
    latency : int
        2: cycles from the acceptance of a window's last word, or of a chunk's beat
        when its first window is already held and the chunk before is done, to its
        first fold on ``o`` (the flag, the reads).

    Latency
    -------
    :attr:`latency`.

    Throughput
    ----------
    One fold a cycle while ``o`` is ready, also from one chunk to the next when the
    next was committed no later than the cycle the last fold of the one before is read;
    ``o`` is the memories' read data itself, held by their read enables while the
    arrays stall: no fold is buffered (a FIFO of four folds of every array's weight
    words took 5,500 ALUTs and 22,000 flip-flops at the intended size), so ``o.ready``
    must be a register (:class:`~.arrays.BaseArrays`'s is): it reaches the read
    enables and the counters, no read address. ``weights`` and ``chunk`` take a beat a
    cycle while ``free``.
    """

    latency = 2

    def __init__(self, *, arrays, pe, simd, planes=1, max_in_folds=96, max_weight_words=3072,
                 max_windows=4096):
        for name, value in (("arrays", arrays), ("pe", pe), ("simd", simd),
                            ("planes", planes), ("max_in_folds", max_in_folds),
                            ("max_weight_words", max_weight_words),
                            ("max_windows", max_windows)):
            positive_int(f"FoldIssuer: {name}", value)
        self.arrays, self.pe, self.simd, self.planes = arrays, pe, simd, planes
        self.max_in_folds, self.max_weight_words = max_in_folds, max_weight_words
        self.max_windows = max_windows
        self.fold_layout = fold_layout(arrays, pe, simd, planes)
        geometry = {"out_folds": range(1, max_weight_words + 1),
                    "in_folds": range(1, max_in_folds + 1),
                    "windows": range(1, max_windows + 1)}
        if planes > 1:
            geometry["levels"] = 1
        self.chunk_layout = data.StructLayout(geometry)
        super().__init__({
            "window": In(stream.Signature(data.StructLayout({
                "x": data.ArrayLayout(unsigned(simd * planes), arrays),
                "mask": unsigned(simd), "last": 1}))),
            "weights": In(stream.Signature(data.StructLayout({
                "addr": range(max_weight_words),
                "w": data.ArrayLayout(unsigned(pe * simd), arrays),
                "en": unsigned(arrays)}))),
            "chunk": In(stream.Signature(self.chunk_layout)),
            "free": Out(1, init=1),
            "idle": Out(1),
            "o": Out(stream.Signature(self.fold_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        depth, simd, half = self.max_in_folds, self.simd, self.max_weight_words
        x_width = self.arrays * simd * self.planes
        # a window word and its mask
        m.submodules.windows = windows = Memory(shape=unsigned(x_width + simd),
                                                depth=2 * depth, init=[])
        # half h's chunk at words h * half ..; a memory an array, since each base's
        # words are written apart (one memory with a write enable an array's granule
        # was not mapped to block RAM by Yosys for Cyclone V at 1,024-bit granules)
        weight_buffers = []
        for k in range(self.arrays):
            mem = Memory(shape=unsigned(self.pe * simd), depth=2 * half, init=[])
            m.submodules[f"weight_buffer{k}"] = mem
            weight_buffers.append(mem)

        # chunks: `full[h]` while half h holds a committed chunk; `l_half` is written
        # next, `a_half` issued next. Both go 0, 1, 0, ... so chunks issue in order.
        full, l_half, a_half = Signal(2), Signal(), Signal()
        free = self.free                 # a register: ~full[l_half], a cycle ahead
        commit = self.chunk.valid & free
        m.d.comb += [self.weights.ready.eq(free), self.chunk.ready.eq(free)]
        for k, mem in enumerate(weight_buffers):
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(Mux(l_half, half, 0) + self.weights.payload.addr),
                         wp.data.eq(self.weights.payload.w[k]),
                         wp.en.eq(self.weights.valid & free & self.weights.payload.en[k])]
        # each half's geometry, kept from its commit; `left` counts its windows down
        # and `final` (a register, not a comparison at the issue) marks the last one
        out_last = [Signal(range(half), name=f"out_last{h}") for h in range(2)]
        in_folds_h = [Signal(range(depth + 1), name=f"in_folds{h}") for h in range(2)]
        in_last = [Signal(range(depth), name=f"in_last{h}") for h in range(2)]
        left = [Signal(range(self.max_windows + 1), name=f"left{h}") for h in range(2)]
        final = [Signal(name=f"final{h}") for h in range(2)]
        levels = [Signal(name=f"levels{h}") for h in range(2)]
        given = self.chunk.payload
        set_full = Signal(2)
        with m.If(commit):
            m.d.comb += set_full.eq(Mux(l_half, 0b10, 0b01))
            m.d.sync += l_half.eq(~l_half)
            for h in range(2):
                with m.If(l_half == h):
                    m.d.sync += [out_last[h].eq(given.out_folds - 1),
                                 in_folds_h[h].eq(given.in_folds),
                                 in_last[h].eq(given.in_folds - 1),
                                 left[h].eq(given.windows), final[h].eq(given.windows == 1)]
                    if self.planes > 1:
                        m.d.sync += levels[h].eq(given.levels)

        # windows in: two buffers; `held[h]` while buffer h holds a whole window
        held = Signal(2)
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
                m.d.sync += [w_half.eq(~w_half), w_addr.eq(0)]
            with m.Else():
                m.d.sync += w_addr.eq(w_addr + 1)

        # folds out: (nf, sf) over the held window with the active chunk; the read data
        # is `o`'s payload and moves on with `o` (`advance`: `o` taken or empty)
        r_half = Signal()
        nf = Signal(range(half))
        sf = Signal(range(depth))
        w_base = Signal(range(2 * half))        # the half's base and nf * in_folds
        o_valid = Signal()
        advance = self.o.ready | ~o_valid
        issue = held.bit_select(r_half, 1) & full.bit_select(a_half, 1) & advance
        last_sf = sf == Mux(a_half, in_last[1], in_last[0])
        last_fold = last_sf & (nf == Mux(a_half, out_last[1], out_last[0]))
        a_final = Mux(a_half, final[1], final[0])
        clear_held, clear_full = Signal(2), Signal(2)
        win_rp = windows.read_port()
        wt_rps = [mem.read_port() for mem in weight_buffers]
        m.d.comb += [win_rp.addr.eq(Mux(r_half, depth, 0) + sf), win_rp.en.eq(advance)]
        for rp in wt_rps:
            m.d.comb += [rp.addr.eq(w_base + sf), rp.en.eq(advance)]
        with m.If(issue):
            with m.If(~last_sf):
                m.d.sync += sf.eq(sf + 1)
            with m.Elif(~last_fold):
                m.d.sync += [sf.eq(0), nf.eq(nf + 1),
                             w_base.eq(w_base + Mux(a_half, in_folds_h[1], in_folds_h[0]))]
            with m.Else():
                m.d.sync += [sf.eq(0), nf.eq(0), r_half.eq(~r_half)]
                m.d.comb += clear_held.eq(Mux(r_half, 0b10, 0b01))
                with m.If(a_final):
                    # the chunk's last fold: its half is free, the next one's issues
                    m.d.comb += clear_full.eq(Mux(a_half, 0b10, 0b01))
                    m.d.sync += [a_half.eq(~a_half), w_base.eq(Mux(a_half, 0, half))]
                with m.Else():
                    m.d.sync += w_base.eq(Mux(a_half, half, 0))
                    for h in range(2):
                        with m.If(a_half == h):
                            m.d.sync += [left[h].eq(left[h] - 1),
                                         final[h].eq(left[h] == 2)]
        m.d.sync += held.eq((held | set_held) & ~clear_held)
        full_next = (full | set_full) & ~clear_full
        m.d.sync += [full.eq(full_next),
                     free.eq(~full_next.bit_select(l_half ^ commit, 1))]

        # the read data a cycle later, with the flags the issue registered
        first_r, last_r, levels_r = Signal(), Signal(), Signal()
        with m.If(advance):
            m.d.sync += [o_valid.eq(issue), first_r.eq(sf == 0), last_r.eq(last_sf),
                         levels_r.eq(Mux(a_half, levels[1], levels[0]))]
        beat = Signal(self.fold_layout)
        m.d.comb += [
            beat.x.as_value().eq(win_rp.data[:x_width]), beat.w.as_value().eq(Cat(rp.data for rp in wt_rps)),
            beat.mask.eq(win_rp.data[x_width:]),
            beat.first.eq(first_r), beat.last.eq(last_r),
            self.o.payload.as_value().eq(beat.as_value()), self.o.valid.eq(o_valid),
            self.idle.eq(~full.any() & ~held.any() & ~o_valid),
        ]
        if self.planes > 1:
            m.d.comb += beat.levels.eq(levels_r)
        return m
