"""The intended engine's stem array: the full-precision first convolution's multipliers
(docs/architecture.md section 15).

A Group-Net's stem is an integer convolution of the frame's 8-bit pixels with 8-bit
weights (ResNet's 7 x 7 stride 2 over RGB: 147 products an output channel and pixel).
The program packs its weights in ``stem_pe x stem_simd`` words over the window's flat
order (``compiler/engine/params.py``: output fold ``fo``, then fold ``fs`` of
``stem_simd`` window elements, then the ``stem_pe`` rows), so a fold is one window word
of ``simd`` bytes against ``pe`` rows of ``simd`` weights: ``pe * simd`` products a
cycle, one DSP multiplier each (a Cyclone V DSP block holds three 9 x 9, so the 16 x 9
array of the DE10-Nano's size takes 48 blocks). Like the base arrays it does no
addressing: its feeder offers one fold a beat and says which beats start and end an
output fold, so any kernel, stride and channel count runs on it.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...numerics import signed_width
from ..arith import positive_int, reduce_levels, sum_tree
from ..mvu import TREE_LEVELS_PER_STAGE, tree_stages
from ..skid import skid_outputs

__all__ = ["StemArray", "StemFolds", "StemRowLoader", "stem_fold_layout", "stem_fold_settings"]


def stem_fold_layout(pe, simd, in_bits=8, weight_bits=8):
    """The payload of one fold: ``x``, ``simd`` unsigned window elements of ``in_bits``
    (element ``j`` at bits ``[j*in_bits, (j+1)*in_bits)``, the window's flat order;
    a window's tail and the padding are 0); ``w``, ``pe`` rows of ``simd`` signed
    weights of ``weight_bits`` (row ``p``'s element ``j`` at ``(p*simd + j) *
    weight_bits``, the program's packing; the tail's weights are 0); ``first`` and
    ``last``: the fold starts and ends its output fold's sum."""
    return data.StructLayout({
        "x": unsigned(simd * in_bits),
        "w": unsigned(pe * simd * weight_bits),
        "first": unsigned(1),
        "last": unsigned(1),
    })


class StemArray(wiring.Component):
    """``pe x simd`` multipliers of unsigned window elements by signed weights, one fold
    a cycle, each PE's products summed over the folds from ``first`` to ``last``.

    PE ``p``'s sum is ``sum_j x[j] * w[p][j]`` over every fold of an output fold: the
    IR's ``int_conv`` of the window and the output channel's weights (the executor's
    integers, exactly). The pipeline: each product of the operands as they come (its
    feeder's block RAM read ports) registered by its multiplier (a DSP block's own
    output register); the adder tree
    over a PE's ``simd`` products ``TREE_LEVELS_PER_STAGE`` levels a stage until two
    terms are left (``hw.mvu.tree_stages``, the dataflow MVUs' rule for 100 MHz), which
    the accumulator adds; an output fold's sums go to the output register, whose
    one-beat skid (``hw.skid``) makes ``i.ready`` a register.

    Parameters
    ----------
    pe, simd : int
        Output channels and window elements of a fold (``stem_pe``, ``stem_simd``).
    in_bits : int
        Bits of an (unsigned) window element: 8, the frame's pixels.
    weight_bits : int
        Bits of a (signed) weight: 8 (the program's ``weight_bytes`` 1).
    max_window : int
        The most window elements one output sums (``kernel**2 * C_in``: 147 for
        ResNet's stem); sizes the accumulators. A longer window's sums wrap.

    Ports
    -----
    i : ``In(stream.Signature(stem_fold_layout(pe, simd, in_bits, weight_bits)))``
        One fold a beat.
    o : ``Out(stream.Signature(data.ArrayLayout(signed(w), pe)))``
        An output fold's sums, PE ``p`` at ``p``; ``w`` is :attr:`sum_width`. The base
        arrays' output type for one array, so the epilogue feeder (or a pooling unit)
        takes either.

    Attributes
    ----------
    stages : int
        Register stages from an accepted fold to its last tree stage: the products and
        the tree's further stages.
    latency : int
        Cycles from the acceptance of an output fold's ``last`` beat to its sums on
        ``o`` (valid), with ``o.ready`` held high.

    Latency
    -------
    :attr:`latency`: ``stages + 2`` (the accumulator's result register and the output
    register): 5 at ``simd`` 9 to 16, 4 at 3 and 4, 3 at 1 and 2.

    Throughput
    ----------
    One fold a cycle (``pe * simd`` products), one output fold a cycle. A consumer that
    stalls stops the array one output fold later.
    """

    def __init__(self, *, pe, simd, in_bits=8, weight_bits=8, max_window=147):
        for name, value in (("pe", pe), ("simd", simd), ("in_bits", in_bits),
                            ("weight_bits", weight_bits), ("max_window", max_window)):
            positive_int(f"StemArray: {name}", value)
        self.pe, self.simd = pe, simd
        self.in_bits, self.weight_bits, self.max_window = in_bits, weight_bits, max_window
        top_x = (1 << in_bits) - 1
        self.product_width = signed_width(-top_x << (weight_bits - 1),
                                          top_x * ((1 << (weight_bits - 1)) - 1))
        self.sum_width = signed_width(-max_window * top_x << (weight_bits - 1),
                                      max_window * top_x * ((1 << (weight_bits - 1)) - 1))
        self.stages = tree_stages(simd)
        self.latency = self.stages + 2
        super().__init__({
            "i": In(stream.Signature(stem_fold_layout(pe, simd, in_bits, weight_bits))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(self.sum_width), pe))),
        })

    def elaborate(self, platform):
        m = Module()
        pe, simd, xb, wb = self.pe, self.simd, self.in_bits, self.weight_bits
        adv = Signal()                 # every stage moves on it (the skid's room)
        m.d.comb += self.i.ready.eq(adv)
        # the operands go straight to the multipliers: the feeder's are block RAM read
        # ports, registers already (a register of them cost 1,224 flip-flops at 16 x 9)
        op, op_valid = self.i.payload, self.i.valid

        # The products, each registered by its multiplier: the tree's first stage.
        groups = []
        for p in range(pe):
            row = []
            for j in range(simd):
                x = op.x[j * xb:(j + 1) * xb]
                w = op.w[(p * simd + j) * wb:(p * simd + j + 1) * wb].as_signed()
                r = Signal(signed(self.product_width), name=f"prod{p}_{j}", reset_less=True)
                with m.If(adv):
                    m.d.sync += r.eq(w * x)
                row.append(r)
            groups.append(row)
        valid, first, last = Signal(), Signal(), Signal()
        with m.If(adv):
            m.d.sync += [valid.eq(op_valid), first.eq(op.first), last.eq(op.last)]

        # TREE_LEVELS_PER_STAGE levels a stage until two terms are left.
        for depth in range(1, self.stages):
            regs = []
            for g, terms in enumerate(groups):
                row_regs = []
                for j, t in enumerate(reduce_levels(terms, TREE_LEVELS_PER_STAGE)):
                    r = Signal(Value.cast(t).shape(), name=f"t{depth}_{g}_{j}",
                               reset_less=True)
                    with m.If(adv):
                        m.d.sync += r.eq(t)
                    row_regs.append(r)
                regs.append(row_regs)
            groups = regs
            nv, nf, nl = (Signal(name=f"t{depth}_valid"), Signal(name=f"t{depth}_first"),
                          Signal(name=f"t{depth}_last"))
            with m.If(adv):
                m.d.sync += [nv.eq(valid), nf.eq(first), nl.eq(last)]
            valid, first, last = nv, nf, nl

        # Accumulate: the last stage's terms and the accumulator.
        accs = [Signal(signed(self.sum_width), name=f"acc{p}", reset_less=True)
                for p in range(pe)]
        results = [Signal(signed(self.sum_width), name=f"result{p}", reset_less=True)
                   for p in range(pe)]
        r_valid = Signal()
        with m.If(adv):
            m.d.sync += r_valid.eq(valid & last)
            for acc, res, terms in zip(accs, results, groups):
                total = sum_tree(terms) + Mux(first, 0, acc)
                with m.If(valid):
                    m.d.sync += acc.eq(total)
                with m.If(valid & last):
                    m.d.sync += res.eq(total)

        m.d.comb += adv.eq(skid_outputs(m, [self.o], [results], adv & r_valid, name="out"))
        return m


