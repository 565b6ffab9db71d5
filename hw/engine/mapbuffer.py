"""The intended engine's output map buffer: a weight-streaming descriptor's channel
slices, assembled into whole maps on chip (docs/architecture.md section 15).

A descriptor whose weights stream computes its outputs a chunk of output channels at a
time over every pixel, so each chunk gives every pixel a *slice*: its chunk's channels.
DRAM holds a map pixel after pixel with all channels together (section 12), and the
write DMA writes whole bus words, so the slices of all chunks meet here first: the
output packer packs each pixel's slice as a row of its own (a slice is whole bytes of
its pixel: a chunk's channels times the element's bits are a multiple of 8), its words
come in with their job, and each slice is written at its place in its job's map
(``row * pitch + x * pixel_bytes + offset``, the chunk's ``offset``); after the last
chunk (``flush``) every job's map goes out row by row as the row writer takes it, the
bytes past a row's pixels zero.

The memory is two banks of bus words with a byte write enable, even and odd words: a
slice's word, shifted to its byte in the map, covers at most two neighbouring words,
one in each bank, so a word is written a cycle. Each job has a region of
``depth // jobs`` words.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..arith import positive_int
from .packer import packed_word_layout

__all__ = ["MapBuffer", "map_buffer_settings"]


def map_buffer_settings(jobs, max_size, region_bytes):
    """The descriptor's output geometry: a pixel's bytes, the map's width and height, a row's bytes in DRAM (``pitch``, whole bus words) and the bytes of
    its pixels (``row_bytes``, the rest padding), and the jobs whose maps it holds."""
    return data.StructLayout({
        "pixel_bytes": range(region_bytes + 1),
        "width": range(max_size + 1), "height": range(max_size + 1),
        "pitch": range(region_bytes + 1), "row_bytes": range(region_bytes + 1),
        "jobs": range(jobs + 1)})


class MapBuffer(wiring.Component):
    """Channel slices in, whole output maps out.

    Parameters
    ----------
    jobs : int
        Maps held (the packer's jobs), each in a region of ``depth // jobs`` words.
    data_width : int
        Bits of a bus word (a power of two, at least 16).
    depth : int
        Bus words of the buffer (even: two banks).
    max_size : int
        The largest map side.

    Ports
    -----
    settings : ``In(map_buffer_settings(jobs, max_size, region_bytes))``
        Held while not ``idle``. ``height * pitch`` must fit a region.
    chunk : ``In(stream.Signature(StructLayout({"offset", "slice_bytes"})))``
        A chunk: its first byte in a pixel (its first channel's) and its slices' bytes
        (a last chunk's may be fewer); every job's next slice is its map's pixel 0.
        Taken while no slice word is in flight.
    i : ``In(stream.Signature(packed_word_layout(jobs, data_width)))``
        A slice's words (the packer's, a slice a row: ``last`` on its last word).
    flush : ``In(stream.Signature(1))``
        Every job's map out, job after job; taken when the slices written are in.
    o : ``Out(stream.Signature(packed_word_layout(jobs, data_width)))``
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

    def __init__(self, *, jobs, data_width=128, depth=1024, max_size=64):
        for name, value in (("jobs", jobs), ("data_width", data_width), ("depth", depth),
                            ("max_size", max_size)):
            positive_int(f"MapBuffer: {name}", value)
        if data_width < 16 or data_width & (data_width - 1):
            raise ValueError(f"MapBuffer: data_width ({data_width}) must be a power of two "
                             "of at least 16 bits")
        if depth % 2:
            raise ValueError(f"MapBuffer: depth ({depth}) must be even (two banks)")
        self.jobs, self.data_width, self.depth, self.max_size = jobs, data_width, depth, max_size
        self.region_words = depth // jobs
        self.region_bytes = self.region_words * data_width // 8
        words = packed_word_layout(jobs, data_width)
        super().__init__({
            "settings": In(map_buffer_settings(jobs, max_size, self.region_bytes)),
            "chunk": In(stream.Signature(data.StructLayout({
                "offset": range(self.region_bytes),
                "slice_bytes": range(self.region_bytes + 1)}))),
            "i": In(stream.Signature(words)),
            "flush": In(stream.Signature(1)),
            "o": Out(stream.Signature(words)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        jobs, dw, s = self.jobs, self.data_width, self.settings
        db = dw // 8
        log_db = exact_log2(db)
        region = self.region_words
        half = self.depth // 2
        banks = []
        for b in range(2):
            mem = Memory(shape=unsigned(dw), depth=half, init=[])
            m.submodules[f"bank{b}"] = mem
            banks.append((mem.write_port(granularity=8), mem.read_port()))

        # -- writes: each job's next slice's byte, its row's first byte, its pixel and
        # the slice's word --
        addr_bits = exact_log2(1 << (self.depth * db - 1).bit_length())
        slice_at = [Signal(addr_bits, name=f"slice_at{j}") for j in range(jobs)]
        row_at = [Signal(addr_bits, name=f"row_at{j}") for j in range(jobs)]
        x = [Signal(range(self.max_size + 1), name=f"x{j}") for j in range(jobs)]
        part = [Signal(range(self.region_words + 1), name=f"part{j}") for j in range(jobs)]
        in_flight = Signal(2)
        slice_bytes = Signal.like(self.chunk.payload.slice_bytes)
        m.d.comb += [self.i.ready.eq(1), self.chunk.ready.eq(in_flight == 0)]
        with m.If(self.chunk.valid & self.chunk.ready):
            m.d.sync += slice_bytes.eq(self.chunk.payload.slice_bytes)
            for j in range(jobs):
                m.d.sync += [slice_at[j].eq(j * region * db + self.chunk.payload.offset),
                             row_at[j].eq(j * region * db), x[j].eq(0), part[j].eq(0)]

        # stage 1: the word's byte in the buffer and how many of its bytes are the
        # slice's (the last word's rest is the packer's padding)
        taken = self.i.valid
        w_data = Signal(dw)
        w_at = Signal(addr_bits)
        w_bytes = Signal(range(db + 1))
        w_valid = Signal()
        job = self.i.payload.job
        sel_slice = Signal(addr_bits)
        sel_part = Signal.like(part[0])
        for j in range(jobs):
            with m.If(job == j):
                m.d.comb += [sel_slice.eq(slice_at[j]), sel_part.eq(part[j])]
        m.d.sync += w_valid.eq(taken)
        with m.If(taken):
            m.d.sync += [w_data.eq(self.i.payload.data),
                         w_at.eq(sel_slice + (sel_part << log_db)),
                         w_bytes.eq(Mux(self.i.payload.last,
                                        slice_bytes - (sel_part << log_db), db))]
            for j in range(jobs):
                with m.If(job == j):
                    with m.If(~self.i.payload.last):
                        m.d.sync += part[j].eq(part[j] + 1)
                    with m.Elif(x[j] == s.width - 1):
                        # the row's last pixel: the next row's first
                        m.d.sync += [part[j].eq(0), x[j].eq(0),
                                     row_at[j].eq(row_at[j] + s.pitch),
                                     slice_at[j].eq(slice_at[j] + s.pitch
                                                    - s.row_bytes + s.pixel_bytes)]
                    with m.Else():
                        m.d.sync += [part[j].eq(0), x[j].eq(x[j] + 1),
                                     slice_at[j].eq(slice_at[j] + s.pixel_bytes)]
        m.d.sync += in_flight.eq(taken + w_valid)

        # stage 2: shifted to its byte, written to the word it starts in and the next
        shift = w_at[:log_db]
        word = w_at[log_db:]
        span = Signal(2 * dw)
        mask = Signal(2 * db)
        m.d.comb += [span.eq(w_data << (shift << 3)),
                     mask.eq((((Const(1, 2 * db + 1) << w_bytes) - 1) << shift)[:2 * db])]
        low, high = (span[:dw], mask[:db]), (span[dw:], mask[db:])
        odd = word[0]
        at = word >> 1
        for b, (wp, _) in enumerate(banks):
            # the word itself in its own bank, the next word in the other
            mine = odd == b
            m.d.comb += [wp.addr.eq(Mux(mine, at, at + odd)),
                         wp.data.eq(Mux(mine, low[0], high[0])),
                         wp.en.eq(Mux(w_valid, Mux(mine, low[1], high[1]), 0))]

        # -- reads: every job's rows, word after word, into a FIFO whose room is counted
        # from registers --
        fifo = SyncFIFOBuffered(width=len(self.o.payload.as_value()), depth=8)
        m.submodules.fifo = fifo
        reading = Signal()
        r_job = Signal(range(jobs + 1))
        r_row = Signal(range(self.max_size + 1))
        r_word = Signal(range(self.region_words + 1))      # the byte, in whole words
        r_addr = Signal(range(self.depth + 1))
        r_base = Signal(range(self.depth + 1))             # the job's region
        pending = Signal(2)
        room = Signal()
        issue = reading & room
        row_words = s.pitch >> log_db
        row_end = r_word == row_words - 1
        m.d.sync += room.eq(fifo.level + pending + issue < fifo.depth - 1)
        m.d.comb += self.flush.ready.eq(~reading & (in_flight == 0))
        with m.If(self.flush.valid & self.flush.ready):
            m.d.sync += [reading.eq(1), r_job.eq(0), r_row.eq(0), r_word.eq(0), r_addr.eq(0),
                         r_base.eq(0)]
        for b, (_, rp) in enumerate(banks):
            m.d.comb += [rp.addr.eq(r_addr >> 1), rp.en.eq(issue)]
        # the word's bytes past the row's pixels are padding: zero
        r_pos = r_word << log_db
        keep = Cat(r_pos + k < s.row_bytes for k in range(db))
        d_keep, d_odd, d_job, d_last, d_valid = (Signal(db), Signal(), Signal(range(jobs)),
                                                 Signal(), Signal())
        m.d.sync += d_valid.eq(issue)
        with m.If(issue):
            m.d.sync += [d_keep.eq(keep), d_odd.eq(r_addr[0]), d_job.eq(r_job),
                         d_last.eq(row_end), r_addr.eq(r_addr + 1), r_word.eq(r_word + 1)]
            with m.If(row_end):
                m.d.sync += [r_word.eq(0), r_row.eq(r_row + 1)]
                with m.If(r_row == s.height - 1):
                    m.d.sync += [r_row.eq(0), r_job.eq(r_job + 1),
                                 r_base.eq(r_base + region), r_addr.eq(r_base + region)]
                    with m.If(r_job == s.jobs - 1):
                        m.d.sync += reading.eq(0)
        m.d.sync += pending.eq(issue)
        read = Mux(d_odd, banks[1][1].data, banks[0][1].data)
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
