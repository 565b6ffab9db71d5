# amaranth: UnusedElaboratable=no
"""Board top shared by every board: the accelerator behind the UART host link.

A board's top is a subclass of :class:`BoardTop` that names its amaranth-boards
platform class; everything else (clock and reset, the host link, the UART and LED
buffers) is the same on every board and lives here once.
"""

from __future__ import annotations

from amaranth.hdl import Elaboratable, Module
from amaranth.lib import io

from .host_link import HostLink
from .uart import baud_divisor

__all__ = ["BoardTop"]

#: The host link shows the class on at most this many LEDs (its ``leds`` port width).
MAX_LEDS = 8


class BoardTop(Elaboratable):
    """The accelerator behind a UART host link on an amaranth-boards platform.

    Uses, from the platform:

    * the default clock resource as the ``sync`` clock. The domain itself is
      left to the platform's ``create_missing_domain``, so that each family keeps
      its own start-up handling (iCE40: reset held for 15 us after configuration,
      while its block RAMs still read as zero; ECP5: reset released through GSR);
    * ``button`` #0 as reset (pressed = reset; this is also how to re-align frames
      after the host lost a byte), made the platform's default reset when the
      platform has none;
    * ``uart`` #0, ``rx`` and ``tx`` only;
    * ``led`` #0, #1, ... (up to 8, as many as the platform has): the class of
      the latest image in binary, LSB on ``led`` #0.

    Parameters
    ----------
    core : wiring.Component
        Accelerator core (see :class:`~.host_link.HostLink` for its interface).
    baud : int
        Serial rate in bit/s. The UART divisor is ``round(clk_frequency / baud)``;
        a rate that the clock cannot hit within 2 % is rejected.

    Attributes
    ----------
    platform_class : type
        Class attribute of a subclass: the amaranth-boards platform it is built for.
    clk_frequency : float
        Frequency of the platform's default clock in Hz, read from
        ``platform_class``.
    link : HostLink
        The wrapped core.
    divisor : int
        Clock cycles per UART bit.
    baud : int

    Raises
    ------
    TypeError
        When instantiated without a ``platform_class`` (use a board's subclass).
    ValueError
        If ``baud`` cannot be generated from the board clock.

    Latency and throughput are those of :class:`~.host_link.HostLink` at
    ``divisor = round(clk_frequency / baud)``.
    """

    platform_class = None

    #: Resource whose #0 resets the design (``None``: the platform's reset, if any).
    reset_resource = "button"

    def __new__(cls, core, baud=115200):
        # Everything that can refuse a top runs before the top exists: amaranth warns
        # about every elaboratable created and never elaborated, and a top that failed
        # to build would be reported so under its error. The host link is made here
        # and elaborated only by its top, so that this file's first line (amaranth's
        # linter option) silences only the link of a top that failed; the top's own
        # warning stays its creator's (``src_loc_at``: the caller's source location).
        if cls.platform_class is None:
            raise TypeError(f"{cls.__name__} names no platform_class; use a board's "
                            f"top (see groupnet_hw.hw.boards.BOARDS)")
        clk_frequency = cls.platform_class().default_clk_frequency
        divisor = baud_divisor(clk_frequency, baud)
        link = HostLink(core, divisor)
        self = super().__new__(cls, src_loc_at=1)
        self.clk_frequency, self.baud, self.divisor, self.link = clk_frequency, baud, divisor, link
        return self

    def elaborate(self, platform):
        name = type(self).__name__
        if platform is None or not hasattr(platform, "request"):
            raise TypeError(f"{name} needs the board platform (build it with "
                            f"{self.platform_class.__name__}); simulate HostLink instead")
        if platform.default_clk_frequency != self.clk_frequency:
            raise ValueError(f"{name} computed its UART divisor for "
                             f"{self.clk_frequency / 1e6:g} MHz, but the platform's default "
                             f"clock runs at {platform.default_clk_frequency / 1e6:g} MHz")
        # None of the supported platforms defines a reset; taking the button as the
        # platform's default reset (instead of building the sync domain here) keeps
        # the family-specific start-up logic of create_missing_domain.
        if platform.default_rst is None and self.reset_resource is not None:
            platform.default_rst = self.reset_resource

        m = Module()
        m.submodules.link = link = self.link

        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx_buf = rx_buf = io.Buffer("i", uart.rx)
        m.submodules.uart_tx_buf = tx_buf = io.Buffer("o", uart.tx)
        m.d.comb += [
            link.rx.eq(rx_buf.i),
            tx_buf.o.eq(link.tx),
        ]

        for n in range(self.led_count(platform)):
            led = platform.request("led", n, dir="-")
            m.submodules[f"led{n}_buf"] = led_buf = io.Buffer("o", led)
            m.d.comb += led_buf.o.eq(link.leds[n])

        return m

    @staticmethod
    def led_count(platform):
        """Number of LEDs the class is shown on.

        Parameters
        ----------
        platform : amaranth.build.Platform

        Returns
        -------
        int
            Consecutive ``led`` resources from #0 on ``platform``, at most 8 (the
            host link's ``leds`` width).
        """
        n = 0
        while n < MAX_LEDS and ("led", n) in platform.resources:
            n += 1
        return n
