"""Spatial subsampling of a pixel stream (the ``x[:, :, ::s, ::s]`` of a strided shortcut)."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .beats import beat_counter

__all__ = ["Subsample"]


class Subsample(wiring.Component):
    """Keeps the pixels whose row and column are multiples of ``stride``.

    Pixels arrive in raster order, frames back-to-back with no marker; the component counts
    rows and columns. A kept pixel passes straight through; a dropped one is accepted at
    once (``i.ready`` high whatever ``o.ready``). Output pixel ``(r, c)`` is input pixel
    ``(r*stride, c*stride)``, as ``x[:, :, ::stride, ::stride]`` in PyTorch.

    In a beat stream (:mod:`.beats`) a pixel is ``beats`` consecutive beats: all of them
    are kept or dropped together, and the row and column advance after the last one.

    Parameters
    ----------
    pixel_shape : shape-like
        Beat (payload) shape: a whole pixel's with one beat per pixel.
    height, width : int
        Input image size.
    stride : int
        Subsampling step (1 passes everything).
    beats : int
        Beats per pixel (1: a beat is a whole pixel).

    Attributes
    ----------
    i : ``In(stream.Signature(pixel_shape))``
        Input beats.
    o : ``Out(stream.Signature(pixel_shape))``
        Beats of the kept pixels; ``o.valid`` depends on ``i.valid`` and the counters
        only.
    out_height, out_width : int
        ``ceil(height / stride)``, ``ceil(width / stride)``.

    Latency
    -------
    0 cycles: combinational from ``i`` to ``o``.

    Throughput
    ----------
    One input beat per cycle: ``height*width*beats`` cycles per frame
    (``elementwise_cycles(height, width)`` with one beat per pixel).
    """

    def __init__(self, pixel_shape, height, width, stride, *, beats=1):
        for name, value in (("height", height), ("width", width), ("stride", stride),
                            ("beats", beats)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        self.height = height
        self.width = width
        self.stride = stride
        self.beats = beats
        self.out_height = -(-height // stride)
        self.out_width = -(-width // stride)
        super().__init__({
            "i": In(stream.Signature(pixel_shape)),
            "o": Out(stream.Signature(pixel_shape)),
        })

    def elaborate(self, platform):
        m = Module()
        H, W, s = self.height, self.width, self.stride

        x = Signal(range(W))
        y = Signal(range(H))
        # Phases of x and y modulo the stride, counted alongside to avoid a divider.
        x_phase = Signal(range(s))
        y_phase = Signal(range(s))
        keep = (x_phase == 0) & (y_phase == 0)

        m.d.comb += [
            self.o.payload.eq(self.i.payload),
            self.o.valid.eq(self.i.valid & keep),
            self.i.ready.eq(self.o.ready | ~keep),
        ]

        advance = self.i.valid & self.i.ready
        if self.beats > 1:
            advance &= beat_counter(m, self.i, self.beats) == self.beats - 1
        with m.If(advance):
            with m.If(x == W - 1):
                m.d.sync += [x.eq(0), x_phase.eq(0)]
                with m.If(y == H - 1):
                    m.d.sync += [y.eq(0), y_phase.eq(0)]
                with m.Else():
                    m.d.sync += [
                        y.eq(y + 1),
                        y_phase.eq(Mux(y_phase == s - 1, 0, y_phase + 1)),
                    ]
            with m.Else():
                m.d.sync += [
                    x.eq(x + 1),
                    x_phase.eq(Mux(x_phase == s - 1, 0, x_phase + 1)),
                ]

        return m
