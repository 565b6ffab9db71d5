"""The intended engine's constant loader: a job's post-op and threshold sections, as the
read DMA delivers them from its parameter block (docs/architecture.md section 12,
*Parameter blocks*), into the epilogue feeder's constant buffers (section 15).

In DRAM a section is constants of ``const_bytes`` bytes (little-endian two's
complement), from a port-aligned offset:

- ``postop``: ``shift``, ``flags`` (bit 0 pre-ReLU, bit 1 post-ReLU), then ``A[c], B[c]``
  channel after channel;
- ``thr``: ``T[c][0 .. L-1]`` channel after channel, then the ``invert`` bits, bit ``c``
  of the bit vector LSB first.

Every item of a section, the invert bits' bytes included, starts on a multiple of
``const_bytes`` within it, so a bus word is ``data_width / (8 * const_bytes)`` whole
items: the loader takes one a cycle, and puts ``lanes`` channels' values together into
the word the feeder reads for them, at ``base + c // lanes`` (a job's words are
consecutive: ``(k * out_folds + nf) * pe / lanes + p`` is ``k * out_folds * pe / lanes
+ c // lanes``). Post-op pairs, thresholds and invert bits are three buffers of the
feeder, written apart, since a channel's thresholds come in a later section than its
pair and its invert bit after every threshold.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import positive_int
from .epilogue import SHIFT_BITS, scale_width

__all__ = ["ConstantLoader", "section_layout", "job_postop_layout", "constant_layouts",
           "word_streams",
           "POSTOP", "THR"]

#: the ``section`` of a command
POSTOP, THR = 0, 1


def job_postop_layout():
    """A job's own post-op settings (its ``postop`` section's first two constants)."""
    return data.StructLayout({"shift": unsigned(SHIFT_BITS), "pre_relu": unsigned(1),
                              "post_relu": unsigned(1)})


def constant_layouts(lanes, const_width, value_width, max_levels):
    """The words of ``lanes`` channels the loader writes and the feeder's and the level
    lanes' buffers hold: post-op ``a`` and ``b`` (``ab``), thresholds (``thr``), invert
    bits (``inv``)."""
    return {
        "ab": data.StructLayout({"a": data.ArrayLayout(signed(scale_width(const_width)), lanes),
                                 "b": data.ArrayLayout(signed(const_width), lanes)}),
        "thr": data.StructLayout({"t": data.ArrayLayout(
            data.ArrayLayout(signed(value_width), max(1, max_levels)), lanes)}),
        "inv": data.StructLayout({"invert": unsigned(lanes)}),
    }


def word_streams(layouts, names, addr):
    """The streams of ``layouts``' words ``names``, each with its buffer address."""
    return {name: stream.Signature(data.StructLayout({"addr": addr, **layouts[name].members}))
            for name in names}


def section_layout(arrays, max_channels, max_levels, max_words, max_beats):
    """A command: job ``job``'s section ``section`` (:data:`POSTOP` or :data:`THR`) of
    ``channels`` channels (``levels`` thresholds each), its feeder words from ``base``,
    ``beats`` bus words in DRAM."""
    return data.StructLayout({
        "job": range(arrays), "section": unsigned(1),
        "channels": range(1, max_channels + 1), "levels": range(1, max_levels + 1),
        "base": range(max_words), "beats": range(1, max_beats + 1),
    })


