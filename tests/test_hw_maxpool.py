# amaranth: UnusedElaboratable=no
# (some tests only inspect attributes or construction errors)
"""Max pooling (hw/maxpool.py) against torch.nn.functional.max_pool2d, under stalls, reset
and at full rate."""

import numpy as np
import pytest
import torch
from amaranth.back import verilog
from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from groupnet_hw.compiler.cycles import conv_out_size, window_cycles
from groupnet_hw.hw.maxpool import MaxPool
from groupnet_hw.hw.window import SlidingWindow
from groupnet_hw.sim.streams import run_streams


# ---- reference (torch; independent of the RTL) -------------------------------------
#
# Images are int arrays [F, H, W, C]: one value per channel, +-1 for binary pixels.

def ref_maxpool(frames, kernel, stride, padding):
    """Pooled pixels in raster order, [N, C]; max_pool2d pads with -inf."""
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).double()
    y = torch.nn.functional.max_pool2d(x, kernel, stride, padding)
    return y.permute(0, 2, 3, 1).reshape(-1, frames.shape[-1]).numpy().astype(np.int64)


def pixel_shape(kind, channels, lane_width):
    if kind == "bin":
        return unsigned(channels)
    lane = signed(lane_width) if kind == "fix" else unsigned(lane_width)
    return data.ArrayLayout(lane, channels)


def random_frames(rng, kind, channels, lane_width, n, height, width):
    """Random pixels; frame 0 has only values below 0 (bits mostly -1), so a pad that
    could win (0, or bit 1) shows at the borders."""
    shape = (n, height, width, channels)
    if kind == "bin":
        frames = np.where(rng.random(shape) < 0.5, 1, -1)
        frames[0] = np.where(rng.random(shape[1:]) < 0.15, 1, -1)
        return frames
    if kind == "fix":
        lo, hi = -(1 << (lane_width - 1)), (1 << (lane_width - 1)) - 1
        frames = rng.integers(lo, hi + 1, size=shape)
        frames[0] = rng.integers(lo, 0, size=shape[1:])
        frames[0, 0, 0] = lo        # the minimum itself, next to the pad
        return frames
    frames = rng.integers(0, 1 << lane_width, size=shape)
    frames[0] = rng.integers(0, 2, size=shape[1:])
    return frames


def to_payload(kind, pixel):
    if kind == "bin":
        return int(sum(1 << c for c, v in enumerate(pixel) if v > 0))
    return [int(v) for v in pixel]


# (height, width, kernel, stride, padding, kind, channels, lane width): every kernel in
# {2, 3}, stride in {1, 2}, padding in {0, 1}, on odd (and some even) image sizes.
CONFIGS = {
    "7x5-k2-s2-p0-fix":   (7, 5, 2, 2, 0, "fix", 3, 5),
    "5x7-k2-s2-p1-bin":   (5, 7, 2, 2, 1, "bin", 4, None),
    "7x7-k2-s1-p0-u4":    (7, 7, 2, 1, 0, "u4", 2, 4),
    "5x5-k2-s1-p1-fix":   (5, 5, 2, 1, 1, "fix", 2, 6),    # output-bound: 36 > 25
    "9x7-k3-s2-p1-fix":   (9, 7, 3, 2, 1, "fix", 3, 8),    # the ResNet stem's pool
    "7x9-k3-s2-p0-bin":   (7, 9, 3, 2, 0, "bin", 3, None),
    "5x7-k3-s1-p1-bin":   (5, 7, 3, 1, 1, "bin", 5, None),
    "7x5-k3-s1-p0-fix":   (7, 5, 3, 1, 0, "fix", 1, 4),
    "8x6-k3-s2-p1-u4":    (8, 6, 3, 2, 1, "u4", 3, 2),
    "3x3-k3-s1-p1-fix":   (3, 3, 3, 1, 1, "fix", 2, 3),
}


def make_case(name, frames, seed):
    height, width, k, s, p, kind, channels, lane_width = CONFIGS[name]
    rng = np.random.default_rng(seed)
    images = random_frames(rng, kind, channels, lane_width, frames, height, width)
    dut = MaxPool(pixel_shape(kind, channels, lane_width), height, width, kernel=k, stride=s,
                  padding=p)
    beats = [to_payload(kind, px) for px in images.reshape(-1, channels)]
    expected = [to_payload(kind, px) for px in ref_maxpool(images, k, s, p)]
    return dut, beats, expected


def output_bound(name):
    height, width, k, s, p = CONFIGS[name][:5]
    return conv_out_size(height, k, s, 1, p) * conv_out_size(width, k, s, 1, p) > height * width


# ---- the reference itself ------------------------------------------------------------

