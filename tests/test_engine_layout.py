"""Engine layout pieces alone: tensor formats and parameter packing (round trips), the
liveness allocator, tiling, the configuration records and the cycle model."""

import copy
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupnet_hw.compiler.engine.config import DE10_NANO_DRAM, DramModel, EngineConfig
from groupnet_hw.compiler.engine.cycles import CHUNK_SWITCH, descriptor_cycles, predict
from groupnet_hw.compiler.engine.formats import TensorFormat, container_bits
from groupnet_hw.compiler.engine.layout import allocate, check_no_overlap, compile_engine
from groupnet_hw.compiler.engine.params import (pack_binary_weights, pack_bitvec, pack_consts,
                                                pack_int_weights, unpack_binary_weights,
                                                unpack_bitvec, unpack_consts, unpack_int_weights)
from groupnet_hw.compiler.engine.program import (DESCRIPTOR, FLAG_BITS, OPCODE_CODES, STAGE_BITS,
                                                 decode, encode)
from groupnet_hw.compiler.engine.sizing import estimate, size_engine
from groupnet_hw.compiler.engine.tiling import input_rows_read
from groupnet_hw.compiler.passes import compile_model
from groupnet_hw.models.groupnet import GroupNet, randomize_eval_state
from groupnet_hw.models.zoo import arch_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from engine import dram_floor  # noqa: E402  (benchmarks/engine.py: the benchmarks are no package)

FORMATS = st.one_of(
    st.tuples(st.just("bits"), st.just(1)),
    st.tuples(st.just("uint"), st.sampled_from([1, 2, 4, 8, 16])),
    st.tuples(st.just("fixed"), st.sampled_from([8, 16, 24, 32, 64])))


@settings(max_examples=60, deadline=None)
@given(fmt=FORMATS, c=st.integers(1, 37), h=st.integers(1, 5), w=st.integers(1, 9),
       port=st.sampled_from([4, 16, 32]), seed=st.integers(0, 2**31))
def test_tensor_format_round_trip(fmt, c, h, w, port, seed):
    kind, bits = fmt
    f = TensorFormat(kind, bits, c, h, w, port)
    rng = np.random.default_rng(seed)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind == "fixed" else (0, (1 << bits) - 1)
    v = rng.integers(lo, hi, size=(c, h, w), endpoint=True, dtype=np.int64)
    packed = f.pack(v)
    assert packed.size == f.nbytes == h * f.row_bytes
    assert f.row_bytes % port == 0 and f.row_bytes >= w * c * bits / 8
    assert np.array_equal(f.unpack(packed), v)


def test_tensor_format_refuses_values_it_cannot_hold():
    with pytest.raises(ValueError, match="outside"):
        TensorFormat("fixed", 8, 1, 1, 1, 16).pack(np.array([[[128]]]))
    with pytest.raises(ValueError, match="outside"):
        TensorFormat("bits", 1, 1, 1, 1, 16).pack(np.array([[[2]]]))
    assert container_bits("fixed", 14) == 16 and container_bits("uint", 3) == 4
    assert TensorFormat("bits", 1, 64, 1, 56, 16).row_bytes == 448


def test_bits_layout_is_documented_order():
    # channel c at bit c % 8 of byte c // 8, pixel after pixel, row padded to the port
    f = TensorFormat("bits", 1, 10, 1, 2, 16)
    v = np.zeros((10, 1, 2), dtype=np.int64)
    v[9, 0, 0] = 1
    v[0, 0, 1] = 1
    assert list(f.pack(v)[:4]) == [0, 2, 1, 0]


@settings(max_examples=40, deadline=None)
@given(c_out=st.integers(1, 20), c_in=st.integers(1, 9), k=st.sampled_from([1, 3]),
       pe=st.integers(1, 8), simd=st.integers(1, 40), groups=st.sampled_from([1, 2]),
       seed=st.integers(0, 2**31))