class ConstantLoader(wiring.Component):
    """Unpacks parameter sections into the feeder's constant words, a constant a cycle.

    Parameters
    ----------
    arrays, lanes : int
        The feeder's jobs and lanes (``lanes`` divides 32: invert bits come 32 or 64 a
        constant).
    const_width, value_width, max_levels : int
        The epilogue's (:class:`~.epilogue.EpilogueLanes`): ``b`` is ``const_width``
        bits, ``a`` :func:`~.epilogue.scale_width` bits, thresholds ``value_width``; a
        constant in DRAM is cut to them (the compiler proves they fit).
    data_width : int
        The read DMA's bus word: a multiple of 64 bits, so whole constants of 4 and 8
        bytes.
    max_channels, max_words : int
        Bounds of the channels of a section and of the feeder's buffer words.

    Ports
    -----
    cmd : ``In(stream.Signature(section_layout(...)))``
        A section to load; taken when the previous one is done.
    const_bytes : ``In(range(9))``
        4 or 8 (the descriptor's), held while not ``idle``.
    data : ``In(stream.Signature(data_width))``
        The section's ``beats`` bus words (the read DMA's ``o``).
    ab : ``Out(stream.Signature(StructLayout({"addr", "a", "b"})))``
        Post-op words: ``lanes`` channels' ``a`` and ``b``.
    thr : ``Out(stream.Signature(StructLayout({"addr", "t"})))``
        Threshold words: ``lanes`` channels' ``max_levels`` thresholds (those past
        ``levels`` 0).
    inv : ``Out(stream.Signature(StructLayout({"addr", "invert"})))``
        Invert words: ``lanes`` channels' bits.
    postops : ``Out(ArrayLayout(job_postop_layout(), arrays))``
        Each job's shift and ReLU flags, from its post-op section, held.
    idle : ``Out(1)``

    Latency
    -------
    A word goes out 2 cycles after the bus word holding its last constant is taken.

    Throughput
    ----------
    A constant a cycle: a post-op section of ``C`` channels takes ``2 + 2 C`` cycles, a
    threshold section ``C L`` and a cycle for each constant of invert bits.
    """

    def __init__(self, *, arrays, lanes, const_width=32, value_width=32, max_levels=1,
                 data_width=128, max_channels=512, max_words=1024):
        for name, value in (("arrays", arrays), ("lanes", lanes),
                            ("const_width", const_width), ("value_width", value_width),
                            ("max_levels", max_levels), ("data_width", data_width),
                            ("max_channels", max_channels), ("max_words", max_words)):
            positive_int(f"ConstantLoader: {name}", value)
        if 32 % lanes:
            raise ValueError(f"ConstantLoader: lanes ({lanes}) must divide 32 (invert bits "
                             "come a constant of 32 or 64 at a time)")
        if data_width % 64:
            raise ValueError(f"ConstantLoader: data_width ({data_width}) must be a multiple "
                             "of 64 (whole constants of 4 and 8 bytes)")
        self.arrays, self.lanes, self.max_levels = arrays, lanes, max_levels
        self.const_width, self.value_width, self.data_width = const_width, value_width, data_width
        self.max_channels, self.max_words = max_channels, max_words
        max_beats = -(-(max_channels * (max_levels + 2) * 8 + max_channels) * 8 // data_width) + 2
        addr = range(max_words)
        super().__init__({
            "cmd": In(stream.Signature(section_layout(arrays, max_channels, max_levels,
                                                      max_words, max_beats))),
            "const_bytes": In(range(9)),
            "data": In(stream.Signature(data_width)),
            **{name: Out(sig) for name, sig in word_streams(
                constant_layouts(lanes, const_width, value_width, max_levels),
                ("ab", "thr", "inv"), addr).items()},
            "postops": Out(data.ArrayLayout(job_postop_layout(), arrays)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, levels, dw = self.lanes, self.max_levels, self.data_width
        sec = Signal(self.cmd.payload.shape())
        busy = Signal()

        # -- items: the bus word held, a constant of 4 or 8 bytes taken a cycle --
        word = Signal(dw)
        have = Signal(range(dw // 32 + 1))          # constants left in `word`
        beats_left = Signal.like(sec.beats)
        wide = self.const_bytes == 8
        per_word = Mux(wide, dw // 64, dw // 32)
        item = Signal(64)
        m.d.comb += item.eq(Mux(wide, word[:64], Cat(word[:32], word[31].replicate(32))))
        # every output is a register with a one-beat hand-off: a constant is consumed
        # only while the output it may complete is free
        outs = (self.ab, self.thr, self.inv)
        free = Const(1)
        for o in outs:
            free = free & (~o.valid | o.ready)
        for o in outs:
            with m.If(o.ready):
                m.d.sync += o.valid.eq(0)
        take_word = busy & (have == 0) & (beats_left != 0)
        m.d.comb += self.data.ready.eq(take_word)
        got = take_word & self.data.valid
        with m.If(got):
            m.d.sync += [word.eq(self.data.payload), have.eq(per_word),
                         beats_left.eq(beats_left - 1)]
        step = busy & (have != 0) & free

        # -- where the item goes: the section's counters --
        c = Signal(range(self.max_channels + 1))     # channel
        lv = Signal(range(max(levels, 2)))           # threshold within the channel
        head = Signal(range(3))                      # postop: shift, flags, then pairs
        second = Signal()                            # postop pair: B next
        lane = Signal(range(lanes))
        waddr = Signal(range(self.max_words))
        in_inv = Signal()                            # thr: the invert bits' constants
        done_items = Signal()                        # the rest of the section is padding
        a_acc = Signal(self.ab.payload.a.shape())
        b_acc = Signal(self.ab.payload.b.shape())
        t_acc = Signal(self.thr.payload.t.shape())
        job = sec.job

        def next_channel(last_kind):
            """After a channel's last item: the next lane, or the word out."""
            full = (lane == lanes - 1) | (c == sec.channels - 1)
            with m.If(full):
                last_kind()
                m.d.sync += [lane.eq(0), waddr.eq(waddr + 1)]
            with m.Else():
                m.d.sync += lane.eq(lane + 1)
            m.d.sync += c.eq(c + 1)
            with m.If(c == sec.channels - 1):
                m.d.sync += [done_items.eq(sec.section == POSTOP), in_inv.eq(sec.section == THR),
                             waddr.eq(sec.base), lane.eq(0), c.eq(0)]

        with m.If(step):
            m.d.sync += [word.eq(Mux(wide, word >> 64, word >> 32)), have.eq(have - 1)]
            with m.If(done_items):
                pass                                 # padding up to the port
            with m.Elif(sec.section == POSTOP):
                with m.If(head == 0):
                    m.d.sync += [self.postops[job].shift.eq(item), head.eq(1)]
                with m.Elif(head == 1):
                    m.d.sync += [self.postops[job].pre_relu.eq(item[0]),
                                 self.postops[job].post_relu.eq(item[1]), head.eq(2)]
                with m.Elif(~second):
                    m.d.sync += [a_acc[lane].eq(item), second.eq(1)]
                with m.Else():
                    m.d.sync += [b_acc[lane].eq(item), second.eq(0)]

                    def ab_out():
                        m.d.sync += [self.ab.valid.eq(1), self.ab.payload.addr.eq(waddr),
                                     self.ab.payload.a.eq(a_acc),
                                     self.ab.payload.b.eq(b_acc),
                                     self.ab.payload.b[lane].eq(item)]
                    next_channel(ab_out)
            with m.Elif(~in_inv):
                m.d.sync += t_acc[lane][lv].eq(item)
                with m.If(lv == sec.levels - 1):
                    m.d.sync += lv.eq(0)

                    def thr_out():
                        m.d.sync += [self.thr.valid.eq(1), self.thr.payload.addr.eq(waddr),
                                     self.thr.payload.t.eq(t_acc),
                                     self.thr.payload.t[lane][lv].eq(item)]
                    next_channel(thr_out)
                with m.Else():
                    m.d.sync += lv.eq(lv + 1)
            with m.Else():
                # a constant of invert bits: 32 or 64 channels, lanes a word; one word
                # a cycle, so the constant is shifted on until its channels are out
                m.d.sync += [self.inv.valid.eq(1), self.inv.payload.addr.eq(waddr),
                             self.inv.payload.invert.eq(item[:lanes]), waddr.eq(waddr + 1),
                             c.eq(c + lanes)]
                per_item = Mux(wide, 64 // lanes, 32 // lanes)
                last_word = c + lanes >= sec.channels
                with m.If((lane != per_item - 1) & ~last_word):
                    # the same constant again, its next lanes' bits moved down (over
                    # the step's shift to the next constant)
                    m.d.sync += [word.eq(_shift_item(word, lanes, wide)), have.eq(have),
                                 lane.eq(lane + 1)]
                with m.Else():
                    m.d.sync += lane.eq(0)
                with m.If(last_word):
                    m.d.sync += done_items.eq(1)

        # -- commands: a section at a time --
        finished = busy & (beats_left == 0) & (have == 0)
        m.d.comb += self.cmd.ready.eq(~busy)
        with m.If(self.cmd.valid & ~busy):
            m.d.sync += [sec.eq(self.cmd.payload), busy.eq(1), beats_left.eq(self.cmd.payload.beats),
                         have.eq(0), c.eq(0), lv.eq(0), head.eq(0), second.eq(0), lane.eq(0),
                         waddr.eq(self.cmd.payload.base), in_inv.eq(0), done_items.eq(0),
                         a_acc.eq(0), b_acc.eq(0), t_acc.eq(0)]
        with m.Elif(finished):
            m.d.sync += busy.eq(0)
        idle_out = Const(1)
        for o in outs:
            idle_out = idle_out & ~o.valid
        m.d.comb += self.idle.eq(~busy & idle_out)
        return m


def _shift_item(word, lanes, wide):
    """``word`` with its current constant's bits moved down by ``lanes`` (the rest of
    the word, the constants after it, in place)."""
    narrow = Cat(word[lanes:32], Const(0, lanes), word[32:])
    full = Cat(word[lanes:64], Const(0, lanes), word[64:])
    return Mux(wide, full, narrow)
