# amaranth: UnusedElaboratable=no
"""Sliding window (hw/window.py) against a numpy reference, under stalls, reset and at full rate."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from amaranth.back import verilog
from amaranth.hdl import Array, Cat, Elaboratable, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib.memory import Memory
from amaranth.lib import data

from groupnet_hw.compiler.cycles import (conv_out_size, window_cycles, window_latency,
                                         window_refill)
from groupnet_hw.hw.window import SlidingWindow, WindowChoices
from groupnet_hw.sim.streams import run_streams

LANE_WIDTH = 5   # lane width of the fixed-point pixels used here

# Lane types of the multi-lane pixel kinds: (width, signed). "fix" is a fixed-point
# pixel, "rgb" an input image pixel (3 channels of 8 bits), "u2"/"u4" n-bit activation
# levels. "bin" (a packed unsigned(C)) has no lanes.
LANES = {"fix": (LANE_WIDTH, True), "rgb": (8, False), "u2": (2, False), "u4": (4, False)}


# ---- reference (numpy; independent of the RTL) -----------------------------------
#
# Images are int arrays [F, H, W, L]: L = 1 for binary pixels (the value is the packed
# channel bits), L = C lanes for the other kinds.

def ref_windows(frames, pad_pixel, kernel, stride, dilation, padding):
    """Windows in raster order; each is a list of kernel*kernel pixels (arrays of L lanes)."""
    n, height, width, lanes = frames.shape
    padded = np.empty((n, height + 2 * padding, width + 2 * padding, lanes), dtype=np.int64)
    padded[:] = np.asarray(pad_pixel)
    padded[:, padding:padding + height, padding:padding + width] = frames
    out_h = (height + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    out_w = (width + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    return [[padded[f, r * stride + ky * dilation, c * stride + kx * dilation]
             for ky in range(kernel) for kx in range(kernel)]
            for f in range(n) for r in range(out_h) for c in range(out_w)]


def pixel_shape(kind, channels):
    if kind == "bin":
        return unsigned(channels)
    width, is_signed = LANES[kind]
    return data.ArrayLayout(signed(width) if is_signed else unsigned(width), channels)


def pixel_bits(kind, channels):
    return channels * (1 if kind == "bin" else LANES[kind][0])


def random_frames(rng, kind, channels, n, height, width):
    if kind == "bin":
        return rng.integers(0, 1 << channels, size=(n, height, width, 1))
    lane, is_signed = LANES[kind]
    lo, hi = (-(1 << (lane - 1)), 1 << (lane - 1)) if is_signed else (0, 1 << lane)
    return rng.integers(lo, hi, size=(n, height, width, channels))


def pad_lanes(kind, channels, pad_value):
    """The pad pixel's lanes, decoded from its raw bits (two's complement lanes)."""
    if kind == "bin":
        return [pad_value & ((1 << channels) - 1)]
    lane, is_signed = LANES[kind]
    raw = pad_value & ((1 << (lane * channels)) - 1)
    lanes = [(raw >> (lane * j)) & ((1 << lane) - 1) for j in range(channels)]
    if not is_signed:
        return lanes
    return [v - (1 << lane) if v >> (lane - 1) else v for v in lanes]


def to_payload(kind, pixel):
    return int(pixel[0]) if kind == "bin" else [int(v) for v in pixel]


# (height, width, kernel, stride, dilation, padding, pixel kind, channels, pad_value)
CONFIGS = {
    "5x7-k3-pad1-bin":        (5, 7, 3, 1, 1, 1, "bin", 4, -1),
    "7x5-k3-s2-fix":          (7, 5, 3, 2, 1, 1, "fix", 2, 0),
    "6x6-k3-d2-bin":          (6, 6, 3, 1, 2, 2, "bin", 3, 0b101),
    "7x7-k3-d3-bin":          (7, 7, 3, 1, 3, 3, "bin", 2, -1),
    "5x7-k3-d3-tiny-fix":     (5, 7, 3, 1, 3, 3, "fix", 2, 0),
    "6x7-k3-s2-pad0-fix":     (6, 7, 3, 2, 1, 0, "fix", 3, 0),
    "5x5-k3-pad0-bin":        (5, 5, 3, 1, 1, 0, "bin", 2, 0),
    "8x5-k3-s2-d2-bin":       (8, 5, 3, 2, 2, 2, "bin", 3, -1),
    "7x6-k3-s2-d3-fix":       (7, 6, 3, 2, 3, 3, "fix", 2, -1),
    "5x6-k1-bin":             (5, 6, 1, 1, 1, 0, "bin", 5, 0),
    "5x5-k1-s2-fix":          (5, 5, 1, 2, 1, 0, "fix", 2, 0),
    "4x3-k1-pad1-bin":        (4, 3, 1, 1, 1, 1, "bin", 2, 0b10),
    # 1x1 convolutions of n-bit levels and RGB, including unused bottom rows and right
    # columns (even sizes, stride 2) and single-row / single-column images.
    "7x7-k1-u4":              (7, 7, 1, 1, 1, 0, "u4", 5, 0),
    "6x4-k1-s2-u2":           (6, 4, 1, 2, 1, 0, "u2", 3, 0),
    "5x6-k1-s2-rgb":          (5, 6, 1, 2, 1, 0, "rgb", 3, 0),
    "1x6-k1-s2-u4":           (1, 6, 1, 2, 1, 0, "u4", 2, 0),
    "5x1-k1-rgb":             (5, 1, 1, 1, 1, 0, "rgb", 3, 0),
    # The full-precision first layer on RGB, and 3x3 convolutions of n-bit levels, with
    # zero padding.
    "7x5-k3-rgb":             (7, 5, 3, 1, 1, 1, "rgb", 3, 0),
    "8x7-k3-s2-rgb":          (8, 7, 3, 2, 1, 1, "rgb", 3, 0),
    "5x6-k3-u4":              (5, 6, 3, 1, 1, 1, "u4", 3, 0),
    "6x5-k3-s2-u2":           (6, 5, 3, 2, 1, 1, "u2", 4, 0),
    "3x3-k3-u2":              (3, 3, 3, 1, 1, 1, "u2", 1, 0),
    # 2x2 windows (max pooling): strided, padded, and output-bound (more windows than
    # pixels) with stride 1 and padding 1.
    "7x5-k2-s2-fix":          (7, 5, 2, 2, 1, 0, "fix", 3, 0),
    "6x7-k2-s2-pad1-u4":      (6, 7, 2, 2, 1, 1, "u4", 2, 0),
    "5x4-k2-pad1-bin":        (5, 4, 2, 1, 1, 1, "bin", 3, 0),
}


def output_bound(name):
    """More windows than pixels per frame: the output side sets the rate."""
    height, width, k, s, d, p = CONFIGS[name][:6]
    return conv_out_size(height, k, s, d, p) * conv_out_size(width, k, s, d, p) > height * width


def run_config(name, *, frames=3, stall=0.0, seed=0, reset_at=None, line_ram="logic",
               paced=False, pace=1):
    height, width, k, s, d, p, kind, channels, pad_value = CONFIGS[name]
    rng = np.random.default_rng(seed)
    images = random_frames(rng, kind, channels, frames, height, width)
    dut = SlidingWindow(pixel_shape(kind, channels), height, width, kernel=k, stride=s,
                        dilation=d, padding=p, pad_value=pad_value,
                        choices=WindowChoices(line_ram, paced))
    expected = [[to_payload(kind, px) for px in window]
                for window in ref_windows(images, pad_lanes(kind, channels, pad_value), k, s, d, p)]
    beats = [to_payload(kind, px) for px in images.reshape(-1, images.shape[-1])]
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=stall, seed=seed,
                      reset_at=reset_at, max_cycles=50 * len(beats) + 1000, pace=pace)
    return dut, run, expected


# ---- the reference itself ----------------------------------------------------------

@pytest.mark.parametrize("k, s, d, p", [(3, 1, 1, 1), (3, 2, 2, 2), (3, 1, 2, 0), (3, 2, 3, 3), (1, 2, 1, 0)])
def test_reference_matches_torch_unfold(k, s, d, p):
    rng = np.random.default_rng(k + 10 * s + 100 * d + 1000 * p)
    images = rng.integers(-8, 8, size=(2, 7, 6, 3))
    windows = np.array(ref_windows(images, [0, 0, 0], k, s, d, p))     # [N, k*k, C]
    x = torch.from_numpy(images).permute(0, 3, 1, 2).double()
    cols = torch.nn.functional.unfold(x, k, dilation=d, padding=p, stride=s)  # [F, C*k*k, L]
    cols = cols.reshape(2, 3, k * k, -1).permute(0, 3, 2, 1).reshape(-1, k * k, 3)
    assert np.array_equal(windows, cols.numpy().astype(np.int64))


# ---- geometry ------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONFIGS)
def test_output_size_matches_conv2d(name):
    height, width, k, s, d, p, kind, channels, pad_value = CONFIGS[name]
    dut = SlidingWindow(pixel_shape(kind, channels), height, width, k, s, d, p, pad_value)
    out = torch.nn.functional.conv2d(torch.zeros(1, 1, height, width), torch.zeros(1, 1, k, k),
                                     stride=s, dilation=d, padding=p)
    assert (dut.out_height, dut.out_width) == tuple(out.shape[2:])
    assert (dut.out_height, dut.out_width) == (conv_out_size(height, k, s, d, p),
                                               conv_out_size(width, k, s, d, p))


def test_rejects_bad_parameters():
    with pytest.raises(ValueError):
        SlidingWindow(unsigned(2), 3, 3, kernel=3, dilation=2, padding=0)   # does not fit
    with pytest.raises(ValueError):
        SlidingWindow(unsigned(2), 4, 4, pad_value=4)                       # 2-bit pixel
    with pytest.raises(ValueError):
        SlidingWindow(unsigned(2), 4, 4, stride=0)
    with pytest.raises(ValueError, match="line_ram"):
        WindowChoices(line_ram="bram")


# ---- behaviour -------------------------------------------------------------------------

@pytest.mark.parametrize("seed, name", list(enumerate(CONFIGS)))
def test_windows_under_stalls(seed, name):
    _, run, expected = run_config(name, frames=3, stall=0.3, seed=seed)
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("seed", range(18))
def test_random_configurations(seed):
    """Seeded random geometry, pixel type, pad pixel, stall rate and reset point."""
    rng = np.random.default_rng(1000 + seed)
    k = int(rng.choice([1, 3]))
    d = int(rng.integers(1, 4)) if k == 3 else 1
    s = int(rng.integers(1, 3))
    p = int(rng.choice([0, d * (k - 1) // 2, d, rng.integers(0, 4)]))
    span = (k - 1) * d + 1
    height = int(rng.integers(max(1, span - 2 * p), 9))
    width = int(rng.integers(max(1, span - 2 * p), 9))
    kind = str(rng.choice(["bin", "fix"]))
    channels = int(rng.integers(1, 5))
    bits = pixel_bits(kind, channels)
    pad_value = int(rng.integers(-(1 << bits), 1 << bits))
    frames = int(rng.integers(1, 4))
    images = random_frames(rng, kind, channels, frames, height, width)
    beats = [to_payload(kind, px) for px in images.reshape(-1, images.shape[-1])]
    reset_at = int(rng.integers(2, len(beats))) if seed % 2 and len(beats) > 2 else None
    line_ram = ["logic", "block", "serial"][seed // 2 % 3]
    dut = SlidingWindow(pixel_shape(kind, channels), height, width, kernel=k, stride=s,
                        dilation=d, padding=p, pad_value=pad_value,
                        choices=WindowChoices(line_ram))
    expected = [[to_payload(kind, px) for px in window]
                for window in ref_windows(images, pad_lanes(kind, channels, pad_value), k, s, d, p)]
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=float(rng.choice([0.3, 0.6])),
                      seed=seed, reset_at=reset_at, max_cycles=100 * len(expected) + 1000)
    assert run.outputs["o"] == expected, (height, width, k, s, d, p, kind, channels, pad_value,
                                          line_ram)


@pytest.mark.parametrize("seed", range(8))
def test_random_unsigned_lane_pixels(seed):
    """n-bit levels and RGB pixels (unsigned lanes, zero padding) on 1x1, 2x2 and 3x3
    windows, with seeded random geometry, stalls and reset point."""
    rng = np.random.default_rng(2000 + seed)
    kind = ["u2", "u4", "rgb"][seed % 3]
    k = [1, 1, 2, 3][seed % 4]
    s = int(rng.integers(1, 3))
    p = 0 if k == 1 else int(rng.integers(0, k // 2 + 1))
    height, width = int(rng.integers(max(1, k - 2 * p), 8)), int(rng.integers(max(1, k - 2 * p), 8))
    channels = 3 if kind == "rgb" else int(rng.integers(1, 6))
    frames = int(rng.integers(1, 4))
    images = random_frames(rng, kind, channels, frames, height, width)
    beats = [to_payload(kind, px) for px in images.reshape(-1, images.shape[-1])]
    reset_at = int(rng.integers(2, len(beats))) if seed % 2 and len(beats) > 2 else None
    dut = SlidingWindow(pixel_shape(kind, channels), height, width, kernel=k, stride=s,
                        padding=p, pad_value=0)
    expected = [[to_payload(kind, px) for px in window]
                for window in ref_windows(images, pad_lanes(kind, channels, 0), k, s, 1, p)]
    run = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=0.4, seed=seed,
                      reset_at=reset_at, max_cycles=100 * len(expected) + 1000)
    assert run.outputs["o"] == expected, (height, width, k, s, p, kind, channels)


@pytest.mark.parametrize("name, frac", [("5x7-k3-pad1-bin", 1.3), ("8x5-k3-s2-d2-bin", 0.6),
                                        ("6x7-k3-s2-pad0-fix", 2.1)])
def test_reset_mid_stream(name, frac):
    height, width = CONFIGS[name][:2]
    # The producer needs at least one cycle per beat, so this cycle is inside its stream
    # (frame 2 of 3 for frac 1.3, the middle of a row for the others).
    reset_at = int(frac * height * width)
    _, run, expected = run_config(name, frames=3, stall=0.3, seed=7, reset_at=reset_at)
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("name", [n for n in CONFIGS if not output_bound(n)])
def test_full_throughput(name):
    """Back-to-back frames at full rate: exactly window_cycles per frame, bounded tail.

    The tail (cycles after the last pixel of the last frame) is at most the latency (3)
    plus the number of windows that need the last image row or padding below it; for
    stride 1 with "same" padding it is exactly padding*out_width + padding + 3.
    """
    height, width, k, s, d, p = CONFIGS[name][:6]
    dut, one, expected_one = run_config(name, frames=1)
    _, three, expected_three = run_config(name, frames=3)
    assert one.outputs["o"] == expected_one
    assert three.outputs["o"] == expected_three

    assert three.cycles - one.cycles == 2 * window_cycles(height, width)

    span = (k - 1) * d + 1
    tail_rows = sum(1 for r in range(dut.out_height) if r * s - p + span - 1 >= height - 1)
    tail = one.cycles - window_cycles(height, width)
    assert dut.latency <= tail <= tail_rows * dut.out_width + dut.latency
    if s == 1 and 2 * p == span - 1:
        assert tail == p * dut.out_width + p + dut.latency


@pytest.mark.parametrize("name", ["5x7-k3-pad1-bin", "8x5-k3-s2-d2-bin", "6x7-k3-s2-pad0-fix",
                                  "7x5-k3-rgb", "5x4-k2-pad1-bin"])
def test_block_line_ram_same_windows_same_cycles(name):
    """Block-RAM line buffers (one memory per ring row and window column): the same
    windows under stalls and a reset, each at full rate in exactly the cycle of the
    logic line buffer's (both register the window once after the read: the picked taps,
    or the block RAM's data as it comes)."""
    height, width = CONFIGS[name][:2]
    _, run, expected = run_config(name, frames=3, stall=0.3, seed=5, line_ram="block",
                                  reset_at=int(1.3 * height * width))
    assert run.outputs["o"] == expected
    _, logic, _ = run_config(name, frames=2, line_ram="logic")
    _, block, expected = run_config(name, frames=2, line_ram="block")
    assert block.outputs["o"] == expected
    assert block.out_cycles["o"] == logic.out_cycles["o"]
    assert block.cycles == logic.cycles


