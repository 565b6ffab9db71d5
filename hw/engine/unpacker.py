"""The intended engine's input unpacker: each job's map as DRAM stores it (the formats of
docs/architecture.md section 12) into beats of ``lanes`` values in the epilogue feeder's
order, the inverse of the output packer (section 15).

A residual add's side elements, and any map read element by element, come in the
feeder's beat order: a pixel's output folds ``nf``, each fold's ``pe / lanes`` parts
``p``, each part's jobs ``k``, a beat ``lanes`` channels from ``nf * pe + p * lanes``.
Each job's map is its own tensor, so its bytes arrive on a stream of its own (``i[k]``:
its rows' bus words, in order), and the unpacker keeps a byte gearbox a job: a beat
takes ``ceil(valid * elem_bits / 8)`` bytes from its job's gearbox, a bus word comes in
whenever the job holds too few, and at the end of a row of the job's map the bytes and
bus words of its padding are dropped. Elements are each value's ``elem_bits`` bits (1,
2, 4 or 8 to 32), sign-extended for fixed point (``signed``), zero-extended for bits
and levels; channels past the map's and jobs past the descriptor's are zeros.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..arith import moved_in_stages
from ..fifo import block_ram_fifo
from .packer import ELEMS, checked_beats, or_of, picked

__all__ = ["InputUnpacker", "unpacker_settings"]

#: beats the queue between the front and the control stage holds
_OPS_DEPTH = 6
#: beats the output FIFO holds: a beat is issued only with room for it, and its credit
#: comes back about seven cycles later (shift, data, values, the FIFO's three registers)
_OUT_DEPTH = 8


def unpacker_settings(arrays, max_size, max_channels, max_out_folds, max_beats):
    """A descriptor's input geometry, held while the unpacker runs: as the packer's
    (:func:`~.packer.packer_settings`), ``height``: the rows to read, and ``signed``: the
    elements are two's complement (fixed point) rather than unsigned (bits, levels)."""
    return data.StructLayout({
        "elem_bits": range(max(ELEMS) + 1), "signed": unsigned(1),
        "channels": range(1, max_channels + 1), "width": range(1, max_size + 1),
        "height": range(1, max_size + 1),
        "out_folds": range(1, max_out_folds + 1), "jobs": range(1, arrays + 1),
        "row_beats": range(1, max_beats + 1),
    })


