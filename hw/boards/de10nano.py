"""Terasic DE10-Nano (Cyclone V 5CSEBA6U23I7) board top.

Board facts, from ``amaranth_boards.de10_nano.DE10NanoPlatform`` (0.0.21):

* ``clk50`` #0 (pin V11, 50 MHz) is the default clock.
* ``uart`` #0 exists: ``rx`` = AG13, ``tx`` = AF13, 3.3-V LVTTL. These are
  Arduino header IO0 / IO1, not the board's mini-USB serial port (that one is
  wired to the HPS, which the platform does not expose). Connect a 3.3 V
  USB-serial adapter: adapter TXD -> Arduino IO0, adapter RXD -> Arduino IO1,
  GND -> GND.
* ``led`` #0..7 (active high), ``button`` #0..1 (KEY0/KEY1, active low on the
  board, inverted by the platform).

The platform has no reset resource; :class:`DE10NanoTop` uses KEY0 as a reset,
which is also how to re-align frames after the host lost a byte. The Quartus
project is written by :func:`groupnet_hw.toolchain.board_project.write_board_project`.
"""

from __future__ import annotations

from amaranth_boards.de10_nano import DE10NanoPlatform

from .top import BoardTop

__all__ = ["DE10NanoTop"]


class DE10NanoTop(BoardTop):
    """Board top for the DE10-Nano: the accelerator behind a UART host link.

    The ``sync`` domain runs from ``clk50`` (50 MHz) with KEY0 as its
    synchronised reset; the host link uses the ``uart`` resource on the Arduino
    header; the 8 user LEDs show the class of the latest image in binary. All of
    it is :class:`~.top.BoardTop`'s.

    Parameters
    ----------
    core : wiring.Component
        Accelerator core (see :class:`~.host_link.HostLink` for its interface).
    baud : int
        Serial rate in bit/s. The UART divisor is ``round(50e6 / baud)``; a
        rate that the 50 MHz clock cannot hit within 2 % is rejected.

    Attributes
    ----------
    link : HostLink
        The wrapped core.
    divisor : int
        Clock cycles per UART bit.

    Latency and throughput are those of :class:`~.host_link.HostLink`, at
    ``divisor = round(50e6 / baud)`` (434 at 115200 baud: one pixel per 86.8 us).
    """

    platform_class = DE10NanoPlatform
