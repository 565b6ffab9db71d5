"""The intended engine's row writer: the output packer's bus words, every job's
interleaved, into write DMA commands of one job's consecutive words
(docs/architecture.md section 15).

Each job (an array's base) writes its own map, and a map's rows lie one after another
in DRAM (section 12: a row is whole bus words, its padding included), so a job's words
go to consecutive addresses from its map's first byte: no row pitch, only an address a
job. The packer interleaves the jobs a word at a time, and a DMA command is one
region of consecutive words, so each job's words collect in a region of their own of
one buffer memory, ``chunk`` words a command: a chunk is closed when it is full or at a
row's last word (so that a descriptor's end leaves nothing behind), and closed chunks
go out in the order they closed, each a command (the job's address, its bytes) and its
words, the job's address then advanced. Two chunks a job are held, so one fills while
the other goes out.

A row may also be a *slice* of a pixel (a weight chunk's channels, written straight to
its place in the map when the map does not fit the map buffer): after a row's last word
the address of a job below ``skip_jobs`` steps ``skip`` bytes further, past the pixel's
other channels, to the next pixel's slice; such a job's first slice lies ``offset``
bytes into its pixel (the chunk's first channel), added to its commands' addresses by
one adder rather than to each job's base.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith import positive_int
from ..fifo import block_ram_fifo

from .dma import descriptor_layout
from .packer import packed_word_layout

__all__ = ["RowWriter"]

#: words read ahead of the output (its FIFO's depth); a read is issued only with room,
#: counted from registers
_OUT_DEPTH = 4


class RowWriter(wiring.Component):
    """Turns each job's words into commands of up to ``chunk`` consecutive words.

    Parameters
    ----------
    arrays : int
        Jobs a descriptor's round writes at once (the packer's).
    data_width : int
        The bus word (the packer's and the write DMA's).
    chunk : int
        Words a command at most: a power of two, at most the write DMA's ``max_burst``
        so that a command is one burst (fewer, longer commands leave the DMA's command
        turnaround a smaller share).
    addr_width : int
        Bits of a byte address.
    max_skip : int
        The most bytes a row's end skips.

    Ports
    -----
    i : ``In(stream.Signature(packed_word_layout(arrays, data_width)))``
        The packer's words (:class:`~.packer.OutputPacker`); ``last``, a row's last
        word, closes the job's chunk.
    bases : ``In(ArrayLayout(unsigned(addr_width), arrays))``
        Each job's map's first byte, taken on ``start``.
    skip, skip_jobs : ``In(range(max_skip + 1))``, ``In(range(arrays + 1))``
        Bytes a job below ``skip_jobs`` skips after a row's last word (0: rows follow
        each other); held while not ``idle``.
    offset : ``In(range(max_skip + 1))``
        Bytes past its base a job below ``skip_jobs`` writes its first word, taken on
        ``start``.
    start : ``In(1)``
        A pulse while ``idle``: the jobs' addresses are ``bases`` again (a descriptor's,
        or a round's, first word follows).
    cmd : ``Out(stream.Signature(descriptor_layout(addr_width)))``
        To :class:`~.dma.WriteDMA`'s ``cmd``: a chunk's address and bytes.
    o : ``Out(stream.Signature(unsigned(data_width)))``
        To the write DMA's ``i``: the chunks' words, chunk after chunk in the order of
        the commands.
    idle : ``Out(1)``
        No word is held, no command or word waits to go out.

    Latency
    -------
    A chunk's command leaves 6 cycles after the word that closes it is taken, its
    first word 9 cycles after (the input register, the chunk queue's three, the command
    register; the buffer's read and the output FIFO's two), consumers ready.

    Throughput
    ----------
    A word a cycle in and out; a command a chunk. ``i.ready`` is a register: low while
    some job holds nearly two chunks (its words wait for the DMA).
    """

    def __init__(self, *, arrays, data_width=128, chunk=16, addr_width=32, max_skip=1):
        for name, value in (("arrays", arrays), ("data_width", data_width), ("chunk", chunk),
                            ("addr_width", addr_width)):
            positive_int(f"RowWriter: {name}", value)
        if chunk < 2 or chunk & (chunk - 1):
            raise ValueError(f"RowWriter: chunk ({chunk}) must be a power of two of at "
                             "least 2 (a job's region is two chunks of the buffer)")
        if data_width % 8:
            raise ValueError(f"RowWriter: data_width ({data_width}) must be whole bytes")
        self.arrays, self.data_width, self.chunk = arrays, data_width, chunk
        self.addr_width, self.max_skip = addr_width, max_skip
        super().__init__({
            "i": In(stream.Signature(packed_word_layout(arrays, data_width))),
            "bases": In(data.ArrayLayout(unsigned(addr_width), arrays)),
            "start": In(1),
            "skip": In(range(max_skip + 1)), "skip_jobs": In(range(arrays + 1)),
            "offset": In(range(max_skip + 1)),
            "cmd": Out(stream.Signature(descriptor_layout(addr_width))),
            "o": Out(stream.Signature(unsigned(data_width))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        arrays, chunk, wb = self.arrays, self.chunk, self.data_width // 8
        region = 2 * chunk                       # a job's words in the buffer
        m.submodules.buffer = buffer = Memory(shape=unsigned(self.data_width),
                                              depth=arrays * region, init=[],
                                              attrs={"no_rw_check": 1})
        wp, rp = buffer.write_port(), buffer.read_port(transparent_for=())

        held = [Signal(range(region + 1), name=f"held{j}") for j in range(arrays)]
        wr = [Signal(range(region), name=f"wr{j}") for j in range(arrays)]
        fill = [Signal(range(chunk), name=f"fill{j}") for j in range(arrays)]
        rd = [Signal(range(region), name=f"rd{j}") for j in range(arrays)]
        addr = [Signal(self.addr_width, name=f"addr{j}") for j in range(arrays)]

        # -- in: a word registered, then written into its job's region --
        w = Signal(packed_word_layout(arrays, self.data_width))
        w_valid = Signal()
        ready = Signal(init=1)
        m.d.comb += self.i.ready.eq(ready)
        m.d.sync += w_valid.eq(self.i.valid & ready)
        with m.If(ready):
            m.d.sync += w.eq(self.i.payload)
        # closed chunks, in the order they closed: (job, words); each word's chunk may
        # be short, so as many as the words the buffer holds
        # with its address step, the bytes and any skip after them, added up on the way
        # in, so that the address adder on the way out keeps two operands
        chunk_layout = data.StructLayout({"job": range(arrays), "n": range(1, chunk + 1),
                                          "step": range(chunk * wb + self.max_skip + 1)})
        # in block RAM with a register behind it: the queue's read data straight from a
        # block RAM (5.8 ns on ECP5) into the address adder placed the writer at 66 MHz
        m.submodules.chunks = chunks = block_ram_fifo(width=chunk_layout.size,
                                                      depth=arrays * region)
        closed = Signal(chunk_layout)
        m.d.comb += [chunks.w_data.eq(closed.as_value()), closed.job.eq(w.job),
                     closed.step.eq(closed.n * wb + Mux(w.last & (w.job < self.skip_jobs),
                                                        self.skip, 0))]
        sel_in = [w_valid & (w.job == j) for j in range(arrays)]
        for j in range(arrays):
            with m.If(sel_in[j]):
                m.d.comb += [wp.addr.eq(Cat(wr[j], Const(j, range(arrays)))),
                             closed.n.eq(fill[j] + 1)]
                m.d.sync += wr[j].eq(wr[j] + 1)
                with m.If(w.last | (fill[j] == chunk - 1)):
                    m.d.comb += chunks.w_en.eq(1)
                    m.d.sync += fill[j].eq(0)
                with m.Else():
                    m.d.sync += fill[j].eq(fill[j] + 1)
        m.d.comb += [wp.data.eq(w.data), wp.en.eq(w_valid)]

        # -- out: a chunk's command, then its words read one a cycle --
        cmd_out = Signal(descriptor_layout(self.addr_width))
        cmd_full = Signal()
        job = Signal(range(arrays))
        left = Signal(range(chunk + 1))          # the chunk's words still to read
        credits = Signal(range(_OUT_DEPTH + 1), init=_OUT_DEPTH)
        head = data.View(chunk_layout, chunks.r_data)
        read = Signal()
        m.d.comb += read.eq((left != 0) & (credits != 0))
        # a chunk is taken as the previous one's last word is read (or after) once its
        # command has gone; the command register holds one
        take = chunks.r_rdy & ((left == 0) | ((left == 1) & read)) & ~cmd_full
        m.d.comb += chunks.r_en.eq(take)
        # the chunk's job's address, and one adder for every job's next
        at = Signal(self.addr_width)
        m.d.comb += at.eq(Array(addr)[head.job])
        offset = Signal.like(self.offset)
        with m.If(take):
            m.d.sync += [job.eq(head.job), left.eq(head.n), cmd_full.eq(1),
                         cmd_out.length.eq(head.n * wb),
                         cmd_out.address.eq(at + Mux(head.job < self.skip_jobs, offset, 0))]
            for j in range(arrays):
                with m.If(head.job == j):
                    m.d.sync += addr[j].eq(at + head.step)
        with m.Elif(self.cmd.ready):
            m.d.sync += cmd_full.eq(0)
        m.d.comb += [self.cmd.valid.eq(cmd_full), self.cmd.payload.eq(cmd_out)]

        sel_out = [read & (job == j) for j in range(arrays)]
        for j in range(arrays):
            with m.If(sel_out[j]):
                m.d.comb += rp.addr.eq(Cat(rd[j], Const(j, range(arrays))))
                m.d.sync += rd[j].eq(rd[j] + 1)
        with m.If(read & ~take):
            m.d.sync += left.eq(left - 1)
        m.d.comb += rp.en.eq(1)
        r_valid = Signal()
        m.d.sync += r_valid.eq(read)
        m.submodules.out = out = SyncFIFOBuffered(width=self.data_width, depth=_OUT_DEPTH)
        m.d.comb += [out.w_data.eq(rp.data), out.w_en.eq(r_valid),
                     self.o.payload.eq(out.r_data), self.o.valid.eq(out.r_rdy),
                     out.r_en.eq(self.o.ready)]
        m.d.sync += credits.eq(credits - read + (self.o.valid & self.o.ready))

        # each job's words held: in as written, out as read. The input stays open while
        # every job could take the word in the register and one more, counted without
        # this cycle's read (a word freed is seen a cycle later), so that the output's
        # progress reaches no part of `ready`'s next state
        next_held = [held[j] + sel_in[j] - sel_out[j] for j in range(arrays)]
        m.d.sync += [held[j].eq(next_held[j]) for j in range(arrays)]
        ok = Const(1)
        for j in range(arrays):
            ok = ok & (held[j] + sel_in[j] <= region - 2)
        m.d.sync += ready.eq(ok)

        with m.If(self.start):
            m.d.sync += [addr[j].eq(self.bases[j]) for j in range(arrays)]
            m.d.sync += offset.eq(self.offset)
        empty = Const(1)
        for j in range(arrays):
            empty = empty & (held[j] == 0)
        m.d.comb += self.idle.eq(~w_valid & empty & ~chunks.r_rdy & (left == 0) & ~cmd_full
                                 & (credits == _OUT_DEPTH))
        return m
