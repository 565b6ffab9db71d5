# amaranth: UnusedElaboratable=no
"""The cycle model of the engine as built (compiler/engine/core_cycles.py) against the
RTL's cycles in Verilator (hw/engine/core.py on the fast path with the C++ DRAM model).

The networks and the engine are tests/test_engine_core.py's (the same ``EngineCore``
parameters, so the session's build cache serves one Verilator build to both modules).
Per descriptor the RTL's cycles are measured as benchmarks/engine_core_cycles.py does:
the program cut after descriptor ``i`` (its successor rewritten as END) minus the
program cut after ``i - 1``. The model must be within 2 % per frame; the default tier
checks digits K=1 (every descriptor too), the max pool on the core's lanes (every
descriptor, exact) and the pooled stem with conv shortcuts under the slower DRAM,
``-m slow`` the rest: every digits K and random configuration at both
DRAM settings, row tiles, weight streaming on a small scratchpad, a head that streams
its weights and GATE descriptors, a read DMA with one burst in flight, and the full
16-lane stem (the fastest shape, over the default budget).
"""

from dataclasses import replace

import pytest

from conftest import random_model
from test_engine_core import (CONFIG, CORE, LANES_NET, PACKING, PIXEL_CONFIG, SMALL, _build,
                              check_network, frames_for, run_rtl, zoo_model)
from test_engine_program import RANDOM_CONFIGS
from groupnet_hw.compiler.engine.config import EngineConfig
from groupnet_hw.compiler.engine.core_cycles import (_Core, _chained, _layout, _read_ahead,
                                                    predict_core)
from groupnet_hw.compiler.engine.program import OPCODE_CODES
from groupnet_hw.compiler.engine.layout import compile_engine
from groupnet_hw.compiler.engine.target import (ARRAY_SHAPES, CORE_PROGRAM, core_config,
                                                with_shape)
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.flow import ENGINE_NAME
from groupnet_hw.sim.engine_verify import cut_after, frame_image

SLOW = pytest.mark.slow
TOLERANCE = 0.02
#: the cycle model's DRAM (DE10-Nano at 100 MHz) and test_engine_core's slower one
DRAMS = {"fast": (48, 10.0), "slow": (40, 4.0)}


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    # test_engine_core's build (the flow's module name, the same Verilog): one build
    return _build(tmp_path_factory, ENGINE_NAME)


def _network(name):
    if name.startswith("digits"):
        k = int(name[-1])
        return compile_model(zoo_model("digits", k, seed=k)), 0
    seed = int(name[-1])
    return compile_model(random_model(seed, **RANDOM_CONFIGS[seed])), seed


def measure(build, program, image, latency, bytes_per_cycle, per_descriptor=False):
    """The RTL's cycles per frame and, with ``per_descriptor``, per descriptor (cuts)."""
    kw = dict(latency=latency, bytes_per_cycle=bytes_per_cycle)
    whole = run_rtl(build, program, image, **kw).cycles
    if not per_descriptor:
        return whole, None
    cuts = [run_rtl(build, program, cut_after(program, image, i), **kw).cycles
            for i in range(len(program.descriptors))]
    return whole, [c - p for c, p in zip(cuts, [0] + cuts[:-1])]


def check(build, g, seed, config, core_params, dram, per_descriptor=False):
    latency, bpc = DRAMS[dram]
    program = compile_engine(g, config)
    image = frame_image(program, frames_for(g, 1, seed)[0])
    pred = predict_core(program, core_params, latency, bpc)
    whole, per = measure(build, program, image, latency, bpc, per_descriptor)
    assert abs(pred.cycles - whole) / whole <= TOLERANCE, (pred.cycles, whole)
    if per:
        # descriptor 0's cut also holds the END descriptor and the run's start and stop
        got = [p.cycles + (pred.end if i == 0 else 0) for i, p in enumerate(pred.descriptors)]
        bad = [(i, g_, m) for i, (g_, m) in enumerate(zip(got, per))
               if abs(g_ - m) / m > TOLERANCE]
        assert not bad, f"descriptors (index, predicted, measured): {bad}"
    return pred, whole


def test_digits_k1_per_descriptor(core):
    """Every descriptor to the cycle, among them fused mixers whose outputs go to the
    writer: a pixel's channels chained (the last job's PCALC reads the next channel's
    job 0 ahead, so AGG goes on to its PCALC)."""
    g, seed = _network("digits1")
    model = _Core(CORE, *DRAMS["fast"])
    program = compile_engine(g, CONFIG)
    assert any(_chained(d, _layout(d, model), model) for d in program.descriptors
               if d["opcode"] != OPCODE_CODES["INPUT"])
    check(core, g, seed, CONFIG, CORE, "fast", per_descriptor=True)


