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


def verify_on_verilator(model, sched, images, tmp_path, stalled):
    """Build ``sched``'s accelerator with Verilator and check it bit-exact on ``images``
    at the predicted cycles per frame, then on the first ``stalled`` of them under random
    input gaps and output stalls."""
    from amaranth.back import verilog

    from groupnet_hw.hw.accelerator import Accelerator
    from groupnet_hw.sim.verify import RTLDesign, port_widths, verify
    acc = Accelerator(sched)
    path = tmp_path / "top.v"
    path.write_text(verilog.convert(acc, name="top"))
    design = RTLDesign(path, "top", *port_widths(acc))
    result = verify(model, sched, images, simulator="verilator", design=design,
                    build_dir=str(tmp_path / "build"))
    assert result.exact == len(images), result.first_mismatch
    assert result.cycles_per_frame_measured == sched.frame_cycles
    stalls = verify(model, sched, images[:stalled], simulator="verilator", design=design,
                    build_dir=str(tmp_path / "build"), stall=0.3, seed=1)
    assert stalls.exact == stalled, stalls.first_mismatch
