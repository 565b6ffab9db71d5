# amaranth: UnusedElaboratable=no
# (some tests only inspect attributes or construction errors)

"""RTL tests of the folded matrix-vector units (hw/mvu.py).

The reference is integer matrix arithmetic in numpy on +-1 / integer values,
built without any of the RTL's bit tricks (no popcount, no masked sums, no
padding, no folding), and compared with exact equality.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator
from hypothesis import HealthCheck, example, given, settings, strategies as st

from groupnet_hw.compiler.cycles import ISSUE_MUX_SLICES, mvu_cycles, mvu_latency, tree_stages
from groupnet_hw.hw.mvu import (BinaryMVU, BinaryWeightMVU, IntegerMVU, MVUChoices,
                                binary_tree_terms)
from groupnet_hw.hw.multithreshold import ThresholdTable
from groupnet_hw.hw.elementwise import AffineTable
from groupnet_hw.compiler.graph import signed_width
from groupnet_hw.sim.streams import run_streams, stream_put, take_probing_ready
from conftest import pairwise

# (kind, n_in, c_out, pe, simd, in_width, in_signed): the corner cases of the
# folding. Each id says which. Kinds: "bin" BinaryMVU, "bw" BinaryWeightMVU
# (in_width = in_bits, unsigned input), "int" IntegerMVU.
CONFIGS = {
    "bin-ragged-both":      ("bin", 7, 5, 2, 3, None, None),    # n_in % simd, c_out % pe != 0
    "bin-pe-eq-cout":       ("bin", 18, 4, 4, 5, None, None),   # one output fold, ragged input
    "bin-fully-parallel":   ("bin", 9, 6, 6, 9, None, None),    # ii = 1
    "bin-pe1-simd1":        ("bin", 5, 3, 1, 1, None, None),    # fully sequential
    "bin-3x3x8-to-16":      ("bin", 72, 16, 4, 24, None, None), # a real layer shape
    "bin-ragged-outfold":   ("bin", 80, 10, 3, 80, None, None), # one input fold, ragged PE
    "int-fully-parallel":   ("int", 9, 8, 8, 9, 8, False),      # first layer, ii = 1
    "int-signed-ragged":    ("int", 27, 16, 5, 4, 6, True),     # ragged, signed input
    "int-pe1-simd1":        ("int", 4, 3, 1, 1, 8, False),
    "bw2-ragged-both":      ("bw", 27, 7, 3, 5, 2, False),      # 3x3x3, 2-bit levels
    "bw4-fully-parallel":   ("bw", 9, 5, 5, 9, 4, False),       # ii = 1
    "bw2-pe1-simd1":        ("bw", 5, 3, 1, 1, 2, False),       # fully sequential
    "bw4-3x3x8-to-16":      ("bw", 72, 16, 4, 25, 4, False),    # a real layer, ragged simd
    "bw1-ragged-outfold":   ("bw", 13, 9, 2, 13, 1, False),     # 1-bit levels, one input fold
}


def _signed_range(width):
    return -(1 << (width - 1)), (1 << (width - 1)) - 1


def _activation(rng, expected, kind, acc_width):
    """A random activation for accumulators ``expected`` (vectors x channels) of
    ``signed(acc_width)`` and the values it gives, by the definitions. ``kind`` 1 or
    2: thresholds of an n-bit activation, some below and some above every
    accumulator, some equal, channels inverted at random; "affine": a post-op with
    scales of both signs and zero, ReLUs on either side."""
    acc = np.asarray(expected)
    if kind == "affine":
        c = acc.shape[1]
        scale = rng.integers(-300, 301, c)
        scale[0] = 0
        bias = rng.integers(-5000, 5001, c)
        shift = int(rng.integers(0, 7))
        pre_relu, post_relu = (bool(b) for b in rng.integers(0, 2, 2))
        half = (1 << (shift - 1)) if shift else 0

        def value(x):
            v = np.maximum(x, 0) if pre_relu else x
            y = (scale * v + bias + half) >> shift
            return np.maximum(y, 0) if post_relu else y
        lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
        ends = np.concatenate([value(np.full(c, lo)), value(np.full(c, hi)),
                               value(np.zeros(c, dtype=np.int64))])
        out_width = signed_width(int(ends.min()), int(ends.max()))
        table = AffineTable(scale.tolist(), bias.tolist(), shift, pre_relu, post_relu, out_width)
        return table, value(acc).tolist()
    levels = (1 << kind) - 1
    T = rng.integers(acc.min() - 2, acc.max() + 3, (acc.shape[1], levels))
    T[0, 0] = -(1 << 40)
    T[-1, -1] = 1 << 40
    if levels > 1:
        T[:, 1] = T[:, 0]
    invert = rng.integers(0, 2, acc.shape[1])
    out = ((acc[:, :, None] >= T[None]) ^ invert[None, :, None].astype(bool)).sum(2)
    return ThresholdTable(T.tolist(), invert.tolist()), out.tolist()


def _case(name, n_vectors=16, in_place=False, activation_bits=None, registered_rom=False,
          registered_products=False):
    """Seeded DUT, input beats, expected output beats and weights for a configuration
    (``in_place``: the MVU reads the held payload at every step, no input buffer;
    ``activation_bits``: with thresholds in the MVU, expecting the levels;
    ``registered_rom``: the weight ROM's read registered once more;
    ``registered_products``: an integer MVU's products registered once more)."""
    kind, n_in, c_out, pe, simd, in_width, in_signed = CONFIGS[name]
    rng = np.random.default_rng(list(CONFIGS).index(name))
    if kind == "bin":
        w = rng.integers(0, 2, (c_out, n_in))
        w[0, :] = 1  # all-agree / all-disagree channels reach +-n_in
        if c_out > 1:
            w[-1, :] = 0
        x = rng.integers(0, 2, (n_vectors, n_in))
        x[0, :] = 1
        x[1, :] = 0
        expected = (2 * x - 1) @ (2 * w - 1).T
        beats = [int(sum(int(b) << j for j, b in enumerate(row))) for row in x]
        make = lambda act: BinaryMVU(n_in, c_out, w, MVUChoices(
            pe, simd, in_place=in_place, activation=act, registered_rom=registered_rom))
    elif kind == "bw":
        w = rng.integers(0, 2, (c_out, n_in))
        w[0, :] = 1  # with x at its top on every lane: +-n_in*(2**in_bits - 1)
        if c_out > 1:
            w[-1, :] = 0
        top = (1 << in_width) - 1
        x = rng.integers(0, top + 1, (n_vectors, n_in))
        x[0, :] = top
        x[1, :] = 0
        expected = x @ (2 * w - 1).T
        beats = x.tolist()
        make = lambda act: BinaryWeightMVU(n_in, c_out, w, in_width, MVUChoices(
            pe, simd, in_place=in_place, activation=act, registered_rom=registered_rom))
    else:
        w = rng.integers(-7, 8, (c_out, n_in))
        w[0, :] = -7  # hits the accumulator bound with x at its extreme
        if in_signed:
            lo, hi = _signed_range(in_width)
        else:
            lo, hi = 0, (1 << in_width) - 1
        x = rng.integers(lo, hi + 1, (n_vectors, n_in))
        x[0, :] = lo if in_signed else hi  # max|x| on every lane
        x[1, :] = hi
        expected = x @ w.T
        beats = x.tolist()
        make = lambda act: IntegerMVU(n_in, c_out, w, in_width, in_signed, MVUChoices(
            pe, simd, in_place=in_place, activation=act, registered_rom=registered_rom,
            registered_products=registered_products))
    expected = expected.tolist()
    act = None
    if activation_bits:
        act, expected = _activation(rng, expected, activation_bits, make(None).acc_width)
    return make(act), beats, expected, w


def _ii(name):
    _, n_in, c_out, pe, simd, *_ = CONFIGS[name]
    return mvu_cycles(1, c_out, n_in, pe, simd)


@pytest.mark.parametrize("name,in_place,activation_bits", pairwise(
    name=list(CONFIGS), in_place=[False, True], activation_bits=[None, 1, 2, "affine"]))
def test_random_stalls(name, in_place, activation_bits):
    dut, beats, expected, _ = _case(name, in_place=in_place, activation_bits=activation_bits)
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.3,
                      seed=len(name), max_cycles=20 * len(beats) * (_ii(name) + 4))
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("name,in_place,activation_bits", pairwise(
    name=list(CONFIGS), in_place=[False, True], activation_bits=[None, 1, "affine"]))
