"""Line buffers in block RAM (``schedule(..., line_buffers=)``, ``build --line-buffers``):
the accelerator with block-RAM line buffers is bit-exact under input gaps and output
stalls at the cycles of the logic ones; the schedule puts a line buffer in block RAM
only where the family's block RAM takes it and counts its blocks exactly; ``auto``
keeps the better of the two."""

import pytest
import torch

from groupnet_hw.compiler import resources as R
from groupnet_hw.compiler.cycles import window_refill
from groupnet_hw.compiler.ops import op_of
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.sim.verify import verify
from conftest import random_model, verify_on_verilator

# Odd sizes: K = 2 with dilation 2, stride 2, channels not a power of two; K = 1 with
# 4-bit activations (n-bit line buffers); a conv shortcut with RGB input.
CONFIGS = [
    dict(bases=2, stages=[[3, 1, 1], [5, 1, 2]], stem_channels=3, image_size=7, num_classes=3,
         dilations=[[1, 2], [1, 1]]),
    dict(bases=1, act_bits=4, stages=[[4, 1, 2]], stem_channels=4, image_size=6, num_classes=3),
    dict(variant="groupnet", bases=2, act_bits=2, stages=[[3, 1, 1], [5, 1, 2]],
         stem_channels=3, image_size=6, in_channels=3, num_classes=3, shortcut="conv"),
]


def _case(index, image_seed):
    """Model, graph, image side and three random images (seeded ``image_seed``) of
    ``CONFIGS[index]``."""
    cfg = CONFIGS[index]
    model = random_model(400 + index, **cfg)
    c, size = cfg.get("in_channels", 1), cfg["image_size"]
    gen = torch.Generator().manual_seed(image_seed)
    images = torch.randint(0, 256, (3, c, size, size), generator=gen, dtype=torch.uint8)
    return model, compile_model(model), size, images


def _tier(fast):
    """Parametrize ``index`` over the configurations, the ones in ``fast`` in the default
    tier and the others in the slow tier: across the three line-buffer tests each
    configuration is in the default tier once."""
    return [pytest.param(i, marks=() if i in fast else pytest.mark.slow)
            for i in range(len(CONFIGS))]


@pytest.mark.parametrize("index", _tier({0}))
def test_block_line_buffers_bit_exact_at_the_same_cycles(index):
    model, g, _, images = _case(index, 60 + index)
    block = schedule(g, "ulx3s", line_buffers="block", bases="parallel", streams="pixels")
    logic = schedule(g, "ulx3s", line_buffers="logic", bases="parallel",
                     target_cycles=block.frame_cycles, streams="pixels")
    convs = [u.name for u in block.units.values() if u.op in ("bin_conv", "int_conv")]
    assert block.block_line_buffers() == convs         # ECP5 takes every one
    assert logic.block_line_buffers() == []
    result = verify(model, block, images, simulator="amaranth", stall=0.3, seed=index)
    assert result.graph_equals_model
    assert result.exact == result.images, result.first_mismatch
    paced = verify(model, block, images, simulator="amaranth")
    assert paced.exact == paced.images
    assert paced.cycles_per_frame_measured == block.frame_cycles == logic.frame_cycles
    logic_run = verify(model, logic, images, simulator="amaranth")
    assert logic_run.exact == logic_run.images
    assert logic_run.cycles_per_frame_measured == paced.cycles_per_frame_measured


# slow tier: the default tier runs in-place MVUs in folded networks through
# test_latency's serial windows at 64 cycles a pixel (latency) and test_cli's serial
# build (bit-exact on Verilator)
@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 2])
def test_in_place_mvus_bit_exact_at_the_predicted_cycles(index):
    """Folded to 64 cycles a pixel, the serial windows' MVUs that have the cycles to spare
    read the window's register in place (taking it with their last step, no input
    buffer, the window refilled after) and the others copy it: no cycle lost against
    the same folding with one memory per row, fewer flip-flops, and bit-exact under
    stalls at the predicted frame interval."""
    model, g, size, images = _case(index, 80 + index)
    target = 64 * size * size
    sched = schedule(g, "ulx3s", line_buffers="serial", bases="parallel", target_cycles=target, streams="pixels")
    block = schedule(g, "ulx3s", line_buffers="block", bases="parallel", target_cycles=target, streams="pixels")
    in_place = [u for u in sched.units.values() if u.in_place]
    assert in_place and all(u.line_ram == "serial" for u in in_place)
    assert sched.frame_cycles == block.frame_cycles
    assert sum(u.resources["ff"] for u in in_place) < \
        sum(block.units[u.name].resources["ff"] for u in in_place)
    result = verify(model, sched, images, simulator="amaranth", stall=0.3, seed=index)
    assert result.exact == result.images, result.first_mismatch
    paced = verify(model, sched, images, simulator="amaranth")
    assert paced.exact == paced.images
    assert paced.cycles_per_frame_measured == sched.frame_cycles


