"""The intended engine's window gatherer: each output pixel's window read from the input
rows on chip, a word a cycle (docs/architecture.md section 15).

The rows of a tile's input sit in a ring of row slots, every array's map side by side
in one word (a descriptor's bases share their geometry, so one address serves them all).
A pixel's channels are ``words`` consecutive words of ``simd`` lanes; a window is its
taps in order (``ky`` then ``kx``), each tap's ``words`` words: *tap-aligned* words, so
that a window word is one read, never a shift of two. Where ``simd`` divides the
channels (64, 128, ... of the paper's ResNets at ``simd`` 32 or 64) no lane is wasted;
elsewhere a tap's last word is partly masked.

Every address is a sum of registers stepped by constants the compiler computes (the
configuration's ``x_step``, ``dx_words``, ``pad_words``, ``iy0``): no product at run
time.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith import positive_int
from ..fifo import block_ram_fifo

__all__ = ["WindowGather", "gather_settings"]

#: Window words the gatherer may have read ahead of its consumer: three words in flight
#: (the address, the read, the word registered) and the FIFO's three cycles
#: (:class:`~groupnet_hw.hw.fifo.BlockRAMFIFO`) need seven for a word a cycle, and one
#: more because whether a read may issue is counted a cycle ahead.
AHEAD = 8


def gather_settings(simd, max_size, max_words, max_kernel, ring_words):
    """A descriptor's geometry, held while the gatherer runs.

    ``height``, ``width``: the input map; ``words``: words a pixel; ``tail``: the lanes
    of a pixel's last word that hold channels; ``kernel``, ``stride``, ``dilation``;
    ``out_w``: output pixels a row; ``pitch``: words a row slot (``width * words``);
    ``x_step``: ``stride * words``; ``dx_words``: ``dilation * words``; ``pad_words``:
    ``padding * words``; ``padding``; ``pad_ones``: padding taps hold ones (binary
    activations: +1) rather than zeros (n-bit levels: 0); ``span``: ``(kernel - 1) *
    dilation``, the rows a window spans after its first.
    """
    size = range(max_size + 1)
    return data.StructLayout({
        "height": size, "width": size, "words": range(1, max_words + 1),
        "tail": unsigned(simd),
        "kernel": range(1, max_kernel + 1), "stride": range(1, max_kernel + 1),
        "dilation": range(1, max_size + 1), "padding": range(max_size + 1),
        "out_w": size, "pitch": range(ring_words + 1), "x_step": range(ring_words + 1),
        "dx_words": range(ring_words + 1), "pad_words": range(ring_words + 1),
        "pad_ones": unsigned(1), "span": range((max_kernel - 1) * max_size + 1),
    })


class WindowGather(wiring.Component):
    """Reads every output pixel's window of a row tile, one tap-aligned word a cycle.

    Parameters
    ----------
    arrays, simd, planes : int
        The base arrays' shape (:class:`~.arrays.BaseArrays`): a word is every array's
        ``simd`` lanes of ``planes`` bits.
    ring_rows : int
        Row slots of the ring (a power of two): input row ``iy`` is in slot
        ``iy % ring_rows``; a tile's input rows must all be there.
    ring_words : int
        The ring's words (``ring_rows * pitch`` at most).
    max_size : int
        The largest input height and width.
    max_words : int
        The most words a pixel has.
    max_kernel : int
        The largest kernel (and stride).

    Ports
    -----
    rows : ``In(stream.Signature(StructLayout({"addr", "x", "en"})))``
        Words written into the ring (slot ``s``'s pixel ``ix``'s word ``j`` at
        ``s * pitch + ix * words + j``), the slices of the arrays whose ``en`` bit is
        set (each base's map arrives on its own: :class:`~.loader.RowLoader`), always
        accepted; write only the slots no tile being read uses.
    settings : ``In(gather_settings(...))``
        The geometry, held while the gatherer is not ``idle``.
    tile : ``In(stream.Signature(StructLayout({"iy0": signed, "rows": ...})))``
        A row tile: its first output row's first input row ``oy * stride - padding``
        and its output rows. Accepted when ``idle``.
    window : ``Out(stream.Signature(StructLayout({"x", "mask", "last"})))``
        Each output pixel's window words, row by row, pixel by pixel: the
        :class:`~.folds.FoldIssuer`'s ``window``.
    loaded : ``In(range(max_size + 1))``
        Input rows ``0 .. loaded - 1`` are in the ring (the last ``ring_rows`` of them):
        an output row's windows are read once the rows they span are loaded.
    release : ``Out(range(max_size + 1))``
        No row below it will be read again: its slot may take row ``release +
        ring_rows`` (:class:`~.loader.RowLoader` waits for that).
    idle : ``Out(1)``

    Latency
    -------
    :attr:`latency` = 8 cycles from a tile's acceptance to its first word on ``window``
    (the rows' check, the counters, the address stage, the read, the word registered,
    the FIFO's write, read and output registers).

    Throughput
    ----------
    One window word a cycle while ``window`` is ready and the rows are loaded, and a
    cycle more an output row (its rows' check); reads run at most :data:`AHEAD` words
    ahead, counted from registers.
    """

    latency = 8

    def __init__(self, *, arrays, simd, planes=1, ring_rows=4, ring_words=4096,
                 max_size=256, max_words=16, max_kernel=7):
        for name, value in (("arrays", arrays), ("simd", simd), ("planes", planes),
                            ("ring_rows", ring_rows), ("ring_words", ring_words),
                            ("max_size", max_size), ("max_words", max_words),
                            ("max_kernel", max_kernel)):
            positive_int(f"WindowGather: {name}", value)
        if ring_rows & (ring_rows - 1):
            raise ValueError(f"WindowGather: ring_rows must be a power of two, not {ring_rows}")
        self.arrays, self.simd, self.planes = arrays, simd, planes
        self.ring_rows, self.ring_words = ring_rows, ring_words
        self.max_size, self.max_words, self.max_kernel = max_size, max_words, max_kernel
        self.word_width = arrays * simd * planes
        settings = gather_settings(simd, max_size, max_words, max_kernel, ring_words)
        coord = signed((2 * max_size + 2).bit_length() + 1)
        self.coord = coord
        super().__init__({
            "rows": In(stream.Signature(data.StructLayout({
                "addr": range(ring_words), "x": unsigned(self.word_width),
                "en": unsigned(arrays)}))),
            "settings": In(settings),
            "tile": In(stream.Signature(data.StructLayout({
                "iy0": coord, "rows": range(max_size + 1)}))),
            "window": Out(stream.Signature(data.StructLayout({
                "x": data.ArrayLayout(unsigned(simd * planes), arrays),
                "mask": unsigned(simd), "last": 1}))),
            "loaded": In(range(max_size + 1)),
            "release": Out(range(max_size + 1)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        st = self.settings
        # a memory an array, written one at a time and read together at one address: one
        # memory with a write granule an array did not map to M10K blocks of 20 or 40
        # bits (their write enable is the whole word), so Yosys took 2-bit-wide blocks,
        # 120 of them for five arrays' 512 words of 48 lanes
        slice_width = self.simd * self.planes
        rings = []
        for k in range(self.arrays):
            mem = Memory(shape=unsigned(slice_width), depth=self.ring_words, init=[])
            m.submodules[f"ring{k}"] = mem
            wp = mem.write_port()
            x = self.rows.payload.x[k * slice_width:(k + 1) * slice_width]
            m.d.comb += [wp.addr.eq(self.rows.payload.addr), wp.data.eq(x),
                         wp.en.eq(self.rows.valid & self.rows.payload.en[k])]
            rings.append(mem)
        m.d.comb += self.rows.ready.eq(1)
        m.submodules.fifo = fifo = block_ram_fifo(
            width=len(self.window.payload.as_value()), depth=AHEAD)

        coord, addr_shape = self.coord, range(2 * self.ring_words + 1)
        busy = Signal()
        rows_left = Signal.like(self.tile.payload.rows)
        ox = Signal(range(self.max_size + 1))
        ky = Signal(range(self.max_kernel))
        kx = Signal(range(self.max_kernel))
        j = Signal(range(self.max_words))
        iy_row, iy_tap = Signal(coord), Signal(coord)          # the tap's input row
        ix_pix, ix_tap = Signal(coord), Signal(coord)          # and column
        # a word offset into the ring, less the padding: one bit wider than an address
        xw_width = Shape.cast(addr_shape).width + 1
        xw_pix, xw_tap = Signal(signed(xw_width)), Signal(signed(xw_width))

        # stages 1 to 3 hold a read each; the FIFO the rest. Whether a read may issue is
        # a register, counted a cycle ahead as if one did (in a layer on ECP5 the count
        # into the counters' enables was the latest path, 11.8 ns)
        v1, v2, v3 = Signal(), Signal(), Signal()
        room = Signal(init=1)
        m.d.sync += room.eq(fifo.level + v1 + v2 + v3 + 1 < AHEAD)
        # an output row's windows wait for the rows they span; the comparison is a
        # register, so a new row's first cycle waits for it (a cycle an output row)
        rows_ok, fresh = Signal(), Signal()
        last_row = Signal(coord)
        m.d.comb += last_row.eq(iy_row + st.span)
        m.d.sync += [rows_ok.eq((last_row < self.loaded)
                                | ((last_row >= st.height) & (st.height <= self.loaded))),
                     fresh.eq(0)]
        m.d.comb += self.release.eq(Mux(iy_row < 0, 0, iy_row))
        issue = busy & room & rows_ok & ~fresh

        m.d.comb += [self.tile.ready.eq(~busy), self.idle.eq(~busy & ~v1 & ~v2 & ~v3
                                                               & (fifo.level == 0))]
        # whether each counter is at its last value: registers kept with the counters,
        # so that no comparison with a setting less one precedes the counters' next
        # values (in a layer on ECP5 that was the latest path, 12.0 ns, into `ix_tap`)
        last_j, last_kx, last_ky, last_ox = (Signal(name=n) for n in
                                             ("last_j", "last_kx", "last_ky", "last_ox"))
        one_word, one_tap, one_pixel = st.words == 1, st.kernel == 1, st.out_w == 1
        with m.If(self.tile.valid & ~busy):
            m.d.sync += [busy.eq(self.tile.payload.rows != 0), fresh.eq(1),
                         rows_left.eq(self.tile.payload.rows), ox.eq(0), ky.eq(0),
                         kx.eq(0), j.eq(0), last_j.eq(one_word), last_kx.eq(one_tap),
                         last_ky.eq(one_tap), last_ox.eq(one_pixel),
                         iy_row.eq(self.tile.payload.iy0), iy_tap.eq(self.tile.payload.iy0),
                         ix_pix.eq(-st.padding), ix_tap.eq(-st.padding),
                         xw_pix.eq(-st.pad_words), xw_tap.eq(-st.pad_words)]

        last_word = last_j & last_kx & last_ky
        with m.If(issue):
            with m.If(~last_j):
                m.d.sync += [j.eq(j + 1), last_j.eq(j + 2 == st.words)]
            with m.Elif(~last_kx):
                m.d.sync += [j.eq(0), last_j.eq(one_word),
                             kx.eq(kx + 1), last_kx.eq(kx + 2 == st.kernel),
                             ix_tap.eq(ix_tap + st.dilation), xw_tap.eq(xw_tap + st.dx_words)]
            with m.Elif(~last_ky):
                m.d.sync += [j.eq(0), last_j.eq(one_word), kx.eq(0), last_kx.eq(one_tap),
                             ky.eq(ky + 1), last_ky.eq(ky + 2 == st.kernel),
                             iy_tap.eq(iy_tap + st.dilation),
                             ix_tap.eq(ix_pix), xw_tap.eq(xw_pix)]
            with m.Elif(~last_ox):
                m.d.sync += [j.eq(0), last_j.eq(one_word), kx.eq(0), last_kx.eq(one_tap),
                             ky.eq(0), last_ky.eq(one_tap),
                             ox.eq(ox + 1), last_ox.eq(ox + 2 == st.out_w),
                             iy_tap.eq(iy_row),
                             ix_pix.eq(ix_pix + st.stride), ix_tap.eq(ix_pix + st.stride),
                             xw_pix.eq(xw_pix + st.x_step), xw_tap.eq(xw_pix + st.x_step)]
            with m.Else():
                m.d.sync += [j.eq(0), last_j.eq(one_word), kx.eq(0), last_kx.eq(one_tap),
                             ky.eq(0), last_ky.eq(one_tap), ox.eq(0), last_ox.eq(one_pixel),
                             rows_left.eq(rows_left - 1), busy.eq(rows_left != 1), fresh.eq(1),
                             iy_row.eq(iy_row + st.stride), iy_tap.eq(iy_row + st.stride),
                             ix_pix.eq(-st.padding), ix_tap.eq(-st.padding),
                             xw_pix.eq(-st.pad_words), xw_tap.eq(-st.pad_words)]

        # stage 1: bounds and the ring address (the slot's base by shifted adds of the
        # pitch: a slot number of log2(ring_rows) bits)
        inside1, last1, mask1 = Signal(), Signal(), Signal(self.simd)
        addr1 = Signal(addr_shape)
        slot = iy_tap.as_unsigned()[:max(1, (self.ring_rows - 1).bit_length())]
        if self.ring_rows == 1:
            slot_base = 0
        else:
            slot_base = sum(Mux(slot[b], st.pitch << b, 0) for b in range(len(slot)))
        m.d.sync += v1.eq(issue)
        with m.If(issue):
            m.d.sync += [
                inside1.eq((iy_tap >= 0) & (iy_tap < st.height)
                           & (ix_tap >= 0) & (ix_tap < st.width)),
                addr1.eq(slot_base + (xw_tap + j).as_unsigned()),
                last1.eq(last_word),
                mask1.eq(Mux(last_j, st.tail, (1 << self.simd) - 1)),
            ]

        # stage 2: the read; padding taps' words are the padding value
        read_ports = [mem.read_port() for mem in rings]
        inside2, last2, mask2 = Signal(), Signal(), Signal(self.simd)
        for rp in read_ports:
            m.d.comb += [rp.addr.eq(addr1[:len(rp.addr)]), rp.en.eq(v1)]
        ring_data = Cat(*(rp.data for rp in read_ports))
        m.d.sync += v2.eq(v1)
        with m.If(v1):
            m.d.sync += [inside2.eq(inside1), last2.eq(last1), mask2.eq(mask1)]
        # +1 in plane 0 for binary activations, level 0 for n-bit ones
        pad = Mux(st.pad_ones, Const((1 << self.simd) - 1, self.simd * self.planes), 0)
        pad_word = Cat(*([pad] * self.arrays))
        # stage 3: the word registered (the ring's read into the FIFO's block RAM in one
        # cycle was a layer's late path on ECP5, 72 MHz)
        beat = Signal(self.window.payload.shape())
        m.d.sync += v3.eq(v2)
        with m.If(v2):
            m.d.sync += [beat.x.as_value().eq(Mux(inside2, ring_data, pad_word)),
                         beat.mask.eq(mask2), beat.last.eq(last2)]
        m.d.comb += [
            fifo.w_data.eq(beat.as_value()), fifo.w_en.eq(v3),
            self.window.payload.as_value().eq(fifo.r_data),
            self.window.valid.eq(fifo.r_rdy), fifo.r_en.eq(self.window.ready),
        ]
        return m
