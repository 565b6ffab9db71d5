# amaranth: UnusedElaboratable=no
# (some tests only inspect construction errors)
"""Beat streams (hw/beats.py) and the units that take beats (Subsample, Threshold,
MultiThreshold) against whole-pixel references split with ``beat_order``."""

import numpy as np
import pytest
import torch
from amaranth.back import verilog
from amaranth.hdl import Const, Signal, signed, unsigned
from amaranth.lib import data
from amaranth.sim import Simulator

from groupnet_hw.hw.beats import BeatPack, BeatPad, beat_order, beat_select, check_order
from groupnet_hw.hw.elementwise import Threshold
from groupnet_hw.hw.multithreshold import MultiThreshold
from groupnet_hw.hw.subsample import Subsample
from groupnet_hw.sim.streams import run_streams
from test_hw_multithreshold import accumulators, ref_multithreshold


# ---- references (independent of the RTL) ---------------------------------------------

def split(pixels, order):
    """[N, C] whole pixels -> N*B beats (lists of lane values), lane i of beat j =
    channel order[j][i]."""
    return [[int(px[c]) for c in row] for px in pixels for row in order]


def pack(fields, width):
    """Lane values -> one int, field i at bits i*width."""
    return sum(int(v) << (i * width) for i, v in enumerate(fields))


def random_order(rng, channels, beats):
    return rng.permutation(channels).reshape(beats, channels // beats).tolist()


def ref_threshold(acc, thresholds, invert):
    return (acc >= np.asarray(thresholds)) ^ np.asarray(invert, dtype=bool)


# ---- beat_order ----------------------------------------------------------------------

def test_beat_order_layout():
    # C=12 in G=2 groups of 6, B=3 beats: L=2 lanes per group per beat
    assert beat_order(12, 2, 3) == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]
    assert beat_order(5, 1, 1) == [[0, 1, 2, 3, 4]]
    assert beat_order(6, 1, 6) == [[c] for c in range(6)]
    assert beat_order(6, 3, 2) == [[0, 2, 4], [1, 3, 5]]


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"groups \(4\) does not divide channels \(6\)"):
        beat_order(6, 4, 1)
    with pytest.raises(ValueError, match=r"beats \(4\) does not divide the 6 channels per group"):
        beat_order(6, 1, 4)
    with pytest.raises(ValueError, match="beats must be positive"):
        beat_order(6, 1, 0)
    with pytest.raises(ValueError, match=r"beats \(4\) does not divide channels \(6\)"):
        BeatPack(1, 6, 4)
    with pytest.raises(ValueError, match="order must be 2 lists of 3 channels"):
        BeatPack(1, 6, 2, [[0, 1], [2, 3, 4, 5]])
    with pytest.raises(ValueError, match="every channel 0..5 exactly once"):
        check_order(6, 2, [[0, 1, 2], [3, 4, 4]])
    with pytest.raises(ValueError, match=r"in_beats \(3\) exceeds out_beats \(2\)"):
        BeatPad(unsigned(4), 3, 2)
    with pytest.raises(ValueError, match="beats must be a positive integer"):
        Subsample(unsigned(4), 5, 3, 2, beats=0)
    with pytest.raises(ValueError, match=r"beats \(4\) does not divide channels \(6\)"):
        Threshold(6, 5, [0] * 6, [0] * 6, beats=4)
    with pytest.raises(ValueError, match="every channel 0..3 exactly once"):
        MultiThreshold(4, 5, 2, [[0, 1, 2]] * 4, [0] * 4, beats=2, order=[[0, 1], [1, 2]])


def test_beat_select_is_a_constant_when_uniform():
    beat = Signal(range(3))
    assert isinstance(beat_select([5, 5, 5], beat, signed(4)), Const)
    assert not isinstance(beat_select([5, 4, 5], beat, signed(4)), Const)


# ---- BeatPack --------------------------------------------------------------------------

PACK_CASES = [(b, w, stall) for b in (1, 2, 3, 5) for w in (1, 7) for stall in (0.0, 0.5)]


@pytest.mark.parametrize("beats, width, stall", PACK_CASES)
def test_beat_pack(beats, width, stall):
    rng = np.random.default_rng(beats * 100 + width * 10 + int(stall * 2))
    channels = beats * int(rng.integers(1, 4))
    order = random_order(rng, channels, beats)
    n = 24
    x = rng.integers(0, 1 << width, size=(n, channels))
    x[0], x[1] = 0, (1 << width) - 1
    beats_in = [pack(lanes, width) for lanes in split(x, order)]
    expected = [pack(px, width) for px in x]
    dut = BeatPack(width, channels, beats, order)
    run = run_streams(dut, {"i": beats_in}, {"o": n}, stall=stall, seed=beats + width,
                      max_cycles=40 * n * beats + 100)
    assert run.outputs["o"] == expected
    if stall == 0:
        # one beat per cycle, each pixel one cycle after its last beat
        assert dut.latency == 1
        assert run.cycles == n * beats + dut.latency
        assert np.all(np.diff(run.out_cycles["o"]) == beats)