@pytest.mark.parametrize("index", _tier({1}))
def test_serial_line_buffers_bit_exact_at_the_predicted_cycles(index):
    """Folded to 16 cycles a pixel, every window whose MVU leaves it the cycles to read
    its taps one by one gets a serial line buffer (on ECP5 all; on Cyclone V those that
    fill an M10K as one memory); bit-exact under input gaps and output stalls, at the
    predicted frame interval."""
    model, g, size, images = _case(index, 70 + index)
    target = 16 * size * size
    for board in ("ulx3s", "de10nano"):
        sched = schedule(g, board, line_buffers="serial", bases="parallel", target_cycles=target, streams="pixels")
        serial = [u for u in sched.units.values() if u.line_ram == "serial"]
        assert serial or board == "de10nano"
        for u in serial:
            node = g[u.name]
            assert op_of(node).vector_steps(node, u) >= window_refill("serial", node.attrs["kernel"])
        result = verify(model, sched, images, simulator="amaranth", stall=0.3, seed=index)
        assert result.exact == result.images, result.first_mismatch
        paced = verify(model, sched, images, simulator="amaranth")
        assert paced.exact == paced.images
        assert paced.cycles_per_frame_measured == sched.frame_cycles <= target


def test_cyclone_v_takes_only_line_buffers_that_fill_an_m10k():
    """M10K needs a 5 % fill: never an 8-pixel row; 32-pixel rows of 16 bits do."""
    digits = compile_model(random_model(410, bases=2, stages=[[16, 1, 1]], stem_channels=16))
    assert schedule(digits, "de10nano", line_buffers="block", streams="pixels").block_line_buffers() == []
    wide = compile_model(random_model(411, bases=1, image_size=32, stem_channels=16,
                                      stages=[[16, 1, 1], [16, 1, 2]]))
    sched = schedule(wide, "de10nano", line_buffers="block", bases="parallel", streams="pixels")
    chosen = set(sched.block_line_buffers())
    taken = set()
    for node in wide:
        memory = op_of(node).line_memory(node, wide.producer(node.inputs[0])) \
            if node.inputs else None
        if memory and R.block_ram_blocks(memory[0], memory[1], "cyclonev") is not None:
            taken.add(node.name)
    assert chosen == taken
    # 32-pixel rows of 16 binary channels (512 bits: 5 % of an M10K) are taken; the
    # 16-pixel rows after the stride-2 convolution and the stem's 8-bit pixels are not
    convs = {u.name for u in sched.units.values() if u.op in ("bin_conv", "int_conv")}
    assert taken and convs - taken
    assert wide["blocks_1_bases_0_layer2_conv"].name not in taken


@pytest.mark.parametrize("mode, target, kinds", [("block", 1024, {"block"}),
                                                 ("serial", 256, {"block", "serial"}),
                                                 ("serial", 1024, {"serial"})])