@pytest.mark.parametrize("line_ram", ["logic", "block"])
@pytest.mark.parametrize("name", ["5x7-k3-pad1-bin", "8x5-k3-s2-d2-bin", "6x7-k3-s2-pad0-fix",
                                  "7x5-k3-rgb", "5x6-k1-bin"])
def test_paced_window_costs_no_cycle_at_a_folded_consumers_rate(name, line_ram):
    """``paced``: the next window is read once the output register is empty, not in the
    cycle it is taken. For a consumer taking one window every 2 or 3 cycles (a folded
    MVU) every window leaves in exactly the cycle it does without ``paced``; under
    random stalls and a reset the windows are the same."""
    height, width = CONFIGS[name][:2]
    for pace in (2, 3):
        _, plain, expected = run_config(name, frames=2, line_ram=line_ram, pace=pace)
        _, paced, _ = run_config(name, frames=2, line_ram=line_ram, pace=pace, paced=True)
        assert paced.outputs["o"] == plain.outputs["o"] == expected
        assert paced.out_cycles["o"] == plain.out_cycles["o"]
    _, run, expected = run_config(name, frames=3, stall=0.3, seed=7, line_ram=line_ram,
                                  paced=True, reset_at=int(1.3 * height * width))
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("name", list(CONFIGS))
def test_serial_line_ram_same_windows_under_stalls_and_reset(name):
    """The ring in one memory read a tap per cycle: the same windows for every
    geometry, under random input gaps and output stalls and a reset mid-frame."""
    height, width = CONFIGS[name][:2]
    _, run, expected = run_config(name, frames=3, stall=0.3, seed=11, line_ram="serial",
                                  reset_at=int(1.3 * height * width))
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("name", ["5x7-k3-pad1-bin", "8x5-k3-s2-d2-bin", "7x6-k3-s2-d3-fix",
                                  "6x7-k3-s2-pad0-fix", "7x5-k3-rgb", "5x4-k2-pad1-bin",
                                  "5x6-k1-bin"])
