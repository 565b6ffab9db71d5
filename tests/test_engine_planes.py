# amaranth: UnusedElaboratable=no
"""The engine built for binary activations alone (``planes=1``): one XNOR popcount a PE
row instead of four bit planes, and twice the lanes (16 x 64 at 128-bit ports).

A build picks it when every binary convolution of the network takes binary
activations (:func:`~groupnet_hw.compiler.engine.target.array_planes`). The RTL runs
on the fast Verilator path as tests/test_engine_core.py's core does: binary networks
on the array, bit-exact and to the cycle of the core's model; a network with 2-bit
activations (which the one-plane array cannot take) on the scalar path, bit-exact.
"""

import pytest

from conftest import random_model
from test_engine_core import (CONFIG, CORE, NBIT_CORE, _build, check_network, frames_for,
                              zoo_model)
from test_engine_program import RANDOM_CONFIGS
from groupnet_hw.compiler.engine.core_cycles import _Core, _layout, _wide_gather, predict_core
from groupnet_hw.compiler.engine.program import FLAG_BITS, OPCODE_CODES
from groupnet_hw.compiler.engine.sizing import core_memories, core_paths_of, estimate_core
from groupnet_hw.compiler.engine.target import array_planes
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.flow import BuildConfig, build
from groupnet_hw.hw.engine.core import EngineCore

#: the engine a build writes for a binary network with a 64 KiB scratchpad (the default
#: ``--max-util``): tests/test_engine_core.py's, and the same Verilog as
#: tests/test_engine_flow.py's digits builds
BINARY_CORE, BINARY_CONFIG = CORE, CONFIG
#: the cycle model's DRAM (DE10-Nano at 100 MHz)
DRAM = (48, 10.0)


@pytest.fixture(scope="module")
def binary_core(tmp_path_factory):
    return _build(tmp_path_factory, "planes1", core=BINARY_CORE)


@pytest.mark.parametrize("act_bits", [1, 2])
def test_the_tested_engines_are_the_builds(act_bits):
    """The engines these tests and tests/test_engine_core.py simulate are the ones a
    64 KiB build writes for digits (binary, then 2-bit activations), so the flow tests'
    Verilator builds are theirs too: one compile for each, whatever the resource
    estimate's shape choice."""
    model = zoo_model("digits", 2, seed=2, act_bits=act_bits)
    b = build(model, BuildConfig(engine="sequential", engine_scratchpad_kib=64),
              stop_after="schedule")
    assert b.engine.target.core == (BINARY_CORE if act_bits == 1 else NBIT_CORE)


def test_binary_engine_has_twice_the_lanes_and_one_plane():
    wide = NBIT_CORE
    assert (BINARY_CORE["planes"], wide["planes"]) == (1, 4)
    assert BINARY_CORE["pe"] * BINARY_CORE["simd"] == 2 * wide["pe"] * wide["simd"]
    # its window word holds two SIMD folds (window pairs), whatever the stem's width
    for stem_simd in (8, 16):
        paths = core_paths_of({**BINARY_CORE, "stem_simd": stem_simd})
        assert (paths["window_bits"], paths["window_pairs"], paths["max_act_bits"],
                paths["banks"]) == (128, True, 0, 8)
    assert core_memories(BINARY_CORE)["window_lo"][1] == 64      # window pairs: halves
    # a one-plane lane costs less: twice the lanes estimated within 10 % of the logic
    one, four = estimate_core(BINARY_CORE), estimate_core(wide)
    assert one["logic"] < 1.1 * four["logic"]
    with pytest.raises(ValueError, match="planes must be one of"):
        EngineCore(planes=2)


def test_builds_pick_the_planes_from_the_activations():
    binary = compile_model(zoo_model("digits", 1, seed=1))
    two_bit = compile_model(random_model(2, **RANDOM_CONFIGS[2]))
    assert (array_planes(binary), array_planes(two_bit)) == (1, 4)
    b = build(zoo_model("digits", 1, seed=1),
              BuildConfig(engine="sequential", engine_scratchpad_kib=256), stop_after="schedule")
    assert b.engine.target.core["planes"] == 1 and b.engine.target.core["simd"] == 64