def test_beat_pack_reset_mid_pixel():
    rng = np.random.default_rng(3)
    order = beat_order(6, 2, 3)
    x = rng.integers(0, 8, size=(20, 6))
    run = run_streams(BeatPack(3, 6, 3, order), {"i": [pack(b, 3) for b in split(x, order)]},
                      {"o": 20}, stall=0.3, seed=2, reset_at=17, max_cycles=3000)
    assert run.outputs["o"] == [pack(px, 3) for px in x]


def test_beat_pack_ready_waits_only_on_the_last_beat():
    """With the output register full and not taken, beats 0..B-2 of the next pixel are
    still accepted; only its last beat waits, and goes in the cycle ``o.ready`` rises."""
    beats = 3
    dut = BeatPack(4, 6, beats)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    seen = []

    async def testbench(ctx):
        ctx.set(dut.i.valid, 1)
        for cycle in range(12):
            ready = int(cycle >= 8)
            ctx.set(dut.o.ready, ready)
            ctx.set(dut.i.payload, cycle)
            seen.append((ctx.get(dut.i.ready), ctx.get(dut.o.valid)))
            await ctx.tick()

    sim.add_testbench(testbench)
    sim.run()
    # cycles 0-2: pixel 0; 3-4: pixel 1's first beats; 5-7: its last beat waits on the
    # full output; 8: o.ready rises and it goes in; 9-10 next pixel's first beats
    assert [r for r, _ in seen] == [1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1]
    assert [v for _, v in seen] == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0]


# ---- BeatPad ---------------------------------------------------------------------------

@pytest.mark.parametrize("in_beats, out_beats, stall", [(1, 2, 0.0), (1, 3, 0.5),
                                                        (2, 3, 0.5), (2, 5, 0.0),
                                                        (3, 3, 0.3)])
def test_beat_pad(in_beats, out_beats, stall):
    rng = np.random.default_rng(in_beats * 10 + out_beats)
    shape = data.ArrayLayout(signed(5), 3)
    n = 15
    beats_in = rng.integers(-16, 16, size=(n * in_beats, 3)).tolist()
    expected = []
    for p in range(n):
        expected += beats_in[p * in_beats:(p + 1) * in_beats]
        expected += [[0, 0, 0]] * (out_beats - in_beats)
    dut = BeatPad(shape, in_beats, out_beats)
    run = run_streams(dut, {"i": beats_in}, {"o": len(expected)}, stall=stall,
                      seed=out_beats, max_cycles=40 * len(expected) + 100)
    assert run.outputs["o"] == expected
    if stall == 0:
        assert dut.latency == 0
        assert run.cycles == n * out_beats
        assert np.all(np.diff(run.out_cycles["o"]) == 1)


# ---- Subsample with beats --------------------------------------------------------------

@pytest.mark.parametrize("height, width, beats, stall", [(5, 3, 1, 0.3), (5, 3, 3, 0.3),
                                                          (3, 5, 3, 0.0), (4, 4, 3, 0.5)])
