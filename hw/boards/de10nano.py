"""Terasic DE10-Nano (Cyclone V 5CSEBA6U23I7) board top and Quartus project writer.

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
which is also how to re-align frames after the host lost a byte.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

from amaranth.hdl import ClockDomain, ClockSignal, Elaboratable, Module
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer

from .host_link import HostLink
from .uart import baud_divisor

__all__ = ["DE10NanoTop", "write_board_project", "PROJECT_NAME"]

#: Name of the top-level entity and of every generated project file.
PROJECT_NAME = "groupnet_top"


class DE10NanoTop(Elaboratable):
    """Board top for the DE10-Nano: the accelerator behind a UART host link.

    Requests ``clk50`` (the platform's default clock) as the ``sync`` domain
    with KEY0 as its (synchronised) reset, the ``uart`` resource on the
    Arduino header, and the 8 user LEDs, and instantiates
    :class:`~.host_link.HostLink` around the core. The LEDs show the class of
    the latest image in binary.

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

    clk_frequency = 50e6

    def __init__(self, core, baud=115200):
        divisor = baud_divisor(self.clk_frequency, baud)
        self.baud = baud
        self.divisor = divisor
        self.link = HostLink(core, divisor)

    def elaborate(self, platform):
        if platform is None or not hasattr(platform, "request"):
            raise TypeError("DE10NanoTop needs the board platform (build it with "
                            "DE10NanoPlatform); simulate HostLink instead")
        if platform.default_clk_frequency != self.clk_frequency:
            raise ValueError(f"DE10NanoTop computed its UART divisor for "
                             f"{self.clk_frequency / 1e6:g} MHz, but the platform's default "
                             f"clock runs at {platform.default_clk_frequency / 1e6:g} MHz")
        m = Module()

        # The sync domain is built here rather than by the platform's fallback
        # so that KEY0 can serve as reset (the platform defines no reset).
        clk = platform.request(platform.default_clk, dir="-")
        m.submodules.clk_buf = clk_buf = io.Buffer("i", clk)
        m.domains.sync = ClockDomain("sync")
        m.d.comb += ClockSignal("sync").eq(clk_buf.i)
        key0 = platform.request("button", 0, dir="-")
        m.submodules.rst_buf = rst_buf = io.Buffer("i", key0)
        m.submodules.reset_sync = ResetSynchronizer(rst_buf.i, domain="sync")

        m.submodules.link = link = self.link

        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx_buf = rx_buf = io.Buffer("i", uart.rx)
        m.submodules.uart_tx_buf = tx_buf = io.Buffer("o", uart.tx)
        m.d.comb += [
            link.rx.eq(rx_buf.i),
            tx_buf.o.eq(link.tx),
        ]

        for n in range(8):
            led = platform.request("led", n, dir="-")
            led_buf = io.Buffer("o", led)
            m.submodules[f"led{n}_buf"] = led_buf
            m.d.comb += led_buf.o.eq(link.leds[n])

        return m


def write_board_project(core, outdir, board="de10nano", run_quartus=None, *, baud=115200):
    """Write a vendor project for ``core`` on ``board`` and build it if the tools exist.

    The platform's build plan (``platform.build(top, name="groupnet_top",
    do_build=False)``) is written to ``outdir/quartus/``: ``groupnet_top.qsf``
    (device, pins, I/O standards), ``groupnet_top.sdc`` (50 MHz clock),
    ``groupnet_top.v``, and the build scripts ``build_groupnet_top.sh`` /
    ``.bat``.

    Parameters
    ----------
    core : wiring.Component
        Accelerator core (see :class:`~.host_link.HostLink`).
    outdir : str or os.PathLike
        Output folder; created if missing, existing files are overwritten.
    board : str
        Name in :data:`groupnet_hw.hw.boards.BOARDS`.
    run_quartus : bool or None
        ``None``: run the build script if the Quartus tools it calls
        (``quartus_map``, ``quartus_fit``, ``quartus_asm``, ``quartus_sta``)
        are on ``PATH`` or ``AMARANTH_ENV_QUARTUS`` names Quartus' environment
        script. ``True``: run it regardless. ``False``: only write files.
    baud : int
        Host link serial rate.

    Returns
    -------
    dict
        ``board``, ``project_dir``, ``qsf``, ``sdc``, ``verilog``, ``script``
        (paths), ``files`` (every path written), ``built`` (bool),
        ``bitstream`` (``.sof`` path or ``None``), ``divisor``, ``baud`` and
        ``message`` (one line for the user).

    Raises
    ------
    ValueError
        Unknown board.
    RuntimeError
        The Quartus build was run and failed.
    """
    from . import get_board     # the registry imports this module

    spec = get_board(board)
    top = spec.top(core, baud=baud)
    platform = spec.platform()
    plan = platform.build(top, name=PROJECT_NAME, do_build=False)

    project_dir = pathlib.Path(outdir) / spec.project_subdir
    project_dir.mkdir(parents=True, exist_ok=True)
    # Written here instead of BuildPlan.extract(), which chdir()s the whole
    # process while it writes.
    written = []
    for filename, content in plan.files.items():
        rel = pathlib.PurePosixPath(filename)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"build plan file {filename!r} escapes the project folder")
        path = project_dir.joinpath(*rel.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        written.append(path)

    script = project_dir / f"{plan.script}.sh"
    result = {
        "board": spec.name,
        "project_dir": project_dir,
        "qsf": project_dir / f"{PROJECT_NAME}.qsf",
        "sdc": project_dir / f"{PROJECT_NAME}.sdc",
        "verilog": project_dir / f"{PROJECT_NAME}.v",
        "script": script,
        "files": written,
        "built": False,
        "bitstream": None,
        "divisor": top.divisor,
        "baud": baud,
    }

    if run_quartus is None:
        run_quartus = platform.has_required_tools()
    if not run_quartus:
        result["message"] = (f"Quartus not found ({', '.join(platform.required_tools)} not on "
                             f"PATH); to build the bitstream run: "
                             f"cd {project_dir} && sh {script.name}")
        return result

    completed = subprocess.run(["sh", script.name], cwd=project_dir, env=os.environ.copy())
    if completed.returncode != 0:
        raise RuntimeError(f"Quartus build failed (exit code {completed.returncode}); "
                           f"see the reports in {project_dir}")
    sof = project_dir / f"{PROJECT_NAME}.sof"
    result["built"] = True
    result["bitstream"] = sof if sof.exists() else None
    result["message"] = (f"Quartus build finished: {sof}; program with "
                         f"quartus_pgm --mode JTAG --operation 'P;{sof.name}@2' (run in {project_dir})")
    return result
