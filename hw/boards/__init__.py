"""Board tops and host link, and the registry of the classes that build each board.

:data:`BOARDS` maps a board name (as given to ``groupnet-hw build --board``) to a
:class:`BoardSpec`: the board's facts (:class:`groupnet_hw.devices.Board`, written
once in :mod:`groupnet_hw.devices`) with its amaranth-boards platform class and its
top. :func:`get_board` looks one up and rejects unknown names with the list of known
ones. Every board's top is a :class:`~.top.BoardTop` (the same
:class:`~.host_link.HostLink` around the core on each);
:func:`groupnet_hw.toolchain.board_project.write_board_project` writes and builds the
project of any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from amaranth_boards.de10_nano import DE10NanoPlatform
from amaranth_boards.icebreaker import ICEBreakerPlatform

from ...devices import BOARDS as BOARD_FACTS
from ...devices import Board
from ...devices import get_board as board_facts
from .de10nano import DE10NanoTop
from .icebreaker import ICEBreakerTop
from .ulx3s import ULX3SPlatform, ULX3STop

__all__ = ["BoardSpec", "BOARDS", "get_board"]


@dataclass(frozen=True)
class BoardSpec:
    """A supported board: its facts and the classes that build it.

    Attributes
    ----------
    board : groupnet_hw.devices.Board
        The board's facts.
    platform : type
        amaranth-boards platform class (instantiated per build): the one
        ``board.platform`` names, or a subclass of it.
    top : callable
        ``top(core, baud=...)`` -> Elaboratable board top.
    """

    board: Board
    platform: type
    top: Callable

    @property
    def name(self):
        """Registry key."""
        return self.board.name

    @property
    def description(self):
        """One line for help texts."""
        return self.board.description

    @property
    def device(self):
        """FPGA part number (``board.device.part``)."""
        return self.board.device.part

    @property
    def clk_frequency(self):
        """Clock of the ``sync`` domain in Hz."""
        return self.board.clk_frequency

    @property
    def toolchain(self):
        """Vendor toolchain that builds the project, with the programs it runs."""
        return self.board.toolchain_text

    @property
    def project_subdir(self):
        """Folder under the output directory that receives the project."""
        return self.board.project_subdir

    @property
    def program(self):
        """Command that loads the bitstream into the board, run in the project folder;
        ``{bitstream}`` stands for the bitstream's file name."""
        return self.board.program


#: Board name -> the platform class and top that build it. The ULX3S builds with a
#: subclass of its amaranth-boards platform that adds a netlist step to the script.
_CLASSES = {
    "de10nano": (DE10NanoPlatform, DE10NanoTop),
    "ulx3s": (ULX3SPlatform, ULX3STop),
    "icebreaker": (ICEBreakerPlatform, ICEBreakerTop),
}

BOARDS = {name: BoardSpec(board, *_CLASSES[name]) for name, board in BOARD_FACTS.items()}


def get_board(name):
    """Return the :class:`BoardSpec` registered as ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not a known board; the message lists the known ones.
    """
    return BOARDS[board_facts(name).name]
