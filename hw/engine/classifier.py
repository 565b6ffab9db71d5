"""The intended engine's classifier head: a HEAD descriptor (global sum pooling and
the fully connected classifier), DRAM to DRAM.

The IR's ``head`` is ``logits = W @ sum_{y,x} x[:, y, x] + bias``
(``compiler/ops/io.py``): the map's sums over its pixels, then a product of integer
weights. The unit reads the descriptor's job-table entry, the bias section of its
parameter block into a bias memory, the input map (a fixed-point map as section 12
stores it) row by row, an element a cycle, into ``lanes`` banks of channel sums (channel
``c`` at word ``c // lanes`` of bank ``c % lanes``: the classifier reads ``lanes`` sums
a cycle), then the weights (``W[classes][C]``, as the compiler packs them) a group of
``lanes`` a cycle, each group's products summed into its class's logit, the bias added
at the class's last group, and writes the logits, packed as the output map's elements,
through the write DMA. Every address goes through the DMAs, which check it against the
host's window.

Arithmetic is modulo ``2**acc_width``: the unit takes a descriptor only when a
bound on its logits from the fields alone (a sum's bits, the map's elements and its
pixels' count; a product's, with the weight's bits; a logit's, with the channels' and a
bit for the bias) fits ``acc_width`` bits, so sums, products and the accumulation may
wrap at that width (two's complement) and still give every logit exactly, which the
logits' element (8 to 64 bits, which the compiler proves holds every logit) then
holds. The multipliers take each
sum at ``sum_width`` bits, the widest a sum of the map can be, and the products of a
group are summed piece by piece (a DSP block's piece of every lane, then the pieces
joined once), so that one adder tree of full width is not paid per lane.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out
from amaranth.utils import exact_log2

from ...engine_format import OPCODE_CODES
from ..arith import multiplier_loan, multiplier_pieces, positive_int, registered_pieces
from .runner import (bits_of, compute_unit_members, descriptor_fields, job_entry_field,
                     refuse_or_read_entry)

__all__ = ["PooledClassifier", "HEAD_ELEMS", "LOGIT_ELEMS", "HEAD_WEIGHT_BYTES"]

#: input map elements the unit reads (fixed point, whole bytes)
HEAD_ELEMS = (8, 16, 24, 32)
#: logits' elements it writes (the low bits of its ``acc_width`` arithmetic: the
#: compiler proves the logits' range fits the element)
LOGIT_ELEMS = (8, 16, 24, 32, 64)
#: bytes of a weight it multiplies
HEAD_WEIGHT_BYTES = (1, 2)
_FIXED_FORMAT = 2
_LATENCY = 6                 # a weight group's products to its class's sum


def _one_of(value, choices):
    ok = Const(0)
    for c in choices:
        ok = ok | (value == c)
    return ok


def _bits_below(n, bound):
    """``ceil(log2(n))``, the bits of ``0 .. n - 1``, for ``1 <= n <= bound``: a
    comparison with a constant a bit."""
    bits = Const(0, range(bound.bit_length() + 1))
    for k in range(bound.bit_length()):
        bits = bits + (n > (1 << k))
    return bits


def _sign_extended(raw, nbytes, choices, width):
    """``raw``'s low ``8 * nbytes`` bits, sign-extended to ``width``: a multiplexer by
    the run-time ``nbytes`` among ``choices``."""
    out = Const(0, signed(width))
    for b in choices:
        out = Mux(nbytes == b, raw[:8 * b].as_signed(), out)
    return out


class PooledClassifier(wiring.Component):
    """Runs a HEAD descriptor: sum pooling and the classifier, DRAM to DRAM.

    Parameters
    ----------
    lanes : int
        Products a cycle (the cycle model's ``vector_lanes``): a weight group is
        ``lanes`` channels of one class, and the map's channels a multiple of it; a
        power of two of at least 4.
    data_width : int
        The DMAs' bus word: a power of two of at least 128 bits (a job-table entry is 16
        bytes) and whole weight groups.
    addr_width : int
        Bits of a byte address.
    max_channels, max_classes, max_size : int
        Bounds of the map's channels, of the classes and of the map's height and width.
    value_width : int
        Widest element of the map (at most 32).
    acc_width : int
        Bits of the logits' arithmetic (module docstring; at most 64).
    loan_widths : (int, int) or None
        None: the unit has its own multipliers, a lane's product in pieces. Else the
        widths of the wide and the narrow operand of ``lanes`` multipliers it borrows
        (port ``loan``; :class:`~.mixer.MixerLanes` lends its aggregate's), at least
        the sums' and the weights' (16 bits).

    Ports
    -----
    desc : ``In(stream.Signature(descriptor_fields()))``
        A HEAD descriptor; taken when the unit is idle.
    rd_cmd, rd, wr_cmd, wr
        The read and write DMAs' commands and words (as :class:`~.runner.ConvRunner`'s).
    done : ``Out(1)``
        Pulse: the logits' last word is with the write DMA.
    error : ``Out(1)``
        Pulse: the descriptor was refused (``error_code`` ``unsupported``: not a HEAD
        descriptor of one job, a map or weights of widths it does not take, channels not a
        multiple of ``lanes``, sizes past its bounds, logits whose bound passes
        ``acc_width``, pitches or sizes that are not the fields' own); nothing was read or
        written.
    error_code : ``Out(4)``
    idle : ``Out(1)``
    loan : ``Out(multiplier_loan(lanes, *loan_widths))``
        With ``loan_widths``: the borrowed multipliers (held ``on`` while classifying).

    Latency
    -------
    The table's, the biases' and each row's read latency in turn, then the weights'; a
    class's logit goes into the logits' FIFO ``_LATENCY`` (6) cycles after its last
    weight group is taken (the sums' read, the sums and weights registered, the
    products' pieces, their sums over the lanes, their join, the class's sum).

    Throughput
    ----------
    Pooling: a map element a cycle (``C x H x W`` cycles). Classifier: a weight group
    of ``lanes`` a cycle while the bus keeps up (``classes x C / lanes`` cycles).
    """

    def __init__(self, *, lanes=8, data_width=128, addr_width=32, max_channels=512,
                 max_classes=1024, max_size=8, value_width=32, acc_width=48, loan_widths=None):
        for name, value in (("lanes", lanes), ("data_width", data_width),
                            ("max_channels", max_channels), ("max_classes", max_classes),
                            ("max_size", max_size)):
            positive_int(f"PooledClassifier: {name}", value)
        if data_width % 128 or data_width & (data_width - 1):
            raise ValueError(f"PooledClassifier: data_width ({data_width}) must be a power "
                             "of two of at least 128 bits: a job-table entry is 16 bytes")
        if data_width % (8 * lanes * max(HEAD_WEIGHT_BYTES)):
            raise ValueError(f"PooledClassifier: a bus word of {data_width} bits must be "
                             f"whole groups of {lanes} weights")
        if lanes & (lanes - 1) or lanes < 4:
            raise ValueError(f"PooledClassifier: lanes ({lanes}) must be a power of two of "
                             "at least 4 (a channel's sum is written before it is read again)")
        if max_channels % lanes:
            raise ValueError(f"PooledClassifier: max_channels ({max_channels}) must be a "
                             f"multiple of lanes ({lanes})")
        if value_width not in HEAD_ELEMS:
            raise ValueError(f"PooledClassifier: value_width must be one of {HEAD_ELEMS}")
        self.lanes, self.data_width, self.addr_width = lanes, data_width, addr_width
        self.max_channels, self.max_classes, self.max_size = max_channels, max_classes, max_size
        if not 32 <= acc_width <= 64:
            raise ValueError(f"PooledClassifier: acc_width ({acc_width}) must be 32 to 64")
        self.value_width, self.acc_width = value_width, acc_width
        #: a sum of the map's elements over its pixels, exactly
        self.sum_width = min(acc_width, value_width + (max_size * max_size - 1).bit_length())
        members = compute_unit_members(data_width, addr_width)
        if loan_widths is not None:
            x_width, y_width = loan_widths
            if x_width < self.sum_width or y_width < 16:
                raise ValueError(f"PooledClassifier: borrowed multipliers of {x_width} x "
                                 f"{y_width} bits cannot take its {self.sum_width}-bit sums "
                                 f"and 16-bit weights")
            members["loan"] = Out(multiplier_loan(lanes, x_width, y_width))
        self.loan_widths = loan_widths
        super().__init__(members)

    def supported(self, d, row_bytes, weight_bytes, logit_bits, bound_bits):
        """The conditions under which the unit runs descriptor ``d``, a bit each (it
        runs ``d`` when all hold), given the products ``row_bytes`` (a row's elements'
        bytes), ``weight_bytes`` (the weights' section) and ``logit_bits`` (the logits'
        bits), and ``bound_bits``, the bits of the pixels' count and of the channels
        (``ceil(log2(.))`` each), which the unit registers from the descriptor before it
        checks."""
        db = self.data_width // 8
        fits = lambda value, bound: (value != 0) & (value <= bound)        # noqa: E731
        conditions = [
            d.opcode == OPCODE_CODES["HEAD"], d.jobs == 1,
            d.in_fmt == _FIXED_FORMAT,
            _one_of(d.in_elem, [b for b in HEAD_ELEMS if b <= self.value_width]),
            d.out_fmt == _FIXED_FORMAT, _one_of(d.out_elem, LOGIT_ELEMS),
            _one_of(d.weight_bytes, HEAD_WEIGHT_BYTES), _one_of(d.const_bytes, (4, 8)),
            fits(d.in_c, self.max_channels), d.in_c[:exact_log2(self.lanes)] == 0,
            fits(d.out_c, self.max_classes),
            fits(d.in_h, self.max_size), fits(d.in_w, self.max_size),
            # the rows and the sections the unit reads are the fields' own
            d.in_pitch[:exact_log2(db)] == 0, d.in_pitch >= row_bytes,
            d.in_pitch - row_bytes < db,
            d.weight_tile_bytes == weight_bytes,
            d.out_bytes[:exact_log2(db)] == 0,
            d.out_bytes * 8 >= logit_bits, d.out_bytes * 8 - logit_bits < 8 * db,
            # a logit's bound within the arithmetic, and a bias too
            d.in_elem + bound_bits + 8 * d.weight_bytes + 1 <= self.acc_width,
            8 * d.const_bytes <= self.acc_width,
        ]
        return Cat(*conditions)

    def elaborate(self, platform):
        m = Module()
        lanes, dw = self.lanes, self.data_width
        db = dw // 8
        log_db = exact_log2(db)
        depth = self.max_channels // lanes
        d = Signal(descriptor_fields())
        aw = self.addr_width

        # -- the held descriptor's products and the job's addresses --
        row_bytes = Signal(32)
        row_elems_total = Signal(32)
        weight_bytes = Signal(32)
        logit_bits = Signal(32)
        pixels = Signal(range(self.max_size ** 2 + 1))
        bound_bits = Signal(8)
        conditions = self.supported(d, row_bytes, weight_bytes, logit_bits, bound_bits)
        ok = Signal(len(conditions))
        acc_width = self.acc_width
        in_addr, out_addr, param_addr = (Signal(aw, name=n) for n in
                                         ("in_addr", "out_addr", "param_addr"))
        row_addr = Signal(aw)
        rd_cmd = self.rd_cmd

        # -- memories: the channels' sums in `lanes` banks, the classes' biases --
        sw = self.sum_width
        banks = []
        for j in range(lanes):
            m.submodules[f"sums{j}"] = bank = Memory(shape=signed(sw), depth=depth, init=[])
            wp = bank.write_port()
            rp = bank.read_port()
            banks.append((wp, rp))
        m.submodules.biases = biases = Memory(shape=signed(acc_width), depth=self.max_classes,
                                              init=[])
        bias_wp, bias_rp = biases.write_port(), biases.read_port()

        # -- counters of the phases --
        y = Signal(range(self.max_size + 1))        # rows of the map requested
        row_words = Signal(32 - log_db)
        words_in_row = Signal(32 - log_db)          # the row's words taken (incl. dropped)
        row_elems = Signal(range(self.max_size * self.max_channels + 1))
        pixel_first = Signal()                       # the map's first pixel
        c_lane = Signal(range(lanes))
        c_word = Signal(range(depth))
        cls = Signal(range(self.max_classes + 1))    # classes issued
        bias_left = Signal(range(self.max_classes + 1))

        # -- the element gearbox: two bus words and the next element's byte --
        lo, hi = Signal(dw), Signal(dw)
        have_lo, have_hi = Signal(), Signal()
        pos = Signal(range(db))
        eb = Signal(3)                                # the element's bytes
        elem = _sign_extended(Cat(lo, hi).bit_select(pos << 3, 32), eb, (1, 2, 3, 4), sw)
        fits_lo = pos + eb <= db
        elem_ready = have_lo & (fits_lo | have_hi)
        pooling = Signal()
        take_elem = Signal()                          # an element into the sums
        row_done = Signal()                           # the row's last element taken
        dropping = Signal()                           # the row's words past its elements

        # the pooling's read, pick, add and write, a stage each: a channel's sum is read
        # again no sooner than `lanes` (at least 4) elements later, after its write, so
        # no sum is read while its new value is on its way. Stage 2: the element beside
        # the sums read; stage 3: the bank's sum picked (a block RAM's data leave it
        # late: read, pick and add in one cycle placed at 68.5 MHz on ECP5); stage 4:
        # added (one adder for the banks), written a cycle later
        p_valid, p_first = Signal(), Signal()
        p_value = Signal(signed(sw))
        p_lane, p_word = Signal.like(c_lane), Signal.like(c_word)
        m.d.sync += [p_valid.eq(take_elem), p_value.eq(elem), p_first.eq(pixel_first),
                     p_lane.eq(c_lane), p_word.eq(c_word)]
        k_valid, k_first = Signal(), Signal()
        k_value, k_sum = Signal(signed(sw)), Signal(signed(sw))
        k_lane, k_word = Signal.like(c_lane), Signal.like(c_word)
        picked = Const(0, signed(sw))
        for j, (wp, rp) in enumerate(banks):
            picked = Mux(p_lane == j, rp.data, picked)
        m.d.sync += [k_valid.eq(p_valid), k_first.eq(p_first), k_value.eq(p_value),
                     k_sum.eq(picked), k_lane.eq(p_lane), k_word.eq(p_word)]
        q_valid = Signal()
        q_sum = Signal(signed(sw))
        q_lane, q_word = Signal.like(c_lane), Signal.like(c_word)
        m.d.sync += [q_valid.eq(k_valid), q_lane.eq(k_lane), q_word.eq(k_word),
                     q_sum.eq(Mux(k_first, k_value, k_sum + k_value))]
        for j, (wp, rp) in enumerate(banks):
            m.d.comb += [wp.addr.eq(q_word), wp.en.eq(q_valid & (q_lane == j)),
                         wp.data.eq(q_sum)]

        # -- the classifier: a weight group a cycle --
        wb = Signal(2)                                # a weight's bytes
        group_bits = 8 * lanes * max(HEAD_WEIGHT_BYTES)
        groups_a_word = db // lanes                   # groups of 1-byte weights a word
        w_word = Signal(dw)
        w_have = Signal()
        w_group = Signal(range(groups_a_word))
        w_groups = Mux(wb == 1, groups_a_word, groups_a_word // 2)
        group1 = w_word.word_select(w_group, 8 * lanes)
        group2 = w_word.word_select(w_group, 16 * lanes) if groups_a_word >= 4 \
            else w_word[:group_bits]
        g = Signal(range(depth))                       # the group's word of the sums
        classifying = Signal()
        take_group = Signal()
        last_g = Signal.like(g)                        # a class's last group, registered
        last_group = g == last_g
        # stage 1: the sums' read (issued with the group), the weights registered
        s1_valid, s1_last = Signal(), Signal()
        s1_w = [Signal(signed(16), name=f"s1_w{j}") for j in range(lanes)]
        for j, (wp, rp) in enumerate(banks):
            m.d.comb += rp.addr.eq(Mux(classifying, g, c_word))
            m.d.comb += rp.en.eq(Mux(classifying, take_group, take_elem))
        m.d.sync += [s1_valid.eq(take_group), s1_last.eq(take_group & last_group)]
        with m.If(take_group):
            for j in range(lanes):
                m.d.sync += s1_w[j].eq(Mux(wb == 1, group1[8 * j:8 * j + 8].as_signed(),
                                           group2[16 * j:16 * j + 16].as_signed()))
        # stage 2: the sums registered beside their weights (a block RAM's read into a
        # DSP block's product in one cycle placed at 75 MHz on ECP5)
        t_valid, t_last = Signal(), Signal()
        m.d.sync += [t_valid.eq(s1_valid), t_last.eq(s1_last)]
        # stage 3: each lane's product in pieces (a DSP block each)
        s2_valid, s2_last = Signal(), Signal()
        m.d.sync += [s2_valid.eq(t_valid), s2_last.eq(t_last)]
        if self.loan_widths is None:
            t_sums = [Signal(signed(sw), name=f"t_sum{j}") for j in range(lanes)]
            t_w = [Signal(signed(16), name=f"t_w{j}") for j in range(lanes)]
            m.d.sync += [*(t_sums[j].eq(banks[j][1].data) for j in range(lanes)),
                         *(t_w[j].eq(s1_w[j]) for j in range(lanes))]
            pieces = [registered_pieces(m, t_sums[j], t_w[j], None, f"product{j}")
                      for j in range(lanes)]
        else:
            # the lender's operand registers are stage 2's, its pieces stage 3's
            loan = self.loan
            m.d.comb += [loan.on.eq(classifying),
                         *(loan.x[j].eq(banks[j][1].data.as_signed()) for j in range(lanes)),
                         *(loan.y[j].eq(s1_w[j]) for j in range(lanes))]
            shifts = [lo for lo, _ in multiplier_pieces(self.loan_widths[0])]
            pieces = [[(loan.pieces[j][i], lo) for i, lo in enumerate(shifts)]
                      for j in range(lanes)]
        # stage 4: each piece summed over the lanes (every lane's pieces have the same
        # shifts)
        s3_valid, s3_last = Signal(), Signal()
        m.d.sync += [s3_valid.eq(s2_valid), s3_last.eq(s2_last)]
        piece_sums = []
        for i, (r0, shift) in enumerate(pieces[0]):
            total = sum(pieces[j][i][0] for j in range(lanes))
            piece_sum = Signal(signed(min(acc_width - shift, len(total))),
                               name=f"piece_sum{i}")
            m.d.sync += piece_sum.eq(total)
            piece_sums.append((piece_sum, shift))
        # stage 5: the pieces joined, modulo 2**acc_width
        s4_valid, s4_last = Signal(), Signal()
        group_sum = Signal(signed(acc_width))
        m.d.sync += [s4_valid.eq(s3_valid), s4_last.eq(s3_last),
                     group_sum.eq(sum(r << shift for r, shift in piece_sums))]
        # stage 6: the class's sum; its bias at its last group
        acc = Signal(signed(acc_width))
        logit_valid = Signal()
        logit = Signal(signed(acc_width))
        acc_first = Signal(init=1)
        m.d.sync += logit_valid.eq(0)
        with m.If(s4_valid):
            total = Mux(acc_first, 0, acc) + group_sum
            with m.If(s4_last):
                m.d.sync += [logit.eq(total + bias_rp.data), logit_valid.eq(1),
                             acc_first.eq(1)]
            with m.Else():
                m.d.sync += [acc.eq(total), acc_first.eq(0)]
        # the class's bias, read while its last group's sum is formed: the classes
        # whose last group has left the products' stage
        ends = Signal(range(self.max_classes + 1))
        m.d.comb += [bias_rp.addr.eq(ends), bias_rp.en.eq(1)]
        with m.If(s3_valid & s3_last):
            m.d.sync += ends.eq(ends + 1)

        # -- the logits into words, through a FIFO whose room the groups wait for --
        m.submodules.logits = logits = SyncFIFOBuffered(width=acc_width, depth=8)
        in_flight = Signal(range(_LATENCY + 2))
        m.d.comb += [logits.w_data.eq(logit), logits.w_en.eq(logit_valid)]
        # a group may go in while the FIFO holds room for every logit on its way
        starts = take_group & last_group
        m.d.sync += in_flight.eq(in_flight + starts - logit_valid)
        # counted a cycle ahead, from registers alone, as if a class ended every cycle
        # (the FIFO's level into the groups' take placed at 75 MHz on ECP5, the class's
        # last group from the held channel count at 83.8)
        room = Signal()
        m.d.sync += room.eq(logits.level + in_flight + 2 < logits.depth)
        # the logits packed as the output map's elements: a logit's bytes at byte `pos`
        # of the word being filled, what passes the word's end spilled into the next
        ob = Signal(4)                                # bytes of a logit
        out_word, spill = Signal(dw), Signal(dw)
        out_pos = Signal(range(db))
        logits_out = Signal(range(self.max_classes + 1))
        words_left = Signal(range(self.max_classes * 8 // db + 2))
        word_valid = Signal()
        flushing = Signal()                           # the last logit is placed
        wide = Signal(signed(64))
        m.d.comb += wide.eq(logits.r_data.as_signed())
        mask = Mux(ob == 8, (1 << 64) - 1, (Const(1, 33) << Cat(Const(0, 3), ob[:3])) - 1)
        placed = Cat(out_word, spill) | ((wide.as_unsigned() & mask) << Cat(Const(0, 3), out_pos))
        with m.If(~word_valid & ~flushing & logits.r_rdy):
            m.d.comb += logits.r_en.eq(1)
            full = out_pos + ob >= db
            last = logits_out + 1 == d.out_c
            m.d.sync += [logits_out.eq(logits_out + 1), out_word.eq(placed[:dw]),
                         spill.eq(placed[dw:]),
                         out_pos.eq(Mux(full, out_pos + ob - db, out_pos + ob)),
                         word_valid.eq(full | last), flushing.eq(last)]
        with m.If(flushing & ~word_valid & (words_left != 0)):
            # the last logit's word, its spill, then the section's padding
            m.d.sync += word_valid.eq(1)
        m.d.comb += [self.wr.valid.eq(word_valid), self.wr.payload.eq(out_word)]
        with m.If(self.wr.valid & self.wr.ready):
            m.d.sync += [word_valid.eq(0), out_word.eq(spill), spill.eq(0),
                         words_left.eq(words_left - 1)]

        # -- the gearbox and the row counting --
        m.d.comb += [take_elem.eq(pooling & elem_ready & ~dropping),
                     row_done.eq(take_elem & (row_elems == 1))]
        word_in = self.rd.valid & self.rd.ready
        with m.If(take_elem):
            m.d.sync += [row_elems.eq(row_elems - 1),
                         c_lane.eq(c_lane + 1)]
            with m.If(c_lane == lanes - 1):
                m.d.sync += [c_lane.eq(0), c_word.eq(c_word + 1)]
            with m.If((c_word << exact_log2(lanes) if lanes & (lanes - 1) == 0
                       else c_word * lanes) + c_lane + 1 == d.in_c):
                m.d.sync += [c_lane.eq(0), c_word.eq(0), pixel_first.eq(0)]

        # the phases
        entry = Signal(128)
        out_c_of = lambda p: p.out_c[:bits_of(self.max_classes)]      # noqa: E731
        step = Signal(range(bits_of(self.max_classes) + 1))
        classes_left = Signal(bits_of(self.max_classes))
        width_left, height_left = Signal(bits_of(self.max_size)), Signal(bits_of(self.max_size))
        channels_shifted = Signal(bits_of(self.max_channels) + bits_of(self.max_classes))
        width_shifted = Signal(2 * bits_of(self.max_size))
        weight_count = Signal(32)
        with m.FSM(name="phase"):
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.desc.ready.eq(1)]
                with m.If(self.desc.valid):
                    p = self.desc.payload
                    m.d.sync += [d.eq(p), step.eq(0), classes_left.eq(out_c_of(p)),
                                 width_left.eq(p.in_w[:len(width_left)]),
                                 height_left.eq(p.in_h[:len(height_left)]),
                                 channels_shifted.eq(p.in_c[:bits_of(self.max_channels)]),
                                 width_shifted.eq(p.in_w[:len(width_left)]),
                                 weight_count.eq(0), row_elems_total.eq(0), pixels.eq(0)]
                    m.next = "SIZE"
            with m.State("SIZE"):
                # the fields' products, cut to their bounds (the check refuses larger
                # fields), by shifts and adds a bit a cycle: no multiplier for a
                # descriptor's few products
                with m.If(classes_left[0]):
                    m.d.sync += weight_count.eq(weight_count + channels_shifted)
                with m.If(width_left[0]):
                    m.d.sync += row_elems_total.eq(row_elems_total + channels_shifted)
                with m.If(height_left[0]):
                    m.d.sync += pixels.eq(pixels + width_shifted)
                m.d.sync += [classes_left.eq(classes_left >> 1), width_left.eq(width_left >> 1),
                             height_left.eq(height_left >> 1),
                             channels_shifted.eq(channels_shifted << 1),
                             width_shifted.eq(width_shifted << 1), step.eq(step + 1)]
                with m.If(step == len(classes_left) - 1):
                    m.next = "BOUNDS"
            with m.State("BOUNDS"):
                elems = row_elems_total
                m.d.sync += [row_bytes.eq(Mux(d.in_elem == 24, elems + (elems << 1),
                                              elems << (d.in_elem[3:6] >> 1))),
                             logit_bits.eq(Mux(d.out_elem == 64, out_c_of(d) << 6,
                                               Mux(d.out_elem == 32, out_c_of(d) << 5,
                                                   Mux(d.out_elem == 24,
                                                       (out_c_of(d) << 4) + (out_c_of(d) << 3),
                                                       Mux(d.out_elem == 16, out_c_of(d) << 4,
                                                           out_c_of(d) << 3))))),
                             weight_bytes.eq(Mux(d.weight_bytes == 2, weight_count << 1,
                                                 weight_count)),
                             bound_bits.eq(_bits_below(pixels, self.max_size ** 2)
                                           + _bits_below(d.in_c, self.max_channels)),
                             eb.eq(d.in_elem >> 3), wb.eq(d.weight_bytes),
                             ob.eq(d.out_elem >> 3),
                             last_g.eq((d.in_c >> exact_log2(lanes)) - 1)]
                m.next = "CHECK"
            with m.State("CHECK"):
                # each condition registered, joined the next cycle (compared and joined
                # in one cycle the check placed at 78 MHz on ECP5)
                m.d.sync += ok.eq(conditions)
                m.next = "DECIDE"
            refuse_or_read_entry(m, self, d, ok, entry, "ADDRESSES")
            with m.State("ADDRESSES"):
                m.d.sync += [in_addr.eq(job_entry_field(entry, "in_addr")),
                             out_addr.eq(job_entry_field(entry, "out_addr")),
                             param_addr.eq(job_entry_field(entry, "param_addr")),
                             row_words.eq(d.in_pitch >> log_db),
                             bias_left.eq(d.out_c), cls.eq(0)]
                m.next = "BIASES"
            with m.State("BIASES"):
                # the bias section follows the weights, from a bus word on
                sec = ((weight_bytes + db - 1) >> log_db) << log_db
                m.d.comb += [rd_cmd.valid.eq(1),
                             rd_cmd.payload.address.eq(param_addr + sec),
                             rd_cmd.payload.length.eq(
                                 ((Mux(d.const_bytes == 8, d.out_c << 3, d.out_c << 2)
                                   + db - 1) >> log_db) << log_db)]
                with m.If(rd_cmd.ready):
                    m.d.sync += [lo.eq(0), have_lo.eq(0), pos.eq(0)]
                    m.next = "BIAS_WORDS"
            with m.State("BIAS_WORDS"):
                # a constant a cycle from the held word
                cb = d.const_bytes[:4]
                word_left = db - pos
                # constants start on multiples of 4 bytes: a word of 32-bit slots
                slot = pos[2:]
                const = Mux(cb == 8, Cat(lo.word_select(slot, 32), lo.word_select(slot + 1, 32)),
                            lo.word_select(slot, 32).as_signed())
                m.d.comb += [self.rd.ready.eq(~have_lo)]
                with m.If(self.rd.valid & ~have_lo):
                    m.d.sync += [lo.eq(self.rd.payload), have_lo.eq(1), pos.eq(0)]
                with m.If(have_lo):
                    with m.If(bias_left != 0):
                        m.d.comb += [bias_wp.addr.eq(cls), bias_wp.en.eq(1),
                                     bias_wp.data.eq(const.as_signed())]
                        m.d.sync += [cls.eq(cls + 1), bias_left.eq(bias_left - 1)]
                    m.d.sync += pos.eq(pos + cb)
                    with m.If((word_left == cb) | (bias_left <= 1)):
                        m.d.sync += [have_lo.eq(0), pos.eq(0)]
                        # the section's last word: its constants past the classes are
                        # zeros of the section's padding
                        with m.If(bias_left <= 1):
                            m.d.sync += [y.eq(0), row_addr.eq(in_addr), pixel_first.eq(1),
                                         c_lane.eq(0), c_word.eq(0)]
                            m.next = "ROW"
            with m.State("ROW"):
                m.d.comb += [rd_cmd.valid.eq(1), rd_cmd.payload.address.eq(row_addr),
                             rd_cmd.payload.length.eq(d.in_pitch)]
                with m.If(rd_cmd.ready):
                    m.d.sync += [row_addr.eq(row_addr + d.in_pitch), y.eq(y + 1),
                                 row_elems.eq(row_elems_total), words_in_row.eq(0),
                                 have_lo.eq(0), have_hi.eq(0), pos.eq(0), dropping.eq(0)]
                    m.next = "POOL"
            with m.State("POOL"):
                m.d.comb += pooling.eq(1)
                # a word in while a slot is free and the row has words left
                m.d.comb += self.rd.ready.eq(Mux(dropping, 1, ~have_hi)
                                             & (words_in_row != row_words))
                shift = take_elem & (pos + eb >= db)
                with m.If(take_elem):
                    m.d.sync += pos.eq(Mux(shift, pos + eb - db, pos + eb))
                with m.If(word_in):
                    m.d.sync += words_in_row.eq(words_in_row + 1)
                # the slots after the element is taken and the word is in
                with m.If(shift):
                    m.d.sync += [lo.eq(hi), have_lo.eq(have_hi), have_hi.eq(0)]
                    with m.If(word_in & ~dropping):
                        with m.If(have_hi):
                            m.d.sync += [hi.eq(self.rd.payload), have_hi.eq(1)]
                        with m.Else():
                            m.d.sync += [lo.eq(self.rd.payload), have_lo.eq(1)]
                with m.Elif(word_in & ~dropping):
                    with m.If(have_lo):
                        m.d.sync += [hi.eq(self.rd.payload), have_hi.eq(1)]
                    with m.Else():
                        m.d.sync += [lo.eq(self.rd.payload), have_lo.eq(1)]
                with m.If(row_done):
                    # the rest of the row is its padding
                    m.d.sync += [dropping.eq(1), have_lo.eq(0), have_hi.eq(0), pos.eq(0)]
                with m.If(dropping & ((words_in_row == row_words)
                                      | (word_in & (words_in_row + 1 == row_words)))):
                    with m.If(y == d.in_h):
                        m.d.sync += [g.eq(0), cls.eq(0), ends.eq(0), logits_out.eq(0),
                                     acc_first.eq(1), out_pos.eq(0), out_word.eq(0),
                                     spill.eq(0), flushing.eq(0),
                                     words_left.eq(d.out_bytes >> log_db)]
                        m.next = "OUTPUT"
                    with m.Else():
                        m.next = "ROW"
            with m.State("OUTPUT"):
                m.d.comb += [self.wr_cmd.valid.eq(1),
                             self.wr_cmd.payload.address.eq(out_addr),
                             self.wr_cmd.payload.length.eq(d.out_bytes)]
                with m.If(self.wr_cmd.ready):
                    m.next = "WEIGHTS"
            with m.State("WEIGHTS"):
                m.d.comb += [rd_cmd.valid.eq(1), rd_cmd.payload.address.eq(param_addr),
                             rd_cmd.payload.length.eq(((weight_bytes + db - 1) >> log_db)
                                                      << log_db)]
                with m.If(rd_cmd.ready):
                    m.d.sync += [w_have.eq(0), w_group.eq(0)]
                    m.next = "CLASSIFY"
            with m.State("CLASSIFY"):
                m.d.comb += classifying.eq(1)
                issuing = cls != d.out_c
                m.d.comb += take_group.eq(w_have & issuing & (room | ~(g == 0)))
                m.d.comb += self.rd.ready.eq(~w_have | (take_group
                                                        & (w_group == w_groups - 1)))
                with m.If(take_group):
                    m.d.sync += [w_group.eq(w_group + 1), g.eq(g + 1)]
                    with m.If(w_group == w_groups - 1):
                        m.d.sync += [w_group.eq(0), w_have.eq(0)]
                    with m.If(last_group):
                        m.d.sync += [g.eq(0), cls.eq(cls + 1)]
                with m.If(~issuing):
                    # the section's padding past the last class's weights
                    m.d.comb += self.rd.ready.eq(1)
                with m.If(self.rd.valid & self.rd.ready & issuing):
                    m.d.sync += [w_word.eq(self.rd.payload), w_have.eq(1), w_group.eq(0)]
                with m.If(flushing & ~word_valid & (words_left == 0)):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        return m
