# amaranth: UnusedElaboratable=no
# (some tests only inspect construction errors)
"""Multi-threshold unit (hw/multithreshold.py) against a numpy reference, under stalls and reset."""

import numpy as np
import pytest
from amaranth.back import verilog

from groupnet_hw.compiler.cycles import elementwise_cycles
from groupnet_hw.hw.multithreshold import MultiThreshold
from groupnet_hw.sim.streams import run_streams


# ---- reference (numpy int64; independent of the RTL: a plain count, no sorting) ----

def ref_multithreshold(acc, thresholds, invert):
    """[N, C] accumulators, [C, L] thresholds, [C] invert -> [N, C] levels."""
    hits = acc[:, :, None] >= np.asarray(thresholds)[None]
    hits ^= np.asarray(invert, dtype=bool)[None, :, None]
    return hits.sum(axis=2)


# ---- stimulus --------------------------------------------------------------------

def accumulators(rng, n, channels, width):
    """Random signed pixels with both range ends (and -1, 0) present in every channel."""
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    x = rng.integers(lo, hi + 1, size=(n, channels), dtype=np.int64)
    x[0], x[1], x[2], x[3] = lo, hi, 0, -1
    return x


def random_thresholds(rng, channels, acc_width, bits):
    """Unsorted thresholds with repeats, range ends and out-of-range values.

    Channel 0: all below the range (gamma = 0 with a positive offset: always the top
    level); channel 1: all above it (always level 0); channel 2: sorted, as the compiler
    folds a quantizer; the others: anything around the range, in random order.
    """
    lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
    levels = (1 << bits) - 1
    t = rng.integers(lo - 3, hi + 4, size=(channels, levels))
    t[0] = lo - rng.integers(0, 100, size=levels)
    t[1] = hi + 1 + rng.integers(0, 100, size=levels)
    t[2] = np.sort(t[2])
    t[3, 0], t[3, -1] = lo, hi          # the range ends themselves
    if levels > 2:
        t[3, 1] = t[3, 2]               # a repeated threshold
    return t


def as_lists(x):
    return [[int(v) for v in row] for row in x]


# (channels, acc_width, bits): odd channel counts, every bits in 1..4, and 8.
CONFIGS = {
    "c5-w6-n2": (5, 6, 2),
    "c7-w9-n4": (7, 9, 4),
    "c4-w3-n4": (4, 3, 4),      # 15 thresholds on an 8-value range: many constant
    "c9-w12-n2": (9, 12, 2),
    "c5-w5-n3": (5, 5, 3),
    "c4-w7-n1": (4, 7, 1),      # degenerates to Threshold
    "c4-w10-n8": (4, 10, 8),
}


def make_case(name, seed, n=60):
    channels, acc_width, bits = CONFIGS[name]
    rng = np.random.default_rng(seed)
    thresholds = random_thresholds(rng, channels, acc_width, bits)
    invert = rng.integers(0, 2, size=channels)
    invert[0], invert[1], invert[3] = 0, 1, 1   # constant channels both ways, inverted ends
    x = accumulators(rng, n, channels, acc_width)
    dut = MultiThreshold(channels, acc_width, bits, thresholds, invert)
    return dut, x, ref_multithreshold(x, thresholds, invert)


# ---- tests -------------------------------------------------------------------------

def test_reference_counts():
    """The reference on a hand-checked channel: thresholds [3, -1, 3], one inverted copy."""
    acc = np.array([[-2, -2], [-1, -1], [2, 2], [3, 3], [9, 9]])
    t = [[3, -1, 3], [3, -1, 3]]
    assert ref_multithreshold(acc, t, [0, 1]).tolist() == [[0, 3], [1, 2], [1, 2], [3, 0],
                                                          [3, 0]]


@pytest.mark.parametrize("seed, name", list(enumerate(CONFIGS)))
def test_random_stalls_and_reset(seed, name):
    dut, x, expected = make_case(name, seed)
    assert expected[:, 0].tolist() == [(1 << CONFIGS[name][2]) - 1] * len(x)  # gamma = 0
    assert expected[:, 1].tolist() == [(1 << CONFIGS[name][2]) - 1] * len(x)  # inverted
    beats, want = as_lists(x), as_lists(expected)
    budget = 20 * len(beats) + 200
    run = run_streams(dut, {"i": beats}, {"o": len(want)}, stall=0.3, seed=seed,
                      max_cycles=budget)
    assert run.outputs["o"] == want
    run = run_streams(dut, {"i": beats}, {"o": len(want)}, stall=0.5, seed=seed + 100,
                      reset_at=len(beats) // 2 + 3, max_cycles=budget)
    assert run.outputs["o"] == want


def test_exhaustive_small_range():
    """Every accumulator value of a 4-bit range against every kind of threshold row."""
    acc_width, bits = 4, 2
    values = np.arange(-8, 8)
    rows = [[-8, -8, -8], [-9, 0, 20], [7, 7, 7], [8, 8, 8], [5, -3, 0], [0, 0, 1],
            [-100, 100, 2]]
    invert = [0, 1, 0, 1, 1, 0, 1]
    x = np.repeat(values[:, None], len(rows), axis=1)
    dut = MultiThreshold(len(rows), acc_width, bits, rows, invert)
    run = run_streams(dut, {"i": as_lists(x)}, {"o": len(x)}, stall=0.3, seed=1,
                      max_cycles=2000)
    assert run.outputs["o"] == as_lists(ref_multithreshold(x, rows, invert))


def test_full_throughput():
    """F frames of H*W pixels take F*elementwise_cycles(H, W) + latency (1) cycles."""
    frames, height, width = 3, 5, 7
    dut, x, expected = make_case("c7-w9-n4", 11, n=frames * height * width)
    run = run_streams(dut, {"i": as_lists(x)}, {"o": len(x)}, max_cycles=10 * len(x))
    assert run.outputs["o"] == as_lists(expected)
    assert dut.latency == 1
    assert run.cycles == frames * elementwise_cycles(height, width) + dut.latency
    assert np.all(np.diff(run.out_cycles["o"]) == 1)


def test_rejects_bad_parameters():
    with pytest.raises(ValueError):
        MultiThreshold(2, 6, 2, [[0, 1, 2]], [0, 0])                 # one row for two channels
    with pytest.raises(ValueError):
        MultiThreshold(2, 6, 2, [[0, 1, 2], [0, 1]], [0, 0])         # 2 thresholds, not 3
    with pytest.raises(ValueError):
        MultiThreshold(1, 6, 2, [[0, 1, 2]], [0, 0])                 # invert too long
    with pytest.raises(ValueError):
        MultiThreshold(1, 6, 9, [[0] * 511], [0])                    # bits > 8
    with pytest.raises(TypeError):
        MultiThreshold(1, 6, 2, [[0, 1.5, 2]], [0])                  # not an integer


def test_converts_to_verilog():
    dut, *_ = make_case("c5-w5-n3", 0)
    text = verilog.convert(dut, name="multithreshold")
    assert "module multithreshold" in text
