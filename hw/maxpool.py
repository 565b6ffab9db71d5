"""Max pooling: a sliding window followed by a per-pixel reduction over its taps."""

import operator
from functools import reduce

from amaranth.hdl import Cat, Module, Mux, Shape, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..numerics import conv_out_size
from .elementwise import _PixelMap
from .window import SlidingWindow

__all__ = ["MaxPool"]


def _lane_shape(pixel_shape):
    """``(lane shape, lanes)`` of a lane pixel, ``(None, channels)`` of a binary pixel."""
    if isinstance(pixel_shape, data.ArrayLayout):
        lane = pixel_shape.elem_shape
        if not isinstance(lane, Shape):
            raise TypeError(f"pixel lanes must be signed(w) or unsigned(w), not {lane!r}")
        return lane, pixel_shape.length
    shape = Shape.cast(pixel_shape)
    if shape.signed:
        raise TypeError(f"a scalar pixel must be unsigned(C) (binary), not {shape!r}; a "
                        f"one-channel fixed-point pixel is data.ArrayLayout(signed(w), 1)")
    return None, shape.width


def _int(name, value, low):
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {value!r}") from None
    if value < low:
        raise ValueError(f"{name} must be >= {low}, not {value}")
    return value


class _TapMax(_PixelMap):
    """Maximum over the taps of one window, per channel, into the output register."""

    def __init__(self, pixel_shape, taps):
        self.taps = taps
        self._lane, self._lanes = _lane_shape(pixel_shape)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(pixel_shape, taps))),
            "o": Out(stream.Signature(pixel_shape)),
        })

    def _map(self, m, x):
        taps = [x[t] for t in range(self.taps)]
        if self._lane is None:
            # Bit 1 <-> +1, bit 0 <-> -1: the maximum of +-1 values is their OR.
            return reduce(operator.or_, taps)
        return Cat(_tree_max(m, [tap[c] for tap in taps], self._lane, f"max{c}")
                   for c in range(self._lanes))


def _tree_max(m, values, shape, name):
    """Balanced tree of two-input maxima (log depth); every node a named signal, since
    each is read twice (compare and select) and an expression would be emitted again at
    every use in the Verilog, doubling at each level."""
    level = 0
    while len(values) > 1:
        paired = []
        for j in range(0, len(values) - 1, 2):
            a, b = values[j], values[j + 1]
            node = Signal(shape, name=f"{name}_{level}_{j // 2}")
            m.d.comb += node.eq(Mux(a > b, a, b))
            paired.append(node)
        if len(values) % 2:
            paired.append(values[-1])
        values, level = paired, level + 1
    return values[0]


class MaxPool(wiring.Component):
    """Max pooling over ``kernel`` x ``kernel`` windows, as ``torch.nn.functional.max_pool2d``.

    A :class:`~groupnet_hw.hw.window.SlidingWindow` (dilation 1) emits every window, and a
    register stage reduces its ``kernel*kernel`` taps to one pixel: per channel signed (or
    unsigned) maximum for lane pixels, OR over the taps for binary pixels. The window pads
    with the smallest pixel value (the most negative value of every signed lane, 0 for
    unsigned lanes, bit 0 = -1 for binary pixels). ``padding <= kernel // 2`` (PyTorch's
    rule) puts at least one image pixel in every window, and no image value is below the
    pad, so the pad never changes a maximum: the result is that of padding with -inf.

    Parameters
    ----------
    pixel_shape : shape-like
        ``unsigned(C)`` (binary, bit ``c`` = channel ``c``), or
        ``data.ArrayLayout(signed(w), C)`` (fixed point), or
        ``data.ArrayLayout(unsigned(n), C)`` (n-bit levels). A plain ``unsigned(n)`` is
        always taken as ``n`` binary channels.
    height, width : int
        Input image size.
    kernel : int
        Pooling window size (square).
    stride : int, optional
        Output step in input pixels; ``kernel`` if omitted, as in PyTorch.
    padding : int
        Pad pixels on each side, ``0 <= padding <= kernel // 2``.

    Members
    -------
    i : ``In(stream.Signature(pixel_shape))``
        Input pixels, raster order, frames back-to-back.
    o : ``Out(stream.Signature(pixel_shape))``
        Pooled pixels, raster order over the ``out_height`` x ``out_width`` outputs.

    Attributes
    ----------
    out_height, out_width : int
        ``conv_out_size(size, kernel, stride, 1, padding)`` (floor mode).
    pad_value : int
        Raw bits of the pad pixel given to the window.

    Latency
    -------
    The window's plus one cycle: a pooled pixel is on ``o`` four cycles after the last
    input pixel its window uses is accepted, if the output side is idle (three for the
    window, one for the reduction register). The reduction register takes a window in the
    cycle it is emptied, so it adds one cycle to every output and nothing to the interval
    between outputs: at full rate each output leaves exactly one cycle after the bare
    window would emit it.

    Throughput
    ----------
    One input pixel and one output pixel per cycle, as the window: per frame
    ``compiler.cycles.window_cycles(height, width) = height*width`` cycles when
    ``out_height*out_width <= height*width`` (every stride-2 pool, and stride 1 without
    padding), otherwise ``out_height*out_width`` (e.g. kernel 2, stride 1, padding 1).

    Notes
    -----
    Resources: the window's line buffer (``ring_rows * width`` pixels of block RAM) and its
    ``kernel*kernel``-tap output multiplexers, plus per channel ``kernel*kernel - 1``
    comparators and lane-wide multiplexers (``kernel*kernel - 1`` OR gates for binary
    pixels) and the one-pixel output register.
    """

    def __init__(self, pixel_shape, height, width, kernel=2, stride=None, padding=0):
        self.height = height = _int("height", height, 1)
        self.width = width = _int("width", width, 1)
        self.kernel = kernel = _int("kernel", kernel, 1)
        self.stride = stride = kernel if stride is None else _int("stride", stride, 1)
        self.padding = padding = _int("padding", padding, 0)
        if padding > kernel // 2:
            raise ValueError(f"padding must be at most kernel // 2 = {kernel // 2}, not "
                             f"{padding}: a window of padding only has no maximum")
        self.out_height = conv_out_size(height, kernel, stride, 1, padding)
        self.out_width = conv_out_size(width, kernel, stride, 1, padding)
        if self.out_height < 1 or self.out_width < 1:
            raise ValueError(f"a {kernel}x{kernel} window (padding {padding}) does not fit "
                             f"a {height}x{width} image")
        self.pixel_shape = pixel_shape
        lane, lanes = _lane_shape(pixel_shape)
        if lane is not None and lane.signed:
            # Two's complement minimum, 100..0, in every lane.
            self.pad_value = sum(1 << (lane.width - 1 + c * lane.width) for c in range(lanes))
        else:
            self.pad_value = 0
        super().__init__({
            "i": In(stream.Signature(pixel_shape)),
            "o": Out(stream.Signature(pixel_shape)),
        })

    def elaborate(self, platform):
        m = Module()
        # Built here, not in __init__: a component is elaborated once per design, and
        # a constructed but never elaborated window would warn as unused.
        m.submodules.window = window = SlidingWindow(
            self.pixel_shape, self.height, self.width, kernel=self.kernel, stride=self.stride,
            dilation=1, padding=self.padding, pad_value=self.pad_value)
        m.submodules.reduce = tap_max = _TapMax(self.pixel_shape, self.kernel * self.kernel)
        wiring.connect(m, wiring.flipped(self.i), window.i)
        wiring.connect(m, window.o, tap_max.i)
        wiring.connect(m, tap_max.o, wiring.flipped(self.o))
        return m
