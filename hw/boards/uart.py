"""8N1 UART receiver and transmitter with ``amaranth.lib.stream`` interfaces.

amaranth-stdio would be the natural source of a UART, but only a placeholder of
it is published on PyPI, so the two small components here are the project's
own. Both run in the ``sync`` domain and count ``divisor`` clock cycles per bit
(``divisor = round(f_clk / baud)``); a byte occupies :data:`BITS_PER_BYTE` bit
periods on the line (start bit 0, eight data bits LSB first, stop bit 1).
"""

from __future__ import annotations

import operator

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["BITS_PER_BYTE", "baud_divisor", "UARTReceiver", "UARTTransmitter"]

#: Bit periods per 8N1 character: start + 8 data + stop.
BITS_PER_BYTE = 10


def _check_divisor(divisor):
    try:
        divisor = operator.index(divisor)
    except TypeError:
        raise TypeError(f"divisor must be an integer number of clock cycles per bit, "
                        f"not {divisor!r}") from None
    # Mid-bit sampling needs at least two clock cycles per bit.
    if divisor < 2:
        raise ValueError(f"divisor must be at least 2 clock cycles per bit, not {divisor}")
    return divisor


def baud_divisor(clk_frequency, baud, *, max_error=0.02):
    """Clock cycles per bit for ``baud`` at ``clk_frequency``: ``round(clk_frequency / baud)``.

    Raises
    ------
    ValueError
        If the divisor is below 2, or the rate it gives is off by more than
        ``max_error`` (a fraction; 2 % leaves room for the other end's error
        within 8N1's mid-bit sampling margin).
    """
    if not baud > 0:
        raise ValueError(f"baud must be positive, not {baud!r}")
    divisor = round(clk_frequency / baud)
    error = abs(clk_frequency / max(divisor, 1) - baud) / baud
    if divisor < 2 or error > max_error:
        raise ValueError(f"{baud} baud cannot be generated from a {clk_frequency / 1e6:g} MHz "
                         f"clock (divisor {divisor}, rate error {error:.1%})")
    return divisor


class UARTReceiver(wiring.Component):
    """8N1 UART receiver.

    The ``rx`` pin passes through a two-flop synchroniser (it is asynchronous to
    the clock), then a falling edge starts a character. The start bit is checked
    in its middle (a shorter low glitch is ignored), and the data and stop bits
    are sampled in their middles, ``divisor`` cycles apart. A character whose
    stop bit is 0 (framing error, or a break) is dropped, and the receiver waits
    for the line to return high before it looks for the next start bit.

    The receiver goes back to hunting for a start bit right after sampling the
    middle of the stop bit, so back-to-back characters are received at full
    line rate and the sender's bit clock may deviate by up to about +-4 %.

    UART has no flow control: the output holds one byte. If a byte is still
    waiting (``o.valid`` and not ``o.ready``) when the next one is complete, the
    new byte is dropped (overrun); the waiting one stays unchanged, as the
    stream rules require. A consumer that accepts each byte within one
    character time (``10 * divisor`` cycles) never loses data.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit, at least 2 (``round(f_clk / baud)``).

    Attributes
    ----------
    rx : Signal, in
        Serial line (idle high). Asynchronous inputs are fine.
    o : stream, out, ``unsigned(8)``
        Received bytes, one beat per correctly framed character.

    Latency
    -------
    ``o.valid`` is high ``divisor // 2 + 9 * divisor + 3`` cycles after the
    first cycle in which ``rx`` is low (start bit): 2 synchroniser cycles, the
    9.5 bit periods to the middle of the stop bit, and the output register.

    Throughput
    ----------
    One byte per character time, ``BITS_PER_BYTE * divisor`` = ``10 * divisor``
    cycles (the line rate).
    """

    def __init__(self, divisor):
        self.divisor = _check_divisor(divisor)
        super().__init__({
            "rx": In(1, init=1),
            "o":  Out(stream.Signature(unsigned(8))),
        })

    def elaborate(self, platform):
        m = Module()
        d = self.divisor

        # init=1 so that leaving reset does not look like a start bit.
        rx = Signal(init=1)
        m.submodules.rx_sync = FFSynchronizer(self.rx, rx, init=1)

        timer = Signal(range(d))
        shreg = Signal(8)
        index = Signal(range(8))

        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    m.d.sync += timer.eq(d // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(rx):
                    # Low for less than half a bit: a glitch, not a start bit.
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [timer.eq(d - 1), index.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [
                        timer.eq(d - 1),
                        shreg.eq(Cat(shreg[1:], rx)),   # LSB first
                        index.eq(index + 1),
                    ]
                    with m.If(index == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(rx):
                    # Load only into a free (or just emptied) output register, so
                    # that a byte on offer never changes (overrun drops the new one).
                    with m.If(~self.o.valid | self.o.ready):
                        m.d.sync += [self.o.payload.eq(shreg), self.o.valid.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "BREAK"
            with m.State("BREAK"):
                # Framing error: resynchronise on the next idle-to-start edge
                # instead of decoding a held-low line as a stream of zero bytes.
                with m.If(rx):
                    m.next = "IDLE"

        return m


class UARTTransmitter(wiring.Component):
    """8N1 UART transmitter.

    Sends each accepted byte as start bit (0), eight data bits LSB first and a
    stop bit (1), every bit exactly ``divisor`` cycles long. ``tx`` is driven
    from a register (no glitches on the pin) and idles high.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit, at least 2 (``round(f_clk / baud)``).

    Attributes
    ----------
    i : stream, in, ``unsigned(8)``
        Bytes to send. ``i.ready`` depends only on the transmitter's state.
    tx : Signal, out
        Serial line, idle high.

    Latency
    -------
    The start bit appears on ``tx`` 1 cycle after a byte is accepted; the stop
    bit ends ``10 * divisor + 1`` cycles after acceptance.

    Throughput
    ----------
    One byte per ``BITS_PER_BYTE * divisor`` = ``10 * divisor`` cycles: the next
    byte is accepted in the last cycle of the previous stop bit, so a stream of
    bytes leaves with no idle time between characters.
    """

    def __init__(self, divisor):
        self.divisor = _check_divisor(divisor)
        super().__init__({
            "i":  In(stream.Signature(unsigned(8))),
            "tx": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        d = self.divisor

        busy = Signal()
        timer = Signal(range(d))
        shreg = Signal(9)                       # data bits, then the stop bit
        left = Signal(range(BITS_PER_BYTE))     # bits still to send after the current one
        stop_ends = busy & (timer == 0) & (left == 0)

        m.d.comb += self.i.ready.eq(~busy | stop_ends)

        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                self.tx.eq(0),
                shreg.eq(Cat(self.i.payload, 1)),
                left.eq(BITS_PER_BYTE - 1),
                timer.eq(d - 1),
                busy.eq(1),
            ]
        with m.Elif(busy):
            with m.If(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            with m.Elif(left == 0):
                # The stop bit (1) stays on the line while idle.
                m.d.sync += busy.eq(0)
            with m.Else():
                m.d.sync += [
                    self.tx.eq(shreg[0]),
                    shreg.eq(shreg >> 1),
                    left.eq(left - 1),
                    timer.eq(d - 1),
                ]

        return m