def test_threshold_lanes_and_stem_array_exact(core):
    """PIXEL descriptors on the threshold lanes (ptv: 16-bit inputs, three jobs with a
    shared input and three with their own, two PE folds each), the stem's multiplier
    array and a head that sums its map first: every descriptor to the cycle."""
    g = compile_model(random_model(6, **LANES_NET))
    model = _Core(CORE, *DRAMS["fast"])
    routes = [_layout(d, model)["ptv"] for d in compile_engine(g, PIXEL_CONFIG).descriptors
              if d["opcode"] == OPCODE_CODES["PIXEL"]]
    assert routes == [True, True]
    pred, whole = check(core, g, 6, PIXEL_CONFIG, CORE, "fast", per_descriptor=True)
    assert pred.cycles == whole


@SLOW
def test_full_stem_shape_exact(tmp_path_factory):
    """The fastest shape (``target.ARRAY_SHAPES[0]``: 16 stem lanes, four channels a
    cycle), which a build takes only where the estimate leaves room (the default tier's
    engine is the build's half stem): the stem's array, the threshold lanes and the head
    bit-exact and every descriptor to the cycle."""
    full = with_shape(CORE, ARRAY_SHAPES[0])
    assert full["stem_simd"] == 2 * CORE["stem_simd"]
    build = _build(tmp_path_factory, "full_stem", **full)
    g = compile_model(random_model(6, **LANES_NET))
    config = replace(PIXEL_CONFIG, stem_simd=full["stem_simd"])
    pred, whole = check(build, g, 6, config, full, "fast", per_descriptor=True)
    assert pred.cycles == whole
    stem = next(p for p in pred.descriptors if p.opcode == "CONV")
    assert stem.phases["folds"] and not stem.phases["scalar"]     # the stem's array


@SLOW
def test_pixel_of_64_bit_inputs_on_the_window_lanes_exact(core):
    """A PIXEL whose inputs the threshold lanes do not take (64-bit: the stem's range
    widened past 32 bits, so its map is written 64 bits an element) is gathered on the
    window lanes (pvec) while the next block's PIXEL takes the threshold lanes: every
    descriptor's outputs equal to the executor's, under stalls, and every descriptor
    to the cycle."""
    g = compile_model(random_model(6, **LANES_NET))
    stem = next(n for n in g.nodes if n.name == "stem_1")
    stem.lo, stem.hi = -(1 << 40), 1 << 40
    model = _Core(CORE, *DRAMS["fast"])
    lays = [(d["in_elem"], _layout(d, model)) for d in compile_engine(g, PIXEL_CONFIG).descriptors
            if d["opcode"] == OPCODE_CODES["PIXEL"]]
    pixels = [(elem, lay["pvec"], lay["ptv"]) for elem, lay in lays]
    assert pixels == [(64, True, False), (16, True, True)]
    check_network(core, g, frames_for(g, 1, 6), config=PIXEL_CONFIG, per_descriptor=True,
                  stall=0.3)
    pred, whole = check(core, g, 6, PIXEL_CONFIG, CORE, "fast", per_descriptor=True)
    assert pred.cycles == whole


def test_max_pool_on_the_lanes_exact(core):
    """A build keeps an overlapping max pool (random4's 3x3 stride-2 pool of the stem's
    32-bit sums, padded at the map's edges) as a MAXPOOL descriptor, which the core runs
    on its lanes: every descriptor to the cycle."""
    g, seed = _network("random4")
    config = core_config(CORE)
    program = compile_engine(g, config)
    model = _Core(CORE, *DRAMS["fast"])
    assert [_layout(d, model)["mvec"] for d in program.descriptors
            if d["opcode"] == OPCODE_CODES["MAXPOOL"]] == [True]
    pred, whole = check(core, g, seed, config, CORE, "fast", per_descriptor=True)
    assert pred.cycles == whole
    pool = [p for p in pred.descriptors if p.opcode == "MAXPOOL"]
    assert pool[0].phases["pool"] > pool[0].phases["scalar"] > 0


#: a pooled stem of 32 channels (two PE folds): its sums are a descriptor's outputs
POOLED_STEM = dict(image_size=16, stem_channels=32, stem_kernel=5, stem_stride=2,
                   stem_pool=True, stages=[[32, 1, 1]], bases=2)