def test_binary_weight_packing_round_trip(c_out, c_in, k, pe, simd, groups, seed):
    c_out, c_in = c_out * groups, c_in
    bits = np.random.default_rng(seed).integers(0, 2, size=(c_out, c_in, k, k))
    buf = pack_binary_weights(bits, pe, simd, groups)
    per = -(-(c_out // groups) // pe) * -(-(k * k * c_in) // simd) * pe * simd
    assert buf.size == -(-groups * per // 8)
    assert np.array_equal(unpack_binary_weights(buf, c_out, c_in, k, pe, simd, groups), bits)


def test_binary_weights_in_pe_simd_order():
    # PE p of fold 0 reads its SIMD lanes first: weight [p][j] at lane p*simd + j
    bits = np.zeros((2, 4, 1, 1), dtype=np.int64)
    bits[1, 2] = 1                          # output 1, flat input 2
    buf = pack_binary_weights(bits, pe=2, simd=4)
    assert list(buf) == [1 << (4 + 2)]


@settings(max_examples=30, deadline=None)
@given(c_out=st.integers(1, 12), c_in=st.integers(1, 4), k=st.sampled_from([1, 3, 5]),
       nbytes=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**31))
def test_int_weight_and_const_packing_round_trip(c_out, c_in, k, nbytes, seed):
    rng = np.random.default_rng(seed)
    half = 1 << (8 * nbytes - 1)
    w = rng.integers(-half, half, size=(c_out, c_in, k, k))
    buf = pack_int_weights(w, 3, 5, nbytes)
    assert np.array_equal(unpack_int_weights(buf, c_out, c_in, k, 3, 5, nbytes), w)
    v = rng.integers(-half, half, size=17)
    assert np.array_equal(unpack_consts(pack_consts(v, nbytes), 17, nbytes), v)
    b = rng.integers(0, 2, size=13)
    assert np.array_equal(unpack_bitvec(pack_bitvec(b), 13), b)
    with pytest.raises(ValueError):
        pack_consts([half], nbytes)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 12), st.integers(0, 5)),
                min_size=1, max_size=25))