def stem_fold_settings(simd, lanes, max_in_folds, max_out_folds):
    """A descriptor's folding, held while :class:`StemFolds` runs: ``channels``, the
    window's channels (at most ``lanes``, and dividing ``simd``: a fold is whole taps);
    ``in_folds``, folds a window (``ceil(kernel**2 * channels / simd)``); ``out_folds``,
    output folds a pixel (``ceil(C_out / pe)``): the descriptor's unit geometry
    (``compiler/engine/gather.py``)."""
    return data.StructLayout({
        "channels": range(1, lanes + 1),
        "in_folds": range(1, max_in_folds + 1), "out_folds": range(1, max_out_folds + 1),
    })


class StemFolds(wiring.Component):
    """The stem array's feeder: each window's taps packed into folds of ``simd`` bytes,
    then every output fold's folds against its weights.

    The taps come from a :class:`~.gather.WindowGather` of ``lanes`` lanes and 8 bit
    planes (a pixel's channels are one word, the frame's bytes as the gatherer's bit
    planes: lane ``l``'s bit ``b`` at bit ``b * lanes + l``; padding taps are 0). A
    window's taps in order (``ky``, ``kx``) are the flat order of the program's stem
    weights (``compiler/engine/params.py``) when the channels divide ``simd``: fold
    ``fs`` is taps ``fs * taps ..`` side by side, each its ``channels`` bytes, and the
    window's last fold is zero past its last tap, as the weights are. The windows go
    into one of two buffers while the other's are issued, ``out_folds`` times each: for
    output fold ``fo``, folds ``fs = 0 .. in_folds - 1`` with weight word ``fo *
    in_folds + fs`` (the program's order, so the weights are written as they come).

    Parameters
    ----------
    pe, simd : int
        The :class:`StemArray`'s.
    lanes : int
        Lanes of the gatherer's tap word: the most channels of a frame (3: RGB).
    max_in_folds, max_out_folds : int
        The most folds a window and output folds a pixel (17 and 4: ResNet's 7 x 7 x 3
        window on 9 lanes, 64 channels on 16 PE rows); the window buffers hold
        ``2 * max_in_folds`` words and the weight buffer ``max_in_folds *
        max_out_folds`` words of ``pe * simd`` bytes.

    Ports
    -----
    settings : ``In(stem_fold_settings(...))``
        Held while the unit is not ``idle``.
    weights : ``In(stream.Signature(StructLayout({"addr", "w"})))``
        Weight words written into the buffer (always accepted); write them while
        ``idle``, before a descriptor's first window.
    taps : ``In(stream.Signature(StructLayout({"x", "mask", "last"})))``
        The gatherer's ``window`` (``mask`` unused: the channels are ``settings``').
    o : ``Out(stream.Signature(stem_fold_layout(pe, simd)))``
        The folds, to :class:`StemArray`'s ``i``.
    idle : ``Out(1)``
        No window is held or issued.

    Latency
    -------
    A window's first fold is on ``o`` two cycles after its last tap is accepted (the
    buffer's write and read).

    Throughput
    ----------
    A tap a cycle in and a fold a cycle out, the two overlapped by the window buffers:
    a pixel takes ``max(kernel**2, in_folds * out_folds)`` cycles (ResNet's stem on 16 x
    9: 68 cycles of folds, 49 of taps).
    """

    def __init__(self, *, pe, simd, lanes=3, max_in_folds=17, max_out_folds=4):
        for name, value in (("pe", pe), ("simd", simd), ("lanes", lanes),
                            ("max_in_folds", max_in_folds), ("max_out_folds", max_out_folds)):
            positive_int(f"StemFolds: {name}", value)
        self.pe, self.simd, self.lanes = pe, simd, lanes
        self.max_in_folds, self.max_out_folds = max_in_folds, max_out_folds
        self.weight_words = max_in_folds * max_out_folds
        super().__init__({
            "settings": In(stem_fold_settings(simd, lanes, max_in_folds, max_out_folds)),
            "weights": In(stream.Signature(data.StructLayout({
                "addr": range(self.weight_words), "w": unsigned(pe * simd * 8)}))),
            "taps": In(stream.Signature(data.StructLayout({
                "x": unsigned(lanes * 8), "mask": unsigned(lanes), "last": 1}))),
            "o": Out(stream.Signature(stem_fold_layout(pe, simd))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        st, simd, lanes, depth = self.settings, self.simd, self.lanes, self.max_in_folds
        m.submodules.windows = windows = Memory(shape=unsigned(simd * 8), depth=2 * depth,
                                                init=[])
        m.submodules.weight_buffer = weights = Memory(shape=unsigned(self.pe * simd * 8),
                                                      depth=self.weight_words, init=[])
        wt_wp = weights.write_port()
        m.d.comb += [self.weights.ready.eq(1), wt_wp.addr.eq(self.weights.payload.addr),
                     wt_wp.data.eq(self.weights.payload.w), wt_wp.en.eq(self.weights.valid)]

        # taps in: the tap's bytes (its planes' bits regrouped a lane a byte) at byte
        # `pos` of the fold being packed; a fold is written once its last tap is in
        planes = self.taps.payload.x
        tap_bytes = Cat(planes[b * lanes + l] for l in range(lanes) for b in range(8))
        held = Signal(2)                          # window buffer h holds a whole window
        w_half = Signal()
        w_fold = Signal(range(depth))
        at = Signal(range(simd + 1))              # the fold's next tap's first byte
        packed = Signal(simd * 8)
        take = self.taps.valid & self.taps.ready
        # a fold ends where the next tap would not fit (the channels divide `simd`)
        fold_done = (at + 2 * st.channels > simd) | self.taps.payload.last
        word = Mux(at == 0, 0, packed) | (tap_bytes << Cat(Const(0, 3), at))
        win_wp = windows.write_port()
        m.d.comb += [self.taps.ready.eq(~held.bit_select(w_half, 1)),
                     win_wp.addr.eq(Mux(w_half, depth, 0) + w_fold),
                     win_wp.data.eq(word), win_wp.en.eq(take & fold_done)]
        set_held = Signal(2)
        with m.If(take):
            m.d.sync += packed.eq(word)
            with m.If(fold_done):
                m.d.sync += [at.eq(0), w_fold.eq(w_fold + 1)]
                with m.If(self.taps.payload.last):
                    m.d.comb += set_held.eq(Mux(w_half, 0b10, 0b01))
                    m.d.sync += [w_half.eq(~w_half), w_fold.eq(0)]
            with m.Else():
                m.d.sync += at.eq(at + st.channels)

        # folds out: (fo, fs) over the held window; the read data is `o`'s payload and
        # moves on with `o` (`advance`: `o` taken or empty)
        r_half = Signal()
        fo = Signal(range(self.max_out_folds))
        fs = Signal(range(depth))
        w_addr = Signal(range(self.weight_words))   # fo * in_folds + fs, counted
        o_valid = Signal()
        advance = self.o.ready | ~o_valid
        issue = held.bit_select(r_half, 1) & advance
        last_fs = fs == st.in_folds - 1
        last_fold = last_fs & (fo == st.out_folds - 1)
        clear_held = Signal(2)
        win_rp, wt_rp = windows.read_port(), weights.read_port()
        m.d.comb += [win_rp.addr.eq(Mux(r_half, depth, 0) + fs), win_rp.en.eq(advance),
                     wt_rp.addr.eq(w_addr), wt_rp.en.eq(advance)]
        with m.If(issue):
            m.d.sync += w_addr.eq(w_addr + 1)
            with m.If(~last_fs):
                m.d.sync += fs.eq(fs + 1)
            with m.Elif(~last_fold):
                m.d.sync += [fs.eq(0), fo.eq(fo + 1)]
            with m.Else():
                m.d.sync += [fs.eq(0), fo.eq(0), w_addr.eq(0), r_half.eq(~r_half)]
                m.d.comb += clear_held.eq(Mux(r_half, 0b10, 0b01))
        m.d.sync += held.eq((held | set_held) & ~clear_held)

        first_r, last_r = Signal(), Signal()
        with m.If(advance):
            m.d.sync += [o_valid.eq(issue), first_r.eq(fs == 0), last_r.eq(last_fs)]
        m.d.comb += [self.o.payload.x.eq(win_rp.data), self.o.payload.w.eq(wt_rp.data),
                     self.o.payload.first.eq(first_r), self.o.payload.last.eq(last_r),
                     self.o.valid.eq(o_valid),
                     self.idle.eq(~held.any() & ~o_valid & (at == 0))]
        return m


class StemRowLoader(wiring.Component):
    """Writes a frame's DRAM rows into the stem's ring, a pixel a ring word.

    The frame is ``uint8``: a pixel's ``channels`` bytes, pixel after pixel, the row
    padded to the port (``row_beats`` bus words, the padding dropped whatever it
    holds). A pixel becomes one ring word of ``lanes`` lanes of 8 bit planes, the
    layout of a :class:`~.gather.WindowGather` of ``lanes`` lanes and 8 planes (lane
    ``l``'s bit ``b`` at bit ``b * lanes + l``; lanes past the channels 0). The stem
    has time to spare (ResNet's takes 68 cycles a pixel of its output, two input rows
    an output row), so the loader takes a byte a cycle: no gearbox, and a row of 224
    RGB pixels in 672 cycles against the 7,616 its output row computes.

    Parameters
    ----------
    lanes : int
        The most channels (the gatherer's lanes).
    data_width : int
        The read DMA's bus word (a multiple of 8).
    ring_rows, ring_words, max_size : int
        The gatherer's (:class:`~.gather.WindowGather`).

    Ports
    -----
    row : ``In(stream.Signature(StructLayout({"base", "iy"})))``
        A row: the ring address of its slot's first word and its row index (rows in
        order). Accepted when the previous row has been written and its slot is free:
        ``iy < release + ring_rows``.
    data : ``In(stream.Signature(data_width))``
        The row's ``row_beats`` bus words (the read DMA's ``data``).
    settings : ``In(StructLayout({"width", "channels", "row_beats"}))``
        Held while a row is loaded.
    o : ``Out(stream.Signature(StructLayout({"addr", "x", "en"})))``
        Ring writes (the gatherer's ``rows``; ``en`` is 1).
    release : ``In(range(max_size + 1))``
        The gatherer's: rows below it are not read again.
    loaded : ``Out(range(max_size + 1))``
        Rows ``0 .. loaded - 1`` are written; row 0 starts the count again (rows are
        numbered per map).
    idle : ``Out(1)``

    Latency
    -------
    A pixel's word is on ``o`` the cycle after its last byte is taken.

    Throughput
    ----------
    A byte a cycle: a row takes ``row_beats * data_width / 8`` cycles.
    """

    def __init__(self, *, lanes=3, data_width=128, ring_rows=8, ring_words=2048,
                 max_size=256):
        for name, value in (("lanes", lanes), ("data_width", data_width),
                            ("ring_rows", ring_rows), ("ring_words", ring_words),
                            ("max_size", max_size)):
            positive_int(f"StemRowLoader: {name}", value)
        if data_width % 8:
            raise ValueError(f"StemRowLoader: data_width must be a multiple of 8, not "
                             f"{data_width}")
        self.lanes, self.data_width, self.ring_rows = lanes, data_width, ring_rows
        self.ring_words, self.max_size = ring_words, max_size
        max_beats = -(-max_size * lanes * 8 // data_width)
        super().__init__({
            "row": In(stream.Signature(data.StructLayout({
                "base": range(ring_words), "iy": range(max_size)}))),
            "data": In(stream.Signature(data_width)),
            "settings": In(data.StructLayout({
                "width": range(1, max_size + 1), "channels": range(1, lanes + 1),
                "row_beats": range(1, max_beats + 1)})),
            "o": Out(stream.Signature(data.StructLayout({
                "addr": range(ring_words), "x": unsigned(lanes * 8), "en": unsigned(1)}))),
            "release": In(range(max_size + 1)),
            "loaded": Out(range(max_size + 1)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        st, lanes, dw = self.settings, self.lanes, self.data_width
        busy = Signal()
        iy = Signal(range(self.max_size))
        addr = Signal(range(self.ring_words))
        pixels_left = Signal(range(self.max_size + 1))
        beats_left = Signal.like(st.row_beats)
        channel = Signal(range(lanes))
        word = Signal(dw)                          # the bus word, its next byte at the bottom
        bytes_left = Signal(range(dw // 8 + 1))
        pixel = Signal(lanes * 8)                  # the pixel's bytes so far
        o_valid = Signal()

        # a row is taken when its slot is free (the gatherer has released the row
        # `ring_rows` before it)
        m.d.comb += self.row.ready.eq(~busy & (self.row.payload.iy
                                               < self.release + self.ring_rows))
        with m.If(self.row.valid & self.row.ready):
            m.d.sync += [busy.eq(1), iy.eq(self.row.payload.iy), addr.eq(self.row.payload.base),
                         pixels_left.eq(st.width), beats_left.eq(st.row_beats),
                         channel.eq(0), pixel.eq(0)]
            with m.If(self.row.payload.iy == 0):
                m.d.sync += self.loaded.eq(0)

        m.d.comb += self.data.ready.eq(busy & (bytes_left == 0) & (beats_left != 0))
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [word.eq(self.data.payload), bytes_left.eq(dw // 8),
                         beats_left.eq(beats_left - 1)]

        # a byte a cycle while the ring write before it has gone
        step = (bytes_left != 0) & (~o_valid | self.o.ready)
        with m.If(self.o.ready):
            m.d.sync += o_valid.eq(0)
        with m.If(step):
            m.d.sync += [word.eq(word >> 8), bytes_left.eq(bytes_left - 1)]
            with m.If(pixels_left != 0):
                byte = word[:8]
                full = Signal(lanes * 8)
                m.d.comb += full.eq(pixel)
                m.d.comb += full.word_select(channel, 8).eq(byte)
                with m.If(channel == st.channels - 1):
                    m.d.sync += [o_valid.eq(1), self.o.payload.addr.eq(addr),
                                 self.o.payload.x.eq(Cat(full[l * 8 + b] for b in range(8)
                                                         for l in range(lanes))),
                                 addr.eq(addr + 1), pixels_left.eq(pixels_left - 1),
                                 channel.eq(0), pixel.eq(0)]
                with m.Else():
                    m.d.sync += [channel.eq(channel + 1), pixel.eq(full)]
        # the row's last byte (its padding's, if any) ends it
        with m.If(busy & (beats_left == 0) & ((bytes_left == 0)
                                              | (step & (bytes_left == 1)))):
            m.d.sync += [busy.eq(0), self.loaded.eq(iy + 1)]
        m.d.comb += [self.o.valid.eq(o_valid), self.o.payload.en.eq(1),
                     self.idle.eq(~busy & ~o_valid)]
        return m