@pytest.mark.parametrize("name", ["digits3", "random0", "random1", "random4"])
def test_binary_network_on_one_plane_exact(binary_core, name):
    """Digits K=3 (shared and per-base side inputs, padding, stride 2; every descriptor
    checked), random0 (K=1, odd channels, stride 2), random1 (odd channels, BPAC
    dilations) and random4 (a pooled 5x5 stride-2 stem, conv shortcuts) on the
    one-plane array: bit-exact, to the cycle of the model, the binary convolutions on
    the array."""
    if name == "digits3":
        g, seed = compile_model(zoo_model("digits", 3, seed=3)), 0
    else:
        seed = int(name[-1])
        g = compile_model(random_model(seed, **RANDOM_CONFIGS[seed]))
    program, runs = check_network(binary_core, g, frames_for(g, 1, seed),
                                  config=BINARY_CONFIG, per_descriptor=name == "digits3",
                                  latency=DRAM[0], bytes_per_cycle=DRAM[1])
    model = _Core(BINARY_CORE, *DRAM)
    binary = [_layout(d, model)["vec"] for d in program.descriptors
              if d["opcode"] == OPCODE_CODES["CONV"]
              and not d["flags"] & FLAG_BITS["int_weights"]]
    assert binary and all(binary)
    assert predict_core(program, BINARY_CORE, *DRAM).cycles == runs[0].cycles


def test_wide_binary_windows_gather_two_window_words_a_cycle(binary_core):
    """Window pairs: taps of 128 binary channels (a whole input word, two window words)
    and of 192 (a pair, then a half word whose next tap starts mid-word), padding,
    stride 2 and weights streamed through the 64 KiB scratchpad, on the one-plane
    engine: bit-exact, every descriptor's outputs checked, to the cycle of the model;
    and the model's gather of the array's convolutions is cheaper with pairs than
    without, so the RTL took pair groups."""
    g = compile_model(random_model(7, image_size=6, stem_channels=16,
                                   stages=[[128, 1, 1], [192, 1, 2]], bases=2))
    program, runs = check_network(binary_core, g, frames_for(g, 1, 7), config=BINARY_CONFIG,
                                  per_descriptor=True, latency=DRAM[0],
                                  bytes_per_cycle=DRAM[1])
    assert predict_core(program, BINARY_CORE, *DRAM).cycles == runs[0].cycles
    paired, plain = _Core(BINARY_CORE, *DRAM), _Core(BINARY_CORE, *DRAM)
    plain.window_pairs = False
    assert paired.window_pairs and not core_paths_of(NBIT_CORE)["window_pairs"]
    convs = [d for d in program.descriptors if _layout(d, paired)["vec"]]

    def gather(core):
        return [_wide_gather(d, _layout(d, core), core, 0, d["out_h"]) for d in convs]
    with_pairs, without = gather(paired), gather(plain)
    assert all(a <= b for a, b in zip(with_pairs, without))
    assert sum(with_pairs) < sum(without)


def test_two_bit_network_on_the_scalar_path_exact(binary_core):
    """2-bit activations need the bit planes: the one-plane core runs those convolutions
    on its scalar datapath, bit-exact and to the cycle of the model."""
    g = compile_model(random_model(2, **RANDOM_CONFIGS[2]))
    program, runs = check_network(binary_core, g, frames_for(g, 1, 2), config=BINARY_CONFIG,
                                  latency=DRAM[0], bytes_per_cycle=DRAM[1])
    model = _Core(BINARY_CORE, *DRAM)
    n_bit = [d for d in program.descriptors if d["act_bits"]]
    assert n_bit and not any(_layout(d, model)["vec"] for d in n_bit)
    assert predict_core(program, BINARY_CORE, *DRAM).cycles == runs[0].cycles
