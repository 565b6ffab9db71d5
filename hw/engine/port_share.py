"""The DMAs shared by the foreground and one background unit: a detached descriptor's
(docs/architecture.md section 15, frames in flight).

The foreground is the sequencer and the unit it waits for; the background is the unit of
a detached descriptor (the stem of the next frame, ``groupnet_hw.engine_opcodes``),
which runs beside it. Both issue commands to the one read DMA and the one write DMA,
whose words come back, and must be given, in command order. The read commands in flight
pass through a queue that records whose each is and its words, so the read words go back
to their issuer; the write DMA has one command open at a time (it takes the next once
the last burst of one has its words), so a register says whose words it takes.

Neither side may stall the other for good. A read word that its issuer cannot take
holds every word behind it, and a write command whose words are not yet made holds
every command behind it; with two issuers that could be a cycle (the background's write
waits behind a foreground command whose words wait for reads behind background words
that wait for the background's write). So the background never does either: its reads
go to a buffer and are issued in pieces of at most ``piece`` words only while the buffer
has room for them, and its words to write collect in a buffer and a piece's command is
issued only once its words are there. The foreground is passed through unchanged; the
background goes first when both have a command (its commands are few: a stem's rows).
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..arith import positive_int
from ..fifo import block_ram_fifo
from .dma import descriptor_layout

__all__ = ["PortShare"]


class PortShare(wiring.Component):
    """The read and write DMAs' commands and words shared by two issuers.

    Parameters
    ----------
    data_width : int
        Bits of a bus word (the DMAs').
    addr_width : int
        Bits of a byte address and of a command's length.
    piece : int
        Most words of a background command issued at once (a power of two: the DMAs'
        ``max_burst``, so a piece is one burst).
    depth : int
        Words of each background buffer (at least ``2 * piece``, so that one piece
        moves while the next collects).
    tags : int
        Read commands in flight at most (their words not all moved): a foreground of
        short reads (a streamed layer's side slices of 6 words, 8 bursts in flight)
        needs more than the DMA's bursts in flight. (The write DMA takes a command only
        with the one before's words all taken, so one write command is open at a time.)

    Ports
    -----
    fg_rd_cmd, bg_rd_cmd : ``In(stream.Signature(descriptor_layout(addr_width)))``
        Each issuer's read commands; a background command is taken whole into a
        register and issued in pieces.
    rd_cmd : ``Out(...)``
        To the read DMA.
    rd_words : ``In(stream.Signature(data_width))``
        The read DMA's words.
    fg_rd, bg_rd : ``Out(stream.Signature(data_width))``
        Each issuer's words, in its commands' order.
    fg_wr_cmd, bg_wr_cmd, wr_cmd : as the reads', for the write DMA.
    fg_wr, bg_wr : ``In(stream.Signature(data_width))``
        Each issuer's words to write, in its commands' order.
    wr_words : ``Out(stream.Signature(data_width))``
        To the write DMA.
    bg_idle : ``Out(1)``
        The background has no command held or in flight, and no word buffered: every
        word it gave is with the write DMA (a fence then waits for the DMA to go idle).

    Latency
    -------
    Foreground: none (its command and words pass through in the cycle they come).
    Background: a read piece is issued the cycle after its room is there; a write
    piece the cycle after its last word is buffered (three cycles after it came).

    Throughput
    ----------
    A command a cycle, a word a cycle each way.
    """

    def __init__(self, *, data_width=128, addr_width=32, piece=16, depth=32, tags=16):
        for name, value in (("data_width", data_width), ("addr_width", addr_width),
                            ("piece", piece), ("depth", depth), ("tags", tags)):
            positive_int(f"PortShare: {name}", value)
        if piece & (piece - 1):
            raise ValueError(f"PortShare: piece ({piece}) must be a power of two")
        if depth < 2 * piece:
            raise ValueError(f"PortShare: depth ({depth}) must be at least 2 * piece ({piece})")
        self.data_width, self.addr_width = data_width, addr_width
        self.piece, self.depth, self.tags = piece, depth, tags
        self.log_bytes = exact_log2(data_width // 8)
        cmd = stream.Signature(descriptor_layout(addr_width))
        words = stream.Signature(unsigned(data_width))
        super().__init__({
            "fg_rd_cmd": In(cmd), "bg_rd_cmd": In(cmd), "rd_cmd": Out(cmd),
            "rd_words": In(words), "fg_rd": Out(words), "bg_rd": Out(words),
            "fg_wr_cmd": In(cmd), "bg_wr_cmd": In(cmd), "wr_cmd": Out(cmd),
            "fg_wr": In(words), "bg_wr": In(words), "wr_words": Out(words),
            "bg_idle": Out(1),
        })

    def _held(self, m, cmd, count_width):
        """A background command taken whole and cut into pieces of at most ``piece``
        words: returns (the next piece's address, its words ``n``: a register, 0 when
        none is held, and the signal to drive when it is issued)."""
        lb, piece = self.log_bytes, self.piece
        address = Signal(self.addr_width)
        after = Signal(count_width)                  # the command's words past the piece
        n = Signal(range(piece + 1))
        issued = Signal()

        def first(words):
            return Mux(words < piece, words, piece)

        words = cmd.payload.length[lb:]
        m.d.comb += cmd.ready.eq(n == 0)
        with m.If(cmd.valid & cmd.ready):
            m.d.sync += [address.eq(cmd.payload.address), n.eq(first(words)),
                         after.eq(words - first(words))]
        with m.Elif(issued):
            m.d.sync += [address.eq(address + (n << lb)), n.eq(first(after)),
                         after.eq(after - first(after))]
        return address, n, issued

    def elaborate(self, platform):
        m = Module()
        lb, depth = self.log_bytes, self.depth
        count_width = self.addr_width - lb

        def words_of(cmd):
            return cmd.payload.length[lb:]

        # ---- reads --------------------------------------------------------------
        # whose each read command in flight is and its words less one (many are in
        # flight: the read DMA takes the next once the last burst of one is asked for)
        rq = m.submodules.rd_tags = SyncFIFOBuffered(width=1 + count_width, depth=self.tags)
        r_moved = Signal(count_width)                # the head command's words moved
        r_bg = rq.r_data[0]
        r_last = r_moved == rq.r_data[1:]
        m.submodules.bg_rd_buffer = rbuf = block_ram_fifo(width=self.data_width, depth=depth)
        r_addr, r_n, r_issued = self._held(m, self.bg_rd_cmd, count_width)
        r_owed = Signal(range(rbuf.depth + 1))       # issued words not yet taken by bg_rd
        r_bg_go = (r_n != 0) & (r_owed + r_n <= rbuf.depth)
        m.d.comb += [
            self.rd_cmd.valid.eq(rq.w_rdy & (r_bg_go | self.fg_rd_cmd.valid)),
            self.rd_cmd.payload.address.eq(Mux(r_bg_go, r_addr,
                                               self.fg_rd_cmd.payload.address)),
            self.rd_cmd.payload.length.eq(Mux(r_bg_go, r_n << lb,
                                              self.fg_rd_cmd.payload.length)),
            self.fg_rd_cmd.ready.eq(rq.w_rdy & ~r_bg_go & self.rd_cmd.ready),
            rq.w_en.eq(self.rd_cmd.valid & self.rd_cmd.ready),
            rq.w_data.eq(Mux(r_bg_go, ((r_n - 1) << 1) | 1,
                             (words_of(self.fg_rd_cmd) - 1) << 1)),
            r_issued.eq(self.rd_cmd.valid & self.rd_cmd.ready & r_bg_go),
        ]
        bg_taken = self.bg_rd.valid & self.bg_rd.ready
        m.d.sync += r_owed.eq(r_owed + Mux(r_issued, r_n, 0) - bg_taken)
        # the words to their issuer (the background's always have room: r_owed)
        m.d.comb += [
            self.fg_rd.payload.eq(self.rd_words.payload),
            self.fg_rd.valid.eq(self.rd_words.valid & rq.r_rdy & ~r_bg),
            rbuf.w_data.eq(self.rd_words.payload),
            rbuf.w_en.eq(self.rd_words.valid & rq.r_rdy & r_bg),
            self.rd_words.ready.eq(rq.r_rdy & Mux(r_bg, rbuf.w_rdy, self.fg_rd.ready)),
            self.bg_rd.valid.eq(rbuf.r_rdy), self.bg_rd.payload.eq(rbuf.r_data),
            rbuf.r_en.eq(self.bg_rd.ready),
        ]
        r_moving = self.rd_words.valid & self.rd_words.ready
        with m.If(r_moving):
            m.d.sync += r_moved.eq(Mux(r_last, 0, r_moved + 1))
        m.d.comb += rq.r_en.eq(r_moving & r_last)

        # ---- writes -------------------------------------------------------------
        # the write DMA takes a command only once the last burst of the one before has
        # started, that is with all its words taken: one command's words are open at
        # a time, so a register says whose they are and how many are left
        m.submodules.bg_wr_buffer = wbuf = block_ram_fifo(width=self.data_width, depth=depth)
        w_addr, w_n, w_issued = self._held(m, self.bg_wr_cmd, count_width)
        w_ready = Signal(range(wbuf.depth + 1))      # buffered words of no piece yet
        open_bg = Signal()                           # the open command is a piece
        open_left = Signal(count_width)              # its words not yet given
        w_bg_go = (w_n != 0) & (w_ready >= w_n)
        w_free = open_left == 0
        m.d.comb += [
            self.wr_cmd.valid.eq(w_free & (w_bg_go | self.fg_wr_cmd.valid)),
            self.wr_cmd.payload.address.eq(Mux(w_bg_go, w_addr,
                                               self.fg_wr_cmd.payload.address)),
            self.wr_cmd.payload.length.eq(Mux(w_bg_go, w_n << lb,
                                              self.fg_wr_cmd.payload.length)),
            self.fg_wr_cmd.ready.eq(w_free & ~w_bg_go & self.wr_cmd.ready),
            w_issued.eq(self.wr_cmd.valid & self.wr_cmd.ready & w_bg_go),
        ]
        buffered = self.bg_wr.valid & self.bg_wr.ready
        m.d.sync += w_ready.eq(w_ready + buffered - Mux(w_issued, w_n, 0))
        m.d.comb += [wbuf.w_data.eq(self.bg_wr.payload), wbuf.w_en.eq(self.bg_wr.valid),
                     self.bg_wr.ready.eq(wbuf.w_rdy)]
        # the open command's words from its issuer
        w_open = ~w_free
        m.d.comb += [
            self.wr_words.valid.eq(w_open & Mux(open_bg, wbuf.r_rdy, self.fg_wr.valid)),
            self.wr_words.payload.eq(Mux(open_bg, wbuf.r_data, self.fg_wr.payload)),
            wbuf.r_en.eq(w_open & open_bg & self.wr_words.ready),
            self.fg_wr.ready.eq(w_open & ~open_bg & self.wr_words.ready),
        ]
        w_moving = self.wr_words.valid & self.wr_words.ready
        with m.If(self.wr_cmd.valid & self.wr_cmd.ready):
            m.d.sync += [open_bg.eq(w_bg_go),
                         open_left.eq(Mux(w_bg_go, w_n, words_of(self.fg_wr_cmd)))]
        with m.Elif(w_moving):
            m.d.sync += open_left.eq(open_left - 1)

        m.d.comb += self.bg_idle.eq((r_n == 0) & (r_owed == 0) & (w_n == 0) & (w_ready == 0)
                                    & ~(open_bg & w_open) & ~wbuf.r_rdy)
        return m
