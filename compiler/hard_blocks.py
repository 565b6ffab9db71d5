"""What each FPGA family's synthesis does with a unit's memories and multipliers, as far
as the hardware the compiler chooses depends on it: which ROMs and line buffers Yosys
puts in block RAM and in how many blocks, and whose block RAM reads or DSP outputs
arrive too late to be used in the same cycle (the ops register them once more).

The ops decide their units by these rules (a weight ROM's read register, a line buffer
in block RAM, an integer MVU's product copies) and the resource model counts cells by
the same ones (:mod:`.resources` re-exports them); this module imports neither, so
neither imports the other for them.
"""

from __future__ import annotations

from ..devices import FAMILIES as DEVICE_FAMILIES

__all__ = ["LUT_ROM_MAX_DEPTH", "BRAM_ROM_COST", "LATE_BLOCK_READ", "LATE_DSP_OUTPUT",
           "BRAM_MODES", "BRAM_MIN_FILL", "rom_blocks", "block_ram_blocks", "rom_in_block_ram",
           "rom_read_register"]


#: Cyclone V: deepest weight ROM (an MVU's, ``rom_depth`` words) Yosys keeps in logic;
#: a deeper one takes an M10K (measured on single MVUs: M10K from 16 words).
LUT_ROM_MAX_DEPTH = {"cyclonev": 8}

#: ECP5 and iCE40: Yosys's ``memory_libmap`` puts a ROM in block RAM when that is
#: cheaper than logic, at 1/16 per bit of logic (its ``-logic-cost-rom``) against this
#: cost per block (``cost`` in its ``brams_16kd.txt``, ``brams.txt``). Measured on
#: single ROMs: ECP5 keeps 64x32, 32x72, 16x144 and 256x8 in logic and puts 64x36,
#: 128x17 and 256x9 in a DP16KD; iCE40 keeps 64x32 and 64x36, puts 128x16 in an
#: SB_RAM40_4K.
BRAM_ROM_COST = {"ecp5": 128, "ice40": 64}

#: Families whose block RAM read data arrives too late to meet the XNORs and popcount in
#: the same cycle: an MVU whose weight ROM is block RAM there registers the word once
#: more (:func:`rom_read_register`). ECP5: a DP16KD's clock-to-output is 5.6 ns of the
#: 10 ns period (nextpnr); Cyclone V and iCE40 have no place and route timing in our
#: flows, so their ROM reads stay as they were.
LATE_BLOCK_READ = ("ecp5",)

#: Families whose integer MVUs register their products once more in the fabric after
#: the DSP block's own output register (``hw.mvu``'s ``registered_products``). ECP5: the
#: first layer's multipliers spread along the DSP rows, and the route from a product
#: register to the adder tree took 5.7 of the CIFAR-size network's 10.4 ns critical
#: path (nextpnr); the other families have no place and route timing in our flows.
LATE_DSP_OUTPUT = ("ecp5",)

#: Block RAM aspect ratios per family: (width, depth) of one block
#: (:attr:`groupnet_hw.devices.Family.bram_modes`).
BRAM_MODES = {name: list(f.bram_modes) for name, f in DEVICE_FAMILIES.items()}


def rom_blocks(depth: int, width: int, family: str) -> int:
    """Block RAMs of a ``depth`` x ``width`` ROM in the family's best aspect ratio."""
    return min(-(-width // w) * -(-depth // d) for w, d in BRAM_MODES[family])


#: Least fill of its blocks (memory bits / block bits) at which Yosys puts a memory in
#: block RAM: Cyclone V's M10K rule has ``min efficiency 5`` (per cent); ECP5 and iCE40
#: map a memory marked ``ram_style = "block"`` whatever its fill.
BRAM_MIN_FILL = {"ecp5": 0.0, "ice40": 0.0, "cyclonev": 0.05}

def block_ram_blocks(depth: int, width: int, family: str) -> int | None:
    """Block RAMs of a ``depth`` x ``width`` memory with one read port (a line-buffer
    memory marked for block RAM, a FIFO), or ``None`` where Yosys would build it in
    logic instead (:data:`BRAM_MIN_FILL`)."""
    blocks = rom_blocks(depth, width, family)
    w, d = BRAM_MODES[family][0]
    if depth * width < BRAM_MIN_FILL[family] * blocks * w * d:
        return None
    return blocks


def rom_in_block_ram(depth: int, width: int, family: str) -> bool:
    """Whether Yosys builds a ``depth`` x ``width`` ROM in the family's block RAM
    (:data:`BRAM_ROM_COST`, :data:`LUT_ROM_MAX_DEPTH`)."""
    if family in BRAM_ROM_COST:
        return depth * width > 16 * BRAM_ROM_COST[family] * rom_blocks(depth, width, family)
    return depth > LUT_ROM_MAX_DEPTH[family]


def rom_read_register(depth: int, width: int, family: str) -> bool:
    """Whether an MVU's ``depth`` x ``width`` weight ROM gets a register after its read
    on this family (:data:`LATE_BLOCK_READ`; ``hw.mvu``'s ``registered_rom``)."""
    return family in LATE_BLOCK_READ and depth > 1 and rom_in_block_ram(depth, width, family)