def test_serial_line_ram_costs_only_its_latency_at_a_slow_consumers_pace(name):
    """Consumed at most one window per ``window_refill`` cycles (a folded MVU), every
    serial window leaves exactly ``kernel**2`` cycles after the logic line buffer's
    (its latency, ``kernel**2 + 3`` against 3): the same frame rate. Faster, it refills
    the register in ``kernel**2 + 3`` cycles after each take."""
    k = CONFIGS[name][2]
    refill = window_refill("serial", k)
    assert window_latency("serial", k) - window_latency("logic", k) == k * k
    for pace in (refill, refill + 3):
        _, logic, expected = run_config(name, frames=2, line_ram="logic", pace=pace)
        dut, serial, _ = run_config(name, frames=2, line_ram="serial", pace=pace)
        assert serial.outputs["o"] == expected
        assert dut.latency == window_latency("serial", k)
        assert [b - a for a, b in zip(logic.out_cycles["o"], serial.out_cycles["o"])] == \
            [k * k] * len(expected)
    _, fast, expected = run_config(name, frames=2, line_ram="serial")
    assert fast.outputs["o"] == expected
    gaps = np.diff(fast.out_cycles["o"])
    assert gaps.min() == refill


def test_serial_line_ram_is_one_block_memory():
    """One memory, marked for block RAM, ``ring_rows`` rows of ``2**ceil(log2(width))``
    words (one row more than the logic line buffer's ring)."""
    dut = SlidingWindow(unsigned(4), 6, 6, kernel=3, choices=WindowChoices("serial"))
    logic = SlidingWindow(unsigned(4), 6, 6, kernel=3)
    assert dut.ring_rows == logic.ring_rows + 1
    text = verilog.convert(dut, name="win")
    assert text.count('(* ram_style = "block" *)') == 1
    assert f"reg [3:0] lines [{dut.ring_rows * 8 - 1}:0]" in text


