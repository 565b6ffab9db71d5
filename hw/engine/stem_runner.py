"""The intended engine's stem runner: the first convolution (integer weights on the
frame's bytes), its fused max pooling and post-op, DRAM to DRAM, on the stem's units
(docs/architecture.md section 15).

A CONV descriptor with integer weights (``int_weights``) comes in whole; the runner reads
its job-table entry, the weight section into the :class:`~.stem.StemFolds`' buffer (a
weight word is ``pe * simd`` bytes, whole bus words), the post-op section into a constant
memory (a channel's ``A`` and ``B``; the shift and the ReLU flags into registers), then
the frame row by row through the :class:`~.stem.StemRowLoader` into the ring of the
:class:`~.gather.WindowGather` (a pixel's channels one word of bytes, 8 bit planes), while
the :class:`~.stem.StemFolds` and :class:`~.stem.StemArray` compute every output pixel's
sums. The sums go on a channel a cycle (a fold of ``pe`` sums comes every ``in_folds``
cycles: 17 at ResNet's stem), through a :class:`~.pool.PoolRows` of one lane (a
``maxpool`` stage: before the post-op, as the reference model does) and a post-op
lane, whose results are packed as the output map's elements and written a row a
command. Every address goes through the DMAs, which check it
against the host's window.

What it runs: one job, the frame's bytes (``uint`` of 8 bits) of channels that divide
``simd`` (at most ``lanes``), 1-byte weights, the ``postop`` stage with 4-byte constants
and an optional fused ``maxpool`` (``kernel <= 2 * stride``, ``padding < stride``), a
fixed-point output of 8-, 16-, 24- or 32-bit elements, sizes within its bounds and
geometry that is the fields' own. Anything else is refused with ``error`` and the cause
``unsupported`` before any transfer.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.utils import exact_log2

from ...engine_format import FLAG_BITS, OPCODE_CODES, STAGE_BITS
from ..arith import const_multiply, positive_int, registered_pieces, sum_tree
from .epilogue import SCALE_BITS
from .gather import WindowGather
from .pool import PoolRows
from .runner import (bits_of, compute_unit_members, descriptor_fields, job_entry_field,
                     refuse_or_read_entry)
from .stem import StemArray, StemFolds, StemRowLoader

__all__ = ["StemRunner", "STEM_OUT_ELEMS"]

#: the output map's elements it writes (fixed point)
STEM_OUT_ELEMS = (8, 16, 24, 32)
_UINT_FORMAT, _FIXED_FORMAT = 1, 2
#: pooling windows of at most this kernel, stride and padding
_POOL_MAX = 3
_STAGES = STAGE_BITS["postop"] | STAGE_BITS["maxpool"]
_FLAGS = FLAG_BITS["int_weights"] | FLAG_BITS["shared_input"]


def _one_of(value, choices):
    ok = Const(0)
    for c in choices:
        ok = ok | (value == c)
    return ok


def _product(x, y, bits):
    """``x * y`` for ``y`` of at most ``bits`` bits, as shifted adds: the descriptor's
    checks multiply a field by a small one (a kernel, a stride, the channels), which
    as a ``*`` Yosys gave a DSP block each (20 of the board's 112)."""
    return sum_tree([Mux(y[i], x << i, 0) for i in range(bits)])


def _floor_size_ok(out, size, padding, span, stride, stride_bits):
    """``out == (size + 2 * padding - span - 1) // stride + 1``, checked by products of
    the small stride: ``(out - 1) * stride <= last < out * stride`` with ``last = size +
    2 * padding - span - 1 >= 0``."""
    last = size + 2 * padding - span - 1
    return ((size + 2 * padding > span) & (out != 0)
            & (_product(out - 1, stride, stride_bits) <= last)
            & (last < _product(out, stride, stride_bits)))


class StemRunner(wiring.Component):
    """Runs the stem's CONV descriptor (integer weights, fused max pooling, post-op).

    Parameters
    ----------
    pe, simd : int
        The stem array's (:class:`~.stem.StemArray`, ``stem_pe`` and ``stem_simd``);
        ``pe * simd`` bytes whole bus words.
    lanes : int
        The most channels of a frame (3: RGB).
    data_width : int
        The DMAs' bus word: a power of two of at least 128 bits (a job-table entry is 16
        bytes).
    addr_width : int
        Bits of a byte address.
    ring_rows, max_size, max_kernel : int
        The gatherer's ring (a power of two of rows of up to ``max_size`` pixels), the
        largest frame side and kernel (7: ResNet's). A descriptor needs ``span +
        stride`` rows of it; twice that (16 for ResNet's 7 x 7 stride-2 stem) lets the
        next output row's input rows load while a row computes (with 8, ResNet's second
        row loaded only once the row began: 9 % more cycles at 224 x 224).
    max_in_folds, max_out_folds : int
        The :class:`~.stem.StemFolds`' (17 and 4: ResNet's 7 x 7 x 3 window on 9 lanes,
        64 channels on 16 PE rows).
    max_pooled : int
        The widest pooled map (its rows' banks in the :class:`~.pool.PoolRows`; 56 at
        ResNet's 224 x 224).

    Ports
    -----
    desc, rd_cmd, rd, wr_cmd, wr, done, error, error_code, idle
        A compute unit's (:func:`~.runner.compute_unit_members`; as
        :class:`~.classifier.PooledClassifier`'s).

    Latency
    -------
    The table's, the weights' and the constants' reads in turn; then the frame's rows
    as the ring frees their slots, and the first output row once the convolution's
    rows it pools are computed.

    Throughput
    ----------
    ``max(kernel**2, in_folds * out_folds)`` cycles a pixel of the convolution (the
    folds, one a cycle, under which the taps are gathered), and a cycle a channel of
    the output (the post-op lane), whichever is more for the map; the frame's rows at
    a byte a cycle under the compute.
    """

    def __init__(self, *, pe=16, simd=9, lanes=3, data_width=128, addr_width=32,
                 ring_rows=16, max_size=256, max_kernel=7, max_in_folds=17, max_out_folds=4,
                 max_pooled=64):
        for name, value in (("pe", pe), ("simd", simd), ("lanes", lanes),
                            ("data_width", data_width), ("addr_width", addr_width),
                            ("ring_rows", ring_rows), ("max_size", max_size),
                            ("max_kernel", max_kernel), ("max_in_folds", max_in_folds),
                            ("max_out_folds", max_out_folds), ("max_pooled", max_pooled)):
            positive_int(f"StemRunner: {name}", value)
        if data_width % 128 or data_width & (data_width - 1):
            raise ValueError(f"StemRunner: data_width ({data_width}) must be a power of two "
                             "of at least 128 bits: a job-table entry is 16 bytes")
        if (pe * simd * 8) % data_width:
            raise ValueError(f"StemRunner: a weight word of {pe} x {simd} bytes must be whole "
                             f"bus words of {data_width} bits")
        self.pe, self.simd, self.lanes = pe, simd, lanes
        self.data_width, self.addr_width = data_width, addr_width
        self.ring_rows, self.max_size, self.max_kernel = ring_rows, max_size, max_kernel
        self.max_in_folds, self.max_out_folds = max_in_folds, max_out_folds
        self.max_pooled = max_pooled
        ring_words = ring_rows * max_size
        self.loader = StemRowLoader(lanes=lanes, data_width=data_width, ring_rows=ring_rows,
                                    ring_words=ring_words, max_size=max_size)
        self.gather = WindowGather(arrays=1, simd=lanes, planes=8, ring_rows=ring_rows,
                                   ring_words=ring_words, max_size=max_size, max_words=1,
                                   max_kernel=max_kernel)
        self.folds = StemFolds(pe=pe, simd=simd, lanes=lanes, max_in_folds=max_in_folds,
                               max_out_folds=max_out_folds)
        self.array = StemArray(pe=pe, simd=simd, max_window=max_in_folds * simd)
        # the pooling takes a channel a cycle, behind the folds' channels one by one: a
        # fold of 16 comes every 17 cycles or more at ResNet's stem, and the lanes'
        # comparisons and transparent banks cost 16 times the logic at 16 lanes
        self.pool = PoolRows(lanes=1, width=self.array.sum_width, max_size=max_size,
                             max_folds=max_out_folds * pe, max_kernel=_POOL_MAX,
                             max_out=max_pooled)
        super().__init__(compute_unit_members(data_width, addr_width))

    def supported(self, d):
        """The conditions under which the unit runs descriptor ``d`` (its fields), a bit
        each: it runs ``d`` when all hold."""
        db = self.data_width // 8
        pool = d.stages[exact_log2(STAGE_BITS["maxpool"])]
        conv_h = Mux(pool, d.mid_h, d.out_h)
        conv_w = Mux(pool, d.mid_w, d.out_w)
        kb = bits_of(self.max_kernel)               # a kernel's or a stride's bits
        pb = bits_of(_POOL_MAX)
        fb = bits_of(self.max_out_folds)
        in_w, out_w = d.in_w[:bits_of(self.max_size)], d.out_w[:bits_of(self.max_size)]
        kernel, dilation = d.kernel[:kb], d.dilation[:bits_of(self.max_size)]
        row_bytes = _product(in_w, d.in_c, bits_of(self.lanes))
        window = _product(_product(kernel, kernel, kb), d.in_c, bits_of(self.lanes))
        # a row's bits: its channels' elements of 1 to 4 bytes, a pixel after another
        pixel_bytes = _product(d.out_c[:bits_of(self.max_out_folds * self.pe)],
                               d.out_elem[3:6], 3)
        out_row_bits = _product(pixel_bytes, out_w, bits_of(self.max_size)) << 3
        # products by the unit's own sizes: shifted adds too (a constant's `*` was a
        # DSP block as well)
        in_folds = d.in_folds[:bits_of(self.max_in_folds)]
        in_folds_lanes = const_multiply(in_folds, self.simd)
        out_folds_rows = const_multiply(d.out_folds[:fb], self.pe)
        fits = lambda value, bound: (value != 0) & (value <= bound)        # noqa: E731
        conditions = [
            d.opcode == OPCODE_CODES["CONV"], (d.flags & FLAG_BITS["int_weights"]) != 0,
            (d.flags & ~_FLAGS) == 0, d.jobs == 1, d.groups == 1,
            d.stages[exact_log2(STAGE_BITS["postop"])], (d.stages & ~_STAGES) == 0,
            d.in_fmt == _UINT_FORMAT, d.in_elem == 8,
            _one_of(d.in_c, [c for c in range(1, self.lanes + 1) if self.simd % c == 0]),
            d.weight_bytes == 1, d.const_bytes == 4,
            d.out_fmt == _FIXED_FORMAT, _one_of(d.out_elem, STEM_OUT_ELEMS),
            fits(d.kernel, self.max_kernel), fits(d.stride, self.max_kernel),
            fits(d.dilation, self.max_size), d.padding < d.kernel,
            fits(d.in_h, self.max_size), fits(d.in_w, self.max_size),
            # the rows below the last window fit the ring beside it
            d.span + d.stride <= self.ring_rows,
            fits(conv_w, self.max_size), fits(d.out_c, self.max_out_folds * self.pe),
            # the unit geometry the compiler wrote (compiler/engine/gather.py)
            d.words == 1, d.tail == d.in_c, d.pitch == d.in_w, d.x_step == d.stride,
            d.dx_words == d.dilation, d.pad_words == d.padding,
            d.span == _product(dilation, kernel - 1, kb),
            fits(d.in_folds, self.max_in_folds), fits(d.out_folds, self.max_out_folds),
            in_folds_lanes >= window, in_folds_lanes - self.simd < window,
            out_folds_rows >= d.out_c, out_folds_rows - self.pe < d.out_c,
            d.weight_tile_bytes == _product(const_multiply(in_folds, self.pe * self.simd),
                                            d.out_folds, fb),
            # the convolution's and the pooling's sizes are the fields' own, so the
            # units make exactly the pixels the rows wait for
            _floor_size_ok(conv_h, d.in_h, d.padding, d.span, d.stride, kb),
            _floor_size_ok(conv_w, d.in_w, d.padding, d.span, d.stride, kb),
            ~pool | (fits(d.pool_kernel, _POOL_MAX) & fits(d.pool_stride, _POOL_MAX)
                     & fits(d.out_w, self.max_pooled)
                     & (d.pool_kernel <= 2 * d.pool_stride)
                     & (d.pool_padding < d.pool_stride)
                     & _floor_size_ok(d.out_h, d.mid_h, d.pool_padding, d.pool_kernel - 1,
                                      d.pool_stride, pb)),
            # rows of the fields' own pitches
            d.in_pitch[:exact_log2(db)] == 0, d.in_pitch >= row_bytes,
            d.in_pitch - row_bytes < db,
            d.out_pitch[:exact_log2(db)] == 0, d.out_pitch * 8 >= out_row_bits,
            d.out_pitch * 8 - out_row_bits < 8 * db,
        ]
        return Cat(*conditions)

    def elaborate(self, platform):
        m = Module()
        pe, dw, aw = self.pe, self.data_width, self.addr_width
        db = dw // 8
        log_db = exact_log2(db)
        loader, gather, folds, array, pool = (self.loader, self.gather, self.folds,
                                              self.array, self.pool)
        m.submodules.loader, m.submodules.gather = loader, gather
        m.submodules.folds, m.submodules.array = folds, array
        m.submodules.pool = pool
        wiring.connect(m, loader.o, gather.rows)
        wiring.connect(m, gather.window, folds.taps)
        wiring.connect(m, folds.o, array.i)
        m.d.comb += [gather.loaded.eq(loader.loaded), loader.release.eq(gather.release)]

        d = Signal(descriptor_fields())
        pooling = d.stages[exact_log2(STAGE_BITS["maxpool"])]
        conditions = self.supported(d)
        ok = Signal(len(conditions))
        in_addr, out_addr, param_addr = (Signal(aw, name=n) for n in
                                         ("in_addr", "out_addr", "param_addr"))
        entry = Signal(128)
        rd_cmd, wr_cmd = self.rd_cmd, self.wr_cmd

        # -- the held settings of the units --
        m.d.comb += [
            loader.settings.width.eq(d.in_w), loader.settings.channels.eq(d.in_c),
            loader.settings.row_beats.eq(d.in_pitch >> log_db),
            gather.settings.height.eq(d.in_h), gather.settings.width.eq(d.in_w),
            gather.settings.words.eq(1),
            gather.settings.tail.eq((Const(1, self.lanes + 1) << d.in_c[:bits_of(self.lanes)]) - 1),
            gather.settings.kernel.eq(d.kernel), gather.settings.stride.eq(d.stride),
            gather.settings.dilation.eq(d.dilation), gather.settings.padding.eq(d.padding),
            gather.settings.out_w.eq(Mux(pooling, d.mid_w, d.out_w)),
            gather.settings.pitch.eq(d.pitch), gather.settings.x_step.eq(d.x_step),
            gather.settings.dx_words.eq(d.dx_words), gather.settings.pad_words.eq(d.pad_words),
            gather.settings.pad_ones.eq(0), gather.settings.span.eq(d.span),
            folds.settings.channels.eq(d.in_c), folds.settings.in_folds.eq(d.in_folds),
            folds.settings.out_folds.eq(d.out_folds),
            pool.settings.mid_h.eq(d.mid_h), pool.settings.mid_w.eq(d.mid_w),
            pool.settings.folds.eq(d.out_c), pool.settings.kernel.eq(d.pool_kernel),
            pool.settings.stride.eq(d.pool_stride), pool.settings.padding.eq(d.pool_padding),
            pool.settings.out_h.eq(d.out_h), pool.settings.out_w.eq(d.out_w),
        ]

        # -- the sums a channel at a time: a fold held while its channels go out --
        sw = self.array.sum_width
        held = Signal(pe * sw)
        held_valid = Signal()
        p = Signal(range(pe))                       # the held fold's channel
        channel = Signal(range(self.max_out_folds * pe + 1))
        next_fold = Signal(range(self.max_out_folds))
        next_channel = Signal(range(self.max_out_folds * pe))
        value = held.word_select(p, sw).as_signed()
        adv = Signal()                              # the post-op lane's stages move on
        sent = held_valid & Mux(pooling, pool.i.ready, adv)
        last_channel = (p == pe - 1) | (channel + 1 == d.out_c)
        take_fold = array.o.valid & (~held_valid | (sent & last_channel))
        m.d.comb += array.o.ready.eq(take_fold)
        with m.If(sent):
            m.d.sync += [p.eq(p + 1), channel.eq(channel + 1)]
            with m.If(last_channel):
                m.d.sync += held_valid.eq(0)
        with m.If(take_fold):
            wrap = next_fold == d.out_folds - 1
            m.d.sync += [held.eq(array.o.payload.as_value()), held_valid.eq(1), p.eq(0),
                         channel.eq(next_channel),
                         next_fold.eq(Mux(wrap, 0, next_fold + 1)),
                         next_channel.eq(Mux(wrap, 0, next_channel + pe))]

        # -- pooled (a maxpool stage) or not, a channel a cycle into the post-op lane --
        m.d.comb += [pool.i.payload[0].eq(value), pool.i.valid.eq(held_valid & pooling),
                     pool.o.ready.eq(pooling & adv)]
        in_valid = Mux(pooling, pool.o.valid, held_valid)
        in_value = Mux(pooling, pool.o.payload[0], value)
        issue = in_valid & adv
        post_channel = Signal(range(self.max_out_folds * pe))  # the value's channel
        with m.If(issue):
            m.d.sync += post_channel.eq(Mux(post_channel == d.out_c - 1, 0, post_channel + 1))

        m.submodules.constants = constants = Memory(
            shape=unsigned(2 * 32), depth=self.max_out_folds * pe, init=[])
        ab_wp, ab_rp = constants.write_port(), constants.read_port()
        shift = Signal(6)
        pre_relu, post_relu = Signal(), Signal()
        # stage 1: the value (after pre_relu) beside its channel's constants
        v1 = Signal(signed(sw))
        s1 = Signal()
        m.d.comb += [ab_rp.addr.eq(post_channel), ab_rp.en.eq(adv)]
        with m.If(adv):
            m.d.sync += [s1.eq(issue), v1.eq(Mux(pre_relu & in_value[-1], 0, in_value))]
        a1 = ab_rp.data[:SCALE_BITS].as_signed()
        b1 = ab_rp.data[32:64].as_signed()
        # stage 2: the product's pieces (a DSP block each) and b with the rounding
        s2 = Signal()
        offset = Signal(signed(34))
        with m.If(adv):
            m.d.sync += [s2.eq(s1), offset.eq(b1 + (Const(1, 1) << shift)[1:34])]
        pieces = registered_pieces(m, v1, a1, adv, "stem_product")
        # stage 3: the pieces joined and the offset added
        s3 = Signal()
        total = Signal(signed(sw + SCALE_BITS + 2))
        with m.If(adv):
            m.d.sync += [s3.eq(s2), total.eq(sum(r << lo for r, lo in pieces) + offset)]
        # stage 4: the shift and post_relu
        s4 = Signal()
        y = Signal(signed(len(total)))
        shifted = total >> shift
        with m.If(adv):
            m.d.sync += [s4.eq(s3), y.eq(Mux(post_relu & shifted[-1], 0, shifted))]

        # -- the packer: a row's elements into bus words, the row padded to its pitch --
        lo, hi = Signal(dw), Signal(dw)                 # the word being filled, its spill
        pos = Signal(range(db))
        eb = Signal(3)                                  # bytes of an element
        elems_left = Signal(range(self.max_size * self.max_out_folds * pe + 1))
        row_elems = Signal.like(elems_left)             # a row's elements
        words_left = Signal(range((self.max_size * self.max_out_folds * pe * 4) // db + 2))
        rows_left = Signal(range(self.max_size + 1))
        row_addr = Signal(aw)
        out_word = Signal(dw)
        word_valid = Signal()
        padding_words = Signal()                        # the row's elements are placed
        row_open = Signal()                             # the row's write command is out
        out_room = ~word_valid | self.wr.ready
        m.d.comb += adv.eq(row_open & ~padding_words & out_room)
        mask = Mux(eb == 1, 0xFF, Mux(eb == 2, 0xFFFF, Mux(eb == 3, 0xFFFFFF, 0xFFFFFFFF)))
        placed = Cat(lo, hi) | ((y.as_unsigned()[:32] & mask) << Cat(Const(0, 3), pos))
        m.d.comb += [self.wr.valid.eq(word_valid), self.wr.payload.eq(out_word)]
        with m.If(self.wr.valid & self.wr.ready):
            m.d.sync += [word_valid.eq(0), words_left.eq(words_left - 1)]
        with m.If(adv & s4):
            full = pos + eb >= db
            last = elems_left == 1
            m.d.sync += elems_left.eq(elems_left - 1)
            with m.If(full | last):
                # the word goes out; the next starts from what spilled past it (which
                # the row's last element leaves to the padding's first word)
                m.d.sync += [out_word.eq(placed[:dw]), word_valid.eq(1),
                             lo.eq(Mux(full, placed[dw:], 0)), hi.eq(0),
                             pos.eq(Mux(full, pos + eb - db, 0))]
            with m.Else():
                m.d.sync += [lo.eq(placed[:dw]), hi.eq(placed[dw:]), pos.eq(pos + eb)]
            with m.If(last):
                m.d.sync += padding_words.eq(1)

        # -- the phases --
        words = Signal(range(self.max_in_folds * self.max_out_folds * pe * self.simd // db + 2))
        piece = Signal(range(pe * self.simd // db + 1))
        w_word = Signal(pe * self.simd * 8)
        w_addr = Signal(range(self.max_in_folds * self.max_out_folds))
        consts_left = Signal(range(2 * self.max_out_folds * pe + 3))
        const_pos = Signal(range(db // 4))
        const_index = Signal(range(2 * self.max_out_folds * pe + 2))
        a_held = Signal(32)
        iy = Signal(range(self.max_size + 1))
        slot = Signal(range(self.ring_rows))
        base = Signal(range(self.ring_rows * self.max_size))
        in_row_addr = Signal(aw)
        row_cmd_out = Signal()                       # the row's read command is out
        tile_sent = Signal()
        have = Signal()                              # a bus word of constants is held
        with m.FSM(name="phase"):
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.desc.ready.eq(1)]
                with m.If(self.desc.valid):
                    m.d.sync += d.eq(self.desc.payload)
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [ok.eq(conditions), eb.eq(d.out_elem >> 3),
                             row_elems.eq(_product(
                                 d.out_c[:bits_of(self.max_out_folds * pe)],
                                 d.out_w[:bits_of(self.max_size)], bits_of(self.max_size)))]
                m.next = "DECIDE"
            refuse_or_read_entry(m, self, d, ok, entry, "ADDRESSES")
            with m.State("ADDRESSES"):
                m.d.sync += [in_addr.eq(job_entry_field(entry, "in_addr")),
                             out_addr.eq(job_entry_field(entry, "out_addr")),
                             param_addr.eq(job_entry_field(entry, "param_addr")),
                             words.eq(d.weight_tile_bytes >> log_db), piece.eq(0),
                             w_addr.eq(0)]
                m.next = "WEIGHTS"
            with m.State("WEIGHTS"):
                m.d.comb += [rd_cmd.valid.eq(1), rd_cmd.payload.address.eq(param_addr),
                             rd_cmd.payload.length.eq(d.weight_tile_bytes)]
                with m.If(rd_cmd.ready):
                    m.next = "WEIGHT_WORDS"
            with m.State("WEIGHT_WORDS"):
                # a weight word is `pe * simd / db` bus words, the first at its bottom
                pieces_a_word = pe * self.simd // db
                m.d.comb += self.rd.ready.eq(1)
                with m.If(self.rd.valid):
                    word = Cat(w_word[dw:], self.rd.payload)
                    m.d.sync += [w_word.eq(word), piece.eq(piece + 1),
                                 words.eq(words - 1)]
                    with m.If(piece == pieces_a_word - 1):
                        m.d.comb += [folds.weights.valid.eq(1),
                                     folds.weights.payload.addr.eq(w_addr),
                                     folds.weights.payload.w.eq(word)]
                        m.d.sync += [piece.eq(0), w_addr.eq(w_addr + 1)]
                    with m.If(words == 1):
                        m.next = "CONSTANTS"
            with m.State("CONSTANTS"):
                # the post-op section follows the weights (a whole number of bus words)
                section_words = ((d.out_c << 3) + 8 + db - 1) >> log_db
                m.d.comb += [rd_cmd.valid.eq(1),
                             rd_cmd.payload.address.eq(param_addr + d.weight_tile_bytes),
                             rd_cmd.payload.length.eq(section_words << log_db)]
                with m.If(rd_cmd.ready):
                    m.d.sync += [consts_left.eq((d.out_c << 1) + 2), const_index.eq(0),
                                 const_pos.eq(0), words.eq(section_words), have.eq(0)]
                    m.next = "CONSTANT_WORDS"
            with m.State("CONSTANT_WORDS"):
                # a 4-byte constant a cycle from the held word: shift, flags, then each
                # channel's A and B; the section's words past them are dropped
                m.d.comb += self.rd.ready.eq(~have & (words != 0))
                with m.If(self.rd.valid & self.rd.ready):
                    m.d.sync += [lo.eq(self.rd.payload), have.eq(1), const_pos.eq(0),
                                 words.eq(words - 1)]
                with m.If(have):
                    const = lo.word_select(const_pos, 32)
                    with m.If((consts_left <= 1) | (const_pos == db // 4 - 1)):
                        m.d.sync += have.eq(0)
                    with m.If(consts_left != 0):
                        m.d.sync += [const_pos.eq(const_pos + 1),
                                     consts_left.eq(consts_left - 1),
                                     const_index.eq(const_index + 1)]
                        with m.If(const_index == 0):
                            m.d.sync += shift.eq(const[:6])
                        with m.Elif(const_index == 1):
                            m.d.sync += [pre_relu.eq(const[0]), post_relu.eq(const[1])]
                        with m.Elif(const_index[0] == 0):
                            m.d.sync += a_held.eq(const)
                        with m.Else():
                            m.d.comb += [ab_wp.addr.eq((const_index - 2) >> 1),
                                         ab_wp.data.eq(Cat(a_held, const)), ab_wp.en.eq(1)]
                with m.If((words == 0) & ~have):
                    m.d.sync += [iy.eq(0), slot.eq(0), base.eq(0), in_row_addr.eq(in_addr),
                                 row_cmd_out.eq(0), tile_sent.eq(0),
                                 rows_left.eq(d.out_h), row_addr.eq(out_addr),
                                 row_open.eq(0), padding_words.eq(0), pos.eq(0),
                                 lo.eq(0), hi.eq(0), next_fold.eq(0), next_channel.eq(0),
                                 post_channel.eq(0)]
                    m.next = "RUN"
            with m.State("RUN"):
                # the frame's rows: each row's read, then its slot to the loader
                m.d.comb += [loader.data.valid.eq(self.rd.valid),
                             loader.data.payload.eq(self.rd.payload),
                             self.rd.ready.eq(loader.data.ready)]
                with m.If(iy != d.in_h):
                    with m.If(~row_cmd_out):
                        m.d.comb += [rd_cmd.valid.eq(1), rd_cmd.payload.address.eq(in_row_addr),
                                     rd_cmd.payload.length.eq(d.in_pitch)]
                        with m.If(rd_cmd.ready):
                            m.d.sync += [row_cmd_out.eq(1),
                                         in_row_addr.eq(in_row_addr + d.in_pitch)]
                    with m.Else():
                        m.d.comb += [loader.row.valid.eq(1), loader.row.payload.base.eq(base),
                                     loader.row.payload.iy.eq(iy)]
                        with m.If(loader.row.ready):
                            wrap = slot == self.ring_rows - 1
                            m.d.sync += [row_cmd_out.eq(0), iy.eq(iy + 1),
                                         slot.eq(slot + 1), base.eq(Mux(wrap, 0, base + d.in_w))]
                # the convolution's rows: one tile
                with m.If(~tile_sent):
                    m.d.comb += [gather.tile.valid.eq(1),
                                 gather.tile.payload.iy0.eq(-d.padding),
                                 gather.tile.payload.rows.eq(Mux(pooling, d.mid_h, d.out_h))]
                    with m.If(gather.tile.ready):
                        m.d.sync += tile_sent.eq(1)
                # the output rows: a write command each, its elements, its padding
                with m.If(~row_open & (rows_left != 0) & ~word_valid):
                    m.d.comb += [wr_cmd.valid.eq(1), wr_cmd.payload.address.eq(row_addr),
                                 wr_cmd.payload.length.eq(d.out_pitch)]
                    with m.If(wr_cmd.ready):
                        m.d.sync += [row_open.eq(1), row_addr.eq(row_addr + d.out_pitch),
                                     rows_left.eq(rows_left - 1),
                                     elems_left.eq(row_elems),
                                     words_left.eq(d.out_pitch >> log_db),
                                     padding_words.eq(0), pos.eq(0), lo.eq(0), hi.eq(0)]
                with m.If(row_open & padding_words & ~word_valid):
                    with m.If(words_left != 0):
                        # the padding's words (the first holds a 24-bit element's spill)
                        m.d.sync += [out_word.eq(lo), word_valid.eq(1), lo.eq(0)]
                    with m.Else():
                        m.d.sync += row_open.eq(0)
                # done with the last row written and every frame row read (rows below
                # the last window are read too, so that no word of this descriptor is
                # left for the next)
                with m.If(~row_open & (rows_left == 0) & ~word_valid & (iy == d.in_h)
                          & loader.idle):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        return m
