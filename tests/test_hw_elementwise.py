"""Per-pixel units (hw/elementwise.py) against a numpy reference, under stalls and reset."""

import numpy as np
import pytest
from amaranth.back import verilog

from groupnet_hw.compiler.cycles import elementwise_cycles
from groupnet_hw.hw.elementwise import PostOp, ResidualAdd, SignBits, Threshold
from groupnet_hw.sim.streams import run_streams, stream_put, take_probing_ready

SEEDS = range(5)


# ---- reference (numpy int64; independent of the RTL) ----------------------------

def ref_round_shift(v, s):
    return v if s == 0 else (v + (1 << (s - 1))) >> s


def ref_pack_bits(bits):
    """[N, C] of 0/1 -> N ints, bit c = channel c."""
    return [int(sum(int(b) << c for c, b in enumerate(row))) for row in bits]


def ref_sign(x):
    return ref_pack_bits(x >= 0)


def ref_threshold(acc, thresholds, invert):
    return ref_pack_bits((acc >= np.asarray(thresholds)) ^ np.asarray(invert, dtype=bool))


def ref_postop(acc, scale, bias, shift, pre_relu, post_relu):
    v = np.maximum(acc, 0) if pre_relu else acc
    y = ref_round_shift(np.asarray(scale) * v + np.asarray(bias), shift)
    return np.maximum(y, 0) if post_relu else y


def ref_residual(a, b):
    out = a.copy()
    out[:, :b.shape[1]] += b
    return out


# ---- stimulus ------------------------------------------------------------------

def pixels(rng, n, channels, width):
    """Random signed pixels with both range ends present in every channel."""
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    x = rng.integers(lo, hi + 1, size=(n, channels), dtype=np.int64)
    x[0], x[1], x[2] = lo, hi, 0
    x[3] = -1
    return x


def width_for(values):
    """Signed width that holds every value (what the compiler's range analysis gives)."""
    values = np.asarray(values)
    lo, hi = int(values.min()), int(values.max())
    return max((v if v >= 0 else ~v).bit_length() + 1 for v in (lo, hi))