def test_block_line_buffer_estimate_counts_its_blocks(mode, target, kinds):
    """A memory per ring row and window column, or (``serial``) one memory where the
    MVU takes a window at most every 11 cycles (at 256 cycles/frame the 4x4 stage's,
    16 cycles a pixel, not the 8x8 stage's, 4): either way its blocks are counted, and
    it costs less distributed RAM than the logic line buffer, and all of them fewer LUT
    sites. Per unit a serial memory costs fewer LUT sites; a memory per ring row and
    column about as many (within 1 %: its tap multiplexers, 1.17 LUTs a bit in the ECP5
    fit since the ROMs are mapped by Yosys's rule, against the logic buffer's LUTs and
    DPR16X4 sites)."""
    g = compile_model(random_model(412, bases=2, stages=[[16, 1, 1], [16, 1, 2]],
                                   stem_channels=16))
    block = schedule(g, "ulx3s", line_buffers=mode, bases="parallel", target_cycles=target, streams="pixels")
    logic = schedule(g, "ulx3s", line_buffers="logic", bases="parallel", target_cycles=target, streams="pixels")
    assert {block.units[n].line_ram for n in block.block_line_buffers()} == kinds
    for name in block.block_line_buffers():
        node = g[name]
        depth, width, copies = op_of(node).line_memory(node, g.producer(node.inputs[0]),
                                                       block.units[name].line_ram)
        features = op_of(node).resource_features(g, node, g.producer(node.inputs[0]),
                                                 block.units[name])
        assert R.family_features(features, "ecp5")["line_blocks"] == \
            copies * R.rom_blocks(depth, width, "ecp5")
        assert block.units[name].resources["bram"] >= copies
        # less distributed RAM and fewer LUT sites than the logic line buffer (on ECP5 the
        # registers are about even: the block RAM's window register against the logic
        # memory's read registers)
        assert block.units[name].resources["lutram"] < logic.units[name].resources["lutram"]
        sites = R.logic_sites(block.units[name].resources, "ecp5")
        logic_sites = R.logic_sites(logic.units[name].resources, "ecp5")
        if block.units[name].line_ram == "serial":
            assert sites < logic_sites
        else:
            assert sites <= logic_sites * 1.01
    names = block.block_line_buffers()
    assert sum(R.logic_sites(block.units[n].resources, "ecp5") for n in names) < \
        sum(R.logic_sites(logic.units[n].resources, "ecp5") for n in names)


def test_auto_keeps_the_better_and_reports_the_other():
    g = compile_model(random_model(413, bases=2, stages=[[16, 1, 1], [16, 1, 2]],
                                   stem_channels=16))
    auto = schedule(g, "ulx3s", streams="pixels")
    both = [schedule(g, "ulx3s", line_buffers=m, streams="pixels") for m in ("logic", "block")]
    assert auto.frame_cycles == min(s.frame_cycles for s in both if s.fits())
    assert any(n.startswith("line buffers in ") for n in auto.notes)
    with pytest.raises(ValueError, match="line_buffers must be one of"):
        schedule(g, "ulx3s", line_buffers="bram", streams="pixels")


def test_auto_reports_each_other_design_once():
    """On Cyclone V the 8-pixel digits rows fit no M10K one per row: the ``block`` mode is
    the logic design again, and is not reported as a second alternative."""
    g = compile_model(random_model(414, bases=2, stages=[[16, 1, 1], [16, 1, 2]],
                                   stem_channels=16))
    assert schedule(g, "de10nano", line_buffers="block", streams="pixels").block_line_buffers() == []
    auto = schedule(g, "de10nano", target_cycles=1024, streams="pixels")
    others = [n.split(":")[0] for n in auto.notes if n.startswith("line buffers in ")]
    assert len(others) == len(set(others)) == 1, auto.notes


@pytest.mark.slow
def test_cifar_size_k1_in_m10k_verifies_on_verilator(tmp_path):
    """The CIFAR-size network (K = 1) fits the DE10-Nano's 90 % only with its line
    buffers in M10K (6,656 cycles per frame, serial windows and MVUs reading them in
    place where the folding leaves the cycles); in that mapping it is bit-exact on
    Verilator, with and without stalls, at the predicted cycles per frame."""
    from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
    from groupnet_hw.models.zoo import arch_config
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    model = randomize_eval_state(GroupNet(arch_config("cifar", bases=1)), gen).eval()
    g = compile_model(model)
    sched = schedule(g, "de10nano", streams="pixels")
    assert sched.fits() and sched.block_line_buffers()
    assert any(u.line_ram == "serial" for u in sched.units.values())
    assert not schedule(g, "de10nano", line_buffers="logic", streams="pixels").fits()
    images = torch.randint(0, 256, (6, 3, 32, 32), generator=gen, dtype=torch.uint8)
    verify_on_verilator(model, sched, images, tmp_path, stalled=3)
