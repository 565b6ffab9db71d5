"""The intended engine's row loader: a binary map's row as the read DMA delivers it (the
DRAM format of docs/architecture.md section 12) into the gatherer's ring, one base's
slice of each word (docs/architecture.md section 15).

In DRAM a pixel's channels are ``pixel_bytes = ceil(C / 8)`` bytes (channel ``c`` at bit
``c % 8`` of byte ``c // 8``), pixel after pixel, the row padded to the port. In the
ring a pixel is ``words`` words of ``simd`` lanes, pixel-major, so a row is
consecutive ring words from the slot's base: the loader cuts the row's byte stream into
``simd / 8``-byte pieces, a pixel's last piece shorter where ``simd`` does not divide
its bytes, and drops the row's padding.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import positive_int

__all__ = ["RowLoader", "loader_settings"]


def loader_settings(max_size, max_words, max_pixel_bytes, max_beats):
    """A map's row geometry: ``width`` pixels of ``pixel_bytes`` bytes, ``words`` ring
    words a pixel, ``row_beats`` bus words a row in DRAM (its padding included)."""
    return data.StructLayout({
        "width": range(1, max_size + 1), "pixel_bytes": range(1, max_pixel_bytes + 1),
        "words": range(1, max_words + 1), "row_beats": range(1, max_beats + 1),
    })


class RowLoader(wiring.Component):
    """Writes DRAM rows of binary maps into the ring, a word a cycle.

    Parameters
    ----------
    arrays, simd : int
        The ring word's shape: ``arrays`` slices of ``simd`` lanes (one bit plane;
        ``simd`` a multiple of 8).
    data_width : int
        The read DMA's bus word (a multiple of 8).
    ring_words, max_size, max_words : int
        The gatherer's (:class:`~.gather.WindowGather`).

    Ports
    -----
    row : ``In(stream.Signature(StructLayout({"base", "array", "iy", "last"})))``
        A row: the ring address of its slot's first word, the base whose map it is, its
        row index and whether it is the row's last base (rows in order, a row's bases
        one after another). Accepted when the previous row has been written and the
        slot is free: ``iy < release + ring_rows``.
    data : ``In(stream.Signature(data_width))``
        The row's ``row_beats`` bus words, in order (the read DMA's ``data``).
    settings : ``In(loader_settings(...))``
        Held while a row is loaded.
    o : ``Out(stream.Signature(StructLayout({"addr", "x", "en"})))``
        Ring writes: ``x``'s slice ``array`` (``en`` has its bit alone) at ``addr``: the
        gatherer's ``rows``.
    release : ``In(range(max_size + 1))``
        The gatherer's (:class:`~.gather.WindowGather`): rows below it are not read
        again.
    loaded : ``Out(range(max_size + 1))``
        Rows ``0 .. loaded - 1`` are written, every base of them (the gatherer's
        ``loaded``); row 0's first command starts the count again, so a map's first
        row must not be given before the gatherer is done with the previous map's (the
        order its driver keeps; rows are numbered per map).
    idle : ``Out(1)``

    Latency
    -------
    A row's first word reaches ``o`` 2 cycles after the bus word that completes it.

    Throughput
    ----------
    A ring word a cycle, so a bus word of ``data_width / simd`` words every that many
    cycles; a row takes ``width * words`` cycles and its bus words.
    """

    def __init__(self, *, arrays, simd, data_width=128, ring_words=4096, ring_rows=4,
                 max_size=256, max_words=16):
        for name, value in (("arrays", arrays), ("simd", simd), ("data_width", data_width),
                            ("ring_words", ring_words), ("max_size", max_size),
                            ("max_words", max_words)):
            positive_int(f"RowLoader: {name}", value)
        if simd % 8 or data_width % 8:
            raise ValueError(f"RowLoader: simd ({simd}) and data_width ({data_width}) must be "
                             "multiples of 8: the loader cuts bytes")
        self.arrays, self.simd, self.data_width = arrays, simd, data_width
        self.ring_words, self.max_size, self.max_words = ring_words, max_size, max_words
        self.ring_rows = ring_rows
        max_pixel_bytes = max_words * simd // 8
        max_beats = -(-max_size * max_pixel_bytes * 8 // data_width)
        super().__init__({
            "row": In(stream.Signature(data.StructLayout({
                "base": range(ring_words), "array": range(arrays),
                "iy": range(max_size), "last": 1}))),
            "data": In(stream.Signature(data_width)),
            "settings": In(loader_settings(max_size, max_words, max_pixel_bytes, max_beats)),
            "o": Out(stream.Signature(data.StructLayout({
                "addr": range(ring_words), "x": unsigned(arrays * simd),
                "en": unsigned(arrays)}))),
            "release": In(range(max_size + 1)),
            "loaded": Out(range(max_size + 1)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        st, simd, dw = self.settings, self.simd, self.data_width
        wb, db = simd // 8, dw // 8                # bytes of a ring word, of a bus word
        # bytes the gearbox holds: a bus word comes in while at most two ring words'
        # bytes are held, so that a word still goes out every cycle while it does
        cap = db + 2 * wb
        buf = Signal(8 * cap)
        count = Signal(range(cap + 1))              # bytes held
        busy = Signal()
        array = Signal(range(self.arrays))
        addr = Signal(range(self.ring_words))
        ix = Signal(range(self.max_size + 1))
        j = Signal(range(self.max_words))
        beats_left = Signal.like(st.row_beats)
        more = Signal()                             # beats_left != 0, kept as a register
        # what the settings fix, registered as a row starts: a pixel's last word's
        # bytes and their mask
        last_bytes_now = Signal(range(wb + 1))
        m.d.comb += last_bytes_now.eq(st.pixel_bytes - (st.words - 1) * wb)
        last_bytes = Signal(range(wb + 1))
        keep_last = Signal(simd)

        words_done = Signal()                       # the row's words are all written
        last_j = Signal()                           # the next word is its pixel's last
        # the bytes held after a word of either size, kept beside `count` so that no
        # subtraction precedes the shifts (on ECP5 the loader placed at 49.5 MHz with
        # the word's size, the subtraction and the shifts in one path)
        left_wb = Signal(range(-wb, cap + 1))
        left_last = Signal(range(-wb, cap + 1))
        iy, last_base = Signal.like(self.row.payload.iy), Signal()
        slot_free = self.row.payload.iy < self.release + self.ring_rows
        m.d.comb += [self.row.ready.eq(~busy & slot_free),
                     self.idle.eq(~busy & ~self.o.valid)]
        with m.If(self.row.valid & self.row.ready):
            m.d.sync += [busy.eq(1), array.eq(self.row.payload.array),
                         addr.eq(self.row.payload.base), ix.eq(0), j.eq(0),
                         last_j.eq(st.words == 1), words_done.eq(0),
                         beats_left.eq(st.row_beats), more.eq(1),
                         iy.eq(self.row.payload.iy), last_base.eq(self.row.payload.last),
                         last_bytes.eq(last_bytes_now),
                         keep_last.eq((Const(1, simd + 1) << (last_bytes_now * 8)) - 1)]
            with m.If(self.row.payload.iy == 0):
                m.d.sync += self.loaded.eq(0)

        # a word goes out when its bytes are held and the output register is free
        free = ~self.o.valid | self.o.ready
        enough = Mux(last_j, left_last >= 0, left_wb >= 0)
        emit = busy & ~words_done & enough & free
        # a bus word comes in while the bytes held leave it room, whatever this cycle's
        # word takes: neither the insertion's shift nor `ready` waits for `emit` (on
        # ECP5 the loader placed at 75.8 MHz with the word's size, the bytes left and
        # the insertion shift in one path)
        accept = busy & more & (words_done | (count <= cap - db))
        m.d.comb += self.data.ready.eq(accept)
        got = accept & self.data.valid
        # the bus word is shifted into place whether it comes or not; `got` picks it last
        merged = Signal(8 * cap)
        m.d.comb += merged.eq(buf | Mux(got, self.data.payload << (count * 8), 0))
        new_count = Signal(range(cap + 1))
        starts = self.row.valid & self.row.ready
        m.d.comb += new_count.eq(
            Mux(starts, 0, Mux(emit, Mux(last_j, left_last, left_wb), count)
                + Mux(got, db, 0)))
        # a new row starts from an empty gearbox (its predecessor's padding bytes came in
        # and were never sent out)
        m.d.sync += [buf.eq(Mux(starts, 0, Mux(emit, Mux(last_j, merged >> (last_bytes * 8),
                                                         merged >> (wb * 8)), merged))),
                     count.eq(new_count), left_wb.eq(new_count - wb),
                     left_last.eq(new_count - Mux(starts, last_bytes_now, last_bytes))]
        with m.If(got):
            m.d.sync += [beats_left.eq(beats_left - 1), more.eq(beats_left != 1)]

        piece = Signal(simd)
        m.d.comb += piece.eq(buf & Mux(last_j, keep_last, (1 << simd) - 1))
        with m.If(emit):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.addr.eq(addr),
                         self.o.payload.x.eq(piece.replicate(self.arrays)),
                         self.o.payload.en.eq(Const(1, self.arrays) << array),
                         addr.eq(addr + 1)]
            with m.If(~last_j):
                m.d.sync += [j.eq(j + 1), last_j.eq(j + 2 == st.words)]
            with m.Else():
                m.d.sync += [j.eq(0), last_j.eq(st.words == 1), ix.eq(ix + 1)]
                with m.If(ix == st.width - 1):
                    m.d.sync += words_done.eq(1)
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        # the row ends when its words are out and its bus words (padding too) are in
        # (its last word is in the output register: written the next cycle, before the
        # gatherer, which waits a cycle for `loaded`, can read it)
        with m.If(busy & words_done & ~more & free):
            m.d.sync += busy.eq(0)
            with m.If(last_base):
                m.d.sync += self.loaded.eq(iy + 1)
        return m