def test_reference_on_binary_is_or():
    """max of +-1 values is the OR of their bits; padding never wins."""
    bits = np.array([[[[0, 1], [0, 0], [1, 0]],
                      [[0, 0], [0, 0], [0, 0]]]])           # [1, 2, 3, 2] bits
    pooled = ref_maxpool(2 * bits - 1, 2, 2, 1)             # windows: (0,0) (0,1..2) ...
    assert ((pooled + 1) // 2).tolist() == [[0, 1], [1, 0], [0, 0], [0, 0]]


# ---- behaviour -------------------------------------------------------------------------

@pytest.mark.parametrize("seed, name", list(enumerate(CONFIGS)))
def test_pooling_under_stalls(seed, name):
    dut, beats, expected = make_case(name, 3, seed)
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.3, seed=seed,
                      max_cycles=50 * len(beats) + 1000)
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("name, frac", [("9x7-k3-s2-p1-fix", 1.4), ("5x7-k2-s2-p1-bin", 0.6),
                                        ("5x5-k2-s1-p1-fix", 2.2)])
def test_reset_mid_stream(name, frac):
    height, width = CONFIGS[name][:2]
    dut, beats, expected = make_case(name, 3, 7)
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.3, seed=7,
                      reset_at=int(frac * height * width), max_cycles=100 * len(beats) + 1000)
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("seed", range(10))
def test_random_configurations(seed):
    """Seeded random geometry, pixel type, lane width, frame count and stall rate."""
    rng = np.random.default_rng(3000 + seed)
    k, s, p = int(rng.integers(2, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 2))
    height = int(rng.integers(k - 2 * p if k > 2 * p else 1, 10))
    width = int(rng.integers(k - 2 * p if k > 2 * p else 1, 10))
    kind = ["bin", "fix", "u4"][seed % 3]
    channels, lane_width = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    if kind == "fix":
        lane_width = max(lane_width, 2)
    images = random_frames(rng, kind, channels, lane_width, int(rng.integers(1, 4)),
                           height, width)
    dut = MaxPool(pixel_shape(kind, channels, lane_width), height, width, kernel=k, stride=s,
                  padding=p)
    beats = [to_payload(kind, px) for px in images.reshape(-1, channels)]
    expected = [to_payload(kind, px) for px in ref_maxpool(images, k, s, p)]
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=float(rng.choice([0.3, 0.6])),
                      seed=seed, max_cycles=100 * len(beats) + 1000)
    assert run.outputs["o"] == expected, (height, width, k, s, p, kind, channels, lane_width)


@pytest.mark.parametrize("name", CONFIGS)
def test_full_throughput(name):
    """At full rate every pooled pixel leaves one cycle after the bare window would emit its
    window (the reduction register), and back-to-back frames take window_cycles(H, W) each
    (out_height*out_width when there are more outputs than pixels)."""
    height, width, k, s, p = CONFIGS[name][:5]
    dut, beats, expected = make_case(name, 3, 0)
    _, beats_one, expected_one = make_case(name, 1, 0)
    three = run_streams(dut, {"i": beats}, {"o": len(expected)})
    one = run_streams(dut, {"i": beats_one}, {"o": len(expected_one)})
    assert three.outputs["o"] == expected
    assert one.outputs["o"] == expected_one

    window = SlidingWindow(dut.pixel_shape, height, width, kernel=k, stride=s, padding=p,
                           pad_value=dut.pad_value)
    bare = run_streams(window, {"i": beats}, {"o": len(expected)})
    assert three.out_cycles["o"] == [c + 1 for c in bare.out_cycles["o"]]
    assert three.cycles == bare.cycles + 1

    per_frame = dut.out_height * dut.out_width if output_bound(name) else \
        window_cycles(height, width)
    assert three.cycles - one.cycles == 2 * per_frame
    assert per_frame == max(height * width, dut.out_height * dut.out_width)

    # Latency: the window's 3 cycles and the reduction register's 1 after the last input
    # pixel of the first window is accepted (input pixel q is accepted at the clock edge
    # counted as cycle q + 1).
    last = min(height - 1, k - 1 - p) * width + min(width - 1, k - 1 - p)
    assert three.out_cycles["o"][0] == last + 1 + window.latency + 1 == last + 1 + 4


def test_pad_values():
    assert MaxPool(data.ArrayLayout(signed(5), 3), 4, 4).pad_value == 0b10000_10000_10000
    assert MaxPool(data.ArrayLayout(unsigned(4), 3), 4, 4).pad_value == 0
    assert MaxPool(unsigned(6), 4, 4).pad_value == 0
    dut = MaxPool(unsigned(6), 7, 5, kernel=3)
    assert (dut.stride, dut.out_height, dut.out_width) == (3, 2, 1)     # stride = kernel


def test_rejects_bad_parameters():
    with pytest.raises(ValueError):
        MaxPool(unsigned(2), 5, 5, kernel=2, padding=2)       # a window of padding only
    with pytest.raises(ValueError):
        MaxPool(unsigned(2), 5, 5, kernel=3, stride=0)
    with pytest.raises(ValueError):
        MaxPool(unsigned(2), 2, 2, kernel=3)                  # does not fit
    with pytest.raises(TypeError):
        MaxPool(signed(4), 5, 5)                              # scalar signed pixel


@pytest.mark.parametrize("name", ["9x7-k3-s2-p1-fix", "5x7-k2-s2-p1-bin"])
def test_converts_to_verilog(name):
    dut, *_ = make_case(name, 1, 0)
    text = verilog.convert(dut, name="maxpool")
    assert "module maxpool" in text