def test_reset_mid_stream(name, in_place, activation_bits):
    dut, beats, expected, _ = _case(name, in_place=in_place, activation_bits=activation_bits)
    # Mid-vector for folded units (half a vector past the 3rd beat).
    reset_at = 3 * _ii(name) + max(1, _ii(name) // 2)
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.2, seed=7,
                      reset_at=reset_at, max_cycles=40 * len(beats) * (_ii(name) + 4))
    assert run.outputs["o"] == expected


# With input always valid and output always ready, vector k is accepted in
# cycle k*ii and its result in cycle k*ii + latency (latency = ii + 2 + the adder
# tree's pipeline stages), so V vectors span (V-1)*ii + latency + 1 cycles counting
# the first and the last handshake.


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("name", CONFIGS)
def test_registered_rom(name, in_place):
    """A weight ROM in block RAM (``registered_rom``, ECP5): its word and the input
    slice are registered once more where the issue rule had no operand stage, for one
    cycle more of latency; same results, one vector every ``ii`` cycles, and exact under
    stalls and through a reset. One step per vector has no ROM: nothing changes."""
    plain, beats, expected, _ = _case(name, n_vectors=10, in_place=in_place)
    dut = _case(name, n_vectors=10, in_place=in_place, registered_rom=True)[0]
    ii = _ii(name)
    assert dut.operand_stage == (plain.operand_stage or ii > 1)
    assert dut.latency == plain.latency + (dut.operand_stage and not plain.operand_stage)
    run = run_streams(dut, {"i": beats}, {"o": len(expected)})
    base = run_streams(plain, {"i": beats}, {"o": len(expected)})
    assert run.outputs["o"] == expected
    assert run.out_cycles["o"][0] - base.out_cycles["o"][0] == dut.latency - plain.latency
    assert (np.diff(run.out_cycles["o"]) == ii).all()
    dut = _case(name, n_vectors=10, in_place=in_place, registered_rom=True)[0]
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.3, seed=3,
                      reset_at=2 * ii + 1, max_cycles=40 * len(beats) * (ii + 4))
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("activation_bits", [None, "affine"])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("name", [n for n in CONFIGS if CONFIGS[n][0] == "int"])
def test_registered_products(name, in_place, activation_bits):
    """An integer MVU's products registered twice (``registered_products``, ECP5: in the
    DSP block, then by the adder tree): one cycle more of latency, the same results,
    one vector every ``ii`` cycles, exact under stalls and through a reset."""
    plain, beats, expected, _ = _case(name, n_vectors=10, in_place=in_place,
                                      activation_bits=activation_bits)
    dut = _case(name, n_vectors=10, in_place=in_place, activation_bits=activation_bits,
                registered_products=True)[0]
    ii = _ii(name)
    assert dut.latency == plain.latency + 1
    act = {None: 0, "affine": 2}[activation_bits]
    assert dut.latency == mvu_latency(ii, CONFIGS[name][4], True, act, product_stage=True)
    run = run_streams(dut, {"i": beats}, {"o": len(expected)})
    base = run_streams(plain, {"i": beats}, {"o": len(expected)})
    assert run.outputs["o"] == expected
    assert run.out_cycles["o"][0] - base.out_cycles["o"][0] == 1
    assert (np.diff(run.out_cycles["o"]) == ii).all()
    dut = _case(name, n_vectors=10, in_place=in_place, activation_bits=activation_bits,
                registered_products=True)[0]
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.3, seed=5,
                      reset_at=2 * ii + 1, max_cycles=40 * len(beats) * (ii + 4))
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("name,in_place,activation_bits", pairwise(
    name=list(CONFIGS), in_place=[False, True], activation_bits=[None, 2, "affine"]))