@pytest.mark.parametrize("name", [n for n in CONFIGS if output_bound(n)])
def test_more_windows_than_pixels_is_output_bound(name):
    """E.g. kernel 1 with padding 1 emits (H+2)(W+2) windows per frame: one per cycle."""
    dut, one, _ = run_config(name, frames=1)
    _, three, expected = run_config(name, frames=3)
    assert three.outputs["o"] == expected
    assert three.cycles - one.cycles == 2 * dut.out_height * dut.out_width


@pytest.mark.parametrize("name", ["5x7-k3-pad1-bin", "7x6-k3-s2-d3-fix", "5x5-k1-s2-fix"])
def test_converts_to_verilog(name):
    height, width, k, s, d, p, kind, channels, pad_value = CONFIGS[name]
    dut = SlidingWindow(pixel_shape(kind, channels), height, width, k, s, d, p, pad_value)
    text = verilog.convert(dut, name="window")
    assert "module window" in text


class CollidingMemory(Elaboratable):
    """A stand-in for a block-RAM line memory whose read of a word written in the same
    cycle returns that word inverted: what ``no_rw_check`` lets the synthesized block
    RAM return (anything), made visible to the simulation."""

    def __init__(self, *, shape, depth, init, attrs):
        assert attrs.get("no_rw_check")
        self.width, self.depth = Shape.cast(shape).width, depth
        self.writes, self.reads = [], []

    def _port(self, ports):
        port = SimpleNamespace(addr=Signal(range(self.depth)), data=Signal(self.width),
                               en=Signal())
        ports.append(port)
        return port

    def write_port(self):
        return self._port(self.writes)

    def read_port(self):
        return self._port(self.reads)

    def elaborate(self, platform):
        m = Module()
        words = Array(Signal(self.width, name=f"word{a}") for a in range(self.depth))
        for w in self.writes:
            with m.If(w.en):
                m.d.sync += words[w.addr].eq(w.data)
        for r in self.reads:
            collide = Signal(name="collide")
            m.d.comb += collide.eq(r.en & Cat(w.en & (w.addr == r.addr) for w in self.writes).any())
            with m.If(r.en):
                m.d.sync += r.data.eq(Mux(collide, ~words[r.addr], words[r.addr]))
        return m


