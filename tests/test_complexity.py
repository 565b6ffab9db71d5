"""The paper's complexity view (eq. 4, `groupnet-hw info`): ``models.complexity`` on the
traced library-layer graph."""

import json
import time

import pytest
import torch

from groupnet_hw.compiler.frontend import lower
from groupnet_hw.models import complexity as mc
from groupnet_hw.models.complexity import complexity, eq4_sigma
from groupnet_hw.models.groupnet import VARIANTS, GroupNet
from groupnet_hw.models.tracing import traced
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


# ---------------------------------------------------------------------------------------
# models.complexity: the same view on the traced library-layer graph (real shapes from a
# meta-device run), checked against counts derived here by hand from the topology.


def test_models_eq4_sigma_worked_example_and_both_forms():
    """Section 3.2: c_in = 256, 3x3, 28x28 maps, K = 5 gives 12.45x; the second line of
    eq. 4 (c_out cancelled) is the same number for any c_out."""
    for c_out in (1, 64, 256, 1000):
        sigma = mc.eq4_sigma(256, c_out, 3, 3, 28, 28, 28, 28, bases=5)
        assert round(sigma, 2) == 12.45
        second = 64 / 5 * (256 * 3 * 3 * 28 * 28) / (256 * 3 * 3 * 28 * 28 + 64 * 28 * 28)
        assert sigma == pytest.approx(second, rel=1e-12)
    # K = 1 and huge c_in tend to the word width; the word is a parameter
    assert 63 < mc.eq4_sigma(10**6, 1, 3, 3, 7, 7, 7, 7, bases=1) < 64
    assert mc.eq4_sigma(256, 256, 3, 3, 28, 28, 28, 28, 5, word=32) < sigma


def test_models_digits_k2_counts_by_hand():
    """digits, K=2, Group-Net: every row type appears; totals written out term by term."""
    c = mc.complexity(GroupNet(arch_config("digits", bases=2, variant="groupnet")))
    m0, m1 = 16 * 16 * 9 * 8 * 8, 16 * 16 * 9 * 4 * 4     # one binary conv, block 0 / 1
    assert c.binary_ops == 2 * 2 * m0 + 2 * 2 * m1 == 737_280
    fp = (16 * 9 * 64                  # stem conv MACs (no bias)
          + 16 * 64                    # stem BN
          + 2 * 5 * 16 * 64            # block 0, per base: 2 alphas, 2 BN, residual add
          + 2 * 16 * 64                # block 0 aggregation, 2 terms
          + 2 * 2 * 16 * 64            # block 1 gate, 2 terms for each of 2 bases, 8x8
          + 2 * 5 * 16 * 16            # block 1 bases at 4x4
          + 2 * 16 * 16                # block 1 aggregation
          + 16 * 16                    # global pooling sums
          + 16 * 10 + 10)              # classifier MACs and bias
    assert c.fp_ops == fp == 30_122
    bits = (32 * 16 * 9 + 32 * 2 * 16  # stem conv, stem BN
            + 8 * (16 * 16 * 9 + 32 * 16)  # 8 binary convs: 1-bit weights + alpha
            + 8 * 32 * 2 * 16          # their BNs
            + 2 * 32 * 2 + 32 * 2      # two aggregations (2 lambdas), one gate (2 thetas)
            + 32 * (16 * 10 + 10))     # classifier
    assert c.weight_bits == bits == 41_984
    # float counterpart: K = 1, the 4 binary convs as float32 convs, no alpha
    fbits = (32 * 16 * 9 + 32 * 32 + 4 * 32 * 16 * 16 * 9 + 4 * 32 * 32
             + 2 * 32 + 32 + 32 * 170)
    assert c.float_weight_bits == fbits == 310_176
    assert c.memory_saving == pytest.approx(fbits / bits)
    # sigma: 4 float convs over 8 binary ones plus their alpha scalings
    sigma = (2 * m0 + 2 * m1) / (4 * (m0 / 64 + 16 * 64) + 4 * (m1 / 64 + 16 * 16))
    assert c.sigma == pytest.approx(sigma, rel=1e-12)
    assert c.sigma == pytest.approx(mc.eq4_sigma(16, 16, 3, 3, 8, 8, 8, 8, 2), rel=1e-12)
    # c_in = 16, 3x3 everywhere: every position has the network's sigma
    assert [l.sigma for l in c.layers if l.kind == "BinaryConv2d"] == [pytest.approx(sigma)] * 8


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_models_every_call_and_parameter_counted_once(variant):
    """One row per library-layer call of the trace; the weight elements counted (without
    the derived alphas) are exactly the model's parameters; the model is left as it was."""
    model = GroupNet(arch_config("digits", variant=variant, bases=3, shortcut="conv",
                                 stages=[[16, 1, 1], [32, 1, 2]], stem_bias=True)).train()
    c = mc.complexity(model)
    calls = [n for n in traced(model).graph.nodes if n.op == "call_module"]
    assert [l.node for l in c.layers] == [n.name for n in calls]
    elements = 0
    for l in c.layers:
        if l.shared:
            assert l.weight_bits == 0
        elif l.kind == "BinaryConv2d":       # 1-bit weights, then one 32-bit alpha per channel
            elements += l.weight_bits - 32 * l.out_shape[0]
        else:
            elements += l.weight_bits // 32
    assert elements == sum(p.numel() for p in model.parameters())
    assert model.training and next(model.parameters()).device.type == "cpu"
    # binary ops agree with an independent count on the lowered integer graph
    g = lower(model)
    assert c.binary_ops == sum(n.attrs["bits"].numel() * n.height * n.width
                               for n in g if n.op == "bin_conv")
    d = json.loads(json.dumps(c.to_dict()))
    assert d["binary_ops"] == c.binary_ops and len(d["layers"]) == len(calls)
    table = c.table().splitlines()
    assert sum(1 for r in table if r.split() and r.split()[0] in {l.name for l in c.layers}) \
        == len(c.layers)
    assert table[len(c.layers) + 3].startswith("total")