def test_full_throughput(name, in_place, activation_bits):
    """In place the vector is taken with its last step instead of its first: with the
    input always valid that costs no cycle (the next vector is there the cycle after).
    An activation costs its stages in latency (thresholds 1, a post-op 2) and nothing
    in throughput."""
    dut, beats, expected, _ = _case(name, n_vectors=10, in_place=in_place,
                                    activation_bits=activation_bits)
    _, n_in, c_out, pe, simd, *_ = CONFIGS[name]
    ii = _ii(name)
    assert dut.ii == ii
    terms = binary_tree_terms(simd) if CONFIGS[name][0] == "bin" else simd
    # the integer MVU's DSP operands, or a binary one's issue multiplexer over > 4 slices
    operands = CONFIGS[name][0] == "int" or -(-n_in // simd) > ISSUE_MUX_SLICES
    assert dut.operand_stage == operands
    act = {None: 0, 2: 1, "affine": 2}[activation_bits]
    assert dut.latency == mvu_latency(ii, terms, operands, act) == \
        ii + 2 + operands + tree_stages(terms) + act
    run = run_streams(dut, {"i": beats}, {"o": len(expected)})
    assert run.outputs["o"] == expected
    assert run.cycles == (mvu_cycles(len(beats), c_out, n_in, pe, simd) - ii
                          + dut.latency + 1)
    # Steady state: one result every ii cycles, not just on average.
    gaps = np.diff(run.out_cycles["o"])
    assert (gaps == ii).all(), gaps


@pytest.mark.parametrize("name", CONFIGS)
def test_widths_are_minimal(name):
    kind, n_in, c_out, pe, simd, in_width, in_signed = CONFIGS[name]
    dut, _, _, w = _case(name)
    if kind == "bin":
        bound = n_in
    elif kind == "bw":
        bound = n_in * ((1 << in_width) - 1)
    else:
        x_max = (1 << (in_width - 1)) if in_signed else (1 << in_width) - 1
        bound = int(np.abs(w).sum(axis=1).max()) * x_max
        lo, hi = int(w.min()), int(w.max())
        wlo, whi = _signed_range(dut.weight_width)
        assert wlo <= lo and hi <= whi
        wlo, whi = _signed_range(dut.weight_width - 1) if dut.weight_width > 1 else (0, -1)
        assert not (wlo <= lo and hi <= whi)
    lo, hi = _signed_range(dut.acc_width)
    assert lo <= -bound and bound <= hi
    lo, hi = _signed_range(dut.acc_width - 1) if dut.acc_width > 1 else (0, -1)
    assert not (lo <= -bound and bound <= hi)


def test_output_holds_under_backpressure():
    """Protocol: once o.valid rises, valid and payload hold until o.ready;
    o.valid does not react to o.ready within a cycle."""
    dut, beats, expected, _ = _case("bin-ragged-both", n_vectors=6)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    received = []

    async def producer(ctx):
        for beat in beats:
            await stream_put(ctx, dut.i, beat)

    async def consumer(ctx):
        rng = np.random.default_rng(3)
        held = None
        while len(received) < len(expected):
            ready = int(rng.random() < 0.25)
            ctx.set(dut.o.ready, ready)
            valid_before = ctx.get(dut.o.valid)
            ctx.set(dut.o.ready, 1 - ready)
            assert ctx.get(dut.o.valid) == valid_before  # no comb path ready -> valid
            ctx.set(dut.o.ready, ready)
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            payload = [int(v) for v in payload]
            if held is not None:
                assert valid and payload == held
            if valid and ready:
                received.append(payload)
                held = None
            elif valid:
                held = payload

    sim.add_testbench(producer, background=True)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * 2000)
    assert received == expected


