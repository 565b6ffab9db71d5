"""The intended engine's output packer: the epilogue's (or the mixer's) beats into the
DRAM rows of each base's output map (docs/architecture.md section 15), in the formats
of section 12.

A beat is ``lanes`` channels of one job (one array's base), in the epilogue feeder's
order: a pixel's output folds ``nf``, each fold's ``pe / lanes`` parts ``p``, each part's
jobs ``k`` (the jobs' values of the same channels one after another, as the mixer takes
them), so a beat's first channel is ``nf * pe + p * lanes``. In DRAM a pixel's
channels are ``ceil(C * elem_bits / 8)`` bytes, element ``c`` at bit ``c * elem_bits``
(bits, 2- and 4-bit levels, 8- to 32-bit two's complement alike: the low
``elem_bits`` of each value, LSB first), pixel after pixel, the row padded with zeros
to whole bus words. Every job's bytes come in that order, only interleaved with the
other jobs' a beat at a time, so each job has a byte gearbox of its own: a beat's
bytes go in behind the bytes the job holds, a bus word goes out whenever it holds one,
and a row's end sends its last bytes and the zero words of its padding. The gearboxes
share one datapath (a job's state is read, updated and written in a cycle): their
counts in a control stage, the beat's shift behind a job's bytes in a stage of its own,
their bytes in a data stage behind it.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..arith import moved_in_stages, positive_int
from ..fifo import block_ram_fifo

__all__ = ["OutputPacker", "packer_settings", "packed_word_layout", "checked_beats",
           "picked", "or_of", "ELEMS"]

#: element widths of the DRAM formats (section 12): bits, levels, fixed containers
ELEMS = (1, 2, 4, 8, 16, 24, 32)
#: bus words the output FIFO holds; the control stage issues a word only with room
#: for it, counted from registers. A credit comes back about seven cycles after its
#: word was issued (shift, data, the FIFO's three registers, the count), so eight keep
#: a word a cycle going out.
_FIFO_DEPTH = 8
#: beats the queue between the front and the control stage holds
_OPS_DEPTH = 4


def checked_beats(unit, *, lanes, pe, data_width, elems, **positive):
    """Refuse, in one line naming ``unit``, a beat geometry the packer and the unpacker
    cannot take (every parameter positive; ``lanes`` a multiple of 8 dividing ``pe``;
    whole-byte bus words; element widths of :data:`ELEMS`); return the element widths,
    sorted."""
    for name, value in dict(positive, lanes=lanes, pe=pe, data_width=data_width).items():
        positive_int(f"{unit}: {name}", value)
    if lanes % 8 or pe % lanes:
        raise ValueError(f"{unit}: lanes ({lanes}) must be a multiple of 8 that divides pe "
                         f"({pe}), so that every beat starts on a byte")
    if data_width % 8:
        raise ValueError(f"{unit}: data_width ({data_width}) must be whole bytes")
    elems = tuple(sorted(set(elems)))
    if not elems or not set(elems) <= set(ELEMS):
        raise ValueError(f"{unit}: elems {elems} must be taken from {ELEMS}")
    return elems


def or_of(values):
    """The OR of ``values`` (a one-hot pick's AND-OR)."""
    out = 0
    for v in values:
        out = out | v
    return out


def picked(sel, values):
    """``values[j]`` for the one bit ``j`` set in ``sel`` (0 for none): an AND-OR, no
    decoder of a job's number in front of it."""
    return or_of(Mux(sel[j], v, 0) for j, v in enumerate(values))


def packer_settings(arrays, max_size, max_channels, max_out_folds, max_beats):
    """A descriptor's output geometry, held while the packer runs.

    ``elem_bits``: one of :data:`ELEMS` that the packer was built for; ``channels``:
    the map's channels ``C``; ``width``: pixels a row; ``out_folds``: ``ceil(C / pe)``;
    ``jobs``: the arrays in use (beats of the others are dropped); ``row_beats``: bus
    words a row in DRAM, its padding included.
    """
    return data.StructLayout({
        "elem_bits": range(max(ELEMS) + 1), "channels": range(1, max_channels + 1),
        "width": range(1, max_size + 1), "out_folds": range(1, max_out_folds + 1),
        "jobs": range(1, arrays + 1), "row_beats": range(1, max_beats + 1),
    })


def packed_word_layout(arrays, data_width):
    """A bus word of job ``job``'s row; ``last``: the row's last word."""
    return data.StructLayout({"data": unsigned(data_width), "job": range(arrays),
                              "last": unsigned(1)})


class OutputPacker(wiring.Component):
    """Packs each job's channels into its map's DRAM rows, a bus word a cycle.

    Parameters
    ----------
    arrays, pe : int
        The base arrays' shape: a pixel's beats are ``ceil(C / pe)`` output folds of
        ``arrays * pe / lanes`` beats.
    lanes : int
        Channels a beat (a multiple of 8 dividing ``pe``, so that every beat starts
        on a byte of the pixel).
    value_width : int
        A lane's value (signed): a level count, or a fixed-point value that the
        compiler proved to fit its container (wider containers are sign-extended).
    data_width : int
        The write DMA's bus word (a multiple of 8).
    elems : tuple of int
        The element widths the packer writes (of :data:`ELEMS`).
    max_size, max_channels, max_out_folds, max_beats : int
        Bounds of :func:`packer_settings`.

    Ports
    -----
    i : ``In(stream.Signature(ArrayLayout(signed(value_width), lanes)))``
        The epilogue's (or mixer's) beats, in the feeder's order (module docstring).
    settings : ``In(packer_settings(...))``
        Held while not ``idle``; change it only between rows.
    o : ``Out(stream.Signature(packed_word_layout(arrays, data_width)))``
        Each job's row as ``row_beats`` bus words in order, its padding zero; the
        jobs' words interleave (the write DMA keeps an address per job).
    idle : ``Out(1)``
        Nothing is held or in flight: every row given has gone out.

    Latency
    -------
    :attr:`latency` = 8 cycles from a beat that completes a word to the word on ``o``.

    Throughput
    ----------
    A beat a cycle while its bytes do not outrun a bus word a cycle (``lanes *
    elem_bits <= data_width``); a beat of more bytes takes a cycle per word it
    completes, and a row's end a cycle per word still to go out.
    """

    latency = 8

    def __init__(self, *, arrays, pe, lanes, value_width=32, data_width=128, elems=ELEMS,
                 max_size=256, max_channels=1024, max_out_folds=64, max_beats=1024):
        elems = checked_beats("OutputPacker", arrays=arrays, pe=pe, lanes=lanes,
                              value_width=value_width, data_width=data_width, elems=elems,
                              max_size=max_size, max_channels=max_channels,
                              max_out_folds=max_out_folds, max_beats=max_beats)
        self.arrays, self.pe, self.lanes = arrays, pe, lanes
        self.parts = pe // lanes
        self.value_width, self.data_width, self.elems = value_width, data_width, elems
        self.max_size, self.max_channels = max_size, max_channels
        self.max_out_folds, self.max_beats = max_out_folds, max_beats
        #: bytes of the widest beat, and of a bus word
        self.beat_bytes, self.word_bytes = lanes * max(elems) // 8, data_width // 8
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(value_width), lanes))),
            "settings": In(packer_settings(arrays, max_size, max_channels, max_out_folds,
                                           max_beats)),
            "o": Out(stream.Signature(packed_word_layout(arrays, data_width))),
            "idle": Out(1),
        })

    def _packed(self, m, values, lane_mask, elem_is):
        """The beat's bytes: each lane of ``lane_mask``'s low ``e`` bits (sign-extended
        past the value's width), lane after lane, in the widest beat's bits; the other
        lanes 0. ``elem_is``: element width -> its flag (one-hot)."""
        w, lanes = self.value_width, self.lanes
        lane = [Signal(signed(w), name=f"lane{j}") for j in range(lanes)]
        m.d.comb += [lane[j].eq(Mux(lane_mask[j], values[j], 0)) for j in range(lanes)]
        return or_of(Mux(elem_is[e], Cat((v[:e] if e <= w else Cat(v, v[-1].replicate(e - w)))
                                       for v in lane), 0)
                   for e in self.elems)

    def elaborate(self, platform):
        m = Module()
        arrays, pe, lanes, parts = self.arrays, self.pe, self.lanes, self.parts
        W, B = self.word_bytes, self.beat_bytes
        st = self.settings

        # -- input: which channels, job and pixel a beat holds (the feeder's order) --
        p = Signal(range(parts))
        k = Signal(range(arrays))
        nf = Signal(range(self.max_out_folds))
        x = Signal(range(self.max_size))
        c0 = Signal(range(self.max_out_folds * pe + pe))        # the beat's first channel
        left = Signal(signed(c0.shape().width + 2))
        m.d.comb += left.eq(st.channels - c0)
        last_of_row = (x == st.width - 1) & (nf == st.out_folds - 1) & (p == parts - 1)

        # The front (the beat and where it goes, registered, then its bytes into a queue
        # of ops) advances whenever the queue will have room, counted from registers a
        # cycle ahead, so that the control stage's progress reaches no enable here.
        room = Signal(init=1)
        adv = Signal()
        m.d.comb += [adv.eq(room), self.i.ready.eq(adv)]
        take = self.i.valid & adv

        # -- stage 1: the beat, its valid lanes, its job and whether it ends a row --
        beat = Signal.like(self.i.payload)
        beat_valid = Signal()
        lanes_in = Signal(range(lanes + 1))
        lane_mask = Signal(lanes)                   # lane j holds a channel: j < lanes_in
        beat_k = Signal(range(arrays))
        beat_row_end = Signal()
        beat_keep = Signal()
        with m.If(adv):
            m.d.sync += [beat.eq(self.i.payload), beat_valid.eq(self.i.valid), beat_k.eq(k),
                         lanes_in.eq(Mux(left[-1], 0, Mux(left >= lanes, lanes,
                                                          left[:lanes.bit_length()]))),
                         lane_mask.eq(Cat(left > j for j in range(lanes))),
                         beat_row_end.eq(last_of_row), beat_keep.eq(k < st.jobs)]
        # the jobs of the same channels one after another, then the next lanes
        # channels: c0 = nf * pe + p * lanes steps by lanes as the jobs wrap
        with m.If(take):
            with m.If(k != arrays - 1):
                m.d.sync += k.eq(k + 1)
            with m.Elif(p != parts - 1):
                m.d.sync += [k.eq(0), p.eq(p + 1), c0.eq(c0 + lanes)]
            with m.Elif(nf != st.out_folds - 1):
                m.d.sync += [k.eq(0), p.eq(0), nf.eq(nf + 1), c0.eq(c0 + lanes)]
            with m.Else():
                m.d.sync += [k.eq(0), p.eq(0), nf.eq(0), c0.eq(0),
                             x.eq(Mux(x == st.width - 1, 0, x + 1))]

        # -- stage 2: the beat as bytes, into the queue of ops --
        # the settings' element width as one flag a width, registered (the settings
        # are held while a row goes through)
        elem_is = {e: Signal(name=f"elem_is_{e}") for e in self.elems}
        m.d.sync += [elem_is[e].eq(st.elem_bits == e) for e in self.elems]
        nbytes = Signal(range(B + 1))
        m.d.comb += nbytes.eq(or_of(Mux(elem_is[e], (lanes_in * e + 7) >> 3, 0)
                                  for e in self.elems))
        # an op's control (its job, bytes, whether it ends a row) in a queue whose head
        # is a register, for the control stage; its bytes in a queue read as they go to
        # the shift stage: written and taken together, the two hold the same ops
        op_layout = data.StructLayout({"n": range(B + 1), "k": range(arrays),
                                       "sel": unsigned(arrays), "row_end": unsigned(1),
                                       "keep": unsigned(1)})
        new_op = Signal(op_layout)
        m.d.comb += [new_op.n.eq(nbytes), new_op.k.eq(beat_k),
                     new_op.sel.eq(Mux(beat_keep, 1 << beat_k, 0)),     # the job, one-hot
                     new_op.row_end.eq(beat_row_end), new_op.keep.eq(beat_keep)]
        m.submodules.ops = ops = SyncFIFOBuffered(width=op_layout.size, depth=_OPS_DEPTH)
        m.submodules.op_bytes = op_bytes = SyncFIFO(width=8 * B, depth=_OPS_DEPTH)
        done = Signal()
        m.d.comb += [ops.w_data.eq(new_op.as_value()), ops.w_en.eq(adv & beat_valid),
                     op_bytes.w_data.eq(self._packed(m, beat, lane_mask, elem_is)),
                     op_bytes.w_en.eq(adv & beat_valid),
                     ops.r_en.eq(done), op_bytes.r_en.eq(done)]
        # a write a cycle at most: the queue's level a cycle on is at most one more
        m.d.sync += room.eq(ops.level + 2 <= _OPS_DEPTH)
        op = data.View(op_layout, ops.r_data)
        op_valid = ops.r_rdy

        # -- control: each job's held bytes and row words; one step of an op a cycle --
        held = [Signal(range(W + B), name=f"held{j}") for j in range(arrays)]
        words = [Signal(range(self.max_beats), name=f"words{j}") for j in range(arrays)]
        credits = Signal(range(_FIFO_DEPTH + 1), init=_FIFO_DEPTH)
        INSERT, DRAIN, FLUSH = 0, 1, 2
        phase = Signal(range(3))
        # the op's job's state: each job's compared on its own, then picked by the
        # one-hot job (no decode of the job's number on the way)
        hk = Signal(range(W + B))
        wk_zero, wk_last = Signal(), Signal()
        m.d.comb += [
            hk.eq(picked(op.sel, held)),
            wk_zero.eq(or_of(op.sel[j] & (words[j] == 0) for j in range(arrays))),
            wk_last.eq(or_of(op.sel[j] & (words[j] == st.row_beats - 1)
                           for j in range(arrays))),
        ]
        total = Signal(range(W + B))
        m.d.comb += total.eq(hk + Mux(phase == INSERT, op.n, 0))
        word_out = total >= W
        row_open = (hk != 0) | ~wk_zero
        emit = Signal()
        step = Signal()
        with m.Switch(phase):
            with m.Case(INSERT):
                m.d.comb += emit.eq(word_out & op.keep)
            with m.Case(DRAIN):
                m.d.comb += emit.eq(1)
            with m.Case(FLUSH):
                m.d.comb += emit.eq(row_open)
        m.d.comb += step.eq(op_valid & (~emit | (credits != 0)))
        rest = Signal.like(total)
        m.d.comb += rest.eq(Mux(phase == FLUSH, 0, Mux(emit, total - W, total)))
        row_done = emit & wk_last
        ends_row = op.row_end & op.keep
        for j in range(arrays):
            with m.If(step & op.sel[j]):
                m.d.sync += held[j].eq(rest)
                with m.If(emit):
                    m.d.sync += words[j].eq(Mux(row_done, 0, words[j] + 1))
        # the op is done when its job holds less than a word again and, at a row's
        # end, the row's last word has gone
        with m.If(~op.keep):
            m.d.comb += done.eq(op_valid)       # another array's beat, not in use
        with m.Elif(rest >= W):
            m.d.comb += done.eq(0)
        with m.Elif(phase == FLUSH):
            m.d.comb += done.eq(step & (~emit | row_done))
        with m.Else():
            m.d.comb += done.eq(step & (~ends_row | (emit & row_done)))
        with m.If(step):
            with m.If(done):
                m.d.sync += phase.eq(INSERT)
            with m.Elif(rest >= W):
                m.d.sync += phase.eq(DRAIN)
            with m.Else():
                m.d.sync += phase.eq(FLUSH)

        # -- shift: the beat's bytes behind the job's (by the bytes it held), a stage of
        # its own: its select fans out to every byte --
        s_valid, s_emit, s_last = Signal(), Signal(), Signal()
        s_k = Signal(range(arrays))
        s_data = Signal(8 * B)
        s_shift = Signal(range(W))
        m.d.sync += [s_valid.eq(step & op.keep), s_emit.eq(step & op.keep & emit),
                     s_last.eq(row_done), s_k.eq(op.k),
                     s_data.eq(Mux(phase == INSERT, op_bytes.r_data, 0)), s_shift.eq(hk)]
        shifted = Signal(8 * (W + B))
        m.d.comb += shifted.eq(moved_in_stages(s_data, s_shift,
                                               lambda v, n: Cat(Const(0, 8 * n), v)))

        # -- data: each job's bytes; a word out when the control says so --
        d_valid, d_emit, d_last = Signal(), Signal(), Signal()
        d_k = Signal(range(arrays))
        d_bytes = Signal(8 * (W + B))
        m.d.sync += [d_valid.eq(s_valid), d_emit.eq(s_emit), d_last.eq(s_last),
                     d_k.eq(s_k), d_bytes.eq(shifted)]
        buf = Array(Signal(8 * (W + B), name=f"buf{j}") for j in range(arrays))
        merged = buf[d_k] | d_bytes
        with m.If(d_valid):
            m.d.sync += buf[d_k].eq(Mux(d_emit, merged >> (8 * W), merged))

        m.submodules.fifo = fifo = block_ram_fifo(
            width=len(self.o.payload.as_value()), depth=_FIFO_DEPTH)
        word = Signal(packed_word_layout(arrays, self.data_width))
        m.d.comb += [word.data.eq(merged[:8 * W]), word.job.eq(d_k), word.last.eq(d_last),
                     fifo.w_data.eq(word.as_value()), fifo.w_en.eq(d_emit),
                     self.o.payload.as_value().eq(fifo.r_data),
                     self.o.valid.eq(fifo.r_rdy), fifo.r_en.eq(self.o.ready)]
        m.d.sync += credits.eq(credits - (step & op.keep & emit)
                               + (self.o.valid & self.o.ready))
        m.d.comb += self.idle.eq(~beat_valid & ~op_valid & ~s_valid & ~d_valid
                                 & (credits == _FIFO_DEPTH))
        return m
