"""Radiona ULX3S (ECP5 LFE5U-85F, caBGA381) board top.

Board facts, from ``amaranth_boards.ulx3s.ULX3S_85F_Platform`` (0.0.21):

* ``clk25`` #0 (pin G2, 25 MHz) is the default clock.
* ``uart`` #0 is the FT231X USB-serial bridge on the US1 USB port: ``rx`` = M1
  (FPGA receives), ``tx`` = L4 (FPGA sends), LVCMOS33. The same cable that
  programs the board carries the host link; no adapter is needed.
* ``led`` #0..7 (active high); ``button`` #0..5 are FIRE1, FIRE2, UP, DOWN,
  LEFT, RIGHT (active high, pulled down).

FIRE1 (``button`` #0) resets the design, which is also how to re-align frames
after the host lost a byte.
"""

from __future__ import annotations

import sys

from amaranth_boards.ulx3s import ULX3S_85F_Platform

from .top import BoardTop

__all__ = ["ULX3STop", "ULX3SPlatform"]


class ULX3SPlatform(ULX3S_85F_Platform):
    """amaranth-boards' ULX3S 85F, its Trellis build with one step between Yosys and
    nextpnr: ``python3 -m groupnet_hw.toolchain.hard_registers`` moves the plain
    registers around each multiplier into the MULT18X18D and those behind block RAM read
    data into the DP16KD's output register (:mod:`groupnet_hw.toolchain.hard_registers`),
    as ``groupnet-hw synth --flow ecp5`` does before it measures Fmax. Only the module's
    name is written into the script: the hardware imports nothing of the toolchain."""

    #: Tools of the build script that this package provides: the environment variable's
    #: default when the user sets none (the interpreter that has groupnet_hw installed).
    tool_paths = {"python3": sys.executable}

    @property
    def required_tools(self):
        return [*super().required_tools, *self.tool_paths]

    @property
    def command_templates(self):
        yosys, *rest = super().command_templates
        return [yosys, r"""
            {{invoke_tool("python3")}} -m groupnet_hw.toolchain.hard_registers {{name}}.json
        """, *rest]


class ULX3STop(BoardTop):
    """Board top for the ULX3S 85F: the accelerator behind a UART host link.

    The ``sync`` domain runs from ``clk25`` (25 MHz) with FIRE1 as its reset;
    the host link uses the FTDI ``uart``; the 8 LEDs show the class of the
    latest image in binary. All of it is :class:`~.top.BoardTop`'s.

    Parameters
    ----------
    core : wiring.Component
        Accelerator core (see :class:`~.host_link.HostLink` for its interface).
    baud : int
        Serial rate in bit/s. The UART divisor is ``round(25e6 / baud)`` (217
        at 115200 baud); a rate that the clock cannot hit within 2 % is rejected.

    Attributes
    ----------
    link : HostLink
        The wrapped core.
    divisor : int
        Clock cycles per UART bit.

    Latency and throughput are those of :class:`~.host_link.HostLink` at that
    divisor (one pixel per 86.8 us at 115200 baud).
    """

    platform_class = ULX3S_85F_Platform
