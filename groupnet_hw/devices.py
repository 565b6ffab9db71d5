"""Every supported board, FPGA device and device family, written once.

The schedule's budget (:func:`groupnet_hw.compiler.schedule.schedule`), the resource
model's families (:mod:`groupnet_hw.compiler.resources`), the board tops and their
registry (:mod:`groupnet_hw.hw.boards`), the Yosys/nextpnr flows
(:mod:`groupnet_hw.toolchain.synth`), the board-project writer
(:mod:`groupnet_hw.toolchain.board_project`) and the command line all read their
facts from here.

- :data:`FAMILIES`: name -> :class:`Family` (``ecp5``, ``ice40``, ``cyclonev``), the
  key the resource model is calibrated by and ``groupnet-hw synth --flow`` takes;
- :data:`DEVICES`: part number -> :class:`Device`: its family and the limit of each
  resource the schedule budgets;
- :data:`BOARDS`: name (``groupnet-hw build --board``) -> :class:`Board`: its device,
  clock, amaranth-boards platform and vendor toolchain.

:func:`get_family`, :func:`get_device` and :func:`get_board` look a name up and reject
an unknown one in one line that lists the known ones.

This module imports nothing of the package: ``compiler/``, ``hw/`` and ``toolchain/``
all import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

__all__ = ["Family", "Device", "Board", "FAMILIES", "DEVICES", "BOARDS", "BOARD_NAMES",
           "get_family", "get_device", "get_board"]


def _lookup(registry, name, what):
    try:
        return registry[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {what} {name!r}; known {what}s: "
                         f"{', '.join(sorted(registry))}") from None


@dataclass(frozen=True)
class Family:
    """An FPGA family: what the resource model is calibrated for and a Yosys flow
    synthesizes for.

    Attributes
    ----------
    name : str
        Registry key (``groupnet-hw synth --flow``, the resource model's family).
    title : str
        Its name in text.
    bram_modes : tuple of (int, int)
        ``(width, depth)`` of one block RAM in each aspect ratio it can be configured
        in, widest first.
    aluts_per_alm : float or None
        ALUTs per logic site that the vendor's packer fits on average, where the
        budget counts sites that hold two LUTs (Cyclone V's ALMs; two fit an ALM, but
        not every pair shares inputs). Yosys counts ALUTs and there is no Quartus here
        to count ALMs. ``None`` where the budget counts LUTs.
    """

    name: str
    title: str
    bram_modes: tuple
    aluts_per_alm: float | None = None

    @property
    def bram_bits(self):
        """Bits of one block RAM."""
        return max(width * depth for width, depth in self.bram_modes)


@dataclass(frozen=True)
class Device:
    """An FPGA part and what the schedule may spend of it.

    Attributes
    ----------
    part : str
        Part number, as the vendor tools take it.
    family : str
        A key of :data:`FAMILIES`.
    series : str
        The family's product line, for text (:attr:`label`).
    limits : Mapping[str, int]
        Budgeted resource -> how many the device has. The keys are the family's
        (``groupnet_hw.compiler.schedule.board_usage``): Cyclone V ``alm``, ``ff``,
        ``m10k``, ``dsp``; ECP5 ``lut`` (LUT4 sites), ``ff``, ``lutram``
        (TRELLIS_DPR16X4), ``ebr``, ``dsp``; iCE40 ``lut``, ``ff``, ``ebr``, ``dsp``.
    ram_bits : int
        On-chip RAM in bits that weights and line buffers can use (block RAM, and
        single-port RAM where the device has it).
    nextpnr : tuple of str
        nextpnr's arguments that select this part and package (empty: no nextpnr runs
        for it).
    """

    part: str
    family: str
    series: str
    # a read-only view, left out of the hash (a mapping has none)
    limits: Mapping[str, int] = field(hash=False)
    ram_bits: int
    nextpnr: tuple = ()

    def __post_init__(self):
        get_family(self.family)
        object.__setattr__(self, "limits", MappingProxyType(dict(self.limits)))

    @property
    def label(self):
        """``part (series)``: the device in the schedule's report."""
        return f"{self.part} ({self.series})"


