# amaranth: UnusedElaboratable=no
"""The intended engine's window gatherer (hw/engine/gather.py): its window words equal
numpy's tap-aligned windows, and gatherer, fold issuer and base arrays together compute
the IR's own binary convolution (``bin_conv``'s ``execute``) bit-exact from the weights as
the compiler packs them, for kernels 1 to 5, stride 2, dilation 2, padding, channels not
a multiple of the lanes and 2-bit levels, in row tiles and under stalls."""

import numpy as np
import pytest
import torch
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from groupnet_hw.compiler.engine.gather import gather_geometry, tile_first_row
from groupnet_hw.compiler.engine.params import (binary_in_folds, binary_weight_words,
                                                pack_binary_weights)
from groupnet_hw.compiler.graph import Node
from groupnet_hw.compiler.ops import op_of
from groupnet_hw.hw.engine.arrays import BaseArrays
from groupnet_hw.hw.engine.folds import FoldIssuer
from groupnet_hw.hw.engine.gather import WindowGather
from groupnet_hw.sim.streams import run_streams, stream_put


def pack_bits(bits):
    """0/1 lanes as an int, lane 0 at bit 0 (Python ints: 64 lanes and more)."""
    return sum(int(v) << i for i, v in enumerate(bits))


def out_size(size, kernel, stride, dilation, padding):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


