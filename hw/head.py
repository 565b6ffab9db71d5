"""Classifier head: global sum pool, fully connected layer and argmax."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .elementwise import _ints, _positive, signed_range, signed_width

__all__ = ["ClassifierHead"]


class ClassifierHead(wiring.Component):
    """Global sum pool + fully connected + argmax, one result beat per frame.

    Per frame of ``height*width`` pixels (counted; frames follow back to back)::

        sums[c]   = sum over the frame's pixels of x[c]
        logits[j] = sum_c weights[j][c] * sums[c] + bias[j]
        cls       = first index of max(logits)      # ties -> lowest index (torch.argmax)

    The pool accumulates one pixel per cycle. On a frame's last pixel the sums move to
    a second register bank, and the classifier evaluates one class per cycle (all
    channels in parallel, weights and bias from a ROM with a synchronous read port)
    while the next frame already accumulates. The argmax runs one cycle behind the
    classifier. The last pixel of a frame is held back (``i.ready`` low) only while the
    classifier is still busy with the previous frame.

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
        Element widths in the weight ROM (one row of ``C`` weights and the bias per
        class; ``n_cls`` rows).
    latency : int
        ``n_cls + 2``: cycles from a frame's last pixel being taken to its result
        being valid.

    Latency
    -------
    ``n_cls + 2`` cycles after the frame's last pixel is taken: one for the weight
    ROM read, ``n_cls`` for the classes, one for the final argmax step into the output
    register.

    Throughput
    ----------
    ``compiler.cycles.head_cycles(H, W, n_cls) = max(H*W, n_cls + 2)`` cycles per frame
    with the output always ready: the classifier is busy for ``n_cls + 2`` cycles per
    frame, overlapped with the next frame's accumulation.
    """

    def __init__(self, channels, in_width, height, width, weights, bias):
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
        s_lo, s_hi = self.pixels * lo, self.pixels * hi
        self.sum_width = signed_width(s_lo, s_hi)
        self.logit_width = max(
            signed_width(sum(min(w * s_lo, w * s_hi) for w in row) + b,
                         sum(max(w * s_lo, w * s_hi) for w in row) + b)
            for row, b in zip(self.weights, self.bias))
        self.cls_width = max(1, (n - 1).bit_length())
        self.latency = n + 2

        self.weight_width = max(signed_width(w, w) for row in self.weights for w in row)
        self.bias_width = max(signed_width(b, b) for b in self.bias)
        self._rom_layout = data.StructLayout({
            "w": data.ArrayLayout(signed(self.weight_width), channels),
            "b": signed(self.bias_width),
        })

        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(in_width), channels))),
            "o": Out(stream.Signature(data.StructLayout({
                "logits": data.ArrayLayout(signed(self.logit_width), n),
                "cls": unsigned(self.cls_width),
            }))),
        })

    def elaborate(self, platform):
        m = Module()
        n, C = self.n_classes, self.channels
        x = self.i.payload

        # ---- pool: accumulate one pixel per cycle --------------------------------
        count = Signal(range(self.pixels), name="count")
        first = count == 0
        last = count == self.pixels - 1
        acc = [Signal(signed(self.sum_width), name=f"acc{c}") for c in range(C)]
        held = [Signal(signed(self.sum_width), name=f"held{c}") for c in range(C)]
        new_sum = [Mux(first, x[c], acc[c] + x[c]) for c in range(C)]

        # phase 0: classifier idle; 1..n: class phase-1 on the MAC (ROM row phase-1
        # on the read port); n+1: final argmax step, waits for the output register.
        phase = Signal(range(n + 2), name="phase")
        idle = phase == 0

        m.d.comb += self.i.ready.eq(~last | idle)
        take = self.i.valid & self.i.ready
        with m.If(take):
            m.d.sync += [a.eq(s) for a, s in zip(acc, new_sum)]
            m.d.sync += count.eq(Mux(last, 0, count + 1))
            with m.If(last):
                # Second bank: the next frame may overwrite acc from the next cycle on.
                m.d.sync += [h.eq(s) for h, s in zip(held, new_sum)]
                m.d.sync += phase.eq(1)

        # ---- classifier: one class per cycle --------------------------------------
        m.submodules.rom = rom = Memory(
            shape=self._rom_layout, depth=n,
            init=[{"w": row, "b": b} for row, b in zip(self.weights, self.bias)])
        rd = rom.read_port()
        # Prefetch: in phase p (class p-1 on the MAC) read row p for the next cycle;
        # while idle keep row 0 ready for the next frame.
        m.d.comb += rd.addr.eq(Mux(phase < n, phase, 0))

        dot = Signal(signed(self.logit_width), name="dot")
        m.d.comb += dot.eq(sum(rd.data.w[c] * held[c] for c in range(C)) + rd.data.b)
        d_reg = Signal(signed(self.logit_width), name="d_reg")
        with m.If((phase >= 1) & (phase <= n)):
            m.d.sync += [d_reg.eq(dot), phase.eq(phase + 1)]

        # ---- argmax, one cycle behind the MAC --------------------------------------
        work = [Signal(signed(self.logit_width), name=f"logit{j}") for j in range(n - 1)]
        best = Signal(signed(self.logit_width), name="best")
        best_idx = Signal(unsigned(self.cls_width), name="best_idx")
        for j in range(n - 1):
            with m.If(phase == j + 2):
                m.d.sync += work[j].eq(d_reg)
                if j == 0:
                    m.d.sync += [best.eq(d_reg), best_idx.eq(0)]
                else:
                    # Strictly greater replaces: the first maximum wins, like torch.argmax.
                    with m.If(d_reg > best):
                        m.d.sync += [best.eq(d_reg), best_idx.eq(j)]

        last_wins = Const(1) if n == 1 else d_reg > best
        final_cls = Mux(last_wins, n - 1, best_idx)
        with m.If((phase == n + 1) & (~self.o.valid | self.o.ready)):
            m.d.sync += [
                self.o.payload.logits.eq(Cat(*work, d_reg)),
                self.o.payload.cls.eq(final_cls),
                self.o.valid.eq(1),
                phase.eq(0),
            ]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m