class InputUnpacker(wiring.Component):
    """Unpacks each job's DRAM rows into beats of ``lanes`` values, a beat a cycle.

    Parameters
    ----------
    arrays, pe, lanes : int
        As the output packer's (:class:`~.packer.OutputPacker`): ``lanes`` a multiple of
        8 dividing ``pe``.
    value_width : int
        A lane's value (signed).
    data_width : int
        The bus word (a multiple of 8).
    elems : tuple of int
        The element widths it reads (of :data:`~.packer.ELEMS`).
    max_size, max_channels, max_out_folds, max_beats : int
        Bounds of :func:`unpacker_settings`.

    Ports
    -----
    i0 .. i{arrays-1} : ``In(stream.Signature(data_width))``
        Job ``k``'s rows on ``i{k}``, ``row_beats`` bus words each, in order (its map's
        read DMA, or a reader's per-job buffer).
    settings : ``In(unpacker_settings(...))``
        Held while not ``idle``; change it only between maps.
    active : ``In(1)``
        The map's beats are counted while it is high, up to its last (the counters run
        ahead of the beats by a queue's depth): raise it a cycle after the settings,
        lower it between maps (a cycle at least).
    o : ``Out(stream.Signature(ArrayLayout(signed(value_width), lanes)))``
        The beats, in the feeder's order (module docstring).
    idle : ``Out(1)``
        No pixel is part-way through (every job's gearbox empty).

    Latency
    -------
    The beat is written into the output FIFO four cycles after the control stage
    takes the bus word that completes it (the job's head, its slots, the beat's
    bytes, its values), and is on ``o`` a cycle later.

    Throughput
    ----------
    A beat a cycle while its job holds its bytes or the bus word taken in that cycle
    completes them (a beat of up to a bus word's bytes, 16-bit values at 8 lanes on a
    128-bit bus: a beat a cycle); a beat of more bytes waits a cycle for each further
    word (24-bit values at 8 lanes: 1.5 cycles a beat); and a cycle for each padding
    word a row drops.
    """

    def __init__(self, *, arrays, pe, lanes, value_width=32, data_width=128, elems=ELEMS,
                 max_size=256, max_channels=1024, max_out_folds=64, max_beats=1024):
        elems = checked_beats("InputUnpacker", arrays=arrays, pe=pe, lanes=lanes,
                              value_width=value_width, data_width=data_width, elems=elems,
                              max_size=max_size, max_channels=max_channels,
                              max_out_folds=max_out_folds, max_beats=max_beats)
        self.arrays, self.pe, self.lanes, self.parts = arrays, pe, lanes, pe // lanes
        self.value_width, self.data_width, self.elems = value_width, data_width, elems
        self.max_size, self.max_out_folds, self.max_beats = max_size, max_out_folds, max_beats
        self.beat_bytes, self.word_bytes = lanes * max(elems) // 8, data_width // 8
        members = {f"i{k}": In(stream.Signature(unsigned(data_width))) for k in range(arrays)}
        super().__init__({
            **members,
            "settings": In(unpacker_settings(arrays, max_size, max_channels, max_out_folds,
                                             max_beats)),
            "active": In(1),
            "o": Out(stream.Signature(data.ArrayLayout(signed(value_width), lanes))),
            "idle": Out(1),
        })

    def _values(self, raw, lane_mask, elem_is, is_signed):
        """``raw``'s lanes as values: each lane's ``e`` bits, sign- or zero-extended to the
        value's width; lanes outside ``lane_mask`` 0. ``elem_is``: width -> flag."""
        w, lanes = self.value_width, self.lanes
        values = []
        for j in range(lanes):
            value = 0
            for e in self.elems:
                bits = raw[j * e:(j + 1) * e]
                keep = min(e, w)
                if keep < w:
                    lane = Cat(bits[:keep], (bits[keep - 1] & is_signed).replicate(w - keep))
                else:
                    lane = bits[:w]
                value = value | Mux(elem_is[e], lane, 0)
            values.append(Mux(lane_mask[j], value, 0))
        return values

    def elaborate(self, platform):
        m = Module()
        arrays, pe, lanes, parts = self.arrays, self.pe, self.lanes, self.parts
        W, B = self.word_bytes, self.beat_bytes
        st = self.settings
        inputs = [getattr(self, f"i{k}") for k in range(arrays)]
        elem_is = {e: Signal(name=f"elem_is_{e}") for e in self.elems}
        is_signed = Signal()
        m.d.sync += [*(elem_is[e].eq(st.elem_bits == e) for e in self.elems),
                     is_signed.eq(st.signed)]

        # -- front: the next beat's job, lanes, bytes and row end, into a queue of ops
        # whose room is counted a cycle ahead --
        k = Signal(range(arrays))
        p = Signal(range(parts))
        nf = Signal(range(self.max_out_folds))
        x = Signal(range(self.max_size))
        c0 = Signal(range(self.max_out_folds * pe + pe))
        left = Signal(signed(len(c0) + 2))            # channels - c0, kept beside c0
        op_layout = data.StructLayout({
            "sel": unsigned(arrays), "k": range(arrays), "need": range(B + 1),
            "mask": unsigned(lanes), "row_end": unsigned(1)})
        m.submodules.ops = ops = SyncFIFOBuffered(width=op_layout.size, depth=_OPS_DEPTH)
        room = Signal(init=1)
        # the front is two stages (the beat's lanes registered, then its bytes): a write a
        # cycle at most, so the queue's level a cycle on is at most one more
        m.d.sync += room.eq(ops.level + 2 <= _OPS_DEPTH)
        ended = Signal()                             # the map's last beat is queued
        go = room & self.active & ~ended
        y = Signal(range(self.max_size))

        # stage 1: the beat's job, lanes and row end
        f_valid = Signal()
        f_k = Signal(range(arrays))
        f_sel = Signal(arrays)
        f_lanes = Signal(range(lanes + 1))
        f_mask = Signal(lanes)
        f_row_end = Signal()
        with m.If(go):
            m.d.sync += [
                f_valid.eq(1), f_k.eq(k), f_sel.eq(Mux(k < st.jobs, 1 << k, 0)),
                f_lanes.eq(Mux(left[-1], 0, Mux(left >= lanes, lanes,
                                                left[:lanes.bit_length()]))),
                f_mask.eq(Cat(left > j for j in range(lanes))),
                f_row_end.eq((x == st.width - 1) & (nf == st.out_folds - 1) & (p == parts - 1))]
            with m.If(k != arrays - 1):
                m.d.sync += k.eq(k + 1)
            with m.Elif(p != parts - 1):
                m.d.sync += [k.eq(0), p.eq(p + 1), c0.eq(c0 + lanes), left.eq(left - lanes)]
            with m.Elif(nf != st.out_folds - 1):
                m.d.sync += [k.eq(0), p.eq(0), nf.eq(nf + 1), c0.eq(c0 + lanes),
                             left.eq(left - lanes)]
            with m.Else():
                m.d.sync += [k.eq(0), p.eq(0), nf.eq(0), c0.eq(0), left.eq(st.channels)]
                with m.If(x != st.width - 1):
                    m.d.sync += x.eq(x + 1)
                with m.Else():
                    m.d.sync += x.eq(0)
                    with m.If(y != st.height - 1):
                        m.d.sync += y.eq(y + 1)
                    with m.Else():
                        m.d.sync += [y.eq(0), ended.eq(1)]
        with m.If(~self.active):
            # between maps: the next map's first beat
            m.d.sync += [left.eq(st.channels), ended.eq(0)]

        # stage 2: its bytes, into the queue
        new_op = Signal(op_layout)
        need = 0
        for e in self.elems:
            need = need | Mux(elem_is[e], (f_lanes * e + 7) >> 3, 0)
        m.d.comb += [new_op.k.eq(f_k), new_op.sel.eq(f_sel), new_op.need.eq(need),
                     new_op.mask.eq(f_mask), new_op.row_end.eq(f_row_end),
                     ops.w_data.eq(new_op.as_value()), ops.w_en.eq(f_valid & room)]
        # stage 1 hands its beat on whenever the queue has room, also after the last
        with m.If(room & ~go):
            m.d.sync += f_valid.eq(0)

        # -- control: each job's bytes held (as the data stage will hold them), the row's
        # words still to take (and one fewer: a row's last beat may take its last word
        # in its own cycle, and the choice is then a multiplexer, not a subtraction) and
        # the padding words to drop; a step of an op a cycle --
        op = data.View(op_layout, ops.r_data)
        held = [Signal(range(W + B + 1), name=f"held{j}") for j in range(arrays)]
        rest = [Signal(range(self.max_beats + 1), name=f"rest{j}") for j in range(arrays)]
        rest_less = [Signal(range(-1, self.max_beats + 1), name=f"rest_less{j}")
                     for j in range(arrays)]
        skip = [Signal(range(self.max_beats + 1), name=f"skip{j}") for j in range(arrays)]
        credits = Signal(range(_OUT_DEPTH + 1), init=_OUT_DEPTH)

        ours = op.sel != 0
        # each job's step worked out beside the others' from its own registers, so that
        # no pick lies between a job's counts and their next values
        drops, takes, emits = [], [], []
        for j in range(arrays):
            mine = ops.r_rdy & op.sel[j]
            skipping_j = skip[j] != 0
            enough_j = held[j] >= op.need
            # a bus word taken this cycle completes the beat: the word in and the beat
            # out in one cycle (a 16-byte beat a cycle from 16-byte words)
            completes_j = held[j] + W >= op.need
            valid_j = inputs[j].valid
            drops.append(mine & skipping_j & valid_j)
            takes.append(mine & ~skipping_j & ~enough_j & valid_j)
            emits.append(mine & ~skipping_j & (enough_j | (completes_j & valid_j))
                         & (credits != 0))
        in_data = picked(op.sel, [s.payload for s in inputs])
        take = Signal()
        emit = Signal()
        m.d.comb += [
            take.eq(or_of(takes)),
            emit.eq(or_of(emits) | (ops.r_rdy & ~ours & (credits != 0))),
            ops.r_en.eq(emit),
        ]
        # where in the job's queue the beat is read and how many slots it leaves behind,
        # worked out here from a copy of the data stage's read byte, so that the data
        # stage's shifts are selected by registers
        read_at = [Signal(range(W), name=f"read_at{j}") for j in range(arrays)]
        at_k = picked(op.sel, read_at)
        ahead = Signal(range(W + B + 1))
        m.d.comb += ahead.eq(at_k + op.need)
        for j in range(arrays):
            with m.If(emits[j]):
                m.d.sync += read_at[j].eq(Mux(op.row_end, 0, ahead % W))
        for j in range(arrays):
            m.d.comb += inputs[j].ready.eq(drops[j] | takes[j])
            with m.If(drops[j]):
                m.d.sync += skip[j].eq(skip[j] - 1)
            with m.If(takes[j]):
                m.d.sync += [rest[j].eq(rest[j] - 1), rest_less[j].eq(rest_less[j] - 1)]
            with m.If(emits[j]):
                with m.If(op.row_end):
                    m.d.sync += [held[j].eq(0), rest[j].eq(st.row_beats),
                                 rest_less[j].eq(st.row_beats - 1),
                                 skip[j].eq(Mux(takes[j], rest_less[j], rest[j]))]
                with m.Else():
                    m.d.sync += held[j].eq(Mux(takes[j], held[j] + (W - op.need),
                                               held[j] - op.need))
            with m.Elif(takes[j]):
                m.d.sync += held[j].eq(held[j] + W)
            with m.If(~self.active):
                # between maps: the next map's rows
                m.d.sync += [rest[j].eq(st.row_beats), rest_less[j].eq(st.row_beats - 1)]

        # -- data: each job's bytes as a ring of whole bus words (slots) from a head
        # slot, read from a byte of the head: a word goes into the slot after the filled
        # ones, a beat is read from that byte (the ring turned by the head, then a shift
        # of less than a bus word), and the slots it has used up are left behind by
        # moving the head. Slots are only ever loaded whole, so their bits need no
        # multiplexer (a design that shifted them down on every beat took 7,550 ALUTs
        # alone, this one 4,327; a first one shifted bytes in and out of a byte gearbox:
        # 6,700 ALMs, 82 MHz) --
        slots = -(-(2 * W + B) // W)          # a word's bytes before the head, a beat's, a word
        slots = 1 << (slots - 1).bit_length()  # a power of two: the ring's index wraps
        window_slots = -(-(W + B) // W)        # the slots a beat's bytes can touch
        queue = [[Signal(8 * W, name=f"q{j}_{i}") for i in range(slots)] for j in range(arrays)]
        head = [Signal(range(slots), name=f"head{j}") for j in range(arrays)]
        filled = [Signal(range(slots + 1), name=f"filled{j}") for j in range(arrays)]
        d_take, d_emit = Signal(), Signal()
        d_sel = Signal(arrays)
        d_word = Signal(8 * W)
        d_at = Signal(range(W))
        d_mask = Signal(lanes)
        m.d.sync += [d_take.eq(take), d_emit.eq(emit), d_sel.eq(op.sel), d_word.eq(in_data),
                     d_at.eq(at_k), d_mask.eq(Mux(ours, op.mask, 0))]

        # the job's head registered as the beat leaves the control (before the beat
        # moves it), its slots a cycle later: a word taken in the beat's own cycle is in
        # its slot by then (the slots are written a cycle after the take). A word a later
        # take writes lands no sooner than the slots are read, and only in a slot no
        # beat still to be read holds (the pick and the read in one cycle were a late
        # path on ECP5)
        e_sel = Signal(arrays)
        e_head = Signal(range(slots))
        e_at = Signal(range(W))
        e_emit = Signal()
        e_mask = Signal(lanes)
        m.d.sync += [e_sel.eq(d_sel), e_head.eq(picked(d_sel, head)), e_at.eq(d_at),
                     e_emit.eq(d_emit), e_mask.eq(d_mask)]
        window = Signal(8 * W * slots)
        r_head = Signal(range(slots))
        r_at = Signal(range(W))
        r_emit = Signal()
        r_mask = Signal(lanes)
        m.d.sync += [window.eq(picked(e_sel, [Cat(*queue[j]) for j in range(arrays)])),
                     r_head.eq(e_head), r_at.eq(e_at), r_emit.eq(e_emit), r_mask.eq(e_mask)]
        turned = Signal(8 * W * window_slots)
        with m.Switch(r_head):
            for h in range(slots):
                with m.Case(h):
                    m.d.comb += turned.eq(Cat(window[8 * W * ((h + i) % slots):
                                                     8 * W * ((h + i) % slots + 1)]
                                              for i in range(window_slots)))
        # the beat's bytes from the head slot's byte r_at on
        raw = moved_in_stages(turned, r_at, lambda v, n: v[8 * n:])[:8 * B]
        # each job's own copy of the op's control, so that no register drives the
        # enables of every job's slots (with one, their route was the late path on ECP5)
        for j in range(arrays):
            j_take, j_emit, j_row_end = Signal(), Signal(), Signal()
            j_used = Signal(range(slots + 1))
            m.d.sync += [j_take.eq(takes[j]), j_emit.eq(emits[j]),
                         j_row_end.eq(op.row_end), j_used.eq(ahead // W)]
            with m.If(j_take):
                with m.Switch((head[j] + filled[j])[:len(head[j])]):
                    for i in range(slots):
                        with m.Case(i):
                            m.d.sync += queue[j][i].eq(d_word)
            # a beat's take and emit may come in one cycle
            with m.If(j_emit):
                with m.If(j_row_end):
                    m.d.sync += filled[j].eq(0)
                with m.Else():
                    m.d.sync += [filled[j].eq(filled[j] + j_take - j_used),
                                 head[j].eq(head[j] + j_used)]
            with m.Elif(j_take):
                m.d.sync += filled[j].eq(filled[j] + 1)

        # -- out: the beat's bytes registered, then its values, into the output FIFO --
        v_valid = Signal()
        v_raw = Signal(8 * B)
        v_mask = Signal(lanes)
        m.d.sync += [v_valid.eq(r_emit), v_raw.eq(raw), v_mask.eq(r_mask)]
        m.submodules.out = out = block_ram_fifo(width=len(self.o.payload.as_value()),
                                                depth=_OUT_DEPTH)
        values = Signal(self.o.payload.shape())
        m.d.comb += [*(values[j].eq(v) for j, v in
                       enumerate(self._values(v_raw, v_mask, elem_is, is_signed))),
                     out.w_data.eq(values.as_value()), out.w_en.eq(v_valid),
                     self.o.payload.as_value().eq(out.r_data), self.o.valid.eq(out.r_rdy),
                     out.r_en.eq(self.o.ready)]
        m.d.sync += credits.eq(credits - emit + (self.o.valid & self.o.ready))

        empty = Const(1)
        for j in range(arrays):
            empty = empty & (held[j] == 0) & (skip[j] == 0)
        m.d.comb += self.idle.eq(empty & ~f_valid & ~ops.r_rdy & (ops.level == 0)
                                 & ~d_take & ~d_emit & ~e_emit & ~r_emit & ~v_valid
                                 & (credits == _OUT_DEPTH))
        return m
