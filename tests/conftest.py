import pytest
import torch

from groupnet_hw.models.groupnet import GroupNet, GroupNetConfig, randomize_eval_state


randomize_bn = randomize_eval_state


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