def test_allocator_never_overlaps_live_tensors(spec):
    sizes = {i: s for i, (s, _, _) in enumerate(spec)}
    lifetimes = {i: (f, f + d) for i, (_, f, d) in enumerate(spec)}
    offsets, arena = allocate(sizes, lifetimes, 16)
    assert all(o % 16 == 0 and o + sizes[t] <= arena for t, o in offsets.items())
    check_no_overlap(sizes, lifetimes, offsets)      # raises on an overlap
    # never more than all tensors side by side
    assert arena <= sum(-(-s // 16) * 16 for s in sizes.values())


def test_allocator_reuses_space_after_the_last_reader():
    sizes = {t: 100 for t in "abcd"}
    chain = {"a": (0, 1), "b": (1, 2), "c": (2, 3), "d": (3, 4)}
    offsets, arena = allocate(sizes, chain, 16)
    assert arena == 2 * 112 and offsets["a"] == offsets["c"]
    with pytest.raises(AssertionError, match="overlap"):
        check_no_overlap(sizes, chain, {"a": 0, "b": 50, "c": 0, "d": 112})


def _digits(bases=3):
    model = randomize_eval_state(GroupNet(arch_config("digits", bases=bases)),
                                 torch.Generator().manual_seed(1)).eval()
    return compile_model(model)


def test_program_tensors_do_not_overlap_and_share_the_arena():
    program = compile_engine(_digits())
    arena = {r: a for r, (a, f) in program.tensors.items()
             if a >= program.header["arena_addr"]}
    sizes = {r: program.tensors[r][1].nbytes for r in arena}
    check_no_overlap(sizes, program.lifetimes, arena)
    assert program.header["arena_bytes"] < sum(sizes.values())       # space is reused
    end = program.header["arena_addr"] + program.header["arena_bytes"]
    assert all(a + sizes[r] <= end for r, a in arena.items())
    assert len(program.image) == program.header["image_bytes"]


def _changed(g, op, pick, **attrs):
    """A copy of ``g`` whose first ``op`` node that ``pick`` takes has ``attrs``."""
    g = copy.deepcopy(g)
    node = next(n for n in g.nodes if n.op == op and pick(n))
    node.attrs.update(attrs)
    return g


def test_the_lanes_refuse_constants_they_would_wrap():
    """The intended engine's mixer lanes take fractions of up to 12 bits and
    coefficients that, scaled to them, fit 18 bits; its epilogue lanes post-op scales of
    18 bits. A program past them is refused with its descriptor named; the core's
    configuration (which shifts at run time and multiplies 32-bit operands) takes it."""
    from groupnet_hw.compiler.engine.target import CORE_PROGRAM
    g = _digits()
    compile_engine(g)
    gated = lambda n: n.attrs.get("gates") is not None            # noqa: E731
    mixer = next(n for n in g.nodes if n.op == "mixer" and gated(n))
    lambdas, frac = mixer.attrs["lambdas"], mixer.attrs["lambda_frac"]
    postop = next(n for n in g.nodes if n.op == "postop")
    cases = [
        # the same coefficients at 13 fraction bits
        (_changed(g, "mixer", gated, lambdas=lambdas << (13 - frac), lambda_frac=13),
         "lambdas of 13 fraction bits, the engine's mixer takes at most 12"),
        (_changed(g, "mixer", gated, lambdas=torch.full_like(lambdas, 1 << 14)),
         "lambdas need 20 bits at the mixer's 12 fraction bits"),
        (_changed(g, "mixer", gated, gate_frac=16), "gates of 16 fraction bits"),
        (_changed(g, "postop", lambda n: n.name == postop.name,
                  A=torch.full_like(postop.attrs["A"], -(1 << 18))),
         "post-op scales of 19 bits, the engine's lanes take 18"),
    ]
    for changed, message in cases:
        with pytest.raises(ValueError, match=r"descriptor \d+ \(.*\): .*" + message):
            compile_engine(changed)
        compile_engine(changed, EngineConfig(coefficient_fraction=None, scale_bits=None))
    assert CORE_PROGRAM["coefficient_fraction"] is None and CORE_PROGRAM["scale_bits"] is None


def test_engine_config_is_validated():
    with pytest.raises(ValueError, match="arrays"):
        EngineConfig(arrays=0)
    with pytest.raises(ValueError, match="port_bytes"):
        EngineConfig(port_bytes=24)
    with pytest.raises(ValueError, match="input_buffer"):
        EngineConfig(input_buffer=1000)
    with pytest.raises(ValueError, match="bytes_per_cycle"):
        DramModel(bytes_per_cycle=0)
    assert EngineConfig().lanes == 5 * 16 * 64
    with pytest.raises(ValueError, match="fixed_containers"):
        EngineConfig(fixed_containers=(8, 16, 32))
    assert DE10_NANO_DRAM == DramModel(latency=48, bytes_per_cycle=10.0)
    assert DramModel.at_clock(50.0).bytes_per_cycle == 20.0


def test_too_small_buffers_are_refused_in_one_line():
    with pytest.raises(ValueError, match="one output row needs"):
        compile_engine(_digits(), EngineConfig(input_buffer=64, output_buffer=64))


def _conv(**over):
    d = dict(index=0, opcode=OPCODE_CODES["CONV"], stages=0, flags=2, jobs=5, kernel=3, stride=1,
             dilation=1, padding=1, in_h=8, in_w=8, in_c=64, out_h=8, out_w=8, out_c=64,
             side_c=0, groups=1, in_fmt=0, in_elem=1, side_fmt=0, side_elem=0, out_fmt=0,
             out_elem=1, act_bits=0, in_levels=0, out_levels=1, const_bytes=4, weight_bytes=0,
             detach=0, rows_per_tile=8, n_tiles=1, in_pitch=64, side_pitch=0, out_pitch=64,
             in_bytes=512, out_bytes=512, table_addr=0, param_bytes=4800,
             weight_tile_bytes=4608, chunk_c=0, mid_h=0, mid_w=0, pool_kernel=0, pool_stride=0,
             pool_padding=0, aux_outputs=0, aux_fmt=0, aux_elem=0, aux_levels=0, aux_pitch=0,
             aux_bytes=0, aux_param_bytes=0, words=0, tail=0, span=0, in_folds=0,
             out_folds=0, pitch=0, x_step=0, dx_words=0, pad_words=0, pixel_bytes=0,
             windows=0, magic=0)
    d.update(over)
    return d


def test_cycle_model_hand_computed():
    cfg = EngineConfig(arrays=5, pe=16, simd=48, pipeline_depth=24)
    dram = DramModel(latency=40, bytes_per_cycle=8.0)
    c = descriptor_cycles(_conv(), {}, cfg, dram)
    # compute: 64 pixels * ceil(64/16)=4 output folds * 9 taps * ceil(64/48)=2 words (a
    # tap's channels are words of their own), five bases in one round
    assert c.compute == 64 * 4 * 9 * 2
    # the epilogue's beats bound an output fold of few folds: a 1x1 layer's 2 words
    # against 5 jobs' 16 sums on 8 lanes, 10 beats
    one = descriptor_cycles(_conv(kernel=1, padding=0), {}, replace(cfg, vector_lanes=8), dram)
    assert one.compute == 64 * 4 * 10
    # read: 8 input rows once (shared), 5 x 4800 parameter bytes, descriptor + 5 entries
    assert c.bytes_read == 8 * 64 + 5 * 4800 + 128 + 5 * 16
    assert c.bytes_written == 5 * 512
    # the parameters (every job's constants, then all weights) are read before the rows,
    # a read latency for the table and for the weights (no constant sections here):
    # not overlapped; the rows and outputs are
    setup = (1 + 1) * 40 + -(-5 * 4800 // 8)
    assert c.memory == 40 + -(-(8 * 64 + 5 * 512) // 8)
    fetch = 40 + -(-(128 + 80) // 16)
    # then the pipeline's depth and the last output row's write
    assert c.overhead == fetch + setup + 40 + 24 + -(-64 * 5 // 8)
    assert c.cycles == c.overhead + max(c.compute, c.memory) and c.bound == "compute"
    assert c.macs == 5 * 64 * 64 * 576
    assert c.lane_utilisation == pytest.approx(c.macs / (c.cycles * cfg.lanes))


def test_cycle_model_counts_the_runners_row_reads_by_hand():
    """The runner's row loop reads every input row: a 1x1 stride-2 convolution's 8,
    not the 4 its windows use. A resident input of a weight-streaming descriptor is read
    while the first chunk computes and only then: 32-bit rows read through a prologue
    (a row and job a read) bound the first of four chunks, the others compute."""
    cfg, dram = EngineConfig(arrays=5, pe=16, simd=64), DramModel(latency=40, bytes_per_cycle=8.0)
    strided = descriptor_cycles(_conv(kernel=1, padding=0, stride=2, out_h=4, out_w=4,
                                      out_pitch=32, out_bytes=128), {}, cfg, dram)
    assert strided.bytes_read == 8 * 64 + 5 * 4800 + 128 + 5 * 16
    wide = 8 * 64 * 4             # a row of 64 channels of 32 bits
    d = _conv(flags=FLAG_BITS["weight_stream"], stages=STAGE_BITS["prologue_threshold"],
              in_fmt=2, in_elem=32, in_pitch=wide, in_bytes=8 * wide, in_levels=1,
              chunk_c=16)
    c = descriptor_cycles(d, {}, cfg, dram)
    # four chunks of one output fold: the epilogue's 10 beats an output fold (5 jobs' 16
    # sums on 8 lanes) bound 9 taps of a word, 640 cycles a chunk; the first chunk's
    # rows come through the prologue at 4 channels a cycle (32-bit elements, two bus
    # words a group of 8), 8 rows of 5 jobs; the ring holds the map for the others,
    # which each wait CHUNK_SWITCH for the chunk before
    first = 5 * 8 * 8 * (64 // 4)
    assert first > 64 * 10
    assert c.compute == first + 3 * (64 * 10 + CHUNK_SWITCH)
    # 8 rows of 5 jobs, each read after the last one's words are in
    reads = max(-(-5 * 8 * wide // 8), 5 * 8 * (40 + -(-wide // 8)))
    assert reads > first
    rest = max(0, c.memory - reads)
    assert c.cycles == c.overhead + max(first, reads) + max(c.compute - first, rest)
    assert c.cycles > c.overhead + max(c.compute, c.memory)


def test_cycle_model_of_the_stem_runner_by_hand():
    """The stem runner computes its convolution's whole map once (one tile: its pooling
    takes the rows as they come), reads every frame row once and its weights once, also
    where the compiler's tiles would overlap and its weights pass half the weight
    buffer (ResNet's 7x7 stride-2 stem, pooled 3x3 stride 2, at 64x64)."""
    cfg, dram = EngineConfig(stem_pe=16, stem_simd=9), DramModel(latency=48, bytes_per_cycle=10.0)
    d = _conv(flags=FLAG_BITS["int_weights"] | FLAG_BITS["shared_input"], jobs=1,
              stages=STAGE_BITS["postop"] | STAGE_BITS["maxpool"], kernel=7, stride=2,
              padding=3, in_h=64, in_w=64, in_c=3, in_fmt=1, in_elem=8, in_pitch=192,
              in_bytes=64 * 192, mid_h=32, mid_w=32, out_h=16, out_w=16, out_c=64,
              pool_kernel=3, pool_stride=2, pool_padding=1, out_fmt=2, out_elem=16,
              out_pitch=2048, out_bytes=16 * 2048, rows_per_tile=5, n_tiles=4,
              weight_tile_bytes=9792, param_bytes=10320, in_folds=17, out_folds=4)
    c = descriptor_cycles(d, {}, cfg, dram)
    # 32 x 32 convolution pixels, each 4 output folds x 17 window folds (of 9 lanes)
    assert c.compute == 32 * 32 * 4 * 17
    # the frame's 64 rows once, the weights and constants once, descriptor and entry
    assert c.bytes_read == 64 * 192 + 10320 + 128 + 16


def test_weights_over_half_the_buffer_always_stream():
    """The units hold a job's weights whole or stream them: a descriptor whose weights
    pass half the weight buffer streams in chunks of whole PE folds, also where row
    tiles that re-read the weights would move fewer bytes (many rows of wide 32-bit
    input read through a prologue, and weights that just pass the half)."""
    from groupnet_hw.compiler.engine.tiling import choose_tiling
    cfg = EngineConfig(arrays=5, pe=16, simd=64, weight_buffer=8192, input_buffer=65536,
                       output_buffer=65536)
    wide = 56 * 64 * 4
    d = _conv(in_h=56, in_w=56, out_h=56, out_w=56, flags=0, in_fmt=2, in_elem=32,
              in_pitch=wide, in_bytes=56 * wide, stages=STAGE_BITS["prologue_threshold"],
              in_levels=1, out_pitch=448, out_bytes=56 * 448, weight_tile_bytes=4608)
    choose_tiling(d, cfg)
    assert d["flags"] & FLAG_BITS["weight_stream"]
    assert d["chunk_c"] % cfg.pe == 0 and d["chunk_c"] < d["out_c"]
    # within half the buffer they are read whole, once
    small = _conv(weight_tile_bytes=4096)
    choose_tiling(small, cfg)
    assert not small["flags"] & FLAG_BITS["weight_stream"] and small["chunk_c"] == 0


def test_cycle_model_is_monotonic():
    d = _conv(out_h=32, out_w=32, in_h=32, in_w=32, rows_per_tile=32)
    base = descriptor_cycles(d, {}, EngineConfig(), DramModel(48, 10.0))
    # more lanes: no more compute; more bandwidth or less latency: no more cycles
    assert descriptor_cycles(d, {}, EngineConfig(simd=96), DramModel(48, 10.0)).compute <= base.compute
    assert descriptor_cycles(d, {}, EngineConfig(), DramModel(48, 20.0)).cycles <= base.cycles
    assert descriptor_cycles(d, {}, EngineConfig(), DramModel(8, 10.0)).cycles <= base.cycles
    # more bases than arrays: rounds
    assert descriptor_cycles(dict(d, jobs=10), {}, EngineConfig(), DramModel(48, 10.0)).compute \
        == 2 * base.compute
    # more tiles read no row twice (the ring keeps the halo), and the units write each
    # output row as it is computed: the same cycles
    tiled = descriptor_cycles(dict(d, rows_per_tile=4, n_tiles=8), {}, EngineConfig(),
                              DramModel(48, 10.0))
    assert tiled.bytes_read == base.bytes_read and tiled.cycles == base.cycles
    # short rows: a read latency each bounds the rows' reads
    short = descriptor_cycles(d, {}, EngineConfig(), DramModel(400, 10.0))
    assert short.memory == 32 * (400 + -(-64 // 10))


def test_input_rows_read_once_and_strided_rows_skipped():
    d = _conv(in_h=8, out_h=8, rows_per_tile=3, n_tiles=3)
    assert input_rows_read(d) == 8
    # a stride-2 1x1 window reads the even rows only
    assert input_rows_read(_conv(kernel=1, stride=2, padding=0, in_h=8, out_h=4,
                                 rows_per_tile=1, n_tiles=4)) == 4
    # a fused 3x3 stride-2 pooling over a stride-2 convolution's rows
    pooled = _conv(kernel=3, stride=2, padding=1, in_h=16, out_h=4, stages=128, mid_h=8,
                   mid_w=8, pool_kernel=3, pool_stride=2, pool_padding=1, rows_per_tile=1,
                   n_tiles=4)
    assert input_rows_read(pooled) == 16


def test_predict_whole_program():
    program = compile_engine(_digits())
    frame = predict(program)
    assert frame.cycles == sum(d.cycles for d in frame.descriptors)
    # frames in flight: a frame of a stream takes the longer of the stem (descriptor 1,
    # after INPUT) and the rest with the stem's DRAM bytes and a descriptor fetch more
    dram = DramModel.at_clock(100.0)
    stem, rest = frame.descriptors[1], frame.descriptors[2:]
    assert program.header["next_addr_a"] and stem.opcode == "CONV"
    traffic = -(-(stem.bytes_read + stem.bytes_written) // dram.bytes_per_cycle)
    fetch = dram.latency + -(-128 // dram.bytes_per_cycle)
    assert frame.interval == max(stem.cycles, sum(d.cycles for d in rest) + traffic + fetch)
    assert frame.interval < frame.cycles
    assert frame.fps == pytest.approx(100e6 / frame.interval)
    one = predict(compile_engine(_digits(), replace(EngineConfig(), frames_in_flight=False)))
    assert one.interval is None and one.fps == pytest.approx(100e6 / one.cycles)
    assert all(d.bound in ("compute", "memory") for d in frame.descriptors)
    assert 0 < frame.lane_utilisation < 1 and 0 < frame.bandwidth_share <= 1


def test_size_engine_de10nano_default_fits():
    sized = size_engine("de10nano")
    # the engine of the units as measured (the stem runner, weight streaming, its map
    # buffer, the classifier head, the row replay and the weight loader among them):
    # EngineConfig's 5 x 16 x 64, the ladder's top rung, does not fit 90 % of the
    # DE10-Nano even with 4 vector lanes; the second rung, 5 x 16 x 32, does with 8
    # and the stem shrunk to 16 x 6 (frames in flight hide it behind the rest)
    assert sized.fits and all(v <= 0.9 for v in sized.utilisation.values())
    assert sized.config == replace(EngineConfig(), simd=32, stem_simd=6)
    assert estimate(sized.config)["logic"] > 0.88 * sized.limits["logic"]
    # the stem's 16 x 6 multipliers take 32 DSP blocks of the 83 (16 x 9 took 48)
    assert estimate(sized.config)["dsp"] == \
        estimate(replace(sized.config, stem_simd=9))["dsp"] - 16 == 83
    assert estimate(replace(EngineConfig(), vector_lanes=4))["logic"] > 0.9 * sized.limits["logic"]
    # 16 vector lanes would not fit
    assert estimate(replace(sized.config, vector_lanes=16))["logic"] > 0.9 * sized.limits["logic"]
    small = size_engine("icebreaker")
    assert small.config.lanes < sized.config.lanes


def test_descriptor_decode_of_encoded_fields():
    d = _conv()
    assert decode(encode(d, DESCRIPTOR), DESCRIPTOR) == d


def test_core_tiles_keep_whole_blocks_and_stream_in_the_fewest_chunks():
    """On the core's scratchpad: a descriptor whose blocks fit beside one row keeps them
    whole (the most rows that do); one whose blocks do not streams its weights in the
    largest chunk of whole PE folds that fits beside one row (a PE more would not), or
    in channel slices of the whole map (the largest chunk dividing its channels), and
    no descriptor needs more than the scratchpad."""
    from dataclasses import replace

    from groupnet_hw.compiler.engine.program import FLAG_BITS
    from groupnet_hw.compiler.engine.target import core_config, engine_target
    from groupnet_hw.compiler.engine.tiling import scratchpad_need
    core = engine_target("de10nano", buffer_bytes=64 << 10).core
    config = replace(core_config(core), prologue_thresholds=False)
    model = randomize_eval_state(GroupNet(arch_config("resnet18", bases=5, image_size=32)),
                                 torch.Generator().manual_seed(0)).eval()
    program = compile_engine(compile_model(model), config)
    streamed = sliced = 0
    for d in program.descriptors:
        if d["opcode"] not in (OPCODE_CODES["CONV"], OPCODE_CODES["HEAD"]):
            continue
        need = scratchpad_need(d, config)
        assert need.bytes <= config.scratchpad
        one_row_whole = scratchpad_need(dict(d, rows_per_tile=1, flags=d["flags"]
                                             & ~FLAG_BITS["weight_stream"]), config)
        if not one_row_whole.streams_weights:
            assert not need.streams_weights, d["index"]
            more = dict(d, rows_per_tile=d["rows_per_tile"] + 1)
            assert d["rows_per_tile"] == d["out_h"] or \
                scratchpad_need(more, config).bytes > config.scratchpad \
                or scratchpad_need(more, config).streams_weights
            continue
        streamed += 1
        pe = config.pe
        assert d["flags"] & FLAG_BITS["weight_stream"] and d["chunk_c"] % pe == 0 \
            or d["chunk_c"] == d["out_c"]
        if d["flags"] & FLAG_BITS["sliced"]:
            # channel slices: the whole map in one tile, the largest chunk dividing the
            # channels that fits beside it
            sliced += 1
            assert d["n_tiles"] == 1 and d["out_c"] % d["chunk_c"] == 0
            larger = [c for c in range(d["chunk_c"] + pe, d["out_c"] + 1, pe)
                      if d["out_c"] % c == 0]
            assert not larger or scratchpad_need(dict(d, chunk_c=larger[0]),
                                                 config).bytes > config.scratchpad
            continue
        bigger = dict(d, rows_per_tile=1, chunk_c=d["chunk_c"] + pe)
        assert d["chunk_c"] >= d["out_c"] or \
            scratchpad_need(bigger, config).bytes > config.scratchpad
    assert streamed >= 3          # the 256- and 512-channel layers and the head
    assert sliced >= 1            # a 512-channel fused mixer would reload per row


@pytest.mark.parametrize("arch,bases", [("digits", 1), ("digits", 3), ("cifar", 2)])
def test_dram_floor_never_above_a_programs_traffic(arch, bases):
    """benchmarks/engine.py's DRAM floor (parameters and input read once, every other
    tensor written and read once) bounds what the intended engine's cycle model counts
    for the same program from below, and narrower maps only lower it."""
    model = randomize_eval_state(GroupNet(arch_config(arch, bases=bases)),
                                 torch.Generator().manual_seed(bases)).eval()
    config = size_engine("de10nano").config
    program = compile_engine(compile_model(model), config)
    floor = dram_floor(program)
    tensors = sum(f.nbytes for _, f in program.tensors.values())
    assert program.header["param_bytes"] + tensors < floor < 2 * tensors + program.header["param_bytes"]
    assert floor <= predict(program, DramModel.at_clock(config.clock_mhz)).dram_bytes
    assert dram_floor(program, wide_maps_at=16) <= dram_floor(program, wide_maps_at=24) <= floor


def test_dram_floor_with_the_stem_pooled_on_chip_drops_its_map():
    """The stem's overlapping max pooling fused onto its convolution (the intended
    engine's fusion): the convolution's wide map leaves the program, and the floor
    drops by exactly that map written and read once."""
    from dataclasses import replace

    from groupnet_hw.compiler.engine.target import engine_target
    model = randomize_eval_state(GroupNet(arch_config("resnet18", bases=1, image_size=32)),
                                 torch.Generator().manual_seed(1)).eval()
    g = compile_model(model)
    config = engine_target("de10nano").config       # the core's: pools apart
    assert not config.fuse_overlapping_pools
    apart = compile_engine(g, config)
    fused = compile_engine(g, replace(config, fuse_overlapping_pools=True))
    gone = set(apart.tensors) - set(fused.tensors)
    assert [g.producer(name).op for name in gone] == ["int_conv"]
    (name,) = gone
    assert dram_floor(apart) - dram_floor(fused) == 2 * apart.tensors[name][1].nbytes


def test_dram_floor_counts_wide_maps_in_narrower_containers():
    """The floor's what-if of narrower maps: a 32-bit map whose rows stay whole port
    words at 24 or 16 bits (every map of a ResNet: 64 channels or more) counts three
    quarters or half of its bytes, written and read; with ``proven`` only the maps
    whose proven range fits; no other tensor changes."""
    from groupnet_hw.compiler.engine.target import engine_target
    model = randomize_eval_state(GroupNet(arch_config("resnet18", bases=2, image_size=32)),
                                 torch.Generator().manual_seed(2)).eval()
    g = compile_model(model)
    config = engine_target("de10nano").config
    # one map's proven range widened past 24 bits (still a 32-bit container)
    name = next(name for name, (_, f) in compile_engine(g, config).tensors.items()
                if f.kind == "fixed" and f.elem_bits == 32)
    g.producer(name).lo, g.producer(name).hi = -(1 << 25), 1 << 25
    program = compile_engine(g, config)
    io = (program.graph.input, program.graph.output)
    wide_bits = [(f, program.graph.producer(name).bit_width)
                 for name, (_, f) in program.tensors.items()
                 if name not in io and f.kind == "fixed" and f.elem_bits == 32]
    wide = [f for f, _ in wide_bits]
    assert wide and all(f.channels * 3 % f.port_bytes == 0 for f in wide)
    floor = dram_floor(program)
    assert floor - dram_floor(program, wide_maps_at=24) == sum(2 * f.nbytes // 4 for f in wide)
    assert floor - dram_floor(program, wide_maps_at=16) == sum(2 * f.nbytes // 2 for f in wide)
    # containers: only the maps whose proven range fits (none fits 16 bits: the maps
    # would be 16-bit ones already)
    fits = [f for f, bits in wide_bits if bits <= 24]
    assert len(wide) > len(fits) > 0
    assert floor - dram_floor(program, wide_maps_at=24, proven=True) == \
        sum(2 * f.nbytes // 4 for f in fits)
    assert dram_floor(program, wide_maps_at=16, proven=True) == floor