@pytest.mark.parametrize("name", CONFIGS)
def test_input_ready_ignores_output_ready(name):
    """The stall (and so ``i.ready``, and the enable of every pipeline register) is a
    function of the unit's own registers: flipping ``o.ready`` within a cycle never
    changes ``i.ready``, also with ``ii = 1``, where the output register's skid keeps the
    rate (``hw.skid``); the rate itself is held by the tests of full throughput."""
    dut, beats, expected, _ = _case(name, n_vectors=8)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    result = {}

    async def producer(ctx):
        for beat in beats:
            await stream_put(ctx, dut.i, beat)

    async def consumer(ctx):
        result["o"] = await take_probing_ready(ctx, dut.o, dut.i.ready, len(expected), 0.4, 5)

    sim.add_testbench(producer, background=True)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * 200 * (_ii(name) + 8))
    received, reacted = result["o"]
    assert received == expected
    assert not reacted


@pytest.mark.parametrize("name", ["bin-ragged-both", "bin-fully-parallel", "int-signed-ragged",
                                  "bw2-ragged-both"])
def test_verilog_and_rom(name):
    dut, *_ = _case(name)
    _, n_in, c_out, pe, simd, *_ = CONFIGS[name]
    text = verilog.convert(dut, name="mvu")
    word = pe * simd * (dut.weight_width if CONFIGS[name][0] == "int" else 1)
    # The weights are one memory of ii words (block RAM), not a register file.
    assert f"reg [{word - 1}:0] weights [{_ii(name) - 1}:0];" in text