def test_stem_sums_written_a_word_at_a_time_exact(core):
    """A stem followed by an overlapping max pool writes its 32-bit sums unchanged: the
    sums writer (swr) stores a PE fold's sums as whole words from the accumulator
    buffer, a word a cycle, instead of an element a cycle through the output writer:
    every descriptor's outputs equal to the executor's, under stalls, and every
    descriptor to the cycle."""
    g = compile_model(random_model(7, **POOLED_STEM))
    config = core_config(CORE)
    model = _Core(CORE, *DRAMS["fast"])
    writers = [d["opcode"] for d in compile_engine(g, config).descriptors
               if _layout(d, model)["swr"]]
    assert writers == [OPCODE_CODES["CONV"]]
    check_network(core, g, frames_for(g, 1, 7), config=config, per_descriptor=True,
                  stall=0.3)
    pred, whole = check(core, g, 7, config, CORE, "fast", per_descriptor=True)
    assert pred.cycles == whole


def _read_ahead_jobs(program, core_params):
    """Per descriptor: the jobs of channel 0 read ahead through the read port (the
    first pixel) and from the pair table (later pixels), as the model counts them."""
    model = _Core(core_params, *DRAMS["fast"])
    lays = [(d, _layout(d, model)) for d in program.descriptors]
    return [(_read_ahead(d, lay, 0), _read_ahead(d, lay, 0, model)) for d, lay in lays]


def test_post_ops_read_ahead_exact(core):
    """Digits K=3's fused blocks: a shared side input (job 0 reads it, two jobs read
    ahead through the read port at the first pixel) and one per base (none at the first
    pixel; from the pair table after it, two jobs a channel): every descriptor to the
    cycle and every output bit-exact."""
    g, seed = _network("digits3")
    program = compile_engine(g, CONFIG)
    ahead = _read_ahead_jobs(program, CORE)
    assert (1, 2) in ahead and (0, 2) in ahead
    check_network(core, g, frames_for(g, 1, seed))
    pred, whole = check(core, g, seed, CONFIG, CORE, "fast", per_descriptor=True)
    assert pred.cycles == whole


@SLOW
def test_pairs_wider_than_the_table_exact(tmp_path_factory):
    """A core whose pair table holds 8 channels (``max_out_c=8``; its array takes 16):
    digits K=3's 16-channel blocks read every pair through the read port, bit-exact and
    to the cycle."""
    params = dict(CORE, max_out_c=8)
    build = _build(tmp_path_factory, "narrow_pairs", max_out_c=8)
    g, seed = _network("digits3")
    program = compile_engine(g, CONFIG)
    ahead = _read_ahead_jobs(program, params)
    assert (1, 1) in ahead and all(s == t for s, t in ahead)
    check_network(build, g, frames_for(g, 1, seed))
    pred, whole = check(build, g, seed, CONFIG, params, "fast", per_descriptor=True)
    assert pred.cycles == whole


def test_pooled_stem_conv_shortcuts_slow_dram(core):
    g, seed = _network("random4")
    check(core, g, seed, CONFIG, CORE, "slow")


@SLOW
@pytest.mark.parametrize("dram", sorted(DRAMS))
@pytest.mark.parametrize("name", ["digits1", "digits2", "digits3"]
                         + [f"random{i}" for i in range(len(RANDOM_CONFIGS))])
def test_every_network_per_descriptor(core, name, dram):
    g, seed = _network(name)
    check(core, g, seed, CONFIG, CORE, dram, per_descriptor=True)


@SLOW
@pytest.mark.parametrize("dram", sorted(DRAMS))
def test_row_tiles(core, dram):
    """Several row tiles per descriptor (the last tile's writes drain while the next
    tile loads) and a pooled stem in tiles."""
    g = compile_model(random_model(3, image_size=16, stem_channels=8,
                                   stages=[[16, 1, 1], [32, 1, 2]], bases=2))
    pred, _ = check(core, g, 3, SMALL, CORE, dram, per_descriptor=True)
    assert any(d["n_tiles"] > 1 for d in compile_engine(g, SMALL).descriptors)
    pool = EngineConfig(arrays=2, **PACKING, input_buffer=1024,
                        weight_buffer=64, output_buffer=1024, port_bytes=16, **CORE_PROGRAM)
    g, seed = _network("random4")
    check(core, g, seed, pool, CORE, dram, per_descriptor=True)


