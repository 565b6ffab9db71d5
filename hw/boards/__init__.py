"""Board tops, host link and vendor project writers.

:data:`BOARDS` maps a board name (as given to ``groupnet-hw build --board``) to
a :class:`BoardSpec`; :func:`get_board` looks one up and rejects unknown names
with the list of known ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["BoardSpec", "BOARDS", "get_board", "write_board_project"]


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
    """

    name: str
    description: str
    platform: type
    top: Callable
    device: str
    clk_frequency: float
    toolchain: str
    project_subdir: str


from amaranth_boards.de10_nano import DE10NanoPlatform  # noqa: E402

from .de10nano import DE10NanoTop, write_board_project  # noqa: E402

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
