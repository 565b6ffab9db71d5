"""The intended engine's row replay: a row of an input map that every job of a round
reads (the descriptor's ``shared_input``), read from DRAM once and given out once a job
(docs/architecture.md section 15).

The jobs of a round load their rows one job after another (a row of each job's map in
turn, :class:`~.loader.RowLoader`); where they all read one map, each job's row is the
same words. Read once a job, ResNet-18's first stage read its 56 x 56 x 64 map of 16-bit
elements five times: 2 MB a frame instead of 401 KB, the descriptor +74 % over the cycle
model's cycles. This unit holds the row instead: two slots of ``row_words`` bus words,
the row given out and the next row's words arriving while it is, so that the next row's
read overlaps the jobs' passes over this one.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..arith import positive_int

__all__ = ["RowReplay"]


class RowReplay(wiring.Component):
    """A row in once, out as often as the jobs read it.

    Parameters
    ----------
    data_width : int
        Bits of a bus word.
    row_words : int
        Bus words of a slot (a power of two): the longest row it holds.

    Ports
    -----
    words : ``In(range(row_words + 1))``
        Bus words of a row (held while rows come in and go out; at least 1).
    i : ``In(stream.Signature(data_width))``
        Rows' words, ``words`` a row, into the slot after the last row's. Taken while
        that slot is free, so a user that reads a row only while at most one other is
        held (the one given out last, once its jobs are done with it, and this one)
        never waits here.
    cmd : ``In(stream.Signature(StructLayout({"fresh": 1})))``
        Give a row out on ``o``: with ``fresh`` the row after the last one given out
        (that row's slot is free from then on), once its words are all in; else the last
        one again. Taken once the row before is out.
    o : ``Out(stream.Signature(data_width))``
        The row's words, in order.
    idle : ``Out(1)``
        No row is being given out.

    Latency
    -------
    3 cycles from a command (its row in) to its first word on ``o``.

    Throughput
    ----------
    A word a cycle in and out at once.
    """

    def __init__(self, *, data_width=128, row_words=512):
        positive_int("RowReplay: data_width", data_width)
        positive_int("RowReplay: row_words", row_words)
        if row_words & (row_words - 1):
            raise ValueError(f"RowReplay: row_words ({row_words}) must be a power of two")
        self.data_width, self.row_words = data_width, row_words
        super().__init__({
            "words": In(range(row_words + 1)),
            "i": In(stream.Signature(data_width)),
            "cmd": In(stream.Signature(data.StructLayout({"fresh": 1}))),
            "o": Out(stream.Signature(data_width)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.row_words
        m.submodules.mem = mem = Memory(shape=unsigned(self.data_width), depth=2 * n, init=[])
        wp, rp = mem.write_port(), mem.read_port()
        addr_bits = exact_log2(n)

        # -- in: each row into the next slot, which is full once its last word is in --
        full = Signal(2)
        w_slot = Signal()
        w_at = Signal(range(n))
        row_in = self.i.valid & self.i.ready & (w_at == self.words - 1)
        m.d.comb += [self.i.ready.eq(~full.bit_select(w_slot, 1)),
                     wp.en.eq(self.i.valid & self.i.ready),
                     wp.addr.eq(Cat(w_at[:addr_bits], w_slot)), wp.data.eq(self.i.payload)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += w_at.eq(w_at + 1)
            with m.If(row_in):
                m.d.sync += [w_at.eq(0), w_slot.eq(~w_slot)]

        # -- out: the slot given out (none before the first fresh row) --
        r_slot = Signal()
        has_row = Signal()
        freed = Signal(2)                # the slot a fresh command moves off
        m.d.sync += full.eq((full | (row_in << w_slot)) & ~freed)
        r_at = Signal(range(n + 1))
        o_valid = Signal()
        # a word read while the one out is taken (or none is out): the read port's
        # data stays while `o` waits
        advance = ~o_valid | self.o.ready
        reading = Signal()
        m.d.comb += [rp.addr.eq(Cat(r_at[:addr_bits], r_slot)), rp.en.eq(advance),
                     self.o.valid.eq(o_valid), self.o.payload.eq(rp.data)]
        with m.If(advance):
            m.d.sync += o_valid.eq(reading)
            with m.If(reading):
                m.d.sync += r_at.eq(r_at + 1)
        with m.FSM(name="replay"):
            with m.State("IDLE"):
                m.d.comb += [self.cmd.ready.eq(~o_valid), self.idle.eq(~o_valid)]
                with m.If(self.cmd.valid & ~o_valid):
                    m.d.sync += r_at.eq(0)
                    with m.If(self.cmd.payload.fresh):
                        m.d.sync += [has_row.eq(1), r_slot.eq(r_slot ^ has_row)]
                        m.d.comb += freed.eq(has_row << r_slot)
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(full.bit_select(r_slot, 1)):
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += reading.eq(r_at != self.words)
                with m.If(advance & ~reading):
                    m.next = "IDLE"
        return m