def test_models_lbd_and_groupnet_binary_work():
    """With option-A shortcuts both put K binary convs at every layer position (eq. 1 vs
    eq. 7): same binary ops and sigma. With a binary 1x1 downsample, lbd keeps one
    residual path (one downsample, K = 1 there) while every Group-Net base has its own
    call of the shared downsample."""
    k = 3
    lbd = mc.complexity(GroupNet(arch_config("digits4", bases=k, variant="lbd")))
    gn = mc.complexity(GroupNet(arch_config("digits4", bases=k, variant="groupnet")))
    assert lbd.binary_ops == gn.binary_ops
    assert lbd.sigma == pytest.approx(gn.sigma)
    assert lbd.binary_weight_bits == gn.binary_weight_bits
    fields = dict(bases=k, shortcut="conv", stages=[[16, 1, 1], [32, 1, 2]])
    lbd = mc.complexity(GroupNet(arch_config("digits", variant="lbd", **fields)))
    gn = mc.complexity(GroupNet(arch_config("digits", variant="groupnet", **fields)))
    down = 16 * 32 * 1 * 4 * 4
    assert gn.binary_ops - lbd.binary_ops == (k - 1) * down
    assert {l.bases for l in lbd.layers if l.kind == "BinaryConv2d" and l.in_shape[0] == 16
            and l.out_shape[0] == 32 and l.binary_ops == down} == {1}
    assert {l.bases for l in gn.layers if l.kind == "BinaryConv2d"} == {k}


def _resnet_binary_macs(stages):
    """Binary-conv MACs of one base of an ImageNet ResNet (224 input, 56x56 after the
    stem): 3x3 convs, the first of stages 2-4 with stride 2, and a 1x1 downsample there."""
    macs, c_prev = 0, 64
    for s, ((ch, blocks), size) in enumerate(zip(stages, (56, 28, 14, 7))):
        macs += c_prev * ch * 9 * size * size + (2 * blocks - 1) * ch * ch * 9 * size * size
        if s:
            macs += c_prev * ch * size * size
        c_prev = ch
    return macs


def _resnet18_params():
    """torchvision ResNet-18's parameter count, from the layer shapes (11,689,512)."""
    p, c_prev = 3 * 64 * 49 + 2 * 64, 64
    for s, ch in enumerate((64, 128, 256, 512)):
        for b in range(2):
            cin = c_prev if b == 0 else ch
            p += cin * ch * 9 + ch * ch * 9 + 4 * ch + (cin * ch + 2 * ch if s and not b else 0)
        c_prev = ch
    return p + 512 * 1000 + 1000


def test_models_resnet18_k5_matches_its_layer_shapes():
    t = time.perf_counter()
    c = mc.complexity(arch_config("resnet18", bases=5))
    elapsed = time.perf_counter() - t
    macs = _resnet_binary_macs([(64, 2), (128, 2), (256, 2), (512, 2)])
    assert c.binary_ops == 5 * macs and c.float_binary_macs == macs
    assert _resnet18_params() == 11_689_512
    # the float counterpart is float ResNet-18 plus one lambda and one gate per block
    # (8 aggregations, 7 gates)
    assert c.float_weight_bits == 32 * (11_689_512 + 15)
    assert c.layers[1].fp_ops == 3 * 64 * 49 * 112 * 112      # 7x7/2 stem conv MACs
    # between the 1x1 downsample of 64 channels (6.4x) and 3x3 layers (< 64/5)
    assert 11 < c.sigma < 64 / 5
    assert 4 < c.memory_saving < 32 / 5
    assert elapsed < 10, elapsed


def test_models_resnet34_fast_on_meta():
    """ResNet-34 at 224, K = 5 and 8: shapes from a meta run, nothing computed."""
    for k in (5, 8):
        t = time.perf_counter()
        c = mc.complexity(arch_config("resnet34", bases=k))
        elapsed = time.perf_counter() - t
        assert c.binary_ops == k * _resnet_binary_macs([(64, 3), (128, 4), (256, 6), (512, 3)])
        assert elapsed < 10, elapsed


def test_models_real_and_meta_models_agree():
    """A model with real weights gives the same view as its config built on meta."""
    cfg = arch_config("cifar-small", bases=2, variant="groupnet-star", act_bits=2)
    real = mc.complexity(GroupNet(cfg)).to_dict()
    assert real == mc.complexity(cfg).to_dict()
    # 2-bit activations: a word holds 32 MACs
    row = next(l for l in real["layers"] if l["kind"] == "BinaryConv2d")
    assert row["sigma"] == pytest.approx(mc.eq4_sigma(16, 16, 3, 3, 32, 32, 32, 32, 2, word=32))
