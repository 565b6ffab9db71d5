"""Serial host link: UART bytes in as pixels, classification results out.

Protocol (8N1 at the board's baud rate, no flow control, no framing bytes):

* host -> FPGA: image pixels in raster order, one byte per channel (grey: one byte
  per pixel; RGB: R, G, B bytes of a pixel in turn, packed into one pixel beat by
  :class:`PixelPacker`), ``core.n_pixels * channels`` bytes per image; images may
  follow each other
  back to back. Frame position is kept by counting, as everywhere in the
  pipeline, so a lost byte shifts every later frame until reset.
* FPGA -> host, one reply per image, :func:`reply_length` bytes::

      byte 0                      class index (unsigned)
      bytes 1 + j*B .. j*B + B    logit j, B = ceil(logit_width / 8) bytes,
                                  little-endian two's complement, sign-extended,
                                  j = 0 .. n_classes - 1 (class order)

:func:`decode_reply` and :func:`encode_reply` are the host-side (pure Python)
reading and the reference of that format.
"""

from __future__ import annotations

import operator

from amaranth.hdl import Cat, Module, Shape, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .uart import UARTReceiver, UARTTransmitter, _check_divisor

__all__ = ["HostLink", "PixelPacker", "reply_length", "encode_reply", "decode_reply"]


def _logit_bytes(logit_width):
    return (operator.index(logit_width) + 7) // 8


def _check_format(n_classes, logit_width):
    n_classes, logit_width = operator.index(n_classes), operator.index(logit_width)
    if not 1 <= n_classes <= 256:
        # The class travels in one byte.
        raise ValueError(f"the host link supports 1..256 classes, not {n_classes}")
    if logit_width < 1:
        raise ValueError(f"logit_width must be at least 1, not {logit_width}")
    return n_classes, logit_width


def reply_length(n_classes, logit_width):
    """Bytes in one reply: ``1 + n_classes * ceil(logit_width / 8)``."""
    n_classes, logit_width = _check_format(n_classes, logit_width)
    return 1 + n_classes * _logit_bytes(logit_width)


def encode_reply(cls, logits, logit_width):
    """The reply bytes the hardware sends for one result (reference model).

    Parameters
    ----------
    cls : int
        Class index.
    logits : sequence of int
        One signed logit per class, each representable in ``signed(logit_width)``.
    logit_width : int
        Width of a logit in bits.

    Returns
    -------
    bytes
    """
    n_classes, logit_width = _check_format(len(logits), logit_width)
    nbytes = _logit_bytes(logit_width)
    lo, hi = -(1 << (logit_width - 1)), (1 << (logit_width - 1)) - 1
    if not 0 <= cls < n_classes:
        raise ValueError(f"class {cls} out of range for {n_classes} classes")
    out = bytearray([cls])
    for j, logit in enumerate(logits):
        if not lo <= logit <= hi:
            raise ValueError(f"logit {j} = {logit} does not fit signed({logit_width})")
        out += int(logit).to_bytes(nbytes, "little", signed=True)
    return bytes(out)


def decode_reply(data: bytes, n_classes, logit_width):
    """Decode one reply from the board.

    Parameters
    ----------
    data : bytes
        Exactly :func:`reply_length` ``(n_classes, logit_width)`` bytes.
    n_classes : int
        Number of classes of the network.
    logit_width : int
        Width of a logit in bits (the core's ``logit_width``).

    Returns
    -------
    (int, list of int)
        The class index and the logits in class order.

    Raises
    ------
    ValueError
        If the length is wrong or the class byte is out of range (a sign that
        the host and the board disagree about frame boundaries).
    """
    data = bytes(data)
    expected = reply_length(n_classes, logit_width)
    if len(data) != expected:
        raise ValueError(f"a reply for {n_classes} classes of {logit_width}-bit logits has "
                         f"{expected} bytes, got {len(data)}")
    cls = data[0]
    if cls >= n_classes:
        raise ValueError(f"class byte {cls} out of range for {n_classes} classes "
                         f"(host and board out of step?)")
    nbytes = _logit_bytes(logit_width)
    logits = [int.from_bytes(data[1 + j * nbytes:1 + (j + 1) * nbytes], "little", signed=True)
              for j in range(n_classes)]
    return cls, logits


