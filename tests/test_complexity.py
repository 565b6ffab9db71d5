"""The paper's complexity view (eq. 4) and `groupnet-hw info`."""

import pytest
import torch

from groupnet_hw.compiler.complexity import complexity, eq4_sigma
from groupnet_hw.models.groupnet import GroupNet
from groupnet_hw.models.zoo import arch_config


def test_paper_worked_example_gives_12_45():
    """c_in = 256, 3x3, 28x28 maps, K = 5 (section 3.2): 12.45x, both forms of eq. 4."""
    sigma = eq4_sigma(256, 256, 3, 3, 28, 28, 28, 28, bases=5)
    assert round(sigma, 2) == 12.45
    second_form = 64 / 5 * (256 * 9 * 784) / (256 * 9 * 784 + 64 * 784)
    assert sigma == pytest.approx(second_form, rel=1e-12)


def test_digits_counts_by_hand():
    model = GroupNet(arch_config("digits", bases=2))
    c = complexity(model)
    # 2 blocks x 2 bases x 2 convs, 16->16 channels, 3x3: block 0 at 8x8, block 1 at 4x4
    binary = 2 * (16 * 16 * 9 * 64 + 16 * 16 * 9 * 64) + 2 * (16 * 16 * 9 * 16 * 2)
    assert c.binary_ops == binary
    assert c.weight_bits >= 8 * 16 * 16 * 9            # at least the binary weights
    stem_macs, fc_macs = 16 * 9 * 64, 10 * 16
    assert c.fp_ops > stem_macs + fc_macs
    assert 1 < c.sigma < 64 / 2
    assert c.memory_saving > 1
    assert "total" in c.table() and c.to_dict()["binary_ops"] == binary


def test_lbd_and_groupnet_have_the_same_binary_work():
    """K binary convs per layer position either way (eq. 1 vs eq. 7)."""
    a = complexity(GroupNet(arch_config("digits", bases=3, variant="lbd")))
    b = complexity(GroupNet(arch_config("digits", bases=3, variant="groupnet")))
    assert a.binary_ops == b.binary_ops and a.sigma == pytest.approx(b.sigma)


def test_resnet18_binary_ops_match_its_layer_shapes():
    with torch.device("meta"):
        pass
    model = GroupNet(arch_config("resnet18", bases=5, variant="groupnet-star", gate="block"))
    c = complexity(model)
    # per stage: channels, output size; block 0 of stages 2-4 has a stride-2 conv1 and a
    # 1x1 downsample, every other conv is 3x3 stride 1
    expect = 0
    for s, (ch, size) in enumerate([(64, 56), (128, 28), (256, 14), (512, 7)]):
        c_prev = 64 if s == 0 else ch // 2
        expect += c_prev * ch * 9 * size * size + 3 * ch * ch * 9 * size * size
        if s:
            expect += c_prev * ch * size * size
    assert c.binary_ops == 5 * expect
    assert 5 < c.sigma < 64 / 5