def check(dut, inputs, expected, seed):
    """Exact equality with random stalls, and again with a reset mid-stream."""
    beats = len(next(iter(expected.values())))
    counts = {name: len(v) for name, v in expected.items()}
    # Stalls cost at most ~2.5 idle cycles per beat and stream: a small deadline makes a
    # lost beat fail in a second instead of after a million cycles.
    budget = 20 * beats + 200
    run = run_streams(dut, inputs, counts, stall=0.3, seed=seed, max_cycles=budget)
    assert run.outputs == expected
    run = run_streams(dut, inputs, counts, stall=0.3, seed=seed + 100,
                      reset_at=beats // 2 + 3, max_cycles=budget)
    assert run.outputs == expected


def as_lists(x):
    return [[int(v) for v in row] for row in x]


# ---- tests -----------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_sign_bits(seed):
    rng = np.random.default_rng(seed)
    channels, width = int(rng.integers(3, 9)), int(rng.integers(1, 9))
    x = pixels(rng, 60, channels, width)
    check(SignBits(channels, width), {"i": as_lists(x)}, {"o": ref_sign(x)}, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_threshold(seed):
    rng = np.random.default_rng(seed)
    channels, acc_width = int(rng.integers(3, 9)), int(rng.integers(2, 10))
    lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
    thresholds = rng.integers(lo - 3, hi + 4, size=channels)
    # Out-of-range thresholds (always / never), as BN with gamma = 0 produces, and
    # the range ends themselves.
    thresholds[0], thresholds[1] = lo - 1 - int(rng.integers(0, 100)), hi + 1
    thresholds[2] = lo if seed % 2 else hi
    invert = rng.integers(0, 2, size=channels)
    x = pixels(rng, 60, channels, acc_width)
    dut = Threshold(channels, acc_width, thresholds, invert)
    check(dut, {"i": as_lists(x)}, {"o": ref_threshold(x, thresholds, invert)}, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_postop(seed):
    rng = np.random.default_rng(seed)
    channels, acc_width = int(rng.integers(3, 9)), int(rng.integers(3, 12))
    scale = rng.integers(-60, 61, size=channels)
    scale[0], scale[1] = 0, -int(rng.integers(1, 60))   # gamma = 0 and gamma < 0
    bias = rng.integers(-5000, 5001, size=channels)
    shift = int(rng.integers(0, 7))
    pre_relu, post_relu = bool(seed & 1), bool(seed & 2)
    x = pixels(rng, 60, channels, acc_width)
    y = ref_postop(x, scale, bias, shift, pre_relu, post_relu)
    # out_width from the extremes over the full accumulator range (y is monotone).
    lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
    ends = ref_postop(np.array([[lo] * channels, [hi] * channels]), scale, bias, shift,
                      pre_relu, post_relu)
    out_width = width_for(ends) + (seed == 4)
    dut = PostOp(channels, acc_width, scale, bias, shift, pre_relu, post_relu, out_width)
    assert [r for r in dut.y_ranges] == [(int(ends[:, c].min()), int(ends[:, c].max()))
                                         for c in range(channels)]
    check(dut, {"i": as_lists(x)}, {"o": as_lists(y)}, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_residual_add(seed):
    rng = np.random.default_rng(seed)
    channels = int(rng.integers(3, 9))
    b_channels = channels if seed == 0 else int(rng.integers(1, channels))
    a_width, b_width = int(rng.integers(2, 10)), int(rng.integers(2, 10))
    a = pixels(rng, 60, channels, a_width)
    b = pixels(rng, 60, b_channels, b_width)
    out_width = max(a_width, b_width) + 1
    dut = ResidualAdd(channels, a_width, b_channels, b_width, out_width)
    check(dut, {"a": as_lists(a), "b": as_lists(b)}, {"o": as_lists(ref_residual(a, b))},
          seed)


def test_residual_add_ragged_stalls():
    """The join must pair the k-th a with the k-th b whatever the two producers do."""
    rng = np.random.default_rng(7)
    a, b = pixels(rng, 200, 4, 6), pixels(rng, 200, 2, 5)
    dut = ResidualAdd(4, 6, 2, 5, 7)
    run = run_streams(dut, {"a": as_lists(a), "b": as_lists(b)}, {"o": 200},
                      stall=0.6, seed=3, max_cycles=10_000)
    assert run.outputs["o"] == as_lists(ref_residual(a, b))


@pytest.mark.parametrize("paced", [False, True])
def test_residual_add_paced_interval_and_ready(paced):
    """Paced, the join takes a beat only into an empty output register: one pixel every
    2 cycles with both inputs always valid and the output always ready, correct under
    random stalls, and its inputs' ``ready`` (the FIFOs' read enables) never reacts to
    ``o.ready`` within a cycle. Unpaced it reacts, and runs at one pixel per cycle."""
    from amaranth.sim import Simulator

    rng = np.random.default_rng(11)
    a, b = pixels(rng, 40, 4, 6), pixels(rng, 40, 2, 5)
    expected = as_lists(ref_residual(a, b))
    run = run_streams(ResidualAdd(4, 6, 2, 5, 7, paced=paced),
                      {"a": as_lists(a), "b": as_lists(b)}, {"o": 40}, max_cycles=1000)
    assert run.outputs["o"] == expected
    assert np.all(np.diff(run.out_cycles["o"]) == (2 if paced else 1))
    stalled = run_streams(ResidualAdd(4, 6, 2, 5, 7, paced=paced),
                          {"a": as_lists(a), "b": as_lists(b)}, {"o": 40},
                          stall=0.5, seed=4, max_cycles=5000)
    assert stalled.outputs["o"] == expected

    dut = ResidualAdd(4, 6, 2, 5, 7, paced=paced)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    result = {}

    async def producer_a(ctx):
        for beat in as_lists(a):
            await stream_put(ctx, dut.a, beat)

    async def producer_b(ctx):
        for beat in as_lists(b):
            await stream_put(ctx, dut.b, beat)

    async def consumer(ctx):
        result["o"] = await take_probing_ready(ctx, dut.o, dut.a.ready, len(expected), 0.5, 5)

    sim.add_testbench(producer_a, background=True)
    sim.add_testbench(producer_b, background=True)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * 1000)
    received, reacted = result["o"]
    assert received == expected
    assert reacted == (not paced)


UNITS = [
    (lambda: SignBits(5, 6), ["i"]),
    (lambda: Threshold(5, 6, [-100, -32, 0, 31, 32], [0, 1, 0, 1, 1]), ["i"]),
    (lambda: PostOp(5, 6, [-3, 0, 5, 1, 7], [7, -2, 100, 0, -9], 3, True, True, 9), ["i"]),
    (lambda: ResidualAdd(5, 6, 3, 4, 7), ["a", "b"]),
]


@pytest.mark.parametrize("index", range(4))
def test_full_throughput(index):
    """F frames of H*W pixels take F*elementwise_cycles(H, W) + latency (1) cycles."""
    make, names = UNITS[index]
    dut = make()
    frames, height, width = 3, 4, 5
    n = frames * height * width
    rng = np.random.default_rng(index)
    inputs = {name: as_lists(rng.integers(-8, 8, size=(n, 5 if name != "b" else 3)))
              for name in names}
    run = run_streams(dut, inputs, {"o": n}, max_cycles=10 * n)
    assert dut.latency == 1
    assert run.cycles == frames * elementwise_cycles(height, width) + dut.latency
    assert np.all(np.diff(run.out_cycles["o"]) == 1)


@pytest.mark.parametrize("index", range(4))
def test_converts_to_verilog(index):
    dut = UNITS[index][0]()
    assert "module" in verilog.convert(dut, name=type(dut).__name__)


# ---- channel-serial (lane-folded) post-op -----------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_folded_postop_equals_reference(seed):
    """Odd channel counts and lanes that do not divide them (padding lanes), lanes = 1
    and lanes = C (one step), under stalls and a mid-stream reset; from seed 3 values
    wider than one multiplier (the product in pieces, ``hw.arith.registered_pieces``)."""
    rng = np.random.default_rng(seed + 50)
    channels = int(rng.integers(3, 11))
    acc_width = int(rng.integers(3, 12)) if seed < 3 else int(rng.integers(19, 36))
    lanes = [1, channels, 2, 3, channels - 1][seed]
    scale = rng.integers(-600, 601, size=channels)
    scale[0], scale[1] = 0, -int(rng.integers(1, 600))
    bias = rng.integers(-50000, 50001, size=channels)
    shift = int(rng.integers(0, 9))
    pre_relu, post_relu = bool(seed & 1), bool(seed & 2)
    x = pixels(rng, 40, channels, acc_width)
    y = ref_postop(x, scale, bias, shift, pre_relu, post_relu)
    lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
    ends = ref_postop(np.array([[lo] * channels, [hi] * channels]), scale, bias, shift,
                      pre_relu, post_relu)
    dut = PostOp(channels, acc_width, scale, bias, shift, pre_relu, post_relu,
                 width_for(ends), lanes=lanes)
    check(dut, {"i": as_lists(x)}, {"o": as_lists(y)}, seed)


@pytest.mark.parametrize("channels,lanes", [(7, 2), (16, 3), (5, 5), (4, 1)])
def test_folded_postop_interval_and_registered_ready(channels, lanes):
    """One pixel per max(ceil(C/lanes)+1, L+2) cycles (L lane registers: 2, or 4 from 5
    steps; with one step 3), first result after ceil(C/lanes)+1+L."""
    from groupnet_hw.hw.lanes import folded_interval
    dut = PostOp(channels, 8, list(range(1, channels + 1)), [0] * channels, 1, False, False,
                 14, lanes=lanes)
    n = 12
    rng = np.random.default_rng(channels)
    run = run_streams(dut, {"i": as_lists(rng.integers(-100, 100, size=(n, channels)))},
                      {"o": n}, max_cycles=100 * n)
    folds = -(-channels // lanes)
    assert dut.lane_latency == (4 if folds >= 5 else 2)
    interval = folded_interval(channels, lanes, dut.lane_latency)
    assert dut.interval == interval == (3 if folds == 1 else max(folds + 1, dut.lane_latency + 2))
    assert dut.latency == folds + 1 + dut.lane_latency
    assert np.all(np.diff(run.out_cycles["o"]) == interval)
    assert run.cycles == (n - 1) * interval + dut.latency + 1


@pytest.mark.parametrize("channels,lanes", [(16, 1), (7, 2), (9, 3)])
def test_folded_steps_go_on_while_the_output_waits(channels, lanes):
    """With two steps or more a folded unit's steps do not wait for ``o.ready``: while
    its output waits for the consumer it works through the next pixel up to the last
    step, so once the consumer takes the output the next one follows after the lane
    pipeline only (a few cycles), not after ceil(C/lanes) more steps. This is what lets
    the step enable, which fans out to every lane, ignore the consumer's ``ready``."""
    from amaranth.sim import Simulator

    dut = PostOp(channels, 8, list(range(1, channels + 1)), [0] * channels, 1, False, False,
                 14, lanes=lanes)
    rng = np.random.default_rng(channels)
    x = as_lists(rng.integers(-100, 100, size=(3, channels)))
    expected = as_lists(ref_postop(np.array(x), np.arange(1, channels + 1), np.zeros(channels,
                                   dtype=np.int64), 1, False, False))
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    taken = []

    async def producer(ctx):
        for beat in x:
            await stream_put(ctx, dut.i, beat)

    async def consumer(ctx):
        cycle = 0
        while len(taken) < len(x):
            # hold the first result for 50 cycles, then take every result at once
            ready = int(cycle >= 50)
            ctx.set(dut.o.ready, ready)
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            cycle += 1
            if valid and ready:
                taken.append((cycle, [int(v) for v in payload]))

    sim.add_testbench(producer, background=True)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * 400)
    assert [p for _, p in taken] == expected
    # the last step, the lane pipeline, the output register: no step of the pixel before
    assert taken[1][0] - taken[0][0] == 1 + dut.lane_latency + 1
