"""Classifier head: global sum pool, fully connected layer and argmax."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .arith import MULT_PIECE
from .elementwise import _ints, _positive, signed_range, signed_width

__all__ = ["ClassifierHead", "head_latency", "HEAD_PIPELINE"]

#: Cycles of the classifier head beyond its MAC steps: the ROM word, the split
#: products, their sum, the accumulator, the argmax step and the output register
#: (:class:`ClassifierHead`).
HEAD_PIPELINE = 6


def head_latency(n_classes, folds):
    """Cycles from a frame's last pixel to its result (see :class:`ClassifierHead`)."""
    return n_classes * folds + HEAD_PIPELINE


class ClassifierHead(wiring.Component):
    """Global sum pool + fully connected + argmax, one result beat per frame.

    Per frame of ``height*width`` pixels (counted; frames follow back to back)::

        sums[c]   = sum over the frame's pixels of x[c]
        logits[j] = sum_c weights[j][c] * sums[c] + bias[j]
        cls       = first index of max(logits)      # ties -> lowest index (torch.argmax)

    The pool accumulates one pixel per cycle. On a frame's last pixel the sums move to
    a second register bank, and the classifier evaluates the logits ``lanes`` channels
    per cycle (``ceil(C/lanes)`` steps per class; weights and bias from a ROM with a
    synchronous read port) while the next frame already accumulates. Each step is three
    pipeline stages (the ``lanes`` products in pieces of one hardware multiplier each
    into registers, each product's pieces summed, then the products into the
    accumulator), so no multiplier feeds an adder in the same cycle: the head
    closes timing at 100 MHz on ECP5 where the single-cycle dot product of all channels
    (19 ns) did not. The argmax runs one stage behind. The last pixel of a frame is
    held back (``i.ready`` low) until the previous frame's result is in the output
    register.

    Parameters
    ----------
    channels : int
        Channels per pixel, ``C``.
    in_width : int
        Element width of the input pixels.
    height, width : int
        Frame size; ``height*width`` pixels per frame.
    weights : array of int, shape ``[n_cls, C]``
    bias : array of int, shape ``[n_cls]``
    lanes : int, optional
        Channels multiplied per cycle (default ``C``).

    Members
    -------
    i : ``In(stream.Signature(data.ArrayLayout(signed(in_width), channels)))``
        Pixels, raster order, frames back to back.
    o : ``Out(stream.Signature(data.StructLayout({...})))``
        One beat per frame, fields ``"logits"``:
        ``data.ArrayLayout(signed(logit_width), n_cls)`` and ``"cls"``:
        ``unsigned(cls_width)``.

    Attributes
    ----------
    n_classes : int
    pixels : int
        ``height * width``.
    sum_width : int
        Exact width of the pooled sums.
    logit_width : int
        Exact width of the logits (maximum over classes of the bound from the sums'
        range, the weights and the bias).
    cls_width : int
        ``max(1, (n_cls - 1).bit_length())``.
    weight_width, bias_width : int
        Element widths in the weight ROM (one row of ``lanes`` weights and the class's
        bias per step; ``n_cls * ceil(C/lanes)`` rows).
    folds : int
        ``ceil(C/lanes)``.
    latency : int
        ``n_cls * folds + 6``: cycles from a frame's last pixel being taken to its
        result being valid.

    Latency
    -------
    ``n_cls * folds + 6`` cycles after the frame's last pixel is taken: the MAC steps,
    the ROM-word, product and accumulator stages, the argmax step and the output register.

    Throughput
    ----------
    ``compiler.cycles.head_cycles(H, W, n_cls, folds) = max(H*W, n_cls*folds + 6)``
    cycles per frame with the output always ready, the classifier overlapped with the
    next frame's accumulation.
    """

    def __init__(self, channels, in_width, height, width, weights, bias, lanes=None):
        self.channels = channels = _positive("channels", channels)
        self.in_width = in_width = _positive("in_width", in_width)
        self.height = height = _positive("height", height)
        self.width = width = _positive("width", width)
        self.pixels = height * width
        self.weights = [_ints(row, channels, "weights row") for row in weights]
        self.n_classes = n = len(self.weights)
        if n < 1:
            raise ValueError("weights must have at least one class")
        self.bias = _ints(bias, n, "bias")

        lo, hi = signed_range(in_width)
        self.sum_width = signed_width(self.pixels * lo, self.pixels * hi)
        self.logit_width = self.logit_width_for(in_width, self.pixels, self.weights, self.bias)
        self.cls_width = max(1, (n - 1).bit_length())
        self.lanes = channels if lanes is None else min(_positive("lanes", lanes), channels)
        self.folds = -(-channels // self.lanes)
        self.latency = head_latency(n, self.folds)

        self.weight_width = max(signed_width(w, w) for row in self.weights for w in row)
        self.bias_width = max(signed_width(b, b) for b in self.bias)
        self._rom_layout = data.StructLayout({
            "w": data.ArrayLayout(signed(self.weight_width), self.lanes),
            "b": signed(self.bias_width),
        })

        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(in_width), channels))),
            "o": Out(stream.Signature(data.StructLayout({
                "logits": data.ArrayLayout(signed(self.logit_width), n),
                "cls": unsigned(self.cls_width),
            }))),
        })

    @staticmethod
    def logit_width_for(in_width, pixels, weights, bias):
        """The ``logit_width`` of a head with these parameters, without building one (an
        accelerator's output port is this wide).

        Parameters
        ----------
        in_width : int
            Element width of the input pixels.
        pixels : int
            Pixels per frame, ``height * width``.
        weights : array of int, shape ``[n_cls, C]``
        bias : array of int, shape ``[n_cls]``

        Returns
        -------
        int
            The width of the widest logit's exact range.
        """
        lo, hi = signed_range(in_width)
        s_lo, s_hi = pixels * lo, pixels * hi
        return max(
            signed_width(sum(min(int(w) * s_lo, int(w) * s_hi) for w in row) + int(b),
                         sum(max(int(w) * s_lo, int(w) * s_hi) for w in row) + int(b))
            for row, b in zip(weights, bias))

    def elaborate(self, platform):
        m = Module()
        n, C = self.n_classes, self.channels
        x = self.i.payload

        # ---- pool: accumulate one pixel per cycle --------------------------------
        count = Signal(range(self.pixels), name="count")
        first = count == 0
        last = count == self.pixels - 1
        acc = [Signal(signed(self.sum_width), name=f"acc{c}") for c in range(C)]
        new_sum = [Mux(first, x[c], acc[c] + x[c]) for c in range(C)]

        # A frame's last pixel starts the classifier, once the previous frame's result
        # has left for the output register (every flag here is a register).
        idle = Signal(name="idle")
        m.d.comb += self.i.ready.eq(~last | idle)
        take = self.i.valid & self.i.ready
        start = Signal(name="start")
        m.d.comb += start.eq(take & last)
        with m.If(take):
            m.d.sync += [a.eq(s) for a, s in zip(acc, new_sum)]
            m.d.sync += count.eq(Mux(last, 0, count + 1))

        # ---- classifier: `lanes` channels per step, `folds` steps per class --------
        P, F = self.lanes, self.folds
        steps = n * F
        padded = [row + [0] * (P * F - C) for row in self.weights]
        m.submodules.rom = rom = Memory(
            shape=self._rom_layout, depth=steps,
            init=[{"w": padded[j][f * P:(f + 1) * P], "b": self.bias[j]}
                  for j in range(n) for f in range(F)])
        rd = rom.read_port()
        busy = Signal(name="busy")
        step = Signal(range(steps), name="step")
        fold = Signal(range(F), name="fold")
        # The sums rotate by one step of lanes per cycle, back in place after a class.
        bank = Signal(P * F * self.sum_width, name="bank")
        lanes_in = [bank.word_select(p, self.sum_width).as_signed() for p in range(P)]
        # Prefetch: in step s read row s+1; while idle keep row 0 ready.
        m.d.comb += rd.addr.eq(Mux(busy & (step != steps - 1), step + 1, 0))

        # stage 0: the ROM word and the lanes, registered (an ECP5 block RAM's output
        # alone takes ~4 ns; it fed the multipliers directly at 79 MHz)
        s0_valid, s0_first, s0_last = Signal(), Signal(), Signal()
        # Data registers without a reset (the valid flags say what they hold): on ECP5
        # the operand and product registers then move into the MULT18X18D
        # (hw.dsp_registers) and the bias into the ROM's output register
        # (hw.bram_registers); outside the DSP block, an operand register through the multiplier
        # into its product register was a 10.48 ns path of the whole-board design.
        s0_w = Signal.like(rd.data.w, name="s0_w", reset_less=True)
        s0_b = Signal(signed(self.bias_width), name="s0_b", reset_less=True)
        s0_x = [Signal(signed(self.sum_width), name=f"s0_x{p}", reset_less=True)
                for p in range(P)]
        m.d.sync += [s0_valid.eq(busy), s0_w.eq(rd.data.w), s0_b.eq(rd.data.b),
                     s0_first.eq(fold == 0), s0_last.eq(fold == F - 1),
                     *(r.eq(x) for r, x in zip(s0_x, lanes_in))]

        # stage 1: the products, in pieces of one hardware multiplier each: a sum wider
        # than 18 bits made Yosys put an adder behind the DSP block in the same cycle,
        # and DSP -> carry chain -> register was the critical path of the K=5 digits
        # core on ECP5 (14 ns, 71 MHz). The low piece is unsigned, the high one signed.
        pieces = [(lo, min(lo + MULT_PIECE, self.sum_width))
                  for lo in range(0, self.sum_width, MULT_PIECE)]
        prod_width = self.sum_width + self.weight_width
        partials = [[Signal(signed(prod_width), name=f"part{p}_{i}", reset_less=True)
                     for i in range(len(pieces))] for p in range(P)]
        s1a_valid, s1a_first, s1a_last = Signal(), Signal(), Signal()
        s1a_bias = Signal(signed(self.bias_width), name="s1a_bias")
        m.d.sync += [s1a_valid.eq(s0_valid), s1a_first.eq(s0_first), s1a_last.eq(s0_last),
                     s1a_bias.eq(s0_b)]
        for p in range(P):
            for i, (lo, hi) in enumerate(pieces):
                x = s0_x[p][lo:hi]
                x = x.as_signed() if hi == self.sum_width else x
                m.d.sync += partials[p][i].eq(s0_w[p] * x)
        # stage 1b: each product, its pieces shifted into place
        prods = [Signal(signed(prod_width), name=f"prod{p}") for p in range(P)]
        s1_valid, s1_first, s1_last = Signal(), Signal(), Signal()
        s1_bias = Signal(signed(self.bias_width), name="s1_bias")
        m.d.sync += [s1_valid.eq(s1a_valid), s1_first.eq(s1a_first), s1_last.eq(s1a_last),
                     s1_bias.eq(s1a_bias),
                     *(pr.eq(sum(part << lo for part, (lo, _) in zip(partials[p], pieces)))
                       for p, pr in enumerate(prods))]
        with m.If(busy):
            m.d.sync += [bank.eq(bank.rotate_right(P * self.sum_width)),
                         step.eq(Mux(step == steps - 1, 0, step + 1)),
                         fold.eq(Mux(fold == F - 1, 0, fold + 1))]
            with m.If(step == steps - 1):
                m.d.sync += busy.eq(0)

        # stage 2: sum of the products into the accumulator; a logit per class
        acc = Signal(signed(self.logit_width), name="mac")
        total = Signal(signed(self.logit_width), name="total")
        m.d.comb += total.eq(Mux(s1_first, s1_bias, acc) + sum(prods))
        d_reg = Signal(signed(self.logit_width), name="d_reg")
        d_valid = Signal(name="d_valid")
        m.d.sync += d_valid.eq(s1_valid & s1_last)
        with m.If(s1_valid):
            m.d.sync += acc.eq(total)
            with m.If(s1_last):
                m.d.sync += d_reg.eq(total)

        # ---- argmax, one stage behind; the logits wait in `work` for the output -----
        work = [Signal(signed(self.logit_width), name=f"logit{j}") for j in range(n)]
        best = Signal(signed(self.logit_width), name="best")
        best_idx = Signal(unsigned(self.cls_width), name="best_idx")
        arg_j = Signal(range(n), name="arg_j")
        done = Signal(name="done")
        with m.If(d_valid):
            m.d.sync += arg_j.eq(Mux(arg_j == n - 1, 0, arg_j + 1))
            with m.Switch(arg_j):
                for j in range(n):
                    with m.Case(j):
                        m.d.sync += work[j].eq(d_reg)
            with m.If(arg_j == 0):
                m.d.sync += [best.eq(d_reg), best_idx.eq(0)]
            # Strictly greater replaces: the first maximum wins, like torch.argmax.
            with m.Elif(d_reg > best):
                m.d.sync += [best.eq(d_reg), best_idx.eq(arg_j)]
            with m.If(arg_j == n - 1):
                m.d.sync += done.eq(1)
        with m.If(done & (~self.o.valid | self.o.ready)):
            m.d.sync += [
                self.o.payload.logits.eq(Cat(*work)),
                self.o.payload.cls.eq(best_idx),
                self.o.valid.eq(1),
                done.eq(0),
            ]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        m.d.comb += idle.eq(~busy & ~s0_valid & ~s1a_valid & ~s1_valid & ~d_valid & ~done)
        with m.If(start):
            # Second bank: the next frame may overwrite the pool from the next cycle on.
            sums = [Signal(signed(self.sum_width), name=f"sum{c}") for c in range(C)]
            m.d.comb += [t.eq(v) for t, v in zip(sums, new_sum)]
            m.d.sync += [busy.eq(1), step.eq(0), fold.eq(0),
                         bank.eq(Cat(*sums, Const(0, (P * F - C) * self.sum_width)))]
        return m
