"""The intended engine's output map buffer: a weight-streaming descriptor's channel
slices, assembled into whole maps on chip (docs/architecture.md section 15).

A descriptor whose weights stream computes its outputs a chunk of output channels at a
time over every pixel, so each chunk gives every pixel a *slice*: its chunk's channels.
DRAM holds a map pixel after pixel with all channels together (section 12), and the
write DMA writes whole bus words, so the slices of all chunks meet here first: the
output packer packs each pixel's slice as a row of its own (a slice is whole bytes of
its pixel: a chunk's channels times the element's bits are a multiple of 8), its words
come in with their map, and each slice is written at its place in its map (``row *
pitch + x * pixel_bytes + offset``, the chunk's ``offset``); after the last chunk
(``flush``) every map goes out row by row as the row writer takes it, the bytes past a
row's pixels zero.

A descriptor may write more than one kind of map a job (a mixer's outputs and their
level outputs, fusion rule 7): ``kinds`` of maps, each with its own format (its pixels'
and rows' bytes, its slices' bytes and place); job ``k``'s map of kind ``n`` is the
packers' (and the row writer's) job ``n * jobs + k``.

The memory is two banks of bus words, a memory a byte lane, even and odd words: a
slice's word, turned to its byte in the map, covers at most two neighbouring words,
one in each bank, so a word is written a cycle. Each map has a region of ``depth //
(kinds * jobs)`` words, or, when a descriptor writes one kind alone (``single``), of
twice that: the regions of the kinds not written are its maps'.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..arith import moved_in_stages, positive_int
from .packer import packed_word_layout

__all__ = ["MapBuffer", "map_buffer_settings", "map_format", "chunk_layout"]


def map_format(region_bytes):
    """A kind of map's bytes: a pixel's, a row's in DRAM (``pitch``, whole bus words)
    and its pixels' (``row_bytes``, the rest padding)."""
    return data.StructLayout({"pixel_bytes": range(region_bytes + 1),
                              "pitch": range(region_bytes + 1),
                              "row_bytes": range(region_bytes + 1)})


def map_buffer_settings(kinds, jobs, max_size, region_bytes):
    """The descriptor's outputs: the maps' width and height, the jobs whose maps it
    holds, the kinds it writes (a bit a kind), whether it writes one kind alone in
    regions of ``kinds`` times the size (``single``), and each kind's format."""
    return data.StructLayout({
        "width": range(max_size + 1), "height": range(max_size + 1),
        "jobs": range(jobs + 1), "kinds": unsigned(kinds), "single": unsigned(1),
        "formats": data.ArrayLayout(map_format(region_bytes), kinds)})


def chunk_layout(kinds, region_bytes):
    """A chunk's slices of each kind of map: their first byte in a pixel, and bytes."""
    return data.ArrayLayout(data.StructLayout({"offset": range(region_bytes),
                                               "slice_bytes": range(region_bytes + 1)}),
                            kinds)


