"""The intended engine's epilogue feeder: the base arrays' sums, one output fold at a time,
into epilogue beats with their channels' constants (docs/architecture.md section 15).

An output fold is ``pe`` channels of every array's job; the epilogue has ``lanes``
lanes (``pe`` or a power-of-two fraction of it), so the fold becomes ``arrays * pe /
lanes`` beats, part after part and each part's channels job after job (the K bases'
values of the same channels one after another, as the mixer behind the epilogue takes
them), each with its channels' constants: one word of each constant buffer (post-op
pairs, thresholds, invert bits: the constant loader's three kinds of word) at ``(k *
job_folds + fold_base + nf) * parts + p`` (``parts = pe / lanes``), kept there for the
whole descriptor, and its job's own post-op shift and ReLU flags. A weight chunk (the
fold issuer's) computes ``out_folds`` of a job's ``job_folds`` output folds from
``fold_base`` on; a descriptor of one chunk has ``fold_base = 0`` and ``job_folds =
out_folds``. Side elements (the residual
add's other operand) arrive as a stream in the same order. Fewer lanes than
``pe`` keep up with every layer whose output folds take ``arrays * parts`` cycles or
more (a 3x3 layer of 64 channels on 64 SIMD lanes takes 9 folds an output fold).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith import positive_int
from ..fifo import block_ram_fifo

from .constants import constant_layouts, job_postop_layout, word_streams
from .epilogue import epilogue_layout, epilogue_settings

__all__ = ["EpilogueFeeder"]


class EpilogueFeeder(wiring.Component):
    """Turns each output fold's ``arrays x pe`` sums into ``arrays * pe / lanes`` epilogue
    beats.

    Parameters
    ----------
    arrays, pe : int
        The base arrays' shape.
    lanes : int, optional
        The epilogue's lanes: ``pe`` (default) or ``pe`` divided by a power of two.
    sum_width : int
        The arrays' sums (``BaseArrays.sum_width``).
    const_width, value_width, max_levels : int
        The epilogue's (:class:`~.epilogue.EpilogueLanes`).
    max_out_folds : int
        The most output folds a job has: each constant buffer holds
        ``arrays * max_out_folds * pe / lanes`` words.

    Ports
    -----
    ab, thr, inv : ``In(stream.Signature(StructLayout({"addr", ...})))``
        Constant words (:func:`constant_layouts`, the constant loader's ``ab``, ``thr``
        and ``inv``) written at ``(k * out_folds + nf) * pe / lanes + p``, always
        accepted; write them only while ``idle``.
    postops : ``In(ArrayLayout(job_postop_layout(), arrays))``
        Each job's post-op ``shift`` and ReLU flags (the constant loader's ``postops``),
        which replace ``settings``' for the job's beats; held while not ``idle``.
    settings : ``In(epilogue_settings(max_levels))``
        The descriptor's stages, held while not ``idle``.
    out_folds : ``In(range(1, max_out_folds + 1))``
        The chunk's output folds (the windows' folds the arrays compute).
    job_folds : ``In(range(1, max_out_folds + 1))``
        A job's output folds: its constants' stride in the buffers.
    fold_base : ``In(range(max_out_folds))``
        The chunk's first output fold. These three are held while not ``idle``.
    sums : ``In(stream.Signature(ArrayLayout(signed(sum_width), arrays * pe)))``
        From :class:`~.arrays.BaseArrays`.
    side : ``In(stream.Signature(ArrayLayout(signed(value_width), lanes)))``
        A beat's side elements, in the beats' order; read only when ``settings.add``.
    o : ``Out(stream.Signature(epilogue_layout(lanes, sum_width, ...)))``
        To :class:`~.epilogue.EpilogueLanes`.
    idle : ``Out(1)``

    Attributes
    ----------
    latency : int
        Cycles from a fold's sums being taken to its first beat on ``o``: the held
        fold, the FIFO's write, read and output registers, the constants' read.

    Latency
    -------
    :attr:`latency`.

    Throughput
    ----------
    A beat a cycle: an output fold every ``arrays * pe / lanes`` cycles. The sums wait
    in a one-fold register, so the arrays stall only when their folds come faster.
    """

    latency = 5

    def __init__(self, *, arrays, pe, sum_width, lanes=None, const_width=32, value_width=32,
                 max_levels=1, max_out_folds=32):
        lanes = pe if lanes is None else lanes
        for name, value in (("arrays", arrays), ("pe", pe), ("sum_width", sum_width),
                            ("lanes", lanes), ("const_width", const_width),
                            ("value_width", value_width), ("max_levels", max_levels),
                            ("max_out_folds", max_out_folds)):
            positive_int(f"EpilogueFeeder: {name}", value)
        parts = pe // lanes
        if pe % lanes or parts & (parts - 1):
            raise ValueError(f"EpilogueFeeder: lanes ({lanes}) must be pe ({pe}) divided by "
                             "a power of two")
        self.arrays, self.pe, self.lanes, self.parts = arrays, pe, lanes, parts
        self.max_out_folds = max_out_folds
        self.const_layouts = constant_layouts(lanes, const_width, value_width, max_levels)
        self.beat_layout = epilogue_layout(lanes, sum_width, const_width, value_width,
                                           max_levels)
        addr = range(arrays * max_out_folds * parts)
        super().__init__({
            **{name: In(sig) for name, sig in word_streams(
                self.const_layouts, ("ab", "thr", "inv"), addr).items()},
            "postops": In(data.ArrayLayout(job_postop_layout(), arrays)),
            "settings": In(epilogue_settings(max_levels)),
            "out_folds": In(range(1, max_out_folds + 1)),
            "job_folds": In(range(1, max_out_folds + 1)),
            "fold_base": In(range(max_out_folds)),
            "sums": In(stream.Signature(data.ArrayLayout(signed(sum_width), arrays * pe))),
            "side": In(stream.Signature(data.ArrayLayout(signed(value_width), lanes))),
            "o": Out(stream.Signature(self.beat_layout)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        arrays, lanes, parts = self.arrays, self.lanes, self.parts
        depth = arrays * self.max_out_folds * parts
        ports = {}
        for name, layout in self.const_layouts.items():
            mem = Memory(shape=layout, depth=depth, init=[])
            m.submodules[f"{name}_buffer"] = mem
            stream_in = getattr(self, name)
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(stream_in.payload.addr),
                         wp.data.eq(Cat(*(stream_in.payload[n] for n in layout.members))),
                         wp.en.eq(stream_in.valid), stream_in.ready.eq(1)]
            rp = mem.read_port()
            ports[name] = layout(rp.data), rp
        # the FIFO carries what a beat needs but its constants: its sums, side elements,
        # job and the constants' address, which are read as the beat leaves it. With
        # the constants in it, it was 29 M10K wide, spread over the device, and its level
        # into itself the one-array layer's late path on ECP5 (70.9 MHz, 12.6 of 14.1 ns
        # routing)
        lane_sums = data.ArrayLayout(self.sums.payload.shape().elem_shape, lanes)
        queued = data.StructLayout({"x": lane_sums, "side": self.side.payload.shape(),
                                    "k": range(arrays), "addr": range(depth + 1)})
        m.submodules.fifo = fifo = block_ram_fifo(width=queued.size, depth=4)

        # the fold being split: its sums held; its part p, job k and fold nf counted,
        # the jobs innermost
        held = Signal(self.sums.payload.shape())
        full = Signal()
        k = Signal(range(arrays))
        p = Signal(range(parts))
        nf = Signal(range(self.max_out_folds))
        fold_word = Signal(range(depth + 1))         # nf * parts + p
        # the constants' address, (k * job_folds + fold_base) * parts + fold_word, kept in
        # a register of its own: its sum from the counters into the buffers' address was
        # the late path on ECP5 (75 MHz)
        addr = Signal(range(depth + 1))
        m.d.comb += self.sums.ready.eq(~full)
        with m.If(self.sums.valid & ~full):
            m.d.sync += [held.eq(self.sums.payload), full.eq(1)]
        shift = (parts - 1).bit_length()            # parts is a power of two
        first_word = self.fold_base << shift
        # between folds (k is 0 then) job 0's constants start at the chunk's first fold
        with m.If(~full):
            m.d.sync += addr.eq(first_word + fold_word)

        # a beat goes into the FIFO when the side element is there (if the stage reads
        # one) and the FIFO has room for it (counted a cycle ahead: the FIFO's level into
        # the write's enable was a late path on ECP5)
        needs_side = self.settings.add
        room = Signal()
        go = full & room & (self.side.valid | ~needs_side)
        m.d.sync += room.eq(fifo.level + go < fifo.depth - 1)
        m.d.comb += self.side.ready.eq(full & room & needs_side)
        with m.If(go):
            with m.If(k != arrays - 1):
                m.d.sync += [k.eq(k + 1), addr.eq(addr + (self.job_folds << shift))]
            with m.Else():
                m.d.sync += [k.eq(0), addr.eq(first_word + fold_word + 1)]
                with m.If(p != parts - 1):
                    m.d.sync += [p.eq(p + 1), fold_word.eq(fold_word + 1)]
                with m.Else():
                    m.d.sync += [p.eq(0), full.eq(0)]
                    with m.If(nf == self.out_folds - 1):
                        m.d.sync += [nf.eq(0), fold_word.eq(0)]
                    with m.Else():
                        m.d.sync += [nf.eq(nf + 1), fold_word.eq(fold_word + 1)]

        # into the FIFO: job k's part p (the held sums' (k * parts + p)-th run of lanes),
        # its side elements, and where its constants are
        into = Signal(queued)
        width = len(into.x.as_value())
        with m.Switch(k * parts + p):
            for j in range(arrays * parts):
                with m.Case(j):
                    m.d.comb += into.x.as_value().eq(held.as_value()[j * width:(j + 1) * width])
        m.d.comb += [into.side.eq(self.side.payload), into.k.eq(k), into.addr.eq(addr),
                     fifo.w_data.eq(into.as_value()), fifo.w_en.eq(go)]

        # out of the FIFO: a stage that reads the beat's constants (the buffers' read
        # data held while the stage waits), with job k's own post-op settings
        out = data.View(queued, fifo.r_data)
        staged = Signal(queued)
        staged_valid = Signal()
        advance = ~staged_valid | self.o.ready
        m.d.comb += fifo.r_en.eq(advance)
        for _, rp in ports.values():
            m.d.comb += [rp.addr.eq(out.addr), rp.en.eq(advance)]
        with m.If(advance):
            m.d.sync += [staged.eq(out), staged_valid.eq(fifo.r_rdy)]
        job = self.postops[staged.k]
        beat = Signal(self.beat_layout)
        ab, thr, inv = (ports[n][0] for n in ("ab", "thr", "inv"))
        m.d.comb += [beat.x.eq(staged.x), beat.a.eq(ab.a), beat.b.eq(ab.b), beat.t.eq(thr.t),
                     beat.invert.eq(inv.invert), beat.side.eq(staged.side),
                     beat.settings.eq(self.settings),
                     beat.settings.shift.eq(job.shift), beat.settings.pre_relu.eq(job.pre_relu),
                     beat.settings.post_relu.eq(job.post_relu),
                     self.o.payload.eq(beat), self.o.valid.eq(staged_valid),
                     self.idle.eq(~full & (fifo.level == 0) & ~staged_valid)]
        return m
