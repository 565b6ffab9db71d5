"""Board tops, host link and vendor project writer.

:data:`BOARDS` maps a board name (as given to ``groupnet-hw build --board``) to
a :class:`BoardSpec`; :func:`get_board` looks one up and rejects unknown names
with the list of known ones. Every board's top is a :class:`~.top.BoardTop`
(the same :class:`~.host_link.HostLink` around the core on each), and
:func:`~.project.write_board_project` writes and builds the project of any of
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["BoardSpec", "BOARDS", "BoardBuildError", "get_board", "write_board_project"]


@dataclass(frozen=True)
class BoardSpec:
    """What the tool needs to know about a supported board.

    Attributes
    ----------
    name : str
        Registry key.
    description : str
        One line for help texts.
    platform : type
        amaranth-boards platform class (instantiated per build).
    top : callable
        ``top(core, baud=...)`` -> Elaboratable board top.
    device : str
        FPGA part number.
    clk_frequency : float
        Clock of the ``sync`` domain in Hz.
    toolchain : str
        Vendor toolchain that builds the project.
    project_subdir : str
        Folder under the output directory that receives the project.
    program : str
        Command that loads the bitstream into the board, run in the project
        folder; ``{bitstream}`` stands for the bitstream's file name.
    """

    name: str
    description: str
    platform: type
    top: Callable
    device: str
    clk_frequency: float
    toolchain: str
    project_subdir: str
    program: str = ""


from amaranth_boards.de10_nano import DE10NanoPlatform  # noqa: E402
from amaranth_boards.icebreaker import ICEBreakerPlatform  # noqa: E402

from .de10nano import DE10NanoTop  # noqa: E402
from .icebreaker import ICEBreakerTop  # noqa: E402
from .project import BoardBuildError, write_board_project  # noqa: E402
from .ulx3s import ULX3SPlatform, ULX3STop  # noqa: E402

BOARDS = {
    "de10nano": BoardSpec(
        name="de10nano",
        description="Terasic DE10-Nano, Cyclone V 5CSEBA6U23I7, UART on Arduino IO0/IO1",
        platform=DE10NanoPlatform,
        top=DE10NanoTop,
        device="5CSEBA6U23I7",
        clk_frequency=50e6,
        toolchain="Quartus",
        project_subdir="quartus",
        program="quartus_pgm --mode JTAG --operation 'P;{bitstream}@2'",
    ),
    "ulx3s": BoardSpec(
        name="ulx3s",
        description="Radiona ULX3S, ECP5 LFE5U-85F, UART over the FTDI USB port (US1)",
        platform=ULX3SPlatform,
        top=ULX3STop,
        device="LFE5U-85F",
        clk_frequency=25e6,
        toolchain="Trellis (Yosys + nextpnr-ecp5 + ecppack)",
        project_subdir="ulx3s",
        program="openFPGALoader --board ulx3s {bitstream}",
    ),
    "icebreaker": BoardSpec(
        name="icebreaker",
        description="1BitSquared iCEBreaker, iCE40UP5K-SG48, UART over the FTDI USB port",
        platform=ICEBreakerPlatform,
        top=ICEBreakerTop,
        device="iCE40UP5K",
        clk_frequency=12e6,
        toolchain="IceStorm (Yosys + nextpnr-ice40 + icepack)",
        project_subdir="icebreaker",
        program="iceprog {bitstream}",
    ),
}


def get_board(name):
    """Return the :class:`BoardSpec` registered as ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not a known board; the message lists the known ones.
    """
    try:
        return BOARDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown board {name!r}; known boards: "
                         f"{', '.join(sorted(BOARDS))}") from None
