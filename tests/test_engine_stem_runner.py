# amaranth: UnusedElaboratable=no
"""The stem runner (hw/engine/stem_runner.py) runs a compiled program's stem descriptor
(integer weights on the frame's bytes, the post-op, a fused max pooling), DRAM to DRAM,
behind the read and write DMAs and the Avalon-MM memory model of the DMA tests: the
memory after it equals, byte for byte, the memory after the reference model ran the
same descriptor (sim/engine_model.py); a descriptor it cannot run is refused with
memory untouched."""

from __future__ import annotations

from dataclasses import replace

import pytest
from amaranth.back import verilog

from conftest import random_model
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.compiler.engine.program import FLAG_BITS, STAGE_BITS
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.engine_registers import ERROR_CAUSES
from groupnet_hw.hw.engine.stem_runner import StemRunner
from test_engine_program import zoo_model
from test_engine_runner import program_steps, run_runner_in_turn

#: the intended engine's stem (16 x 9 multipliers), with a small input buffer: the
#: tests' frames
CONFIG = EngineConfig()
#: a narrower stem: folds of 6 bytes (two RGB taps, six grey ones), 8 output channels
NARROW = replace(CONFIG, stem_pe=8, stem_simd=6)


def is_stem(d):
    return bool(d["flags"] & FLAG_BITS["int_weights"])


def stem_step(model, config):
    """The program's stem descriptor and the model's images around it."""
    program, descs, steps = program_steps(compile_model(model), config, which=is_stem)
    (i, before, after), = steps
    return program, descs[i], before, after


def stem_unit(config, **bounds):
    """A stem runner of ``config``'s multipliers whose fold buffers hold ResNet's 7 x 7 x
    3 windows and 64 channels."""
    in_folds = -(-147 // config.stem_simd)
    return StemRunner(pe=config.stem_pe, simd=config.stem_simd, lanes=3,
                      data_width=8 * config.port_bytes,
                      **dict(dict(max_size=32, max_in_folds=in_folds,
                                  max_out_folds=64 // config.stem_pe), **bounds))


# a grey 3x3 stem of 12 channels (not a multiple of the 16 PE rows), the CIFAR-size RGB
# 3x3 stem, ResNet's 7x7/2 stem with its 3x3/2 pooling at 16x16; each on both stems
STEMS = {
    "grey-3x3": lambda: random_model(3, **dict(image_size=8, stem_channels=12,
                                               stages=[[12, 1, 1]], bases=1)),
    "rgb-3x3": lambda: zoo_model("cifar", 1),
    "resnet-7x7-pooled": lambda: zoo_model("resnet18", 1, image_size=16),
}


#: The Amaranth simulations of the CIFAR-size stem take 20-30 s each; its frames run on
#: the units' Verilator build in the default tier (tests/test_engine_unit_engine.py,
#: whole programs, wait states among them)
SLOW = pytest.mark.slow


@pytest.mark.parametrize("config", [CONFIG, NARROW], ids=["16x9", "8x6"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=SLOW) if n == "rgb-3x3" else n
                                  for n in sorted(STEMS)])
def test_the_stem_runs_dram_to_dram_as_the_model_runs_it(name, config):
    program, d, before, after = stem_step(STEMS[name](), config)
    if name == "resnet-7x7-pooled":
        assert d["stages"] & STAGE_BITS["maxpool"] and d["kernel"] == 7
    (got, result), = run_runner_in_turn(program, [(d, before)], unit=stem_unit(config),
                                        max_cycles=400_000)
    assert result == "done"
    assert got == after and got != before


@SLOW
def test_the_pooled_stem_under_wait_states():
    program, d, before, after = stem_step(STEMS["resnet-7x7-pooled"](), CONFIG)
    (got, result), = run_runner_in_turn(program, [(d, before)], unit=stem_unit(CONFIG),
                                        p_wait=0.3, latency=(1, 6), seed=3,
                                        max_cycles=400_000)
    assert result == "done" and got == after


@pytest.mark.parametrize("change", [
    dict(jobs=2), dict(in_elem=16), dict(in_c=2), dict(weight_bytes=2), dict(const_bytes=8),
    dict(out_elem=64), dict(stages=STAGE_BITS["postop"] | STAGE_BITS["threshold"]),
    dict(in_h=40), dict(in_folds=2), dict(out_h=7), dict(in_pitch=32),
    dict(weight_tile_bytes=288), dict(flags=FLAG_BITS["shared_input"]),
], ids=lambda c: next(iter(c)))
def test_a_descriptor_it_cannot_run_is_refused_with_memory_untouched(change):
    program, d, before, _ = stem_step(STEMS["grey-3x3"](), CONFIG)
    (got, result), = run_runner_in_turn(program, [(dict(d, **change), before)],
                                        unit=stem_unit(CONFIG))
    assert result == ("error", ERROR_CAUSES["unsupported"])
    assert got == before


@SLOW
def test_the_de10nano_stem_converts():
    """At the DE10-Nano's size: ResNet's 224 x 224 frame, 7 x 7 windows of RGB on 16 x 9
    multipliers, 64 channels."""
    unit = StemRunner(pe=16, simd=9, lanes=3, max_size=224, max_kernel=7, max_in_folds=17,
                      max_out_folds=4)
    assert "stem_product" in verilog.convert(unit, name="stem_runner")
