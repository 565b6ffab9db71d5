"""The subsampler of the engine of the units (hw/engine/subsample_runner.py): each
SUBSAMPLE descriptor of a program leaves DRAM as the reference model leaves it, under
wait states and read latency; the descriptors it cannot run are refused before any
transfer."""

from __future__ import annotations

import pytest

from conftest import random_model
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.compiler.engine.program import FLAG_BITS, OPCODE_CODES, STAGE_BITS
from groupnet_hw.compiler.engine.units import refusal
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.engine_registers import ERROR_CAUSES
from groupnet_hw.hw.engine.subsample_runner import SubsampleRunner
from test_engine_program import zoo_model
from test_engine_runner import program_steps, run_runner_in_turn

#: the DE10-Nano's bus of 16-byte words, three arrays (three bases)
CONFIG = EngineConfig(arrays=3, pe=16, simd=32)


def subsamples(model, config=CONFIG):
    g = compile_model(model)
    program, descs, steps = program_steps(
        g, config, which=lambda d: d["opcode"] == OPCODE_CODES["SUBSAMPLE"])
    assert steps, "the network has no SUBSAMPLE descriptor"
    return program, [(descs[i], before, after) for i, before, after in steps]


@pytest.fixture(scope="module")
def digits():
    """digits K=3: three bases' 8 x 8 maps of 16 channels at 16 bits (pixels of two bus
    words) to 4 x 4."""
    program, runs = subsamples(zoo_model("digits", 3))
    assert {(d["in_h"], d["out_h"], d["in_c"], d["in_elem"], d["jobs"]) for d, _, _ in runs} \
        == {(8, 4, 16, 16, 3)}
    return program, runs


@pytest.fixture(scope="module")
def wide_elements():
    """An odd map side (7 to 4) of pixels of 4 words (32 channels of 16 bits): a
    stride-2 stage after a stem of 7 x 7 maps."""
    program, runs = subsamples(random_model(2, image_size=7, stem_channels=32,
                                            stem_pool=False, stages=[[32, 1, 1], [32, 1, 2]],
                                            bases=3, shortcut="A"))
    assert {(d["in_h"], d["out_h"], d["in_c"], d["in_elem"]) for d, _, _ in runs} \
        == {(7, 4, 32, 16)}
    return program, runs


@pytest.fixture(scope="module")
def cifar():
    """CIFAR-size K=5: five jobs a descriptor; 24-bit elements (pixels of 6 words)."""
    program, runs = subsamples(zoo_model("cifar-small", 5))
    assert {(d["in_elem"], d["jobs"]) for d, _, _ in runs} == {(16, 5), (24, 5)}
    return program, runs


@pytest.mark.parametrize("p_wait, latency", [(0.0, (1, 3)), (0.3, (2, 9))])
@pytest.mark.parametrize("which", ["digits", "wide_elements", "cifar"])
def test_each_subsample_leaves_the_models_image(request, which, p_wait, latency):
    program, runs = request.getfixturevalue(which)
    for d, _, _ in runs:
        assert refusal(d, CONFIG.arrays) is None
    outcomes = run_runner_in_turn(program, [(d, before) for d, before, _ in runs],
                                  unit=SubsampleRunner(max_size=32), p_wait=p_wait,
                                  latency=latency, seed=len(which))
    for (d, before, after), (got, result) in zip(runs, outcomes):
        assert result == "done"
        assert got != before and got == after, d["index"]


@pytest.mark.parametrize("change", ["stages", "flags", "odd_pixel", "format", "padding"])
def test_a_subsample_it_cannot_copy_is_refused_before_any_transfer(digits, change):
    program, runs = digits
    d, before, _ = runs[0]
    bad = dict(d, **{
        "stages": dict(stages=STAGE_BITS["add"]),
        "flags": dict(flags=FLAG_BITS["side_first"]),
        "odd_pixel": dict(in_c=4, out_c=4),          # 8 bytes: half a bus word
        "format": dict(out_elem=8),
        "padding": dict(padding=1),
    }[change])
    assert refusal(bad, CONFIG.arrays) is not None
    (got, result), = run_runner_in_turn(program, [(bad, before)],
                                        unit=SubsampleRunner(max_size=32))
    assert result == ("error", ERROR_CAUSES["unsupported"]) and got == before