@dataclass(frozen=True)
class Board:
    """A supported board: its device, clock, platform and vendor toolchain.

    Attributes
    ----------
    name : str
        Registry key (``groupnet-hw build --board``).
    title : str
        Short name in text.
    description : str
        One line for help texts.
    device : Device
    clock_mhz : float
        Clock of the ``sync`` domain (the platform's default clock), in MHz.
    platform : str
        The amaranth-boards platform, ``module.Class``; :mod:`groupnet_hw.hw.boards`
        maps it to the class the build uses (the same, or a subclass of it).
    toolchain : str
        The platform's amaranth toolchain (``Platform.toolchain``).
    tools : str
        The programs that toolchain runs, for text (empty: one vendor suite).
    project_subdir : str
        Folder under the build's output folder that receives the vendor project.
    program : str
        Command that loads the bitstream into the board, run in the project folder;
        ``{bitstream}`` stands for the bitstream's file name.
    dram_port_bits : int
        Data width of the Avalon-MM port through which the fabric reaches DRAM (the
        layer-sequential engine's memory port); 0: none the engine can use.
    """

    name: str
    title: str
    description: str
    device: Device
    clock_mhz: float
    platform: str
    toolchain: str
    tools: str
    project_subdir: str
    program: str
    dram_port_bits: int = 0

    @property
    def family(self):
        """The device's family: the key of its resource model and of its
        ``groupnet-hw synth --flow``."""
        return self.device.family

    @property
    def clk_frequency(self):
        """Clock of the ``sync`` domain in Hz."""
        return self.clock_mhz * 1e6

    @property
    def toolchain_text(self):
        """The toolchain with the programs it runs, e.g. ``Trellis (Yosys + ...)``."""
        return f"{self.toolchain} ({self.tools})" if self.tools else self.toolchain

    def budget(self):
        """The schedule's budget (``Schedule.budget``): a new dict of ``device`` (its
        :attr:`Device.label`), ``family``, ``clock_mhz``, ``limits`` and ``ram_bits``."""
        d = self.device
        return dict(device=d.label, family=d.family, clock_mhz=self.clock_mhz,
                    limits=dict(d.limits), ram_bits=d.ram_bits)


#: name -> family, in the order the resource model and the reports list them.
FAMILIES = {f.name: f for f in (
    Family("ecp5", "ECP5",
           ((36, 512), (18, 1024), (9, 2048), (4, 4096), (2, 8192), (1, 16384))),
    Family("ice40", "iCE40", ((16, 256), (8, 512), (4, 1024), (2, 2048))),
    Family("cyclonev", "Cyclone V",
           ((40, 256), (20, 512), (10, 1024), (5, 2048), (2, 4096), (1, 8192)),
           aluts_per_alm=1.6),
)}


def get_family(name):
    """The :class:`Family` registered as ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not a known family; the message lists the known ones.
    """
    return _lookup(FAMILIES, name, "family")


#: part number -> device.
DEVICES = {d.part: d for d in (
    # Cyclone V: four registers per ALM.
    Device("5CSEBA6U23I7", "cyclonev", "Cyclone V SE",
           limits=dict(alm=41_910, ff=4 * 41_910, m10k=553, dsp=112),
           ram_bits=553 * 10_240),
    # ECP5: only a quarter of the slices can be distributed RAM: 83,640 / 8 RAM LUTs,
    # four per TRELLIS_DPR16X4 (nextpnr refuses to place beyond it).
    Device("LFE5U-85F", "ecp5", "ECP5",
           limits=dict(lut=83_640, ff=83_640, lutram=83_640 // 8 // 4, ebr=208, dsp=156),
           ram_bits=208 * 18_432, nextpnr=("--85k", "--package", "CABGA381")),
    # iCE40 UltraPlus: 30 SB_RAM40_4K and 4 SB_SPRAM256KA.
    Device("iCE40UP5K", "ice40", "iCE40 UltraPlus",
           limits=dict(lut=5_280, ff=5_280, ebr=30, dsp=8),
           ram_bits=30 * 4_096 + 4 * 262_144),
)}


def get_device(part):
    """The :class:`Device` registered as ``part``.

    Raises
    ------
    ValueError
        If ``part`` is not a known device; the message lists the known ones.
    """
    return _lookup(DEVICES, part, "device")


#: name -> board, in the order the command line lists them.
BOARDS = {b.name: b for b in (
    Board("de10nano", "DE10-Nano",
          "Terasic DE10-Nano, Cyclone V 5CSEBA6U23I7, UART on Arduino IO0/IO1",
          DEVICES["5CSEBA6U23I7"], clock_mhz=50.0,
          platform="amaranth_boards.de10_nano.DE10NanoPlatform",
          toolchain="Quartus", tools="", project_subdir="quartus",
          program="quartus_pgm --mode JTAG --operation 'P;{bitstream}@2'",
          # an FPGA-to-SDRAM port of the HPS's DDR3 controller, configured 128 bits wide
          dram_port_bits=128),
    Board("ulx3s", "ULX3S",
          "Radiona ULX3S, ECP5 LFE5U-85F, UART over the FTDI USB port (US1)",
          DEVICES["LFE5U-85F"], clock_mhz=25.0,
          platform="amaranth_boards.ulx3s.ULX3S_85F_Platform",
          toolchain="Trellis", tools="Yosys + nextpnr-ecp5 + ecppack", project_subdir="ulx3s",
          program="openFPGALoader --board ulx3s {bitstream}"),
    Board("icebreaker", "iCEBreaker",
          "1BitSquared iCEBreaker, iCE40UP5K-SG48, UART over the FTDI USB port",
          DEVICES["iCE40UP5K"], clock_mhz=12.0,
          platform="amaranth_boards.icebreaker.ICEBreakerPlatform",
          toolchain="IceStorm", tools="Yosys + nextpnr-ice40 + icepack",
          project_subdir="icebreaker", program="iceprog {bitstream}"),
)}

#: The board names, as ``groupnet-hw build --board`` accepts them.
BOARD_NAMES = tuple(BOARDS)


def get_board(name):
    """The :class:`Board` registered as ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not a known board; the message lists the known ones.
    """
    return _lookup(BOARDS, name, "board")
