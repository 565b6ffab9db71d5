"""The engine of the units' subsampler: a SUBSAMPLE descriptor (option-A shortcuts'
``x[:, :, ::s, ::s]``), DRAM to DRAM.

Each job (its job-table entry: an input map and an output map) is copied a pixel at a
time: for each output row, a write command of the row, then a read command of each
pixel it keeps (every ``stride``-th pixel of every ``stride``-th input row), whose words
go straight to the write DMA. A pixel is whole bus words (the maps' elements are
copied, not repacked: 16 channels of 16 bits are two words at 128 bits), so no word is
split; the unit refuses other pixels, other stages and flags, a format change, and a
kernel or padding, with ``error`` and the cause ``unsupported`` before any transfer.
Every address goes through the DMAs, which check it against the host's window.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.utils import exact_log2

from ...engine_format import FLAG_BITS, OPCODE_CODES
from ..arith import positive_int
from .runner import (bits_of, compute_unit_members, descriptor_fields, job_entry_field,
                     refuse_or_read_entry)

__all__ = ["SubsampleRunner", "SUBSAMPLE_ELEMS"]

#: element bits of the maps it copies (binary maps and fixed-point ones of whole bytes)
SUBSAMPLE_ELEMS = (1, 8, 16, 24, 32)
_FLAGS = FLAG_BITS["shared_input"]


class SubsampleRunner(wiring.Component):
    """Runs a SUBSAMPLE descriptor: each job's map, every ``stride``-th pixel of every
    ``stride``-th row, DRAM to DRAM.

    Parameters
    ----------
    data_width : int
        The DMAs' bus word: a power of two of at least 128 bits (a job-table entry is 16
        bytes).
    addr_width : int
        Bits of a byte address.
    max_size : int
        The largest map side.
    max_stride : int
        The largest stride.
    max_channels : int
        The most channels of a map.

    Ports
    -----
    desc, rd_cmd, rd, wr_cmd, wr, done, error, error_code, idle
        A compute unit's (:func:`~.runner.compute_unit_members`).

    Latency
    -------
    The descriptor's products (a cycle a bit of the channels and of the stride), the
    job table's read, then each pixel's read latency (reads are issued a cycle each
    while the read DMA takes them; their words follow in order).

    Throughput
    ----------
    A pixel's read command a cycle; its words at the read DMA's pace, which a pixel's
    short bursts bound by its latency over its bursts in flight.
    """

    def __init__(self, *, data_width=128, addr_width=32, max_size=256, max_stride=4,
                 max_channels=1024):
        for name, value in (("data_width", data_width), ("addr_width", addr_width),
                            ("max_size", max_size), ("max_stride", max_stride),
                            ("max_channels", max_channels)):
            positive_int(f"SubsampleRunner: {name}", value)
        if data_width % 128 or data_width & (data_width - 1):
            raise ValueError(f"SubsampleRunner: data_width ({data_width}) must be a power of "
                             "two of at least 128 bits: a job-table entry is 16 bytes")
        self.data_width, self.addr_width = data_width, addr_width
        self.max_size, self.max_stride, self.max_channels = max_size, max_stride, max_channels
        super().__init__(compute_unit_members(data_width, addr_width))

    def supported(self, d, pixel_bytes, row_bytes):
        """The conditions under which the unit runs descriptor ``d``, a bit each, given
        ``pixel_bytes`` and ``row_bytes`` (a pixel's and an output row's bytes,
        registered from the descriptor)."""
        db = self.data_width // 8
        fits = lambda value, bound: (value != 0) & (value <= bound)        # noqa: E731
        elem_ok = Const(0)
        for e in SUBSAMPLE_ELEMS:
            elem_ok = elem_ok | (d.in_elem == e)
        return Cat(
            d.opcode == OPCODE_CODES["SUBSAMPLE"], d.stages == 0, (d.flags & ~_FLAGS) == 0,
            d.jobs != 0, d.kernel == 1, d.padding == 0, fits(d.stride, self.max_stride),
            d.in_fmt == d.out_fmt, d.in_elem == d.out_elem, elem_ok,
            fits(d.in_c, self.max_channels), d.out_c == d.in_c,
            fits(d.in_h, self.max_size), fits(d.in_w, self.max_size),
            d.out_h != 0, d.out_w != 0, d.out_h <= d.in_h, d.out_w <= d.in_w,
            # a pixel whole bus words: rows of whole pixels, no padding to repack
            pixel_bytes != 0, pixel_bytes[:exact_log2(db)] == 0,
            d.in_pitch[:exact_log2(db)] == 0, d.out_pitch == row_bytes)

    def elaborate(self, platform):
        m = Module()
        db = self.data_width // 8
        log_db = exact_log2(db)
        aw = self.addr_width
        d = Signal(descriptor_fields())
        rd_cmd, wr_cmd = self.rd_cmd, self.wr_cmd

        # the descriptor's products, by shifted adds a bit a cycle (no multiplier for a
        # descriptor's three products)
        pixel_bytes = Signal(bits_of(self.max_channels) + 3)
        pixel_step = Signal(aw)                       # stride x pixel bytes
        row_step = Signal(aw)                         # stride x the input's pitch
        row_bytes = Signal(aw)                        # out_w x pixel bytes
        conditions = self.supported(d, pixel_bytes, row_bytes)
        ok = Signal(len(conditions))
        channels = Signal(bits_of(self.max_channels))
        stride_left = Signal(bits_of(self.max_stride))
        width_left = Signal(bits_of(self.max_size))
        pixel_shifted, pitch_shifted = Signal(aw), Signal(aw)
        step = Signal(range(max(bits_of(self.max_channels), bits_of(self.max_size)) + 2))

        entry = Signal(128)
        jobs_left = Signal(8)
        in_row, out_row, pixel_addr = Signal(aw), Signal(aw), Signal(aw)
        rows_left = Signal(bits_of(self.max_size))
        pixels_left = Signal(bits_of(self.max_size))
        # words asked for and not yet handed to the write DMA
        owed = Signal(aw)

        # the words, straight from the read DMA to the write DMA, but a job-table
        # entry's (read once every pixel word asked for has passed)
        passing = Signal()
        moved = passing & self.rd.valid & self.wr.ready
        m.d.comb += [self.wr.valid.eq(passing & self.rd.valid),
                     self.wr.payload.eq(self.rd.payload),
                     self.rd.ready.eq(passing & self.wr.ready)]
        asked = Signal()
        m.d.sync += owed.eq(owed + Mux(asked, pixel_bytes >> log_db, 0) - moved)

        with m.FSM(name="phase") as phase:
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.desc.ready.eq(1)]
                with m.If(self.desc.valid):
                    p = self.desc.payload
                    m.d.sync += [d.eq(p), step.eq(0), pixel_bytes.eq(0), pixel_step.eq(0),
                                 row_step.eq(0), row_bytes.eq(0),
                                 channels.eq(p.in_c[:len(channels)]),
                                 stride_left.eq(p.stride[:len(stride_left)]),
                                 width_left.eq(p.out_w[:len(width_left)])]
                    m.next = "PIXEL"
            with m.State("PIXEL"):
                # a pixel's bytes: the channels times the element's bytes (1 to 4: a
                # shifted copy of the channels a bit), or a binary map's channels / 8
                eb = d.in_elem[3:6]
                times = sum(Mux(eb[k], channels << k, 0) for k in range(3))
                m.d.sync += [pixel_bytes.eq(Mux(d.in_elem == 1, channels >> 3, times)),
                             pixel_shifted.eq(0), pitch_shifted.eq(d.in_pitch), step.eq(0)]
                m.next = "STEPS"
            with m.State("STEPS"):
                # stride x pixel, stride x pitch, out_w x pixel: a bit a cycle
                with m.If(step == 0):
                    m.d.sync += pixel_shifted.eq(pixel_bytes)
                with m.Else():
                    with m.If(stride_left[0]):
                        m.d.sync += [pixel_step.eq(pixel_step + pixel_shifted),
                                     row_step.eq(row_step + pitch_shifted)]
                    with m.If(width_left[0]):
                        m.d.sync += row_bytes.eq(row_bytes + pixel_shifted)
                    m.d.sync += [stride_left.eq(stride_left >> 1),
                                 width_left.eq(width_left >> 1),
                                 pixel_shifted.eq(pixel_shifted << 1),
                                 pitch_shifted.eq(pitch_shifted << 1)]
                m.d.sync += step.eq(step + 1)
                with m.If(step == max(len(stride_left), len(width_left))):
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [ok.eq(conditions), jobs_left.eq(d.jobs)]
                m.next = "DECIDE"
            refuse_or_read_entry(m, self, d, ok, entry, "ADDRESSES")
            with m.State("ADDRESSES"):
                m.d.sync += [in_row.eq(job_entry_field(entry, "in_addr")),
                             pixel_addr.eq(job_entry_field(entry, "in_addr")),
                             out_row.eq(job_entry_field(entry, "out_addr")),
                             rows_left.eq(d.out_h), pixels_left.eq(d.out_w)]
                m.next = "ROW"
            with m.State("ROW"):
                # the output row's write, then its pixels' reads
                m.d.comb += [wr_cmd.valid.eq(1), wr_cmd.payload.address.eq(out_row),
                             wr_cmd.payload.length.eq(row_bytes)]
                with m.If(wr_cmd.ready):
                    m.next = "PIXELS"
            with m.State("PIXELS"):
                m.d.comb += [rd_cmd.valid.eq(1), rd_cmd.payload.address.eq(pixel_addr),
                             rd_cmd.payload.length.eq(pixel_bytes), asked.eq(rd_cmd.ready)]
                with m.If(rd_cmd.ready):
                    m.d.sync += [pixel_addr.eq(pixel_addr + pixel_step),
                                 pixels_left.eq(pixels_left - 1)]
                    with m.If(pixels_left == 1):
                        m.d.sync += [in_row.eq(in_row + row_step),
                                     pixel_addr.eq(in_row + row_step),
                                     out_row.eq(out_row + d.out_pitch),
                                     rows_left.eq(rows_left - 1), pixels_left.eq(d.out_w)]
                        with m.If(rows_left == 1):
                            m.d.sync += jobs_left.eq(jobs_left - 1)
                            m.next = "NEXT_JOB"
                        with m.Else():
                            m.next = "ROW"
            with m.State("NEXT_JOB"):
                with m.If(jobs_left == 0):
                    m.next = "DRAIN"
                with m.Elif(owed == 0):
                    # the next entry of the job table (16 bytes on)
                    m.d.sync += d.table_addr.eq(d.table_addr + 16)
                    m.next = "TABLE"
            with m.State("DRAIN"):
                with m.If(owed == 0):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        m.d.comb += passing.eq(~phase.ongoing("TABLE") & ~phase.ongoing("ENTRY"))
        return m