@pytest.mark.parametrize("line_ram", ["block", "serial"])
@pytest.mark.parametrize("name", ["5x7-k3-pad1-bin", "8x5-k3-s2-d2-bin", "6x7-k3-s2-pad0-fix",
                                  "5x4-k2-pad1-bin", "5x6-k1-bin"])
def test_block_line_ram_never_uses_a_read_of_the_word_being_written(name, line_ram, monkeypatch):
    """The line memories in block RAM carry ``no_rw_check`` (Yosys then adds no logic
    behind the block RAM for a same-cycle read and write of one word): with memories
    that return garbage for such a read, every window is still right, at full rate and
    under stalls and reset."""
    import groupnet_hw.hw.window as window_module
    text = verilog.convert(SlidingWindow(unsigned(4), 6, 6, kernel=3, choices=WindowChoices(line_ram)), name="w")
    assert text.count("(* no_rw_check") == text.count('(* ram_style = "block" *)') > 0
    monkeypatch.setattr(window_module, "Memory",
                        lambda **kw: CollidingMemory(**kw) if kw["attrs"].get("no_rw_check")
                        else Memory(**kw))
    height, width = CONFIGS[name][:2]
    for stall, reset_at in ((0.0, None), (0.3, int(1.3 * height * width))):
        _, run, expected = run_config(name, frames=3, stall=stall, seed=5, line_ram=line_ram,
                                      reset_at=reset_at)
        assert run.outputs["o"] == expected


def test_block_line_ram_is_marked_for_block_ram():
    """Yosys maps a memory to block RAM only with one read port; ECP5 needs the
    ``ram_style`` attribute to prefer it over distributed RAM."""
    dut = SlidingWindow(unsigned(4), 6, 6, kernel=3, choices=WindowChoices("block"))
    text = verilog.convert(dut, name="win")
    assert text.count('(* ram_style = "block" *)') == 3 * dut.ring_rows
