"""Time-shared bases (compiler.sharing): the merged graph computes what the side-by-side
graph computes, its accelerator is bit-exact in RTL under random input gaps and output
stalls, and its cycles per frame are the model's."""

import pytest
import torch

from groupnet_hw.compiler.execute import execute
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.compiler.sharing import base_groups, share_bases
from groupnet_hw.sim.verify import verify
from conftest import random_model

# Odd sizes: K = 2..3, channels not a multiple of anything, stride 2 with an option-A
# shortcut (3 -> 5 channels), n-bit activations, dilation, gates, RGB, a conv shortcut.
CONFIGS = [
    dict(bases=3, stages=[[4, 1, 1], [4, 1, 2]], stem_channels=4, image_size=6, num_classes=3),
    dict(bases=2, stages=[[3, 1, 1], [5, 1, 2]], stem_channels=3, image_size=7, num_classes=3),
    dict(variant="groupnet", bases=2, act_bits=2, stages=[[3, 1, 1], [5, 1, 2]],
         stem_channels=3, image_size=6, in_channels=3, num_classes=3, gate="block",
         shortcut="conv"),
    dict(variant="gbd-v3", bases=3, act_bits=1, stages=[[2, 1, 1], [3, 1, 1]],
         stem_channels=2, image_size=5, num_classes=2, dilations=[[2, 2, 2], [1, 1, 1]]),
    # layer-wise bases (a mixer per convolution), K = 4, RGB, conv shortcut
    dict(variant="lbd", bases=4, act_bits=1, stages=[[2, 2, 1], [2, 1, 2]], stem_channels=4,
         image_size=6, num_classes=3, in_channels=3, gate="base", shortcut="conv"),
    # 4-bit activations, K = 4, stride 2 with a conv shortcut
    dict(variant="gbd-v1", bases=4, act_bits=4, stages=[[5, 2, 1], [5, 1, 2]],
         stem_channels=3, image_size=7, num_classes=3, in_channels=3, shortcut="conv"),
]


def _images(index, cfg, n):
    gen = torch.Generator().manual_seed(50 + index)
    c, size = cfg.get("in_channels", 1), cfg["image_size"]
    return torch.randint(0, 256, (n, c, size, size), generator=gen, dtype=torch.uint8)


@pytest.mark.parametrize("index", range(len(CONFIGS)))
def test_shared_graph_computes_the_same(index):
    cfg = CONFIGS[index]
    g = compile_model(random_model(300 + index, **cfg))
    groups = base_groups(g)
    shared = share_bases(g)
    x = _images(index, cfg, 6)
    assert torch.equal(execute(g, x)[g.output], execute(shared, x)[shared.output])
    # every group merged: one chain per block, each convolution grouped K ways
    assert groups and not base_groups(shared)
    k = cfg["bases"]
    convs = [n for n in shared if n.op == "bin_conv"]
    # every base convolution grouped K ways (a conv shortcut outside the bases stays)
    assert any(n.attrs.get("groups", 1) == k for n in convs)
    assert all(n.attrs.get("groups", 1) in (1, k) for n in convs)
    assert sum(n.op == "bin_conv" for n in g) - len(convs) == (k - 1) * sum(
        n.attrs.get("groups", 1) == k for n in convs)
    assert len(shared) < len(g)
    assert g.nodes[0].name == shared.nodes[0].name   # the input graph is not modified
    assert len(base_groups(g)) == len(groups)


def test_sharing_needs_isomorphic_bases():
    # BPAC: bases with different dilations need different windows; the block whose
    # dilations agree is still shared
    g = compile_model(random_model(8, **dict(CONFIGS[0], dilations=[[1, 2, 3], [1, 1, 1]])))
    assert len(base_groups(g)) == 1
    shared = share_bases(g)
    assert sum(n.op == "bin_conv" for n in shared) == 3 * 2 + 2

    # K = 1: nothing to share; schedule(..., bases="shared") says so in one line
    g = compile_model(random_model(7, bases=1, stages=[[3, 1, 1]], stem_channels=3,
                                   image_size=5, num_classes=2))
    assert base_groups(g) == []
    with pytest.raises(ValueError, match="no blocks whose bases can be time-shared"):
        schedule(g, bases="shared", streams="pixels")
    with pytest.raises(ValueError, match="no time-shareable bases"):
        share_bases(g, mixers=["nonexistent"])


@pytest.mark.parametrize("index", range(len(CONFIGS)))
def test_time_shared_bit_exact_in_hardware(index):
    """Amaranth simulation of the whole time-shared accelerator, random gaps on the
    input and stalls on the output (FIFOs on the packed forks and joins)."""
    cfg = CONFIGS[index]
    model = random_model(300 + index, **cfg)
    sched = schedule(compile_model(model), bases="shared", streams="pixels")
    assert sched.base_mapping == "shared"
    result = verify(model, sched, _images(index, cfg, 3), simulator="amaranth", stall=0.3,
                    seed=index)
    assert result.graph_equals_model
    assert result.exact == result.images, result.first_mismatch


def test_time_shared_cycles_measured_equal_predicted():
    cfg = CONFIGS[1]
    model = random_model(301, **cfg)
    g = compile_model(model)
    shared = schedule(g, bases="shared", streams="pixels")
    parallel = schedule(g, bases="parallel", target_cycles=shared.frame_cycles, streams="pixels")
    result = verify(model, shared, _images(1, cfg, 4), simulator="amaranth")
    assert result.exact == result.images
    assert result.cycles_per_frame_measured == shared.frame_cycles
    # one grouped MVU per convolution instead of K: fewer units, and fewer LUTs at the
    # same frame interval
    assert len(shared.units) < len(parallel.units)
    assert shared.cells["lut"] < parallel.cells["lut"]


def _fits(s):
    return all(s.resources[k] <= int(v * s.max_util) for k, v in s.budget["limits"].items())


@pytest.mark.parametrize("board", ["de10nano", "icebreaker"])
def test_auto_picks_the_best_mix_of_mappings(board):
    """auto tries every mix of shared and side-by-side blocks (two blocks here: four
    mappings) and keeps the fastest that fits, or, if none fits, the least over."""
    from itertools import combinations
    g = compile_model(random_model(302, **CONFIGS[0]))
    auto = schedule(g, board, streams="pixels")
    groups = [grp.mixer for grp in base_groups(g)]
    mixes = [schedule(share_bases(g, c) if c else g, board, bases="parallel", streams="pixels")
             for n in range(len(groups) + 1) for c in combinations(groups, n)]
    assert len(mixes) == 4
    fitting = [s for s in mixes if _fits(s)]
    if fitting:     # de10nano
        assert _fits(auto)
        assert auto.frame_cycles == min(s.frame_cycles for s in fitting)
    else:           # icebreaker: nothing fits; the least over its tightest budget
        def over(s):
            return max(s.resources[k] / v for k, v in s.budget["limits"].items())
        assert over(auto) == min(over(s) for s in mixes)
        assert auto.time_shared()
    assert any("instead" in n for n in auto.notes)   # the runner-up is reported
