"""Classifier head (hw/head.py): sum pool + FC + argmax against torch, stalls, reset, cycles."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from amaranth.back import verilog
from amaranth.lib import data

from groupnet_hw.compiler.cycles import HEAD_PIPELINE, head_cycles
from groupnet_hw.hw.head import ClassifierHead
from groupnet_hw.sim.streams import run_streams


# ---- reference (torch int64; independent of the RTL) ----------------------------

def ref_head(frames, weights, bias):
    """frames: [F, H*W, C] int64 -> (logits [F, n_cls], cls [F])."""
    sums = frames.sum(dim=1)
    logits = sums @ weights.T + bias
    return logits, torch.argmax(logits, dim=1)   # first maximum on ties


# ---- harness -------------------------------------------------------------------

def bits_port(dut):
    """Expose ``o`` with its payload as raw bits: :func:`run_streams` turns ints and
    arrays into Python values but not struct layouts."""
    dut.o_bits = SimpleNamespace(valid=dut.o.valid, ready=dut.o.ready,
                                 payload=dut.o.payload.as_value())
    return dut


def decode(dut, raw):
    value = data.Const(dut.o.payload.shape(), raw)
    return [int(v) for v in value.logits], int(value.cls)


def as_lists(t):
    return [[int(v) for v in row] for row in t]


def signed_bits(v):
    return (v if v >= 0 else ~v).bit_length() + 1


def make_case(seed, channels, in_width, height, width, n_cls, frames, ties=False):
    rng = np.random.default_rng(seed)
    lo, hi = -(1 << (in_width - 1)), (1 << (in_width - 1)) - 1
    x = torch.from_numpy(rng.integers(lo, hi + 1, size=(frames, height * width, channels)))
    # Extreme frames: every pixel at a range end.
    x[0] = lo
    if frames > 1:
        x[1] = hi
    weights = torch.from_numpy(rng.integers(-20, 21, size=(n_cls, channels)))
    bias = torch.from_numpy(rng.integers(-300, 301, size=n_cls))
    if ties and n_cls >= 4:
        # Equal rows give equal logits on every frame: the lowest index must win.
        weights[3], bias[3] = weights[1], bias[1]
        weights[2] = 0
        bias[2] = -10**6
    if ties and frames > 2:
        x[2] = 0                                 # all logits = bias -> argmax of bias
        bias[n_cls - 1] = bias.max()             # ... tied with an earlier class
    return dict(x=x, weights=weights, bias=bias, in_width=in_width, height=height,
                width=width)


def make_dut(case, lanes=None):
    x = case["x"]
    return ClassifierHead(x.shape[2], case["in_width"], case["height"], case["width"],
                          case["weights"].numpy(), case["bias"].numpy(), lanes=lanes)


def run_case(case, *, stall, seed, reset_at=None, lanes=None):
    x, weights, bias = case["x"], case["weights"], case["bias"]
    frames, pixels, _ = x.shape
    dut = bits_port(make_dut(case, lanes))
    stream = [list(p) for f in x.tolist() for p in f]
    run = run_streams(dut, {"i": stream}, {"o_bits": frames}, stall=stall, seed=seed,
                      reset_at=reset_at, max_cycles=40 * frames * (pixels + 20) + 2000)
    got = [decode(dut, raw) for raw in run.outputs["o_bits"]]
    logits, cls = ref_head(x, weights, bias)
    assert [g[0] for g in got] == as_lists(logits)
    assert [g[1] for g in got] == [int(c) for c in cls]
    return dut, run


CASES = [
    # (channels, in_width, height, width, n_cls, frames, ties)
    (3, 6, 2, 3, 10, 4, True),     # H*W = 6 < n_cls + 6: classifier-bound
    (5, 4, 4, 4, 3, 4, False),     # H*W = 16 >= n_cls + 6: pool-bound
    (8, 8, 3, 3, 3, 3, True),      # H*W = 9 == n_cls + 6
    (4, 5, 1, 1, 1, 5, False),     # one pixel per frame, one class
    (6, 7, 2, 5, 4, 3, True),
    (3, 16, 8, 8, 3, 2, False),    # sums of 22 bits: two multiplier pieces per product
]


# ---- tests -----------------------------------------------------------------------

#: lanes per case: all channels, one, and ones that do not divide the channels
LANES = [None, 1, 3, None, 4, 2]


@pytest.mark.parametrize("index", range(len(CASES)))
def test_head_stalls_and_reset(index):
    case = make_case(index, *CASES[index])
    run_case(case, stall=0.3, seed=index, lanes=LANES[index])
    # Reset inside the second frame, while the classifier may still work on the first.
    pixels = case["height"] * case["width"]
    run_case(case, stall=0.3, seed=index + 10, reset_at=int(1.4 * pixels) + 3,
             lanes=LANES[index])


def test_widths_are_exact():
    """sum_width and logit_width are reached: frames that drive each logit to its
    extremes need exactly those widths (and come out right)."""
    channels, in_width, height, width, n_cls = 4, 5, 2, 2, 3
    case = make_case(11, channels, in_width, height, width, n_cls, 1)
    lo, hi = -(1 << (in_width - 1)), (1 << (in_width - 1)) - 1
    extremes = []
    for row in case["weights"]:
        up = torch.where(row >= 0, hi, lo)
        extremes += [up, torch.where(row >= 0, lo, hi)]
    case["x"] = torch.stack([e.expand(height * width, channels) for e in extremes])
    dut, _ = run_case(case, stall=0.3, seed=2)
    logits, _ = ref_head(case["x"], case["weights"], case["bias"])
    sums = case["x"].sum(dim=1)
    assert dut.logit_width == max(signed_bits(int(v)) for v in logits.flatten())
    assert dut.sum_width == max(signed_bits(int(v)) for v in sums.flatten())
    assert dut.cls_width == 2


@pytest.mark.parametrize("index,lanes", [(0, None), (1, None), (2, None), (1, 2), (2, 1), (5, 2),
                                         (4, 4)])
def test_full_throughput(index, lanes):
    """F frames: the first result H*W pixels + latency (n_cls*folds + HEAD_PIPELINE)
    cycles in, then one every head_cycles(H, W, n_cls, folds) = max(H*W, n_cls*folds +
    HEAD_PIPELINE) cycles, so the total is F*head_cycles + (H*W + latency - head_cycles)."""
    channels, in_width, height, width, n_cls, _, _ = CASES[index]
    frames = 6
    case = make_case(index, channels, in_width, height, width, n_cls, frames)
    dut, run = run_case(case, stall=0.0, seed=0, lanes=lanes)
    folds = -(-channels // (lanes or channels))
    period = head_cycles(height, width, n_cls, folds)
    assert dut.latency == n_cls * folds + HEAD_PIPELINE == n_cls * folds + 6
    assert np.all(np.diff(run.out_cycles["o_bits"]) == period)
    assert run.cycles == frames * period + (height * width + dut.latency - period)


def test_output_backpressure():
    """A slow consumer stalls the pipeline without losing or reordering results."""
    run_case(make_case(3, 4, 5, 2, 2, 6, 12, ties=True), stall=0.8, seed=4)


def test_converts_to_verilog():
    dut = make_dut(make_case(0, *CASES[0]))
    assert "module" in verilog.convert(dut, name="ClassifierHead")