def _result_format(core):
    """(n_classes, logit_width, cls_width) read from the core's ``o`` payload layout."""
    members = core.signature.members
    try:
        in_shape = members["i"].signature.members["payload"].shape
        out_shape = members["o"].signature.members["payload"].shape
    except (KeyError, AttributeError):
        raise TypeError(f"core must have stream ports `i` and `o`, has {list(members)}") from None
    width = Shape.cast(in_shape).width
    if width % 8 or Shape.cast(in_shape).signed:
        raise TypeError(f"core.i must carry pixels of unsigned bytes, not {in_shape!r}")
    try:
        layout = data.Layout.cast(out_shape)
        logits_shape = data.Layout.cast(layout["logits"].shape)
        cls_shape = layout["cls"].shape
    except (KeyError, TypeError):
        raise TypeError(f"core.o must carry a StructLayout with `logits` (ArrayLayout) and "
                        f"`cls` fields, not {out_shape!r}") from None
    elem = logits_shape.elem_shape
    if not (hasattr(elem, "signed") and elem.signed):
        raise TypeError(f"logits must be signed integers, not {elem!r}")
    return logits_shape.length, elem.width, cls_shape.width


class PixelPacker(wiring.Component):
    """Bytes in, pixels of ``channels`` bytes out (channel ``c`` in bits ``8c..8c+7``).

    Parameters
    ----------
    channels : int

    Members
    -------
    i : ``In(stream.Signature(unsigned(8)))``
    o : ``Out(stream.Signature(unsigned(8 * channels)))``

    Latency
    -------
    1 cycle after the last byte of a pixel.

    Throughput
    ----------
    One byte per cycle (one pixel per ``channels`` cycles); the UART is far slower.
    """

    def __init__(self, channels):
        from amaranth.lib import stream
        self.channels = channels
        super().__init__({"i": In(stream.Signature(unsigned(8))),
                          "o": Out(stream.Signature(unsigned(8 * channels)))})

    def elaborate(self, platform):
        m = Module()
        n = self.channels
        held = Signal(8 * n)
        count = Signal(range(n + 1))
        # accept while the pixel is incomplete; the output register frees on ready
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            with m.If(count == n - 1):
                m.d.sync += [self.o.payload.eq(Cat(held[:8 * (n - 1)], self.i.payload)),
                             self.o.valid.eq(1), count.eq(0)]
            with m.Else():
                m.d.sync += [held.word_select(count, 8).eq(self.i.payload), count.eq(count + 1)]
        return m