def test_rejects_bad_parameters():
    w = np.ones((4, 6), dtype=int)
    with pytest.raises(ValueError):
        BinaryMVU(6, 4, w, MVUChoices(5, 2))        # pe > c_out
    with pytest.raises(ValueError):
        BinaryMVU(6, 4, w, MVUChoices(2, 7))        # simd > n_in
    with pytest.raises(ValueError):
        BinaryMVU(6, 4, 2 * w, MVUChoices(2, 2))    # not bits
    with pytest.raises(ValueError):
        IntegerMVU(6, 4, w.T, 8, False, MVUChoices(2, 2))     # wrong shape
    with pytest.raises(ValueError):
        BinaryWeightMVU(6, 4, 2 * w, 2, MVUChoices(2, 2))   # not bits
    with pytest.raises(ValueError):
        BinaryWeightMVU(6, 4, w, 0, MVUChoices(2, 2))
    with pytest.raises(ValueError):
        BinaryWeightMVU(6, 4, w.T, 2, MVUChoices(2, 2))     # wrong shape


@st.composite
def _random_config(draw):
    kind = draw(st.sampled_from(["bin", "bw", "int"]))
    n_in = draw(st.integers(1, 80))
    c_out = draw(st.integers(1, 16))
    pe = draw(st.integers(1, c_out))
    simd = draw(st.integers(1, n_in))
    in_width = draw(st.integers(1, 9))
    in_signed = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    in_place = draw(st.booleans())
    activation_bits = draw(st.sampled_from([None, None, 1, 2, "affine"]))
    return kind, n_in, c_out, pe, simd, in_width, in_signed, seed, in_place, activation_bits


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_random_config(), st.sampled_from([None, "reset"]))
def test_random_configurations(config, mode):
    """Random shapes, weights and stall patterns, with or without a reset, the input
    buffered or read in place, with or without thresholds in the MVU."""
    kind, n_in, c_out, pe, simd, in_width, in_signed, seed, in_place, activation_bits = config
    rng = np.random.default_rng(seed)
    n_vectors = 8
    if kind == "bin":
        w = rng.integers(0, 2, (c_out, n_in))
        x = rng.integers(0, 2, (n_vectors, n_in))
        expected = (2 * x - 1) @ (2 * w - 1).T
        beats = [int(sum(int(b) << j for j, b in enumerate(row))) for row in x]
        make = lambda act: BinaryMVU(n_in, c_out, w, MVUChoices(pe, simd, in_place=in_place,
                                                                activation=act))
    elif kind == "bw":
        in_bits = min(in_width, 8)
        w = rng.integers(0, 2, (c_out, n_in))
        x = rng.integers(0, 1 << in_bits, (n_vectors, n_in))
        expected = x @ (2 * w - 1).T
        beats = x.tolist()
        make = lambda act: BinaryWeightMVU(n_in, c_out, w, in_bits, MVUChoices(
            pe, simd, in_place=in_place, activation=act))
    else:
        w = rng.integers(-300, 301, (c_out, n_in)) >> rng.integers(0, 9)
        lo, hi = _signed_range(in_width) if in_signed else (0, (1 << in_width) - 1)
        x = rng.integers(lo, hi + 1, (n_vectors, n_in))
        expected = x @ w.T
        beats = x.tolist()
        make = lambda act: IntegerMVU(n_in, c_out, w, in_width, in_signed, MVUChoices(
            pe, simd, in_place=in_place, activation=act))
    expected, act = expected.tolist(), None
    if activation_bits:
        act, expected = _activation(rng, expected, activation_bits, make(None).acc_width)
    dut = make(act)
    ii = dut.ii
    reset_at = int(rng.integers(2, 3 * ii + 4)) if mode else None
    run = run_streams(dut, {"i": beats}, {"o": n_vectors}, stall=0.3, seed=seed,
                      reset_at=reset_at, max_cycles=40 * n_vectors * (ii + 4))
    assert run.outputs["o"] == expected


