"""The command line: help, errors (one line, non-zero, nothing written), build outputs."""

import json
import pickle

import pytest
import torch
from click.testing import CliRunner

from groupnet_hw.cli import main
from groupnet_hw.models.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from conftest import random_model


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    model = random_model(4, image_size=8, stem_channels=3, stages=[[3, 1, 1], [4, 1, 2]], bases=2)
    save_checkpoint(path, model)
    return path


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_help_lists_subcommands():
    out = run("--help").output
    for cmd in ("train", "build", "verify"):
        assert cmd in out


def _assert_one_line_error(result, text):
    assert result.exit_code != 0
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and text in lines[0], result.output
    assert "Traceback" not in result.output


def test_missing_file(tmp_path):
    out = tmp_path / "out"
    _assert_one_line_error(run("build", tmp_path / "nope.pt", "-o", out), "no such file")
    assert not out.exists()


def test_corrupted_checkpoint(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"PK\x03\x04 definitely not a zip archive")
    out = tmp_path / "out"
    _assert_one_line_error(run("build", bad, "-o", out), "corrupted")
    assert not out.exists()


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_checkpoint_with_pickled_object_is_refused(tmp_path, tiny_ckpt):
    payload = torch.load(tiny_ckpt, weights_only=True)
    payload["metrics"] = {"x": Evil()}
    evil = tmp_path / "evil.pt"
    torch.save(payload, evil)
    out = tmp_path / "out"
    result = run("build", evil, "-o", out)
    _assert_one_line_error(result, "pickled")
    assert "pwned" not in result.output
    assert not out.exists()


def test_foreign_and_mismatched_checkpoints(tmp_path, tiny_ckpt):
    foreign = tmp_path / "foreign.pt"
    torch.save({"model": torch.zeros(3)}, foreign)
    with pytest.raises(CheckpointError, match="not a groupnet-hw checkpoint"):
        load_checkpoint(foreign)
    payload = torch.load(tiny_ckpt, weights_only=True)
    payload["config"]["bases"] = 3
    payload["config"]["dilations"] = [[1, 1, 1], [1, 1, 1]]
    wrong = tmp_path / "wrong.pt"
    torch.save(payload, wrong)
    with pytest.raises(CheckpointError, match="do not match"):
        load_checkpoint(wrong)


def test_unknown_board(tmp_path, tiny_ckpt):
    out = tmp_path / "out"
    _assert_one_line_error(run("build", tiny_ckpt, "--board", "nexys", "-o", out), "unknown board")
    assert not out.exists()


def test_build_writes_verilog_project_and_report(tmp_path, tiny_ckpt):
    out = tmp_path / "out"
    result = run("build", tiny_ckpt, "--board", "de10nano", "-o", out)
    assert result.exit_code == 0, result.output
    assert "module groupnet_core" in (out / "groupnet_core.v").read_text()
    assert "5CSEBA6U23I7" in next((out / "quartus").glob("*.qsf")).read_text()
    report = json.loads((out / "report.json").read_text())
    assert report["frame_cycles"] > 0 and report["frames_per_second"] > 0
    assert "cycles/frame" in (out / "report.txt").read_text()
    assert not list(tmp_path.glob(".groupnet-build-*"))  # no staging left behind