class HostLink(wiring.Component):
    """An accelerator core behind a UART: pixels in, classification replies out.

    Bytes from a :class:`~.uart.UARTReceiver` go straight into ``core.i`` (one
    byte = one pixel). Each result beat from ``core.o`` is latched into a reply
    shift register (format in the module docstring and :func:`encode_reply`)
    and sent byte by byte through a :class:`~.uart.UARTTransmitter`; the class
    is also latched onto ``leds`` in binary.

    There is no buffering on the receive side (UART has no flow control): the
    core must take each pixel within one character time, ``10 * divisor``
    cycles, or the following byte is dropped. An accelerator that keeps up with
    the line does this as long as its result is taken in time, which holds
    whenever ``reply_length <= n_pixels`` (the previous reply has left before
    the next result is ready); a host that waits for each reply before sending
    the next image is always safe.

    Parameters
    ----------
    core : wiring.Component
        The accelerator, with ports ``i: In(stream.Signature(unsigned(8)))``
        and ``o: Out(stream.Signature(StructLayout({"logits":
        ArrayLayout(signed(logit_width), n_classes), "cls": unsigned(...)})))``.
        It becomes the submodule ``core``.
    divisor : int
        UART clock cycles per bit, ``round(f_clk / baud)``, at least 2.

    Attributes
    ----------
    rx : Signal, in
        Serial line from the host (idle high; synchronised inside).
    tx : Signal, out
        Serial line to the host (idle high, registered).
    leds : Signal(8), out
        Class of the latest result, binary, held until the next result.
    n_classes, logit_width : int
        Read from the core's ``o`` payload layout.
    reply_length : int
        Bytes per reply, ``1 + n_classes * ceil(logit_width / 8)``.

    Latency
    -------
    Pixel path: a byte reaches ``core.i`` ``divisor // 2 + 9 * divisor + 3``
    cycles after its start bit begins (the receiver's latency). Result path:
    the reply's first start bit appears on ``tx`` 2 cycles after ``core.o`` is
    accepted; the reply has been sent ``reply_length * 10 * divisor + 2``
    cycles after acceptance.

    Throughput
    ----------
    Uplink and downlink run at line rate, ``10 * divisor`` cycles per byte, in
    parallel: with images sent back to back, one image per
    ``max(n_pixels, reply_length) * 10 * divisor`` cycles, if the core keeps up.
    """

    def __init__(self, core, divisor):
        self.core = core
        self.divisor = _check_divisor(divisor)
        self.n_classes, self.logit_width, self._cls_width = _result_format(core)
        _check_format(self.n_classes, self.logit_width)
        if self._cls_width > 8:
            raise TypeError(f"core.o.cls is {self._cls_width} bits wide; the reply and the "
                            f"LEDs carry it in 8")
        self.reply_length = reply_length(self.n_classes, self.logit_width)
        self.n_pixels = getattr(core, "n_pixels", None)
        super().__init__({
            "rx":   In(1, init=1),
            "tx":   Out(1, init=1),
            "leds": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.uart_rx = uart_rx = UARTReceiver(self.divisor)
        m.submodules.uart_tx = uart_tx = UARTTransmitter(self.divisor)

        m.d.comb += [
            uart_rx.rx.eq(self.rx),
            self.tx.eq(uart_tx.tx),
        ]
        pixel_bits = Shape.cast(core.i.payload.shape()).width
        if pixel_bits == 8:
            wiring.connect(m, uart_rx.o, core.i)
        else:
            m.submodules.packer = packer = PixelPacker(pixel_bits // 8)
            wiring.connect(m, uart_rx.o, packer.i)
            m.d.comb += [core.i.valid.eq(packer.o.valid), packer.o.ready.eq(core.i.ready),
                         core.i.payload.as_value().eq(packer.o.payload)]

        nbytes = _logit_bytes(self.logit_width)
        result = core.o.payload
        cls8 = Signal(8)
        m.d.comb += cls8.eq(result.cls)
        fields = [cls8]
        for j in range(self.n_classes):
            # Assigning a signed value to a wider signed signal sign-extends it.
            wide = Signal(signed(8 * nbytes), name=f"logit{j}_ext")
            m.d.comb += wide.eq(result.logits[j])
            fields.append(wide)

        reply = Signal(8 * self.reply_length)
        left = Signal(range(self.reply_length + 1))   # reply bytes not yet handed to the UART

        with m.If(left == 0):
            m.d.comb += core.o.ready.eq(1)
            with m.If(core.o.valid):
                m.d.sync += [
                    reply.eq(Cat(*fields)),
                    left.eq(self.reply_length),
                    self.leds.eq(result.cls),
                ]

        m.d.comb += [
            uart_tx.i.valid.eq(left != 0),
            uart_tx.i.payload.eq(reply[:8]),
        ]
        with m.If(uart_tx.i.valid & uart_tx.i.ready):
            m.d.sync += [reply.eq(reply >> 8), left.eq(left - 1)]

        return m
