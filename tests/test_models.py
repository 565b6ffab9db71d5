"""Binary ops, gradients and the soft gate of eq. 7 (verification level 1)."""

import pytest
import torch

from groupnet_hw.models.binary import BinarizeWeight, SignActivation, sign
from groupnet_hw.models.layers import BinaryConv2d, NBitActivation, SoftGate
from groupnet_hw.models.quantize import round_shift
from conftest import random_images, random_model


def test_sign_of_zero_is_plus_one():
    x = torch.tensor([-2.0, -0.0, 0.0, 1e-9, 3.0])
    assert torch.equal(sign(x), torch.tensor([-1.0, 1.0, 1.0, 1.0, 1.0]))
    assert torch.equal(SignActivation.apply(torch.zeros(3)), torch.ones(3))


def test_sign_keeps_the_dtype():
    for dtype in (torch.float32, torch.float64):
        x = torch.tensor([-2.5, -0.0, 0.0, 1e-30, -1e-30], dtype=dtype)
        y = sign(x)
        assert y.dtype == dtype and torch.equal(y, torch.tensor([-1, 1, 1, 1, -1], dtype=dtype))


def test_the_sample_photos_are_scikit_learns():
    """The built-in photo datasets read scikit-learn's sample photos from its folder
    (without importing it): the same arrays as its own loader."""
    import numpy as np
    from sklearn.datasets import load_sample_images
    from groupnet_hw.models.data import _photos
    ours, theirs = _photos(), load_sample_images().images
    assert len(ours) == len(theirs) == 2
    assert all(a.dtype == np.uint8 and np.array_equal(a, b) for a, b in zip(ours, theirs))


def test_activation_backward_is_the_piecewise_polynomial():
    x = torch.tensor([-1.5, -1.0, -0.5, 0.0, 0.25, 0.75, 1.0, 2.0], requires_grad=True)
    SignActivation.apply(x).sum().backward()
    expected = torch.tensor([0.0, 0.0, 1.0, 2.0, 1.5, 0.5, 0.0, 0.0])
    assert torch.equal(x.grad, expected.to(x.grad.dtype))


def test_weight_ste_passes_gradient_and_scales_by_mean_abs():
    w = torch.tensor([[[[0.5, -0.25], [0.0, -1.0]]]], requires_grad=True)
    out = BinarizeWeight.apply(w)
    assert torch.equal(out, torch.tensor([[[[0.4375, -0.4375], [0.4375, -0.4375]]]]))
    g = torch.arange(4.0).view_as(w)
    out.backward(g)
    assert torch.equal(w.grad, g)


def test_binary_conv_pads_with_plus_one():
    conv = BinaryConv2d(1, 1, 3)
    conv.weight.data.fill_(1.0)  # alpha = 1, all +1 weights: output = sum of 9 taps
    x = -torch.ones(1, 1, 3, 3)
    y = conv(x)
    # corner: 4 real taps of -1 and 5 padded +1 taps
    assert y[0, 0, 0, 0].item() == 1.0
    assert y[0, 0, 1, 1].item() == -9.0


def _gate_inputs(model, images):
    """(gate inputs G_i, aggregate, gate outputs) of the second block's gate."""
    q = model.forward_quantized(images, keep_trace=True)
    gate = next(n for n in q.trace if n.startswith("blocks_1_gate"))
    agg = next(n for n in q.trace if n.startswith("blocks_0_aggregate"))
    outs = [q.trace[n] for n in q.trace if n.startswith("blocks_0_bases_") and
            n.endswith("add2")]
    return outs, q.trace[agg], q.trace[gate]


def test_soft_gate_limits_of_eq7():
    """C = 0 gives the aggregate (eq. 2, blocks independent); C = 1 the base's own output (eq. 3)."""
    model = random_model(3, image_size=6, stem_channels=3, stages=[[3, 2, 1]], bases=3,
                         num_classes=4)
    images = random_images(3, 4, 6)
    for theta, check in ((-1e4, "agg"), (1e4, "own")):
        model.blocks[1].gate.theta.data.fill_(theta)
        outs, agg, gated = _gate_inputs(model, images)
        for i in range(3):
            want = agg if check == "agg" else outs[i]
            assert torch.equal(gated[i].value, want.value)
    # float model: same limits through the sigmoid
    gate = SoftGate(2)
    x = torch.randn(2, 3, 6, 6)
    g = [torch.randn(2, 3, 6, 6) for _ in range(2)]
    for theta, want in ((-1e4, [x, x]), (1e4, g)):
        gate.theta.data.fill_(theta)
        got = gate(g, x)
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_nbit_activation_levels_match_the_appendix_quantizer():
    """Float forward: round(clip(y, 0, beta) * L/beta) * beta/L; fixed forward: the level."""
    act = NBitActivation(2, 1.5)
    y = torch.tensor([-1.0, 0.0, 0.2, 0.25, 0.26, 0.74, 0.76, 1.2, 1.5, 9.0])
    assert torch.equal(act(y), torch.tensor([0, 0, 0, 0.5, 0.5, 0.5, 1.0, 1.0, 1.5, 1.5]))
    from groupnet_hw.models.fixed import Fixed
    frac = 8
    q = act.forward_fixed(Fixed(torch.round(y * 2 ** frac).long(), "fixed", frac=frac))
    assert q.value.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    assert torch.equal(q.value * act.step, act(y).double())
    # straight-through gradient inside the clip range, none outside it
    y = y.clone().requires_grad_()
    act(y).sum().backward()
    assert y.grad.tolist() == [0, 1, 1, 1, 1, 1, 1, 1, 1, 0]


def test_round_shift_rounds_half_up():
    v = torch.tensor([-6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 5, 6])
    assert round_shift(v, 2).tolist() == [-1, -1, -1, -1, 0, 0, 0, 0, 1, 1, 1, 2]
    assert torch.equal(round_shift(v, 0), v)


@pytest.mark.slow       # trains the default model for minutes; shared with the slow RTL runs
def test_float_and_quantized_agree_on_trained_model(trained_digits):
    _, model, metrics = trained_digits
    # reported, never hidden: the fixed-point network is close to the float one
    assert metrics["float_quantized_agreement"] >= 0.9


def test_loading_a_checkpoint_does_not_import_dynamo(tmp_path):
    """The checkpoint's meta-device skeleton runs no Python meta kernel: importing
    ``torch._dynamo`` for one cost a full-size import 1.4 s."""
    import subprocess
    import sys
    from groupnet_hw.models.checkpoint import save_checkpoint
    from groupnet_hw.models.groupnet import GroupNet
    from groupnet_hw.models.zoo import arch_config
    save_checkpoint(tmp_path / "m.pt", GroupNet(arch_config("resnet18", bases=2,
                                                            image_size=32)).eval())
    code = ("import sys\n"
            "from groupnet_hw.models.checkpoint import load_checkpoint\n"
            f"load_checkpoint({str(tmp_path / 'm.pt')!r})\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