class MapBuffer(wiring.Component):
    """Channel slices in, whole output maps out.

    Parameters
    ----------
    jobs : int
        Jobs (the packer's), each with a map of each kind.
    kinds : int
        Kinds of map a job.
    data_width : int
        Bits of a bus word (a power of two, at least 16).
    depth : int
        Bus words of the buffer (even: two banks).
    max_size : int
        The largest map side.

    Ports
    -----
    settings : ``In(map_buffer_settings(kinds, jobs, max_size, region_bytes))``
        Held while not ``idle``, from a cycle before the first ``chunk`` on (the
        formats' steps are registered). ``height * pitch`` must fit a region (with
        ``single``, one kind written: ``kinds`` regions).
    chunk : ``In(stream.Signature(chunk_layout(kinds, region_bytes)))``
        A chunk: each kind's first byte in a pixel (its first channel's) and slices'
        bytes (a last chunk's may be fewer); every map's next slice is its pixel 0.
        Taken while no slice word is in flight.
    i : ``In(stream.Signature(packed_word_layout(kinds * jobs, data_width)))``
        A slice's words (the packer's, a slice a row: ``last`` on its last word).
    flush : ``In(stream.Signature(1))``
        Every map of the kinds written out, kind after kind and job after job; taken
        when the slices written are in.
    o : ``Out(stream.Signature(packed_word_layout(kinds * jobs, data_width)))``
        The maps' rows, ``last`` on a row's last word: the row writer's words.
    idle : ``Out(1)``

    Latency
    -------
    A slice word is in its bank two cycles after it is taken; a flushed map's first
    word is on ``o`` four cycles after ``flush``.

    Throughput
    ----------
    A word a cycle in and out.
    """

    def __init__(self, *, jobs, kinds=1, data_width=128, depth=1024, max_size=64):
        for name, value in (("jobs", jobs), ("kinds", kinds), ("data_width", data_width),
                            ("depth", depth), ("max_size", max_size)):
            positive_int(f"MapBuffer: {name}", value)
        if data_width < 16 or data_width & (data_width - 1):
            raise ValueError(f"MapBuffer: data_width ({data_width}) must be a power of two "
                             "of at least 16 bits")
        if depth % 2:
            raise ValueError(f"MapBuffer: depth ({depth}) must be even (two banks)")
        if depth < kinds * jobs:
            raise ValueError(f"MapBuffer: depth ({depth}) must hold a word a map "
                             f"({kinds * jobs} maps)")
        self.jobs, self.kinds, self.data_width = jobs, kinds, data_width
        self.depth, self.max_size = depth, max_size
        self.region_words = depth // (kinds * jobs)
        self.region_bytes = self.region_words * data_width // 8
        words = packed_word_layout(kinds * jobs, data_width)
        super().__init__({
            "settings": In(map_buffer_settings(kinds, jobs, max_size, self.region_bytes)),
            "chunk": In(stream.Signature(chunk_layout(kinds, self.region_bytes))),
            "i": In(stream.Signature(words)),
            "flush": In(stream.Signature(1)),
            "o": Out(stream.Signature(words)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        jobs, kinds, dw, s = self.jobs, self.kinds, self.data_width, self.settings
        maps = kinds * jobs
        db = dw // 8
        log_db = exact_log2(db)
        region = self.region_words
        half = self.depth // 2
        # a bank is a memory a byte lane, each with its own write enable: Yosys maps a
        # memory of bus words with byte enables to Cyclone V M10Ks at 512 words of a
        # byte lane a block (64 a bank of 2,048 words), byte-wide memories at 1,024 (32)
        lanes = [[] for _ in range(2)]                # [bank][byte]: (write, read) ports
        for b in range(2):
            for byte in range(db):
                mem = Memory(shape=unsigned(8), depth=half, init=[])
                m.submodules[f"bank{b}_{byte}"] = mem
                lanes[b].append((mem.write_port(), mem.read_port()))

        # -- writes: each map's next slice's byte, its pixel and the slice's word --
        addr_bits = (self.depth * db - 1).bit_length()
        slice_at = [Signal(addr_bits, name=f"slice_at{j}") for j in range(maps)]
        x = [Signal(range(self.max_size + 1), name=f"x{j}") for j in range(maps)]
        part = [Signal(range(self.region_words + 1), name=f"part{j}") for j in range(maps)]
        at_end = [Signal(name=f"at_end{j}") for j in range(maps)]   # x is the row's last
        in_flight = Signal(2)
        slice_bytes = Signal(data.ArrayLayout(self.chunk.payload.shape().elem_shape, kinds))
        m.d.comb += [self.i.ready.eq(1), self.chunk.ready.eq(in_flight == 0)]
        with m.If(self.chunk.valid & self.chunk.ready):
            m.d.sync += slice_bytes.eq(self.chunk.payload)
            for j in range(maps):
                # one kind alone: job k's map takes the regions of every kind's job k
                base = Mux(s.single, (j % jobs) * kinds * region * db, j * region * db)
                m.d.sync += [slice_at[j].eq(base + self.chunk.payload[j // jobs].offset),
                             x[j].eq(0), at_end[j].eq(s.width == 1), part[j].eq(0)]

        # stage 1: the word's byte in the buffer and how many of its bytes are the
        # slice's (the last word's rest is the packer's padding)
        taken = self.i.valid
        w_data = Signal(dw)
        w_at = Signal(addr_bits)
        w_bytes = Signal(range(db + 1))
        w_valid = Signal()
        job = self.i.payload.job
        kind = Signal(range(kinds))
        sel_slice = Signal(addr_bits)
        sel_part = Signal.like(part[0])
        sel_x = Signal.like(x[0])
        row_end = Signal()
        # each map's row end and each kind's steps kept in registers (settings are
        # held), so that only the pick of the word's map (a case, not a chain of ifs)
        # and one adder lie before its next slice (a comparison and the steps' sum behind
        # a chain of picks were the buffer's late path on ECP5, 83.8 MHz)
        pixel_step = Signal(data.ArrayLayout(addr_bits, kinds))
        row_step = Signal(data.ArrayLayout(addr_bits, kinds))
        m.d.sync += [*(pixel_step[n].eq(s.formats[n].pixel_bytes) for n in range(kinds)),
                     *(row_step[n].eq(s.formats[n].pitch - s.formats[n].row_bytes
                                      + s.formats[n].pixel_bytes) for n in range(kinds))]
        step = Signal(addr_bits)
        with m.Switch(job):
            for j in range(maps):
                with m.Case(j):
                    m.d.comb += [sel_slice.eq(slice_at[j]), sel_part.eq(part[j]),
                                 sel_x.eq(x[j]), kind.eq(j // jobs), row_end.eq(at_end[j]),
                                 step.eq(Mux(at_end[j], row_step[j // jobs],
                                             pixel_step[j // jobs]))]
        # the word's map's next part, pixel and slice: one set of adders for the maps
        next_part = sel_part + 1
        next_x = sel_x + 1
        next_slice = sel_slice + step
        m.d.sync += w_valid.eq(taken)
        with m.If(taken):
            m.d.sync += [w_data.eq(self.i.payload.data),
                         w_at.eq(sel_slice + (sel_part << log_db)),
                         w_bytes.eq(Mux(self.i.payload.last,
                                        slice_bytes[kind].slice_bytes - (sel_part << log_db),
                                        db))]
            for j in range(maps):
                with m.If(job == j):
                    with m.If(~self.i.payload.last):
                        m.d.sync += part[j].eq(next_part)
                    with m.Else():
                        # the slice's last word: the next pixel's (at a row's end, the
                        # next row's first)
                        m.d.sync += [part[j].eq(0), x[j].eq(Mux(row_end, 0, next_x)),
                                     at_end[j].eq(Mux(row_end, s.width == 1,
                                                      next_x == s.width - 1)),
                                     slice_at[j].eq(next_slice)]
        m.d.sync += in_flight.eq(taken + w_valid)

        # stage 2: turned to its byte (its bytes past the word's end wrap round to the
        # same byte lanes of the next word), written to the word it starts in and the
        # next: both banks take the same turned word, each with its own bytes enabled
        # (a shift into two words' span and a pick of its half a bank cost twice the
        # logic)
        shift = w_at[:log_db]
        word = w_at[log_db:]
        turned = moved_in_stages(w_data, shift, lambda v, n: v.rotate_left(8 * n))
        mask = Signal(2 * db)
        m.d.comb += mask.eq((((Const(1, 2 * db + 1) << w_bytes) - 1) << shift)[:2 * db])
        odd = word[0]
        at = word >> 1
        for b in range(2):
            # the word itself in its own bank, the next word in the other
            mine = odd == b
            addr = Signal(range(half), name=f"w_addr{b}")
            en = Signal(db, name=f"w_en{b}")
            m.d.comb += [addr.eq(Mux(mine, at, at + odd)),
                         en.eq(Mux(w_valid, Mux(mine, mask[:db], mask[db:]), 0))]
            for byte, (wp, _) in enumerate(lanes[b]):
                m.d.comb += [wp.addr.eq(addr), wp.data.eq(turned[8 * byte:8 * byte + 8]),
                             wp.en.eq(en[byte])]

        # -- reads: every map's rows, word after word, into a FIFO whose room is counted
        # from registers --
        fifo = SyncFIFOBuffered(width=len(self.o.payload.as_value()), depth=8)
        m.submodules.fifo = fifo
        reading = Signal()
        r_kind = Signal(range(kinds + 1))
        r_job = Signal(range(jobs + 1))
        r_row = Signal(range(self.max_size + 1))
        r_word = Signal(range(self.region_words + 1))      # the byte, in whole words
        r_addr = Signal(range(self.depth + 1))
        r_base = Signal(range(self.depth + 1))             # the map's region
        pending = Signal(2)
        room = Signal()
        r_fmt = s.formats[r_kind]
        written = Signal(kinds)                            # the kinds still to flush
        issue = reading & room
        row_words = r_fmt.pitch >> log_db
        row_end = r_word == row_words - 1
        m.d.sync += room.eq(fifo.level + pending + issue < fifo.depth - 1)
        m.d.comb += self.flush.ready.eq(~reading & (in_flight == 0))

        def first_kind(bits):
            """The lowest kind set in ``bits`` (``kinds`` if none) and its maps' first
            word (0 for a kind alone): multiplexers of constants."""
            kind = Const(kinds, range(kinds + 1))
            base = Const(0, range(self.depth + 1))
            for n in reversed(range(kinds)):
                kind = Mux(bits[n], n, kind)
                base = Mux(bits[n], n * jobs * region, base)
            return kind, Mux(s.single, 0, base)
        # a map's region: a kind alone takes every kind's
        map_words = Signal(range(self.depth + 1))
        m.d.sync += map_words.eq(Mux(s.single, kinds * region, region))
        with m.If(self.flush.valid & self.flush.ready):
            start, start_base = first_kind(s.kinds)
            m.d.sync += [reading.eq(s.kinds != 0), r_kind.eq(start), r_job.eq(0),
                         r_row.eq(0), r_word.eq(0), r_addr.eq(start_base),
                         r_base.eq(start_base), written.eq(s.kinds)]
        for b in range(2):
            for _, rp in lanes[b]:
                m.d.comb += [rp.addr.eq(r_addr >> 1), rp.en.eq(issue)]
        # the word's bytes past the row's pixels are padding: zero
        r_pos = r_word << log_db
        keep = Cat(r_pos + k < r_fmt.row_bytes for k in range(db))
        d_keep, d_odd, d_last, d_valid = Signal(db), Signal(), Signal(), Signal()
        d_job = Signal(range(maps))
        m.d.sync += d_valid.eq(issue)
        # the kind after this one: a multiplexer of constants (a product of the kind was
        # the buffer's late path on ECP5)
        rest = Signal(kinds)
        m.d.comb += rest.eq(written & ~(Const(1, kinds) << r_kind)[:kinds])
        next_kind, next_base = first_kind(rest)
        with m.If(issue):
            m.d.sync += [d_keep.eq(keep), d_odd.eq(r_addr[0]),
                         d_job.eq(r_kind * jobs + r_job),
                         d_last.eq(row_end), r_addr.eq(r_addr + 1), r_word.eq(r_word + 1)]
            with m.If(row_end):
                m.d.sync += [r_word.eq(0), r_row.eq(r_row + 1)]
                with m.If(r_row == s.height - 1):
                    m.d.sync += [r_row.eq(0), r_job.eq(r_job + 1),
                                 r_base.eq(r_base + map_words), r_addr.eq(r_base + map_words)]
                    with m.If(r_job == s.jobs - 1):
                        # the next kind written, or the end
                        m.d.sync += [r_job.eq(0), r_kind.eq(next_kind), written.eq(rest),
                                     r_base.eq(next_base), r_addr.eq(next_base),
                                     reading.eq(rest != 0)]
        m.d.sync += pending.eq(issue)
        read = Mux(d_odd, Cat(rp.data for _, rp in lanes[1]),
                   Cat(rp.data for _, rp in lanes[0]))
        out = Signal(self.o.payload.shape())
        m.d.comb += [out.data.eq(Cat(Mux(d_keep[k], read[8 * k:8 * k + 8], 0)
                                     for k in range(db))),
                     out.job.eq(d_job), out.last.eq(d_last),
                     fifo.w_data.eq(out.as_value()), fifo.w_en.eq(d_valid),
                     self.o.payload.as_value().eq(fifo.r_data), self.o.valid.eq(fifo.r_rdy),
                     fifo.r_en.eq(self.o.ready),
                     self.idle.eq(~reading & (in_flight == 0) & ~d_valid
                                  & (fifo.level == 0))]
        return m