def test_build_line_buffers_option_recorded_and_verified(tmp_path, tiny_ckpt):
    """--line-buffers block on the ULX3S: every window in block RAM, recorded in
    build.json, and the artifact verifies bit-exact with the option it was built with."""
    out = tmp_path / "out"
    result = run("build", tiny_ckpt, "--board", "ulx3s", "--line-buffers", "block",
                 "--no-bitstream", "-o", out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    convs = [u["name"] for u in report["units"] if u["op"] in ("bin_conv", "int_conv")]
    assert report["block_line_buffers"] == convs
    assert json.loads((out / "build.json").read_text())["options"]["line_buffers"] == "block"
    assert "line buffers in block RAM" in (out / "report.txt").read_text()
    result = run("verify", out, "--sim", "amaranth", "--images", 2)
    assert result.exit_code == 0, result.output
    bad = run("build", tiny_ckpt, "--line-buffers", "bram", "-o", tmp_path / "bad")
    assert bad.exit_code != 0 and "bram" in bad.output
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow      # the recording of every option: test_build_line_buffers_option_...
def test_build_serial_line_buffers_verified(tmp_path, tiny_ckpt):
    """--line-buffers serial at a folding slow enough for it: the windows read a tap per
    cycle from one block-RAM memory each, some MVUs read them in place, report.txt says
    so, and the artifact verifies bit-exact on Verilator at the predicted cycles and
    latency."""
    out = tmp_path / "out"
    result = run("build", tiny_ckpt, "--board", "ulx3s", "--line-buffers", "serial",
                 "--target-cycles", "2048", "--no-bitstream", "-o", out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    serial = [u["name"] for u in report["units"] if u["line_ram"] == "serial"]
    assert serial and set(serial) <= set(report["block_line_buffers"])
    # the 4x4 stage's (time-shared) MVUs have the cycles to read their windows in place,
    # the 8x8 stage's copy them into their input buffers
    in_place = {u["name"]: u["in_place"] for u in report["units"] if u["line_ram"] == "serial"}
    assert True in in_place.values() and False in in_place.values()
    assert "serial, in place" in (out / "report.txt").read_text()
    assert f"{len(serial)} serial" in (out / "report.txt").read_text()
    result = run("verify", out, "--images", 4, "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.output[result.output.index("{"):])
    assert got["simulator"] == "verilator"
    assert got["exact"] == got["images"] == 4
    assert got["cycles_per_frame_measured"] == got["cycles_per_frame_predicted"]
    assert got["latency_measured"] == got["latency_predicted"] > 0
    assert got["latency_steady_measured"] == got["latency_steady_predicted"]


def test_build_fuse_activations_option_recorded_and_verified(tmp_path, tiny_ckpt):
    """By default thresholds (and post-ops where it pays) run in the MVU in front of
    them, and report.txt says where each went; --no-fuse-activations keeps every unit,
    is recorded in build.json, and that artifact verifies with the option it was built
    with."""
    out, plain = tmp_path / "out", tmp_path / "plain"
    assert run("build", tiny_ckpt, "--no-bitstream", "-o", out).exit_code == 0
    report = json.loads((out / "report.json").read_text())
    fused = [u["name"] for u in report["units"] if u["fused"]]
    # one MVU with an activation for every unit fused into one
    assert fused and sum(u["activation"] > 0 for u in report["units"]) == len(fused)
    text = (out / "report.txt").read_text()
    assert text.count("in the MVU") == len(fused) and "+ threshold" in text
    result = run("build", tiny_ckpt, "--no-fuse-activations", "--no-bitstream", "-o", plain)
    assert result.exit_code == 0, result.output
    report = json.loads((plain / "report.json").read_text())
    assert not any(u["fused"] or u["activation"] for u in report["units"])
    assert json.loads((plain / "build.json").read_text())["options"]["fuse_activations"] is False
    result = run("verify", plain, "--sim", "amaranth", "--images", 2)
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_build_streams_beats_recorded_and_verified(tmp_path, tiny_ckpt):
    """--streams beats at a slow frame interval sends the tensors between convolutions
    as beats (report.txt: "N beats"), is recorded in build.json, and that artifact
    verifies bit-exact with it; a bad choice is one line."""
    out = tmp_path / "out"
    result = run("build", tiny_ckpt, "--streams", "beats", "--target-cycles", 8192,
                 "--no-bitstream", "-o", out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    beats = [u for u in report["units"] if u["beats"] > 1]
    assert beats and {u["op"] for u in beats} >= {"bin_conv", "add"}
    assert " beats)" in (out / "report.txt").read_text()
    assert json.loads((out / "build.json").read_text())["options"]["streams"] == "beats"
    result = run("verify", out, "--sim", "amaranth", "--images", 2)
    assert result.exit_code == 0, result.output
    bad = run("build", tiny_ckpt, "--streams", "bits", "-o", tmp_path / "bad")
    assert bad.exit_code == 2 and "--streams" in bad.output


def test_verify_amaranth_with_user_images_and_json(tmp_path, tiny_ckpt):
    import numpy as np
    images = np.random.default_rng(0).integers(0, 256, (2, 8, 8), dtype=np.uint8)
    npy = tmp_path / "imgs.npy"
    np.save(npy, images)
    result = run("verify", tiny_ckpt, "--sim", "amaranth", "--input", npy, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{"):])
    assert summary["exact"] == 2 and summary["ok"]


def test_verify_rejects_wrong_image_shape(tmp_path, tiny_ckpt):
    import numpy as np
    npy = tmp_path / "bad.npy"
    np.save(npy, np.zeros((2, 5, 5), dtype=np.uint8))
    _assert_one_line_error(run("verify", tiny_ckpt, "--sim", "amaranth", "--input", npy),
                           "expected uint8 images")


def test_train_cli_writes_a_loadable_checkpoint(tmp_path):
    out = tmp_path / "m.pt"
    result = run("train", "-o", out, "--epochs", "1", "-K", "1", "--channels", "4,4,5",
                 "--variant", "gbd-v2", "--act-bits", "2")
    assert result.exit_code == 0, result.output
    assert "quantized test accuracy" in result.output
    model, payload = load_checkpoint(out)
    assert payload["config"]["bases"] == 1 and "quantized_accuracy" in payload["metrics"]
    assert payload["config"]["variant"] == "gbd-v2" and payload["config"]["act_bits"] == 2
    assert model.config.stages == [[4, 1, 1], [5, 1, 2]]


@pytest.mark.parametrize("args,message", [
    (["--variant", "groupnet3"], "variant = 'groupnet3' is not one of"),
    (["-K", "9"], "bases = 9 is out of range; allowed 1..8"),
    (["-K", "0"], "bases = 0 is out of range"),
    (["--act-bits", "3"], "act_bits = 3; allowed 1, 2 or 4"),
    (["--bpac"], "dilations[1][0] = 6: stage 1 works on 4x4 maps"),
    (["--dilations", "1,x"], "expected integers"),
    (["--dilations", "1,1;1"], "dilations[0] = [1, 1]; allowed one list of 5 rates"),
    (["--arch", "vgg"], "arch = 'vgg' is not in the zoo"),
    (["--channels", "4,4"], "--channels needs 3 values"),
])
def test_train_refuses_bad_family_options(tmp_path, args, message):
    out = tmp_path / "m.pt"
    _assert_one_line_error(run("train", "-o", out, *args), message)
    assert not out.exists()


def test_zoo_lists_topologies_and_variants():
    result = run("zoo")
    assert result.exit_code == 0
    for name in ("digits", "cifar", "resnet18", "resnet34", "lbd", "gbd-v1", "gbd-v2", "gbd-v3",
                 "groupnet", "groupnet-star"):
        assert f"  {name} " in result.output
