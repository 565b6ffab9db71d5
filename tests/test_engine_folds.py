# amaranth: UnusedElaboratable=no
"""The intended engine's fold issuer (hw/engine/folds.py) feeding its base arrays: every
output channel of every pixel equals numpy's dot product of the window with the channel's
weights, for odd geometries, under stalls on both sides, with the arrays never idle
while windows keep coming."""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from groupnet_hw.hw.engine.arrays import BaseArrays
from groupnet_hw.hw.engine.folds import FoldIssuer
from groupnet_hw.sim.streams import run_streams, stream_put


class Pipe(Elaboratable):
    """A FoldIssuer whose folds go to a BaseArrays; ``window`` in, ``o`` out."""

    def __init__(self, arrays, pe, simd, planes, max_in_folds, max_weight_words):
        self.issuer = FoldIssuer(arrays=arrays, pe=pe, simd=simd, planes=planes,
                                 max_in_folds=max_in_folds, max_weight_words=max_weight_words)
        self.arrays = BaseArrays(arrays=arrays, pe=pe, simd=simd, planes=planes,
                                 max_window=max_in_folds * simd)
        self.window, self.o = self.issuer.window, self.arrays.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.issuer, m.submodules.arrays = self.issuer, self.arrays
        wiring.connect(m, self.issuer.o, self.arrays.i)
        return m


def pack(bits):
    return int(sum(int(b) << j for j, b in enumerate(bits)))


def conv_case(rng, arrays, pe, simd, planes, lanes, c_out, pixels, levels):
    """Random windows (``lanes`` elements a pixel and array) and weights (``c_out``
    channels), packed as the issuer takes them, and the expected sums."""
    in_folds, out_folds = -(-lanes // simd), -(-c_out // pe)
    if levels:
        x = rng.integers(0, 1 << planes, (pixels, arrays, lanes))
    else:
        x = rng.integers(0, 2, (pixels, arrays, lanes))
    w = np.zeros((arrays, out_folds * pe, in_folds * simd), dtype=np.int64)
    w[:, :c_out, :lanes] = rng.integers(0, 2, (arrays, c_out, lanes))
    windows = []
    for pix in range(pixels):
        for sf in range(in_folds):
            words = []
            for k in range(arrays):
                seg = np.zeros(simd, dtype=np.int64)
                part = x[pix, k, sf * simd:(sf + 1) * simd]
                seg[:len(part)] = part
                words.append(sum(pack((seg >> b) & 1) << (b * simd) for b in range(planes)))
            mask = (1 << min(simd, lanes - sf * simd)) - 1
            windows.append({"x": words, "mask": mask, "last": int(sf == in_folds - 1)})
    weights = [{"addr": nf * in_folds + sf,
                "w": [pack(w[k, nf * pe:(nf + 1) * pe, sf * simd:(sf + 1) * simd].reshape(-1))
                      for k in range(arrays)]}
               for nf in range(out_folds) for sf in range(in_folds)]
    xs = x if levels else 2 * x - 1
    ws = 2 * w[:, :, :lanes] - 1          # padded channels have weights of -1
    expected = [[int(v) for v in np.einsum("kl,kcl->kc", xs[pix],
                                           ws[:, nf * pe:(nf + 1) * pe]).reshape(-1)]
                for pix in range(pixels) for nf in range(out_folds)]
    return windows, weights, expected, dict(out_folds=out_folds)


def run(arrays, pe, simd, planes, lanes, c_out, *, pixels=5, levels=False, stall=0.0,
        seed=0):
    rng = np.random.default_rng(seed)
    windows, weights, expected, config = conv_case(rng, arrays, pe, simd, planes, lanes,
                                                   c_out, pixels, levels)
    in_folds = -(-lanes // simd)
    dut = Pipe(arrays, pe, simd, planes, max_in_folds=in_folds + 1,
               max_weight_words=len(weights) + 3)
    issuer = dut.issuer

    async def load(ctx):
        ctx.set(issuer.out_folds, config["out_folds"])
        if planes > 1:
            ctx.set(issuer.levels, int(levels))
        for word in weights:
            await stream_put(ctx, issuer.weights, word)

    result = run_streams(dut, {"window": windows}, {"o": len(expected)}, stall=stall,
                         seed=seed, max_cycles=20 * len(expected) * in_folds + 400,
                         setup=load)
    return dut, windows, expected, result


# arrays, pe, simd, planes, lanes (taps x channels), output channels: K = 1, lanes not a
# multiple of simd, channels not a multiple of pe, one fold a window, 4 planes
CASES = [(1, 2, 8, 1, 27, 5), (3, 4, 16, 1, 40, 7), (2, 3, 13, 1, 13, 3),
         (2, 2, 6, 4, 20, 4), (5, 1, 9, 1, 30, 2)]


@pytest.mark.parametrize("arrays, pe, simd, planes, lanes, c_out", CASES)
def test_every_channel_of_every_pixel(arrays, pe, simd, planes, lanes, c_out):
    *_, expected, result = run(arrays, pe, simd, planes, lanes, c_out, levels=planes > 1,
                               seed=lanes)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("seed", [1, 2])
def test_under_stalls_on_both_sides(seed):
    *_, expected, result = run(3, 4, 16, 1, 40, 7, pixels=6, stall=0.4, seed=seed)
    assert result.outputs["o"] == expected


def test_the_arrays_take_a_fold_every_cycle():
    # windows offered without gaps: after the first window, a fold every cycle, so the
    # output folds (3 folds each) leave exactly 3 cycles apart, and the first one the
    # stated latencies after the first window's last word
    dut, windows, expected, result = run(2, 4, 16, 1, 48, 16, pixels=8)
    assert result.outputs["o"] == expected
    shown = result.out_cycles["o"]
    assert [b - a for a, b in zip(shown, shown[1:])] == [3] * (len(shown) - 1)
    first_fold_in = 3 + dut.issuer.latency          # three window words, then the issuer
    assert result.cycles == first_fold_in + 3 * len(expected) - 1 + dut.arrays.latency


def test_a_second_descriptor_after_idle():
    # Two convolutions of different geometry through the same units: the second's
    # weights and settings are written once `idle` says the first is done.
    rng = np.random.default_rng(4)
    cases = [conv_case(rng, 2, 3, 8, 1, 20, 5, 3, False),
             conv_case(rng, 2, 3, 8, 1, 9, 7, 4, False)]
    dut = Pipe(2, 3, 8, 1, max_in_folds=4, max_weight_words=12)
    issuer, got = dut.issuer, []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def feed(ctx):
        for windows, weights, expected, config in cases:
            while not ctx.get(issuer.idle):
                await ctx.tick()
            ctx.set(issuer.out_folds, config["out_folds"])
            for word in weights:
                await stream_put(ctx, issuer.weights, word)
            for word in windows:
                await stream_put(ctx, dut.window, word)
            await ctx.tick()             # the last word is held before `idle` falls

    async def collect(ctx):
        from groupnet_hw.sim.streams import stream_get
        total = sum(len(c[2]) for c in cases)
        while len(got) < total:
            got.append(await stream_get(ctx, dut.o))

    sim.add_testbench(feed, background=True)
    sim.add_testbench(collect)
    sim.run()
    assert got == cases[0][2] + cases[1][2]
