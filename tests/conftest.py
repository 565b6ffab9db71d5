import pytest
import torch

from groupnet_hw.models.groupnet import GroupNet, GroupNetConfig
from groupnet_hw.models.layers import Aggregation, SoftGate


def randomize_bn(model, gen, zero_gamma=False):
    """Non-trivial eval statistics, with negative (and optionally zero) gammas."""
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            c = mod.num_features
            mod.running_mean.copy_(torch.rand(c, generator=gen) * 4 - 2)
            mod.running_var.copy_(torch.rand(c, generator=gen) * 2 + 0.25)
            mod.weight.data.copy_(torch.rand(c, generator=gen) * 3 - 1.5)
            mod.bias.data.copy_(torch.rand(c, generator=gen) * 2 - 1)
            if zero_gamma:
                mod.weight.data[0] = 0.0
    for mod in model.modules():
        if isinstance(mod, Aggregation) and mod.lambdas.requires_grad:
            mod.lambdas.data.copy_(torch.rand(len(mod.lambdas), generator=gen) * 2 - 0.5)
        elif isinstance(mod, SoftGate):
            mod.theta.data.copy_(torch.randn(len(mod.theta), generator=gen) * 2)
    return model


def random_model(seed, **overrides):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = GroupNet(GroupNetConfig(**overrides))
    return randomize_bn(model, gen, zero_gamma=seed % 2 == 0).eval()


def random_images(seed, n, size):
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.randint(0, 256, (n, size, size), generator=gen, dtype=torch.uint8)


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory):
    """A K=5 digits model trained briefly (the accuracy bar is tested in the slow tier)."""
    from groupnet_hw.models.checkpoint import save_checkpoint
    from groupnet_hw.models.train import TrainConfig, train_digits
    torch.set_num_threads(2)
    model, metrics = train_digits(GroupNetConfig(), TrainConfig(epochs=6, seed=0))
    path = tmp_path_factory.mktemp("ckpt") / "digits.pt"
    save_checkpoint(path, model, metrics=metrics)
    return path, model.eval(), metrics