def test_subsample_beats(height, width, beats, stall):
    stride, frames, channels = 2, 2, 2 * beats
    rng = np.random.default_rng(height * 10 + width + beats)
    x = torch.from_numpy(rng.integers(0, 16, size=(frames, channels, height, width)))
    kept = x[:, :, ::stride, ::stride]
    order = beat_order(channels, 2, beats)

    def beats_of(t):
        """[F, C, H, W] -> the beat stream: pixels in raster order, each split."""
        return split(t.permute(0, 2, 3, 1).reshape(-1, channels).numpy(), order)

    dut = Subsample(data.ArrayLayout(unsigned(4), channels // beats), height, width, stride,
                    beats=beats)
    expected = beats_of(kept)
    run = run_streams(dut, {"i": beats_of(x)}, {"o": len(expected)}, stall=stall,
                      seed=beats, max_cycles=5000)
    assert run.outputs["o"] == expected
    if stall == 0:
        # one beat per cycle: the last kept beat leaves as it arrives
        last_kept = ((height - 1) // stride * stride * width + (width - 1) // stride * stride)
        assert run.cycles == ((frames - 1) * height * width + last_kept + 1) * beats


# ---- Threshold and MultiThreshold with beats -------------------------------------------

def uniform_lanes(thresholds, order, lo, hi, rng):
    """Make lane 0 the same threshold in every beat, lane 1 a different threshold below
    the range in every beat (a constant once clipped) and, with 3 lanes or more, lane 2
    out of range on both sides and in range across the beats."""
    for j, row in enumerate(order):
        thresholds[row[0]] = thresholds[order[0][0]]
        if len(row) > 1:
            thresholds[row[1]] = lo - 1 - j * 7
        if len(row) > 2:
            thresholds[row[2]] = [hi + 1 + j, lo - 5, int(rng.integers(lo, hi + 1))][j % 3]


THRESHOLD_CASES = [  # (channels, acc_width, beats, groups, stall, reset)
    (6, 5, 2, 1, 0.3, False),
    (9, 6, 3, 3, 0.5, True),
    (18, 4, 3, 3, 0.3, False),
    (12, 7, 4, 1, 0.0, False),
    (10, 5, 5, 1, 0.3, False),
]


@pytest.mark.parametrize("case", THRESHOLD_CASES)
def test_threshold_beats(case):
    channels, acc_width, beats, groups, stall, reset = case
    rng = np.random.default_rng(channels * acc_width)
    lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
    order = beat_order(channels, groups, beats)
    thresholds = rng.integers(lo - 3, hi + 4, size=channels)
    invert = rng.integers(0, 2, size=channels)
    uniform_lanes(thresholds, order, lo, hi, rng)
    for row in order:                       # an inversion the same in every beat
        invert[row[0]] = invert[order[0][0]]
    n = 30
    x = accumulators(rng, n, channels, acc_width)
    want = [pack(bits, 1) for bits in split(ref_threshold(x, thresholds, invert), order)]
    dut = Threshold(channels, acc_width, thresholds, invert, beats=beats, order=order)
    counts = {"o": len(want)}
    run = run_streams(dut, {"i": split(x, order)}, counts, stall=stall, seed=channels,
                      max_cycles=40 * len(want) + 100)
    assert run.outputs["o"] == want
    if stall == 0:
        assert run.cycles == n * beats + dut.latency
    if reset:
        run = run_streams(dut, {"i": split(x, order)}, counts, stall=stall, seed=7,
                          reset_at=len(want) // 2 + 2, max_cycles=40 * len(want) + 100)
        assert run.outputs["o"] == want


def test_threshold_beats_random_order():
    rng = np.random.default_rng(5)
    channels, acc_width, beats = 8, 5, 4
    order = random_order(rng, channels, beats)
    thresholds = rng.integers(-20, 20, size=channels)
    invert = rng.integers(0, 2, size=channels)
    x = accumulators(rng, 25, channels, acc_width)
    want = [pack(bits, 1) for bits in split(ref_threshold(x, thresholds, invert), order)]
    dut = Threshold(channels, acc_width, thresholds, invert, beats=beats, order=order)
    run = run_streams(dut, {"i": split(x, order)}, {"o": len(want)}, stall=0.3, seed=5,
                      max_cycles=5000)
    assert run.outputs["o"] == want


MULTI_CASES = [  # (channels, acc_width, bits, beats, groups, stall)
    (6, 5, 2, 2, 1, 0.3),
    (9, 6, 3, 3, 3, 0.5),
    (12, 4, 2, 2, 3, 0.0),
    (8, 4, 4, 4, 1, 0.3),
]


@pytest.mark.parametrize("case", MULTI_CASES)
def test_multithreshold_beats(case):
    channels, acc_width, bits, beats, groups, stall = case
    rng = np.random.default_rng(channels * acc_width + bits)
    lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
    levels = (1 << bits) - 1
    order = beat_order(channels, groups, beats)
    t = rng.integers(lo - 3, hi + 4, size=(channels, levels))
    invert = rng.integers(0, 2, size=channels)
    lanes = channels // beats
    for j, row in enumerate(order):
        # lane 0: one multiset of thresholds in every beat (shuffled: sorted per channel)
        t[row[0]] = rng.permutation(t[order[0][0]])
        invert[row[0]] = invert[order[0][0]]
        if lanes > 1:   # lane 1: out of range, below in some beats and above in others
            t[row[1]] = (lo - 1 - rng.integers(0, 50, size=levels) if j % 2 else
                         hi + 1 + rng.integers(0, 50, size=levels))
        if lanes > 2:   # lane 2: range ends and beyond, mixed with in-range values
            t[row[2], 0], t[row[2], -1] = lo - j, hi + j
    n = 24
    x = accumulators(rng, n, channels, acc_width)
    want = split(ref_multithreshold(x, t, invert), order)
    dut = MultiThreshold(channels, acc_width, bits, t, invert, beats=beats, order=order)
    run = run_streams(dut, {"i": split(x, order)}, {"o": len(want)}, stall=stall,
                      seed=channels, max_cycles=40 * len(want) + 100)
    assert run.outputs["o"] == want
    if stall == 0:
        assert run.cycles == n * beats + dut.latency


def test_converts_to_verilog():
    order = beat_order(6, 3, 2)
    for dut in (BeatPack(3, 6, 2, order), BeatPad(unsigned(6), 1, 3),
                Subsample(unsigned(6), 5, 3, 2, beats=3),
                Threshold(6, 5, [0, -40, 3, 16, 2, 2], [0, 1, 1, 0, 0, 0], beats=2,
                          order=order),
                MultiThreshold(4, 5, 2, [[0, 1, 2], [3, 4, 5], [0, 2, 1], [-1, 9, 40]],
                               [0, 1, 0, 0], beats=2)):
        assert "module top" in verilog.convert(dut, name="top")
