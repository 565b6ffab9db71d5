"""FIFOs in block RAM (``schedule(..., fifos=)``, ``build --fifos``): a join FIFO's
memory marked for block RAM behaves and times exactly as the flow's own mapping, the
estimate counts its blocks, and where ECP5's distributed RAM runs out the schedule moves
the FIFOs that free the most of it per block to block RAM: the CIFAR-size K=1 network
fits the ULX3S that way."""

import pytest
import torch

from groupnet_hw.compiler.graph import Graph
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.resources import rom_blocks, stream_fifo_features
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config
from groupnet_hw.sim.verify import verify
from test_latency import assert_exact_and_timed
from test_line_buffers import _case


@pytest.mark.parametrize("index", [pytest.param(0, marks=pytest.mark.slow), 2])
def test_block_ram_fifos_bit_exact_at_the_same_cycles(index):
    """Every join FIFO marked for block RAM: counted as DP16KD blocks, its read
    registered, and the accelerator is bit-exact under stalls at the cycles of the
    unmarked one and at the predicted latency."""
    model, g, size, images = _case(index, 70 + index)
    marked = schedule(g, "ulx3s", fifos="block", bases="parallel", streams="pixels")
    plain = schedule(g, "ulx3s", bases="parallel", target_cycles=marked.frame_cycles, streams="pixels")
    refs = [(c, r) for c, rs in marked.fifos.items() for r in rs]
    assert refs and all(marked.fifo_ram(c, r) == "block" for c, r in refs)
    assert not plain.fifo_rams
    blocks = sum(rom_blocks(marked.fifos[c][r] - 1,
                            stream_fifo_features(g, g[Graph.source(r)], 2)["fifo_width"],
                            "ecp5") for c, r in refs)
    units = sum(u.resources.get("bram", 0) for u in marked.units.values())
    assert marked.resources["ebr"] == units + blocks
    assert marked.resources["lutram"] < plain.resources["lutram"]
    # ECP5's block RAM reads late: every such FIFO registers its output, one cycle later,
    # and the predicted latency counts it
    for consumer, refs in marked.fifos.items():
        node = marked.graph[consumer]
        assert {node.inputs[s] for s in marked.units[consumer].registered_fifos} == set(refs)
    assert marked.frame_cycles == plain.frame_cycles
    assert_exact_and_timed(model, marked, images, index)


def test_cifar_k1_fits_the_ulx3s_with_a_skip_fifo_in_block_ram():
    """With the FIFOs as the flow maps them the skip FIFOs' distributed RAM alone is over
    90 % of ECP5's at any folding; moving the one that frees the most per block fits."""
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    model = randomize_eval_state(GroupNet(arch_config("cifar", bases=1)), gen).eval()
    g = compile_model(model)
    sched = schedule(g, "ulx3s", line_buffers="serial", streams="pixels")
    assert sched.fits() and sched.fifo_rams
    limits = sched.budget["limits"]
    assert sched.resources["lutram"] <= int(limits["lutram"] * sched.max_util)
    kept = schedule(g, "ulx3s", line_buffers="serial", target_cycles=sched.frame_cycles,
                    fifos="auto", streams="pixels")
    assert kept.fifo_rams == sched.fifo_rams
    # every FIFO in block RAM is more than the board has
    every = schedule(g, "ulx3s", line_buffers="serial", target_cycles=sched.frame_cycles,
                     fifos="block", streams="pixels")
    assert every.resources["ebr"] > int(limits["ebr"] * sched.max_util)
