"""The engine's register map and error codes, as data: what the host runtime imports.

The sequential engine's control and status registers (``hw.engine.csr.EngineCSR``) are
built from this module, and the host runtime (numpy only, on the board's Linux or against
the Verilator model) reads and writes them by the same names, so neither side can drift
from the other. It imports nothing, not even Amaranth, so that the runtime can use it on
the board without the hardware tools.

Every register is 32 bits wide and is reached at byte offset ``4 * index`` from the
agent's base address (the Avalon-MM agent port decodes word addresses, the host's
interconnect turns its byte addresses into them). Use 32-bit accesses: the port has no
byte enables, so a narrower write writes the whole register.

========  ======  =================  =====  ==============================================
offset    index   name               access fields
========  ======  =================  =====  ==============================================
0x00      0       ID                 RO     [31:8] ``0x474E45`` ("GNE"), [7:0] map version
0x04      1       CONTROL            W/RW   [0] START (write 1), [1] SOFT_RESET (write 1),
                                            [2] IRQ_ENABLE (read/write)
0x08      2       STATUS             RO/W1C [0] BUSY, [1] DONE (W1C), [2] ERROR (W1C),
                                            [3] IGNORED (W1C), [15:8] ERROR_CODE
0x0C      3       WINDOW_BASE        RW*    first byte of the DRAM window
0x10      4       WINDOW_LIMIT       RW*    first byte past the DRAM window
0x14      5       PROGRAM_ADDRESS    RW*    byte address of the layer program in DRAM
0x20      8       CYCLES_BUSY_LO     RO     clock cycles with STATUS.BUSY, bits [31:0]
0x24      9       CYCLES_BUSY_HI     RO     bits [63:32], latched by reading ``_LO``
0x28      10      CYCLES_STALLED_LO  RO     cycles the engine waited on memory
0x2C      11      CYCLES_STALLED_HI  RO
0x30      12      WORDS_READ_LO      RO     bus words read from DRAM
0x34      13      WORDS_READ_HI      RO
0x38      14      WORDS_WRITTEN_LO   RO     bus words written to DRAM
0x3C      15      WORDS_WRITTEN_HI   RO
========  ======  =================  =====  ==============================================

RW*: locked while STATUS.BUSY is 1; a write then is ignored and sets STATUS.IGNORED.
Offsets 0x18, 0x1C and 0x40-0x7C are reserved: they read 0 and ignore writes.

Rules (``hw/engine/csr.py`` implements them, ``tests/test_engine_csr.py`` checks them):

- START starts a run when STATUS.BUSY is 0: it clears DONE, ERROR, ERROR_CODE, IGNORED
  and the four counters, and BUSY reads 1 from the next cycle. START while BUSY is
  ignored and sets IGNORED.
- SOFT_RESET resets the engine (its pulse reaches every unit); it clears DONE, ERROR,
  ERROR_CODE and IGNORED, not the window, the program address, IRQ_ENABLE or the
  counters (they stay readable after an aborted run). A DMA finishes a burst it has
  started on the bus before it goes idle, so BUSY can stay 1 for a few cycles after it:
  poll it. SOFT_RESET and START written together: the reset wins, the start is dropped.
- DONE is set when the engine reports the end of a run, ERROR with ERROR_CODE when a unit
  reports an error (the first error of a run is kept); either ends the run.
- The interrupt output is ``IRQ_ENABLE and (DONE or ERROR)``, a level: write 1 to the
  STATUS bit to clear it.
- A 64-bit counter is read ``_LO`` first: that read latches the counter's upper half,
  which the following ``_HI`` read returns, so the two halves are of one instant.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Field", "Register", "REGISTERS", "BY_NAME", "ID_MAGIC", "MAP_VERSION",
           "ID_VALUE", "REGISTER_ADDRESS_WIDTH", "COUNTERS", "ERROR_SOURCES",
           "ERROR_CAUSES", "error_code", "decode_error", "field_value", "with_field"]

#: ``ID[31:8]``: "GNE" (Group-Net engine) in ASCII.
ID_MAGIC = 0x474E45
#: ``ID[7:0]``: the version of this register map; changed when a register moves.
MAP_VERSION = 1
#: What the ID register reads.
ID_VALUE = (ID_MAGIC << 8) | MAP_VERSION
#: Width of the agent port's word address: 32 registers (128 bytes) of room, 16 used.
REGISTER_ADDRESS_WIDTH = 5


@dataclass(frozen=True)
class Field:
    """A bit field of a register.

    Attributes
    ----------
    name : str
    lsb : int
        Its lowest bit.
    width : int
    access : str
        ``"RO"`` read only, ``"RW"`` read and write, ``"W"`` write only (an action; reads
        0), ``"W1C"`` read, and cleared by writing 1.
    doc : str
    """

    name: str
    lsb: int
    width: int
    access: str
    doc: str

    @property
    def mask(self) -> int:
        """The field's bits in the register."""
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    """A 32-bit register of the agent port.

    Attributes
    ----------
    name : str
    index : int
        Word address on the agent port.
    access : str
        As :attr:`Field.access`, for the register as a whole (``"RW*"``: read and write,
        locked while the engine is busy; ``"mixed"``: see the fields).
    doc : str
    fields : tuple of Field
        Its bit fields; empty for a plain 32-bit value.
    """

    name: str
    index: int
    access: str
    doc: str
    fields: tuple = ()

    @property
    def offset(self) -> int:
        """Byte offset from the agent's base address."""
        return 4 * self.index

    def field(self, name: str) -> Field:
        """The field called ``name``."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")


#: The 64-bit performance counters, in register order: each has ``<name>_LO`` and
#: ``<name>_HI``.
COUNTERS = ("CYCLES_BUSY", "CYCLES_STALLED", "WORDS_READ", "WORDS_WRITTEN")

_COUNTER_DOCS = {
    "CYCLES_BUSY": "clock cycles with STATUS.BUSY since START",
    "CYCLES_STALLED": "clock cycles the engine waited on memory since START",
    "WORDS_READ": "bus words read from DRAM since START",
    "WORDS_WRITTEN": "bus words written to DRAM since START",
}
_COUNTER_BASE = 8


def _counter_registers():
    out = []
    for k, name in enumerate(COUNTERS):
        index = _COUNTER_BASE + 2 * k
        out.append(Register(f"{name}_LO", index, "RO",
                            f"{_COUNTER_DOCS[name]}, bits [31:0]; reading it latches "
                            f"bits [63:32] for {name}_HI"))
        out.append(Register(f"{name}_HI", index + 1, "RO",
                            f"{_COUNTER_DOCS[name]}, bits [63:32] as latched by the last "
                            f"read of {name}_LO"))
    return out


#: Every register, by index.
REGISTERS = (
    Register("ID", 0, "RO", "identifies the engine and the version of this map", (
        Field("VERSION", 0, 8, "RO", "register map version (MAP_VERSION)"),
        Field("MAGIC", 8, 24, "RO", "0x474E45, 'GNE'"),
    )),
    Register("CONTROL", 1, "mixed", "starts and resets the engine", (
        Field("START", 0, 1, "W", "write 1 to start a run (ignored while BUSY)"),
        Field("SOFT_RESET", 1, 1, "W", "write 1 to reset the engine"),
        Field("IRQ_ENABLE", 2, 1, "RW", "interrupt on DONE or ERROR"),
    )),
    Register("STATUS", 2, "mixed", "the engine's state", (
        Field("BUSY", 0, 1, "RO", "a run is going on, or a unit is still finishing"),
        Field("DONE", 1, 1, "W1C", "the last run finished"),
        Field("ERROR", 2, 1, "W1C", "a unit reported an error (ERROR_CODE says which)"),
        Field("IGNORED", 3, 1, "W1C", "a write was ignored: a locked register, or START "
                                      "while BUSY"),
        Field("ERROR_CODE", 8, 8, "RO", "the run's first error (error_code()); 0 if none"),
    )),
    Register("WINDOW_BASE", 3, "RW*", "first byte address the engine may access in DRAM"),
    Register("WINDOW_LIMIT", 4, "RW*", "first byte address past the engine's DRAM window"),
    Register("PROGRAM_ADDRESS", 5, "RW*", "byte address of the layer program in DRAM"),
    *_counter_registers(),
)

#: Registers by name.
BY_NAME = {r.name: r for r in REGISTERS}

#: ``ERROR_CODE[7:4]``: the unit that reported the error.
ERROR_SOURCES = {
    "read_dma": 1,
    "write_dma": 2,
    "sequencer": 3,
}

#: ``ERROR_CODE[3:0]``: what went wrong. The DMAs report the first five; a descriptor
#: with any of them issues no bus command at all. The sequencer reports the rest
#: (``hw/engine/sequencer.py``, and ``unsupported`` from the compute path in
#: ``hw/engine/core.py``): the program itself is wrong, or asks for what the engine
#: cannot run, and the engine stops before it acts on the descriptor.
ERROR_CAUSES = {
    "empty": 1,         # length 0
    "misaligned": 2,    # address or length not a multiple of the bus word
    "wraps": 3,         # address + length overflows the address space
    "below_window": 4,  # address < WINDOW_BASE
    "above_window": 5,  # address + length > WINDOW_LIMIT
    "unknown_opcode": 6,    # a descriptor's opcode the engine does not execute
    "bad_magic": 7,     # a descriptor without DESCRIPTOR_MAGIC: not a descriptor at all
    "bad_index": 8,     # a descriptor whose index is not its place in the program
    "unsupported": 9,   # a compute descriptor whose stages, formats or sizes the engine's
                        # compute path cannot run (hw/engine/core.py): never a wrong result
}


def error_code(source: str, cause: str) -> int:
    """The 8-bit ERROR_CODE of ``cause`` reported by ``source``."""
    return (ERROR_SOURCES[source] << 4) | ERROR_CAUSES[cause]


def decode_error(code: int) -> str:
    """``"source: cause"`` of an ERROR_CODE value; ``"none"`` for 0."""
    if code == 0:
        return "none"
    sources = {v: k for k, v in ERROR_SOURCES.items()}
    causes = {v: k for k, v in ERROR_CAUSES.items()}
    source = sources.get(code >> 4, f"unit {code >> 4}")
    cause = causes.get(code & 0xF, f"cause {code & 0xF}")
    return f"{source}: {cause}"


def field_value(register: str, field: str, value: int) -> int:
    """The value of ``field`` in a 32-bit ``value`` read from ``register``."""
    f = BY_NAME[register].field(field)
    return (value & f.mask) >> f.lsb


def with_field(register: str, field: str, value: int = 1, word: int = 0) -> int:
    """``word`` with ``field`` of ``register`` set to ``value`` (what to write)."""
    f = BY_NAME[register].field(field)
    if not 0 <= value < (1 << f.width):
        raise ValueError(f"{register}.{field} is {f.width} bits wide, not enough for {value}")
    return (word & ~f.mask) | (value << f.lsb)