@st.composite
def _grouped_config(draw):
    kind = draw(st.sampled_from(["bin", "bw"]))
    groups = draw(st.integers(2, 4))
    n_in = draw(st.integers(1, 30))
    c_group = draw(st.integers(1, 6))
    pe = draw(st.integers(1, c_group))
    simd = draw(st.integers(1, n_in))
    seed = draw(st.integers(0, 2**32 - 1))
    in_place = draw(st.booleans())
    activation = draw(st.sampled_from([None, 1, "affine"]))
    return kind, groups, n_in, c_group, pe, simd, seed, in_place, activation


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_grouped_config(), st.sampled_from(["full-rate", "stalls", "reset"]))
@example(("bin", 5, 18, 4, 2, 6, 11, False, None), "stalls")  # two-level issue: 5 groups of 3 slices
@example(("bin", 5, 18, 4, 2, 6, 11, True, 1), "stalls")
@example(("bw", 3, 7, 2, 1, 3, 12, False, "affine"), "full-rate")
def test_grouped_time_shared_bases(config, mode):
    """Grouped MVU (K bases time-shared on one unit): group g's channels see only
    group g's lanes, at ``groups*ceil(c_group/pe)*ceil(n_in/simd)`` cycles per vector;
    under random stalls and after a reset mid-vector too; with an activation in the
    MVU (a sign, or a post-op, of every channel, the grouped convolution's padding PEs
    included), its values."""
    kind, groups, n_in, c_group, pe, simd, seed, in_place, activation = config
    rng = np.random.default_rng(seed)
    n_vectors = 6
    c_out = groups * c_group
    w = rng.integers(0, 2, (c_out, n_in))
    if kind == "bin":
        x = rng.integers(0, 2, (n_vectors, groups, n_in))
        expected = np.concatenate([(2 * x[:, g] - 1) @ (2 * w[g * c_group:(g + 1) * c_group] - 1).T
                                   for g in range(groups)], axis=1)
        beats = [int(sum(int(b) << j for j, b in enumerate(row.reshape(-1)))) for row in x]
        make = lambda act: BinaryMVU(n_in, c_out, w, MVUChoices(
            pe, simd, groups=groups, in_place=in_place, activation=act))
    else:
        x = rng.integers(0, 4, (n_vectors, groups, n_in))
        expected = np.concatenate([x[:, g] @ (2 * w[g * c_group:(g + 1) * c_group] - 1).T
                                   for g in range(groups)], axis=1)
        beats = x.reshape(n_vectors, -1).tolist()
        make = lambda act: BinaryWeightMVU(n_in, c_out, w, 2, MVUChoices(
            pe, simd, groups=groups, in_place=in_place, activation=act))
    expected, act = expected.tolist(), None
    if activation:
        act, expected = _activation(rng, expected, activation, make(None).acc_width)
    dut = make(act)
    assert dut.ii == mvu_cycles(groups, c_group, n_in, pe, simd)
    assert dut.operand_stage == (groups * -(-n_in // simd) > ISSUE_MUX_SLICES)
    reset_at = int(rng.integers(2, 3 * dut.ii + 4)) if mode == "reset" else None
    run = run_streams(dut, {"i": beats}, {"o": n_vectors}, stall=0.0 if mode == "full-rate" else 0.3,
                      seed=seed, reset_at=reset_at, max_cycles=40 * n_vectors * (dut.ii + 4))
    assert run.outputs["o"] == expected
    if mode == "full-rate":
        assert (np.diff(run.out_cycles["o"]) == dut.ii).all()


def _beat_lanes(c_out, groups, beats):
    """Channels of each output beat (reference layout: beat j carries channels
    j*L .. j*L+L-1 of every group, group-major, L = c_out/groups/beats)."""
    c_group = c_out // groups
    lanes = c_group // beats
    return [[g * c_group + j * lanes + l for g in range(groups) for l in range(lanes)]
            for j in range(beats)]


@st.composite
def _beats_config(draw):
    kind = draw(st.sampled_from(["bin", "bw", "int"]))
    groups = 1 if kind == "int" else draw(st.integers(1, 3))
    beats = draw(st.integers(2, 4))
    lanes = draw(st.integers(1, 3))
    pe = draw(st.integers(1, lanes))
    n_in = draw(st.integers(1, 20))
    simd = draw(st.integers(1, n_in))
    seed = draw(st.integers(0, 2**32 - 1))
    in_place = draw(st.booleans())
    activation = draw(st.sampled_from([None, 1, "affine"]))
    return kind, groups, beats, lanes, pe, n_in, simd, seed, in_place, activation


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_beats_config(), st.sampled_from(["full-rate", "stalls", "reset"]))
@example(("bin", 3, 2, 2, 1, 6, 1, 5, False, 1), "full-rate")   # three groups' folds per beat
@example(("bin", 1, 4, 1, 1, 3, 3, 6, False, None), "full-rate")  # a beat every cycle
@example(("int", 1, 3, 2, 2, 4, 4, 7, True, "affine"), "stalls")
def test_beat_output(config, mode):
    """An MVU with ``beats`` sends each vector as beats of every group's next channels
    (beat j: channels j*L.. of each group), a beat as soon as its folds are done: every
    ``beat_steps`` cycles at full rate, the first ``latency`` after the vector; under
    random stalls, after a reset, with an activation, with padding PEs (PE not dividing
    the beat's lanes) and at one beat per cycle."""
    kind, groups, beats, lanes, pe, n_in, simd, seed, in_place, activation = config
    rng = np.random.default_rng(seed)
    n_vectors = 5
    c_group = beats * lanes
    c_out = groups * c_group
    if kind == "int":
        w = rng.integers(-7, 8, (c_out, n_in))
        x = rng.integers(0, 256, (n_vectors, n_in))
        expected = x @ w.T
        vectors = x.tolist()
        make = lambda act: IntegerMVU(n_in, c_out, w, 8, False, MVUChoices(
            pe, simd, in_place=in_place, activation=act, beats=beats))
    else:
        w = rng.integers(0, 2, (c_out, n_in))
        top = 1 if kind == "bin" else 3
        x = rng.integers(0, top + 1, (n_vectors, groups, n_in))
        xs = 2 * x - 1 if kind == "bin" else x
        expected = np.concatenate([xs[:, g] @ (2 * w[g * c_group:(g + 1) * c_group] - 1).T
                                   for g in range(groups)], axis=1)
        if kind == "bin":
            vectors = [int(sum(int(b) << j for j, b in enumerate(row.reshape(-1)))) for row in x]
            make = lambda act: BinaryMVU(n_in, c_out, w, MVUChoices(
                pe, simd, groups=groups, in_place=in_place, activation=act, beats=beats))
        else:
            vectors = x.reshape(n_vectors, -1).tolist()
            make = lambda act: BinaryWeightMVU(n_in, c_out, w, 2, MVUChoices(
                pe, simd, groups=groups, in_place=in_place, activation=act, beats=beats))
    expected, act = expected.tolist(), None
    if activation:
        act, expected = _activation(rng, expected, activation, make(None).acc_width)
    dut = make(act)
    assert dut.ii == groups * beats * -(-lanes // pe) * -(-n_in // simd)
    assert dut.beat_steps * beats == dut.ii
    order = _beat_lanes(c_out, groups, beats)
    out_beats = [[vec[c] for c in order[j]] for vec in expected for j in range(beats)]
    reset_at = int(rng.integers(2, 3 * dut.ii + 4)) if mode == "reset" else None
    run = run_streams(dut, {"i": vectors}, {"o": len(out_beats)},
                      stall=0.0 if mode == "full-rate" else 0.3, seed=seed, reset_at=reset_at,
                      max_cycles=40 * n_vectors * (dut.ii + 4))
    assert run.outputs["o"] == out_beats
    if mode == "full-rate":
        assert (np.diff(run.out_cycles["o"]) == dut.beat_steps).all()
        # the first beat `latency` after the first vector, the last beat of the last
        # vector (beats-1)*beat_steps after its first
        assert run.cycles == ((n_vectors - 1) * dut.ii + (beats - 1) * dut.beat_steps
                              + dut.latency + 1)


def test_beats_reject_bad_parameters():
    w = np.zeros((12, 4), dtype=int)
    with pytest.raises(ValueError, match="beats must divide"):
        BinaryMVU(4, 12, w, MVUChoices(1, 1, groups=2, beats=4))
    with pytest.raises(ValueError, match="pe must be in"):
        BinaryMVU(4, 12, w, MVUChoices(3, 1, groups=2, beats=3))
