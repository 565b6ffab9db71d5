"""The intended engine's row loader: a map's row as the read DMA delivers it (the DRAM
formats of docs/architecture.md section 12) into the gatherer's ring, one base's slice
of each word (docs/architecture.md section 15).

A map is binary (DRAM ``bits``: channel ``c`` at bit ``c % 8`` of byte ``c // 8``) or of
n-bit levels (DRAM ``uint`` of ``elem_bits`` ``b`` = 2 or 4: element ``c`` at bits
``(c * b) % 8`` of byte ``(c * b) // 8``, LSB first); a pixel is ``pixel_bytes =
ceil(C * b / 8)`` bytes, pixel after pixel, the row padded to the port. In the ring a
pixel is ``words`` words of ``simd`` lanes, pixel-major, each lane ``planes`` bits kept
as bit planes (plane ``p``, bit ``p`` of each lane's level, at bits ``[p * simd, (p + 1) *
simd)``), so a row is consecutive ring words from the slot's base: the loader cuts the
row's byte stream into ``simd * b / 8``-byte pieces, a pixel's last piece shorter where
``simd`` does not divide its channels, drops the row's padding, and deals each piece's
``b``-bit elements out to ``b`` planes (wiring: bit ``l * b + p`` of the piece is lane
``l`` of plane ``p``).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import positive_int

__all__ = ["RowLoader", "loader_settings"]


def loader_settings(max_size, max_words, max_pixel_bytes, max_beats, planes=1):
    """A map's row geometry: ``width`` pixels of ``pixel_bytes`` bytes, ``words`` ring
    words a pixel, ``row_beats`` bus words a row in DRAM (its padding included), and
    ``elem_bits`` bits a channel in DRAM: 1 for a binary map (``bits``), 2 or 4 (at most
    ``planes``) for levels (``uint``)."""
    return data.StructLayout({
        "width": range(1, max_size + 1), "pixel_bytes": range(1, max_pixel_bytes + 1),
        "words": range(1, max_words + 1), "row_beats": range(1, max_beats + 1),
        "elem_bits": range(1, planes + 1),
    })


class RowLoader(wiring.Component):
    """Writes DRAM rows of binary maps or of 2- or 4-bit levels into the ring, a word a
    cycle.

    Parameters
    ----------
    arrays, simd, planes : int
        The ring word's shape (:class:`~.gather.WindowGather`'s): ``arrays`` slices of
        ``simd`` lanes (a multiple of 8) in ``planes`` bit planes (1, 2 or 4).
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
        Held while a row is loaded. ``elem_bits`` 1 (a binary map) writes the lanes'
        bits into plane 0 and zeros into the planes above it (the write port's granule
        is a slice's every plane; the gatherer reads plane 0 alone for binary
        activations, and pads them with ones there); 2 or 4 writes a level's bits into
        as many planes and zeros above them (a 2-bit level in 4 planes is its value).
    o : ``Out(stream.Signature(StructLayout({"addr", "x", "en"})))``
        Ring writes: ``x``'s slice ``array`` (``simd * planes`` bits; ``en`` has its bit
        alone) at ``addr``: the gatherer's ``rows``.
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
    A ring word a cycle while the bus keeps up: a ring word takes ``simd * elem_bits /
    8`` bytes, so a bus word brings ``data_width / (simd * elem_bits)`` words, and where
    a word is wider than a bus word a bus word a cycle sets the pace; a row takes
    ``width * words`` cycles or its bus words, whichever is more.
    """

    def __init__(self, *, arrays, simd, planes=1, data_width=128, ring_words=4096,
                 ring_rows=4, max_size=256, max_words=16):
        for name, value in (("arrays", arrays), ("simd", simd), ("planes", planes),
                            ("data_width", data_width), ("ring_words", ring_words),
                            ("max_size", max_size), ("max_words", max_words)):
            positive_int(f"RowLoader: {name}", value)
        if simd % 8 or data_width % 8:
            raise ValueError(f"RowLoader: simd ({simd}) and data_width ({data_width}) must be "
                             "multiples of 8: the loader cuts bytes")
        if planes not in (1, 2, 4):
            raise ValueError(f"RowLoader: planes must be 1, 2 or 4, not {planes}: levels are "
                             "DRAM elements of 2 or 4 bits")
        self.arrays, self.simd, self.planes, self.data_width = arrays, simd, planes, data_width
        self.ring_words, self.max_size, self.max_words = ring_words, max_size, max_words
        self.ring_rows = ring_rows
        max_pixel_bytes = max_words * simd * planes // 8
        max_beats = -(-max_size * max_pixel_bytes * 8 // data_width)
        super().__init__({
            "row": In(stream.Signature(data.StructLayout({
                "base": range(ring_words), "array": range(arrays),
                "iy": range(max_size), "last": 1}))),
            "data": In(stream.Signature(data_width)),
            "settings": In(loader_settings(max_size, max_words, max_pixel_bytes, max_beats,
                                           planes)),
            "o": Out(stream.Signature(data.StructLayout({
                "addr": range(ring_words), "x": unsigned(arrays * simd * planes),
                "en": unsigned(arrays)}))),
            "release": In(range(max_size + 1)),
            "loaded": Out(range(max_size + 1)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        st, simd, planes, dw = self.settings, self.simd, self.planes, self.data_width
        wb, db = simd // 8, dw // 8                # bytes of a plane's word, of a bus word
        widths = [b for b in (1, 2, 4) if b <= planes]   # the element widths built
        wmax = wb * planes                         # bytes of the widest ring word
        # the gearbox: a queue of `slots` bus words, the oldest first. A bus word comes
        # in while at most two of the widest ring words' bytes are held, so that a word
        # still goes out every cycle while it does (narrower words only leave it more).
        # Bus words enter and leave it whole, so it moves by whole slots: a bus word
        # goes into the first free slot, and the slots a word leaves behind drop out
        # (0 to `max_drop` a word); a word goes out from byte `head` of the oldest, a
        # shift of less than a bus word (on ECP5 a gearbox that shifted each bus word
        # in at the bytes held, and the bytes left down past each word out, placed at
        # 68.7 MHz with 4 planes)
        slots = -(-(db + 2 * wmax) // db)
        cap = slots * db
        max_drop = (db - 1 + wmax) // db
        queue = [Signal(8 * db, name=f"queue{s}", reset_less=True) for s in range(slots)]
        filled = Signal(range(slots + 2))           # slots holding bytes not yet out
        head = Signal(range(db))                    # the byte of `queue[0]` next out
        # where a word of either size leaves the queue, kept a cycle ahead like
        # `left_word`: the slots it drops and the byte after it in the new oldest slot
        drop_word, drop_last = Signal(range(max_drop + 1)), Signal(range(max_drop + 1))
        rest_word, rest_last = Signal(range(db)), Signal(range(db))
        count = Signal(range(cap + 1))              # bytes held
        busy = Signal()
        array = Signal(range(self.arrays))
        addr = Signal(range(self.ring_words))
        ix = Signal(range(self.max_size + 1))
        j = Signal(range(self.max_words))
        beats_left = Signal.like(st.row_beats)
        more = Signal()                             # beats_left != 0, kept as a register

        # the row's element width, one flag a width beyond 1 (registered as a row
        # starts, so that no comparison with the settings precedes the shift and the
        # planes' multiplexer); widths not built read as 1
        width_now = {b: st.elem_bits == b for b in widths[1:]}
        width_is = {b: Signal(name=f"elem_bits_{b}") for b in widths[1:]}

        def by_width(values, flags):
            """``values[b]`` for the element width the flags say (1 where none is set)."""
            out = values[1]
            for b in widths[1:]:
                out = Mux(flags[b], values[b], out)
            return out

        # what the settings fix, registered as a row starts: a full word's bytes, a
        # pixel's last word's bytes and their mask
        if planes == 1:                             # one width: a constant, as it was
            word_bytes_now = word_bytes = wb
        else:
            word_bytes_now, word_bytes = Signal(range(wmax + 1)), Signal(range(wmax + 1))
            m.d.comb += word_bytes_now.eq(by_width({b: wb * b for b in widths}, width_now))
        before_last = Signal(range(self.max_words * wb + 1))   # a pixel's words but its
        # last, in bytes at a bit a lane (times the element width below)
        m.d.comb += before_last.eq((st.words - 1) * wb)
        last_bytes_now = Signal(range(wmax + 1))
        m.d.comb += last_bytes_now.eq(
            st.pixel_bytes - by_width({b: before_last * b for b in widths}, width_now))
        last_bytes = Signal(range(wmax + 1))
        keep_last = Signal(wmax)                    # a byte a bit

        words_done = Signal()                       # the row's words are all written
        last_j = Signal()                           # the next word is its pixel's last
        # the bytes held after a word of either size, kept beside `count` so that no
        # subtraction precedes `emit` (on ECP5 the loader placed at 49.5 MHz with the
        # word's size, the subtraction and the shifts in one path)
        left_word = Signal(range(-wmax, cap + 1))
        left_last = Signal(range(-wmax, cap + 1))
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
                         keep_last.eq((Const(1, wmax + 1) << last_bytes_now) - 1)]
            m.d.sync += [width_is[b].eq(width_now[b]) for b in width_is]
            if planes > 1:
                m.d.sync += word_bytes.eq(word_bytes_now)
            with m.If(self.row.payload.iy == 0):
                m.d.sync += self.loaded.eq(0)

        # a word goes out when its bytes are held and the output register is free
        free = ~self.o.valid | self.o.ready
        enough = Mux(last_j, left_last >= 0, left_word >= 0)
        emit = busy & ~words_done & enough & free
        # a bus word comes in while the bytes held leave its slot free, whatever this
        # cycle's word takes: `ready` does not wait for `emit` (on ECP5 the loader placed
        # at 75.8 MHz with the word's size, the bytes left and the insertion in one path)
        accept = busy & more & (words_done | (count <= cap - db))
        m.d.comb += self.data.ready.eq(accept)
        got = accept & self.data.valid
        starts = self.row.valid & self.row.ready
        drop = Signal(range(max_drop + 1))
        m.d.comb += drop.eq(Mux(emit, Mux(last_j, drop_last, drop_word), 0))
        into = Signal(range(slots + 2))            # the slot the bus word goes into
        m.d.comb += into.eq(filled - drop)
        for k in range(slots):
            moved = queue[k]
            for d in range(1, max_drop + 1):
                moved = Mux(drop == d, queue[min(k + d, slots - 1)], moved)
            with m.If(got & (into == k)):
                m.d.sync += queue[k].eq(self.data.payload)
            with m.Elif(drop != 0):
                m.d.sync += queue[k].eq(moved)
        with m.If(got):
            m.d.sync += [beats_left.eq(beats_left - 1), more.eq(beats_left != 1)]

        def split(x):
            """``x`` (below ``db + wmax``) in whole bus words and bytes left."""
            if db & (db - 1) == 0:
                return x >> (db.bit_length() - 1), x[:db.bit_length() - 1]
            whole = 0
            for d in range(1, max_drop + 1):
                whole = Mux(x >= d * db, d, whole)
            return whole, x - whole * db

        new_count = Signal(range(cap + 1))
        m.d.comb += new_count.eq(
            Mux(starts, 0, Mux(emit, Mux(last_j, left_last, left_word), count)
                + Mux(got, db, 0)))
        m.d.sync += [count.eq(new_count),
                     left_word.eq(new_count - (word_bytes if planes == 1
                                               else Mux(starts, word_bytes_now, word_bytes))),
                     left_last.eq(new_count - Mux(starts, last_bytes_now, last_bytes))]
        # a new row starts from an empty gearbox (its predecessor's padding bytes came in
        # and were never sent out)
        new_head = Signal.like(head)
        m.d.comb += new_head.eq(
            Mux(starts, 0, Mux(emit, Mux(last_j, rest_last, rest_word), head)))
        after_word = new_head + (word_bytes if planes == 1
                                 else Mux(starts, word_bytes_now, word_bytes))
        after_last = new_head + Mux(starts, last_bytes_now, last_bytes)
        m.d.sync += [head.eq(new_head), filled.eq(Mux(starts, 0, into + got)),
                     drop_word.eq(split(after_word)[0]), rest_word.eq(split(after_word)[1]),
                     drop_last.eq(split(after_last)[0]), rest_last.eq(split(after_last)[1])]

        # the word's bytes: the queue's from `head`, shifted down a power of two bytes a
        # stage (the stages keep only the bytes the word can still need), a pixel's
        # last word masked to its bytes
        held = [w[8 * i:8 * (i + 1)] for w in queue for i in range(db)][:db - 1 + wmax]
        for k in reversed(range((db - 1).bit_length())):
            step, need = 1 << k, wmax + (1 << k) - 1
            held = [Mux(head[k], held[i + step], held[i]) if i + step < len(held) else held[i]
                    for i in range(min(need, len(held)))]
        piece = Signal(8 * wmax)
        m.d.comb += piece.eq(Cat(*(Mux(last_j & ~keep_last[i], 0, held[i])
                                   for i in range(wmax))))

        # `b`-bit elements, lane `l`'s at bits `l * b ..`; bit `p` of each goes to plane
        # `p` (bits `p * simd + l`), the planes above `b` zeros. A permutation of wires:
        # the planes' multiplexer by the width is its only logic
        def dealt(b):
            return Cat(*(piece[l * b + p] for p in range(b) for l in range(simd)),
                       Const(0, simd * (planes - b)))

        word = Signal(simd * planes)
        m.d.comb += word.eq(by_width({b: dealt(b) for b in widths}, width_is))
        with m.If(emit):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.addr.eq(addr),
                         self.o.payload.x.eq(word.replicate(self.arrays)),
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
