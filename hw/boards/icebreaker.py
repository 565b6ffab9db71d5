"""1BitSquared iCEBreaker (iCE40UP5K-SG48) board top.

Board facts, from ``amaranth_boards.icebreaker.ICEBreakerPlatform`` (0.0.21):

* ``clk12`` #0 (pin 35, 12 MHz) is the default clock.
* ``uart`` #0 is channel B of the FT2232H on the USB port: ``rx`` = 6 (FPGA
  receives), ``tx`` = 9 (FPGA sends). The programming cable carries the host
  link (the second of the two serial ports it shows).
* ``led`` #0 (red, pin 11) and ``led`` #1 (green, pin 37), active low on the
  board, inverted by the platform; ``button`` #0 (pin 10, the user button
  next to the USB connector, inverted by the platform). The five LEDs and
  three buttons of the break-off PMOD are not used: it may have been broken off
  and plugged elsewhere.

The user button resets the design, which is also how to re-align frames after
the host lost a byte. Only the two low bits of the class reach the LEDs.
"""

from __future__ import annotations

from amaranth_boards.icebreaker import ICEBreakerPlatform

from .top import BoardTop

__all__ = ["ICEBreakerTop"]


class ICEBreakerTop(BoardTop):
    """Board top for the iCEBreaker: the accelerator behind a UART host link.

    The ``sync`` domain runs from ``clk12`` (12 MHz), held in reset for the
    platform's 15 us power-on delay and while the user button is pressed; the
    host link uses the FTDI ``uart``; the red and green LEDs show bits 0 and 1
    of the class of the latest image. All of it is :class:`~.top.BoardTop`'s.

    Parameters
    ----------
    core : wiring.Component
        Accelerator core (see :class:`~.host_link.HostLink` for its interface).
    baud : int
        Serial rate in bit/s. The UART divisor is ``round(12e6 / baud)`` (104 at
        115200 baud, 0.2 % fast); a rate that the clock cannot hit within 2 % is
        rejected.

    Attributes
    ----------
    link : HostLink
        The wrapped core.
    divisor : int
        Clock cycles per UART bit.

    Latency and throughput are those of :class:`~.host_link.HostLink` at that
    divisor (one pixel per 86.7 us at 115200 baud).
    """

    platform_class = ICEBreakerPlatform