@SLOW
@pytest.mark.parametrize("config", ["small", "default"])
def test_weight_streaming(tmp_path_factory, config):
    """A 14 KiB scratchpad: the last convolution streams its weights (the compiler's
    chunks, or one PE fold per chunk for a program compiled for big buffers)."""
    params = dict(CORE, buffer_bytes=14 << 10)
    build = _build(tmp_path_factory, "engine_core_14k", buffer_bytes=14 << 10)
    g = compile_model(random_model(3, image_size=8, stem_channels=8,
                                   stages=[[32, 1, 1], [64, 1, 2]], bases=2))
    for dram in DRAMS:
        check(build, g, 3, SMALL if config == "small" else CONFIG, params, dram,
              per_descriptor=True)


@SLOW
def test_read_dma_limits(tmp_path_factory):
    """One read burst in flight and a 16-word receive buffer: every burst of a load
    waits for the latency again (the model follows the bursts)."""
    params = dict(CORE, max_outstanding=1, buffer_depth=16)
    build = _build(tmp_path_factory, "engine_core_mo1", max_outstanding=1, buffer_depth=16)
    g, seed = _network("digits1")
    for dram in DRAMS:
        check(build, g, seed, CONFIG, params, dram, per_descriptor=True)


@SLOW
@pytest.mark.parametrize("dram", sorted(DRAMS))
def test_head_streaming_and_gates(core, dram, tmp_path):
    """Compiled as a build compiles (the core's scratchpad): a 200-class head over 320
    channels that streams its weights four classes at a time, and the authors'
    fixed-mean network (K=3) with its GATE descriptors, per descriptor."""
    from authors_layout import narrow_authors_model
    config = core_config(CORE)
    g = compile_model(random_model(3, image_size=8, stem_channels=8, num_classes=200,
                                   stages=[[16, 1, 1], [32, 1, 2], [320, 1, 2]], bases=1))
    check(core, g, 3, config, CORE, dram, per_descriptor=True)
    model, _ = narrow_authors_model(tmp_path, bases=3, image_size=16, learned_scales=False)
    check(core, compile_model(model), 0, config, CORE, dram, per_descriptor=True)


def test_phases_add_up():
    """Without the RTL: the phases of every descriptor add up to its cycles, the frame
    is their sum and the END descriptor's, and a slower DRAM costs cycles."""
    g, _ = _network("digits1")
    program = compile_engine(g, CONFIG)
    fast = predict_core(program, CORE, *DRAMS["fast"])
    for p in fast.descriptors:
        assert sum(p.phases.values()) == p.cycles
        assert p.phases[p.dominant] == max(p.phases.values())
    assert fast.cycles == sum(p.cycles for p in fast.descriptors) + fast.end
    assert predict_core(program, CORE, *DRAMS["slow"]).cycles > fast.cycles


def _bucket_by_cycle(word, rate, cap, dues):
    """The DRAM model's token bucket (sim/dram_model.h's drive()) cycle by cycle: each
    word moves in the first cycle from its due cycle on, after the word before, whose
    tokens (``rate`` added a cycle, capped at ``cap``) hold a word."""
    tokens, cycle, times = cap, 0, []
    for due in dues:
        while True:
            if cycle >= due and tokens >= word:
                tokens -= word
                times.append(cycle)
                cycle += 1
                tokens = min(cap, tokens + rate)
                break
            cycle += 1
            tokens = min(cap, tokens + rate)
    return times


@pytest.mark.parametrize("seed", range(6))
def test_the_models_bucket_moves_words_when_the_dram_models_does(seed):
    """_Bucket's closed forms (take after a gap, follow and spans along a run) against
    the bucket stepped cycle by cycle: rates of whole bytes below, at and above the
    word, runs and gaps of random lengths."""
    import random
    from groupnet_hw.compiler.engine.core_cycles import _Bucket
    rng = random.Random(seed)
    for rate in (1, 3, 4, 7, 8, 10, 12, 15, 16, 20, 31, 40):
        core = _Core(CORE, 48, rate)
        dues, plan, t = [], [], 0
        for _ in range(30):
            t += rng.choice([0, 0, 1, 2, 5, 40])          # a gap before the run (or none)
            run = rng.randint(1, 20)
            plan.append((t, run))
            dues.append(t)
            dues.extend([-1] * (run - 1))                 # due as soon as the word before
        expected = _bucket_by_cycle(core.bpw, rate, core.bucket_cap, dues)
        bucket, got = _Bucket(core), []
        for due, run in plan:
            first = bucket.take(max(due, got[-1] + 1) if got else due)
            got.append(first)
            got.extend(first + d for d in bucket.spans(bucket.left, run)[1:])
            assert bucket.follow(run - 1) == got[-1]
        assert got == expected, rate
    # a long run sustains the rate: five 16-byte words in eight cycles at 10 B/cycle
    assert _Core(CORE, 48, 10).stream_end(5 * 1000 + 1) == 8 * 1000