class Geometry:
    """A convolution's geometry and its maps, as the gatherer holds them."""

    def __init__(self, rng, arrays, simd, planes, c, h, w, kernel, stride, dilation,
                 padding, levels):
        self.arrays, self.simd, self.planes, self.c = arrays, simd, planes, c
        self.h, self.w, self.kernel, self.stride = h, w, kernel, stride
        self.dilation, self.padding, self.levels = dilation, padding, levels
        self.words = -(-c // simd)
        self.oh = out_size(h, kernel, stride, dilation, padding)
        self.ow = out_size(w, kernel, stride, dilation, padding)
        top = (1 << planes) if levels else 2
        self.maps = rng.integers(0, top, (arrays, c, h, w))       # bits or levels
        self.ring_rows = 1 << max(0, (h - 1).bit_length())
        self.pitch = w * self.words

    def word(self, k, iy, ix, j):
        """Array ``k``'s word ``j`` of pixel (iy, ix): its channels' bit planes."""
        lanes = np.zeros(self.simd, dtype=np.int64)
        part = self.maps[k, j * self.simd:(j + 1) * self.simd, iy, ix]
        lanes[:len(part)] = part
        return sum(pack_bits((lanes >> b) & 1) << (b * self.simd) for b in range(self.planes))

    def ring(self):
        """The ring's writes: every input row in its slot."""
        return [{"addr": (iy % self.ring_rows) * self.pitch + ix * self.words + j,
                 "x": sum(self.word(k, iy, ix, j) << (k * self.simd * self.planes)
                          for k in range(self.arrays)), "en": (1 << self.arrays) - 1}
                for iy in range(self.h) for ix in range(self.w) for j in range(self.words)]

    def settings(self):
        tail = (self.c - 1) % self.simd + 1
        return dict(height=self.h, width=self.w, words=self.words, tail=(1 << tail) - 1,
                    kernel=self.kernel, stride=self.stride, dilation=self.dilation,
                    padding=self.padding, out_w=self.ow, pitch=self.pitch,
                    x_step=self.stride * self.words, dx_words=self.dilation * self.words,
                    pad_words=self.padding * self.words, pad_ones=int(not self.levels),
                    span=(self.kernel - 1) * self.dilation)

    def tiles(self, rows):
        """Tiles of ``rows`` output rows: (first input row, output rows)."""
        return [{"iy0": oy * self.stride - self.padding, "rows": min(rows, self.oh - oy)}
                for oy in range(0, self.oh, rows)]

    def windows(self):
        """The expected window words, pixel by pixel."""
        pad = ((1 << self.simd) - 1) if not self.levels else 0
        beats = []
        for oy in range(self.oh):
            for ox in range(self.ow):
                for ky in range(self.kernel):
                    for kx in range(self.kernel):
                        iy = oy * self.stride - self.padding + ky * self.dilation
                        ix = ox * self.stride - self.padding + kx * self.dilation
                        inside = 0 <= iy < self.h and 0 <= ix < self.w
                        for j in range(self.words):
                            last_tap = ky == kx == self.kernel - 1
                            beats.append({
                                "x": [self.word(k, iy, ix, j) if inside else pad
                                      for k in range(self.arrays)],
                                "mask": self.settings()["tail"] if j == self.words - 1
                                else (1 << self.simd) - 1,
                                "last": int(last_tap and j == self.words - 1)})
        return beats


def configure(dut_settings, geometry):
    async def bench(ctx):
        ctx.set(dut_settings, geometry.settings())
    return bench


GEOMETRIES = [
    # arrays, simd, planes, channels, h, w, kernel, stride, dilation, padding, levels
    (1, 8, 1, 8, 5, 6, 3, 1, 1, 1, False),
    (2, 8, 1, 13, 7, 5, 3, 2, 1, 1, False),      # channels not a multiple of simd, stride 2
    (3, 6, 1, 6, 6, 7, 3, 1, 2, 2, False),       # dilation 2
    (1, 8, 2, 10, 5, 5, 5, 1, 1, 2, True),       # 5x5, 2-bit levels pad with 0
    (2, 16, 1, 16, 4, 4, 1, 2, 1, 0, False),     # 1x1, stride 2 (a downsample shortcut)
]


def gather_run(geometry, rows_per_tile, stall=0.0, seed=0):
    g = geometry
    dut = WindowGather(arrays=g.arrays, simd=g.simd, planes=g.planes, ring_rows=g.ring_rows,
                       ring_words=g.ring_rows * g.pitch, max_size=16, max_words=4,
                       max_kernel=5)

    async def setup(ctx):
        ctx.set(dut.settings, g.settings())
        ctx.set(dut.loaded, g.h)
        for word in g.ring():
            await stream_put(ctx, dut.rows, word)

    expected = g.windows()
    result = run_streams(dut, {"tile": g.tiles(rows_per_tile)}, {"window": len(expected)},
                         stall=stall, seed=seed, setup=setup,
                         max_cycles=10 * len(expected) + 500)
    return dut, expected, result


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_window_words_equal_numpys_windows(geometry):
    g = Geometry(np.random.default_rng(sum(geometry[:6])), *geometry)
    _, expected, result = gather_run(g, rows_per_tile=2)
    assert result.outputs["window"] == expected


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_compilers_geometry_is_the_gatherers_settings(geometry):
    """The settings these tests hand the gatherer are what the compiler computes from
    the descriptor (compiler/engine/gather.py)."""
    g = Geometry(np.random.default_rng(0), *geometry)
    d = dict(index=0, groups=1, stages=0, in_c=g.c, in_h=g.h, in_w=g.w, kernel=g.kernel,
             stride=g.stride, dilation=g.dilation, padding=g.padding, out_w=g.ow, mid_w=0,
             act_bits=g.planes if g.levels else 0)
    assert gather_geometry(d, g.simd) == g.settings()
    assert [tile_first_row(d, oy) for oy in range(0, g.oh, 2)] == [t["iy0"] for t in g.tiles(2)]


def test_a_word_a_cycle():
    g = Geometry(np.random.default_rng(1), *GEOMETRIES[1])
    dut, expected, result = gather_run(g, rows_per_tile=g.oh)
    assert result.outputs["window"] == expected
    shown = result.out_cycles["window"]
    # and a cycle an output row after the first, for its rows' check
    assert shown[-1] - shown[0] == len(expected) - 1 + g.oh - 1


class Convolution(Elaboratable):
    """Gatherer, fold issuer and base arrays: a binary convolution's datapath."""

    def __init__(self, g, pe, max_weight_words):
        self.gather = WindowGather(arrays=g.arrays, simd=g.simd, planes=g.planes,
                                   ring_rows=g.ring_rows, ring_words=g.ring_rows * g.pitch,
                                   max_size=16, max_words=4, max_kernel=5)
        self.issuer = FoldIssuer(arrays=g.arrays, pe=pe, simd=g.simd, planes=g.planes,
                                 max_in_folds=g.kernel ** 2 * g.words,
                                 max_weight_words=max_weight_words)
        self.arrays = BaseArrays(arrays=g.arrays, pe=pe, simd=g.simd, planes=g.planes,
                                 max_window=g.kernel ** 2 * g.words * g.simd)
        self.tile, self.o = self.gather.tile, self.arrays.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.gather = self.gather
        m.submodules.issuer = self.issuer
        m.submodules.arrays = self.arrays
        wiring.connect(m, self.gather.window, self.issuer.window)
        wiring.connect(m, self.issuer.o, self.arrays.i)
        return m


def conv_weights(rng, g, c_out, pe):
    """Random weights of ``c_out`` channels a base, as the compiler packs them for the
    intended engine (tap-aligned) and the fold issuer reads them: word ``nf * in_folds +
    s`` of a base is fold ``(nf, s)``'s ``pe * simd`` bits."""
    bits = rng.integers(0, 2, (g.arrays, c_out, g.c, g.kernel, g.kernel))
    out_folds = -(-c_out // pe)
    folds = out_folds * binary_in_folds(g.c, g.kernel, g.simd, tap_aligned=True)
    words = [binary_weight_words(pack_binary_weights(bits[k], pe, g.simd, tap_aligned=True),
                                 pe, g.simd, folds) for k in range(g.arrays)]
    weights = [{"addr": a, "w": [words[k][a] for k in range(g.arrays)],
                "en": (1 << g.arrays) - 1} for a in range(folds)]
    return bits, weights, out_folds


def hand_packed(bits, g, c_out, pe):
    """The gatherer's tap-aligned order, word by word: fold ``(nf, t * words + j)`` holds
    PE ``p``'s channel ``nf * pe + p``, tap ``t``'s channels of word ``j`` (channels past
    ``c_out`` are 0 bits: weights of -1)."""
    taps, out_folds = g.kernel ** 2, -(-c_out // pe)
    in_folds = taps * g.words
    weights = []
    for nf in range(out_folds):
        for t in range(taps):
            for j in range(g.words):
                w = []
                for k in range(g.arrays):
                    word = 0
                    for p in range(pe):
                        c = nf * pe + p
                        if c >= c_out:
                            continue
                        row = bits[k, c, j * g.simd:(j + 1) * g.simd, t // g.kernel,
                                   t % g.kernel]
                        word |= pack_bits(row) << (p * g.simd)
                    w.append(word)
                weights.append({"addr": nf * in_folds + t * g.words + j, "w": w,
                                "en": (1 << g.arrays) - 1})
    return weights


def conv_run(geometry, c_out, pe, rows_per_tile, stall=0.0, seed=0):
    g = Geometry(np.random.default_rng(seed + c_out), *geometry)
    rng = np.random.default_rng(seed)
    bits, weights, out_folds = conv_weights(rng, g, c_out, pe)
    in_folds = g.kernel ** 2 * g.words
    dut = Convolution(g, pe, max_weight_words=len(weights))

    async def setup(ctx):
        ctx.set(dut.gather.settings, g.settings())
        ctx.set(dut.gather.loaded, g.h)
        for word in g.ring():
            await stream_put(ctx, dut.gather.rows, word)
        for word in weights:
            await stream_put(ctx, dut.issuer.weights, word)
        chunk = dict(out_folds=out_folds, in_folds=in_folds, windows=g.oh * g.ow)
        if g.planes > 1:
            chunk["levels"] = int(g.levels)
        await stream_put(ctx, dut.issuer.chunk, chunk)        # one chunk: every pixel

    # the IR's bin_conv on each base's map; channels past c_out have weights of -1
    ys = []
    for k in range(g.arrays):
        padded = np.zeros((out_folds * pe, g.c, g.kernel, g.kernel), dtype=np.int64)
        padded[:c_out] = bits[k]
        node = Node("test", "bin_conv", [], dict(
            bits=torch.from_numpy(padded), in_bits=g.planes if g.levels else 0,
            kernel=g.kernel, stride=g.stride, dilation=g.dilation, padding=g.padding),
            channels=out_folds * pe)
        x = torch.from_numpy(g.maps[k]).unsqueeze(0)
        ys.append(op_of(node).execute(node, [x])[0])
    expected = [[int(ys[k][nf * pe + p, oy, ox]) for k in range(g.arrays) for p in range(pe)]
                for oy in range(g.oh) for ox in range(g.ow) for nf in range(out_folds)]
    result = run_streams(dut, {"tile": g.tiles(rows_per_tile)}, {"o": len(expected)},
                         stall=stall, seed=seed, setup=setup,
                         max_cycles=10 * len(expected) * in_folds + 1000)
    return expected, result


CONVOLUTIONS = [(GEOMETRIES[0], 5, 2), (GEOMETRIES[1], 7, 3), (GEOMETRIES[2], 4, 4),
                (GEOMETRIES[3], 3, 2), (GEOMETRIES[4], 9, 4)]


@pytest.mark.parametrize("geometry, c_out, pe", CONVOLUTIONS)
def test_the_compilers_weights_are_the_gatherers_order(geometry, c_out, pe):
    g = Geometry(np.random.default_rng(0), *geometry)
    bits, weights, _ = conv_weights(np.random.default_rng(1), g, c_out, pe)
    assert weights == hand_packed(bits, g, c_out, pe)


@pytest.mark.parametrize("geometry, c_out, pe", CONVOLUTIONS)
def test_the_datapath_computes_the_irs_convolution(geometry, c_out, pe):
    expected, result = conv_run(geometry, c_out, pe, rows_per_tile=2)
    assert result.outputs["o"] == expected


def test_the_datapath_under_stalls():
    expected, result = conv_run(GEOMETRIES[1], 7, 3, rows_per_tile=1, stall=0.4, seed=5)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("bad, message", [(dict(ring_rows=3), "power of two"),
                                          (dict(simd=0), "must be positive")])
def test_bad_sizes_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        WindowGather(**{**dict(arrays=1, simd=8), **bad})


def test_the_first_word_after_the_stated_latency():
    from amaranth.sim import Simulator
    g = Geometry(np.random.default_rng(2), *GEOMETRIES[0])
    dut = WindowGather(arrays=g.arrays, simd=g.simd, planes=g.planes, ring_rows=g.ring_rows,
                       ring_words=g.ring_rows * g.pitch, max_size=16, max_words=4,
                       max_kernel=5)
    seen = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(dut.settings, g.settings())
        ctx.set(dut.loaded, g.h)
        ctx.set(dut.window.ready, 1)
        await ctx.tick()                       # `loaded` is seen a cycle later
        ctx.set(dut.tile.payload, g.tiles(1)[0])
        ctx.set(dut.tile.valid, 1)
        await ctx.tick()                       # the tile is taken in this cycle
        ctx.set(dut.tile.valid, 0)
        for cycle in range(1, 10):
            *_, valid = await ctx.tick().sample(dut.window.valid)
            if valid:
                seen.append(cycle)
        assert ctx.get(dut.idle) == 0

    sim.add_testbench(bench)
    sim.run()
    assert seen[0] == dut.latency and seen == list(range(seen[0], 10))


def test_the_ring_offsets_are_an_address_wide():
    """The word offsets into the ring are one bit wider than a ring address: at the
    stem's sizes (a ring of 2,048 words, frames of 256 pixels) 14 bits. (They were once
    the ring's address count wide, 3,586 bits there: Yosys removed the surplus, but
    Amaranth's netlist checks walked every bit, and the DE10-Nano's units took 80 s
    instead of 28 to convert.)"""
    import re

    from amaranth.back import rtlil
    gather = WindowGather(arrays=1, simd=3, planes=8, ring_rows=8, ring_words=2048,
                          max_size=256, max_words=1, max_kernel=7)
    text = rtlil.convert(gather, name="gather")
    widths = {name: int(w) for w, name in
              re.findall(r"wire width (\d+) signed \\(xw_\w+)", text)}
    assert "xw_tap" in widths and set(widths.values()) == {14}, widths
