"""Real synthesis from the CLI (`groupnet-hw synth`): YoWASP Yosys, nextpnr."""

import json

import pytest
from click.testing import CliRunner

from groupnet_hw.cli import main
from groupnet_hw.hw.synth import FLOWS, SynthError, synthesize
from groupnet_hw.models.checkpoint import save_checkpoint
from conftest import random_model


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    ckpt = root / "tiny.pt"
    save_checkpoint(ckpt, random_model(7, image_size=5, stem_channels=2, stages=[[2, 1, 1]],
                                       bases=1, num_classes=2))
    out = root / "out"
    r = CliRunner().invoke(main, ["build", str(ckpt), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("flow", list(FLOWS))
def test_synthesis_counts_every_flow(tiny_build, flow):
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", flow, "--no-pnr"])
    assert r.exit_code == 0, r.output
    report = json.loads((tiny_build / "report.json").read_text())
    cells = report["synthesis"][flow]["cells"]
    assert cells["lut"] > 50 and cells["ff"] > 20     # a real netlist, not an empty one
    estimate = report["synthesis"][flow]["estimate"]  # the estimate stays beside it
    assert estimate["lut"] > 0 and set(cells) >= {"lut", "ff", "dsp"}
    assert (tiny_build / f"synth-{flow}" / "netlist.json").is_file()


def test_synth_refuses_what_is_not_a_build(tmp_path):
    r = CliRunner().invoke(main, ["synth", str(tmp_path)])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "build.json" in r.output
    with pytest.raises(SynthError, match="unknown flow"):
        synthesize(tmp_path / "x.v", "top", "virtex", tmp_path)


@pytest.mark.slow
def test_ecp5_place_and_route_reports_fmax(tiny_build):
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", "ecp5"])
    assert r.exit_code == 0, r.output
    ecp5 = json.loads((tiny_build / "report.json").read_text())["synthesis"]["ecp5"]
    assert ecp5["fmax_mhz"] > 10 and ecp5["frames_per_second_at_fmax"] > 0
    assert ecp5["utilization"]["TRELLIS_FF"]["used"] > 0


def test_multipliers_in_logic_on_request(tiny_build):
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", "ecp5", "--no-pnr"])
    with_dsp = json.loads((tiny_build / "report.json").read_text())["synthesis"]["ecp5"]
    r = CliRunner().invoke(main, ["synth", str(tiny_build), "--flow", "ecp5", "--no-pnr",
                                  "--no-dsp"])
    assert r.exit_code == 0, r.output
    logic = json.loads((tiny_build / "report.json").read_text())["synthesis"]["ecp5"]
    assert with_dsp["cells"]["dsp"] > 0 and logic["cells"]["dsp"] == 0
    assert logic["cells"]["lut"] > with_dsp["cells"]["lut"]
    assert logic["multipliers"] == "logic (-nodsp)"


def test_a_silent_tool_failure_is_explained_from_its_own_log(tmp_path):
    """yosys -q dies without a word on stdout: the error line comes from its own log."""
    from groupnet_hw.hw.synth import SynthError, _run
    cmd = ["sh", "-c", "echo 'Executing ABC.' > tool.log; echo 'End of script.' >> tool.log; exit 3"]
    with pytest.raises(SynthError, match=r"yosys failed \(exit 3\): End of script\."):
        _run(cmd, tmp_path / "stdout.log", 60, "yosys", tmp_path, tool_log=tmp_path / "tool.log")
    with pytest.raises(SynthError, match="without a message"):
        _run(["sh", "-c", "exit 2"], tmp_path / "stdout.log", 60, "yosys", tmp_path)
