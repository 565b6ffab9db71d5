# amaranth: UnusedElaboratable=no
"""The intended engine's stem (hw/engine/stem.py): the array's sums equal numpy's dot
products of unsigned pixels and signed weights, under stalls and reset, one fold a cycle
at the stated latency; the window gatherer of 8 bit planes, the stem's folds and the
array together compute the IR's ``int_conv`` exactly from the weights as the compiler
packs them."""

import numpy as np
import pytest
import torch
from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from test_engine_gather import Geometry
from groupnet_hw.compiler.engine.params import pack_int_weights
from groupnet_hw.compiler.graph import Node
from groupnet_hw.compiler.ops import op_of
from groupnet_hw.hw.engine.gather import WindowGather
from groupnet_hw.hw.engine.stem import StemArray, StemFolds, StemRowLoader
from groupnet_hw.sim.streams import run_streams, stream_put


def pack(values, bits):
    """Elements side by side, element ``j`` at bits ``[j*bits, (j+1)*bits)``."""
    mask = (1 << bits) - 1
    return sum((int(v) & mask) << (j * bits) for j, v in enumerate(values))


def random_folds(rng, pe, simd, outputs, most_folds=4, extreme=False, in_bits=8,
                 weight_bits=8):
    """Beats of ``outputs`` output folds of 1 to ``most_folds`` folds each, and the
    expected sums. ``extreme``: every element at the end of its range (the largest
    sums of either sign)."""
    top, lo, hi = (1 << in_bits) - 1, -(1 << (weight_bits - 1)), (1 << (weight_bits - 1)) - 1
    beats, expected = [], []
    for _ in range(outputs):
        folds = int(rng.integers(1, most_folds + 1))
        sums = np.zeros(pe, dtype=np.int64)
        for f in range(folds):
            if extreme:
                x = np.full(simd, top)
                w = np.full((pe, simd), rng.choice([lo, hi]))
            else:
                x = rng.integers(0, top + 1, simd)
                w = rng.integers(lo, hi + 1, (pe, simd))
            sums += w @ x
            beats.append({"x": pack(x, in_bits), "w": pack(w.reshape(-1), weight_bits),
                          "first": int(f == 0), "last": int(f == folds - 1)})
        expected.append([int(v) for v in sums])
    return beats, expected


def run(pe, simd, *, outputs=12, stall=0.0, seed=0, reset_at=None, most_folds=4, **kw):
    rng = np.random.default_rng(seed)
    beats, expected = random_folds(rng, pe, simd, outputs, most_folds, **kw)
    dut = StemArray(pe=pe, simd=simd, max_window=most_folds * simd)
    result = run_streams(dut, {"i": beats}, {"o": outputs}, stall=stall, seed=seed,
                         reset_at=reset_at, max_cycles=40 * len(beats) + 200)
    return dut, expected, result


# pe, simd: one multiplier, odd sizes, the DE10-Nano's 9-element folds cut to 3 PEs,
# ResNet's 7-element rows
@pytest.mark.parametrize("pe, simd", [(1, 1), (3, 9), (2, 7), (5, 3), (1, 16)])
def test_sums_equal_the_dot_products(pe, simd):
    _, expected, result = run(pe, simd, seed=pe * simd)
    assert result.outputs["o"] == expected


def test_the_largest_sums_of_either_sign():
    # 255 x -128 and 255 x 127 over the whole window: the accumulator's width is exact
    # for max_window elements (one more fold would wrap)
    _, expected, result = run(3, 9, seed=4, extreme=True, most_folds=17, outputs=6)
    assert result.outputs["o"] == expected
    assert min(min(s) for s in expected) < -(1 << 18)


@pytest.mark.parametrize("seed", [1, 2])
def test_sums_under_stalls_of_both_streams(seed):
    _, expected, result = run(3, 9, stall=0.4, seed=seed, outputs=20)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("reset_at", [7, 12, 19])
def test_reset_mid_stream_starts_clean(reset_at):
    # the reset lands inside an output fold, on its last fold and with sums waiting at
    # the output; the stream starts again and no partial sum survives
    _, expected, result = run(2, 9, stall=0.3, seed=7, reset_at=reset_at, outputs=14)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("simd, latency", [(2, 3), (4, 4), (9, 5), (16, 5)])
def test_one_fold_a_cycle_at_the_stated_latency(simd, latency):
    # output folds of one fold each, offered and taken every cycle: an output a cycle,
    # the first `latency` cycles after the first beat (run_streams counts an output at
    # the clock edge that takes it, a cycle after it is shown)
    dut, expected, result = run(2, simd, seed=simd, outputs=40, most_folds=1)
    assert dut.latency == latency
    assert result.outputs["o"] == expected
    assert result.out_cycles["o"] == [latency + 1 + n for n in range(40)]


def test_the_de10nano_array_converts():
    dut = StemArray(pe=16, simd=9)
    assert (dut.product_width, dut.sum_width, dut.latency) == (16, 24, 5)
    assert "prod15_8" in verilog.convert(dut, name="stem_array")


@pytest.mark.parametrize("bad", [dict(pe=0), dict(simd=2.5), dict(max_window=-1)])
def test_bad_sizes_are_refused(bad):
    with pytest.raises((TypeError, ValueError), match="must be"):
        StemArray(**{**dict(pe=1, simd=8), **bad})


# -- the stem's datapath: the window gatherer of 8 bit planes, the folds, the array ------

class StemConvolution(Elaboratable):
    """Gatherer (a pixel's channels one word of bytes as bit planes), stem folds and
    stem array: the stem's convolution."""

    def __init__(self, g, pe, simd, out_folds, data_width=None):
        in_folds = -(-g.kernel ** 2 // (simd // g.c))
        self.loader = None if data_width is None else StemRowLoader(
            lanes=g.simd, data_width=data_width, ring_rows=g.ring_rows,
            ring_words=g.ring_rows * g.pitch, max_size=16)
        self.gather = WindowGather(arrays=1, simd=g.simd, planes=8, ring_rows=g.ring_rows,
                                   ring_words=g.ring_rows * g.pitch, max_size=16,
                                   max_words=1, max_kernel=7)
        self.folds = StemFolds(pe=pe, simd=simd, lanes=g.simd, max_in_folds=in_folds,
                               max_out_folds=out_folds)
        self.array = StemArray(pe=pe, simd=simd, max_window=in_folds * simd)
        self.tile, self.o = self.gather.tile, self.array.o
        if self.loader is not None:
            self.row, self.data = self.loader.row, self.loader.data

    def elaborate(self, platform):
        m = Module()
        m.submodules.gather = self.gather
        m.submodules.folds = self.folds
        m.submodules.array = self.array
        if self.loader is not None:
            m.submodules.loader = self.loader
            wiring.connect(m, self.loader.o, self.gather.rows)
            m.d.comb += [self.gather.loaded.eq(self.loader.loaded),
                         self.loader.release.eq(self.gather.release)]
        wiring.connect(m, self.gather.window, self.folds.taps)
        wiring.connect(m, self.folds.o, self.array.i)
        return m


def stem_run(lanes, c, h, w, kernel, stride, padding, c_out, pe, simd, *, stall=0.0,
             seed=0, rows_per_tile=2, dilation=1, data_width=None, ring_rows=None):
    """A random frame of ``c`` channels of bytes and random 8-bit weights through the
    datapath, against the IR's ``int_conv``; the weights as the compiler packs them."""
    rng = np.random.default_rng(seed)
    g = Geometry(rng, 1, lanes, 8, c, h, w, kernel, stride, dilation, padding, True)
    g.ring_rows = ring_rows or g.ring_rows
    weight = rng.integers(-128, 128, (c_out, c, kernel, kernel))
    taps = simd // c
    in_folds, out_folds = -(-kernel ** 2 // taps), -(-c_out // pe)
    buf = pack_int_weights(weight, pe, simd, 1)
    word_bytes = pe * simd
    weights = [{"addr": a, "w": int.from_bytes(buf[a * word_bytes:(a + 1) * word_bytes],
                                               "little")}
               for a in range(len(buf) // word_bytes)]
    assert len(weights) == in_folds * out_folds
    dut = StemConvolution(g, pe, simd, out_folds, data_width)
    inputs = {"tile": g.tiles(rows_per_tile)}

    async def setup(ctx):
        ctx.set(dut.gather.settings, g.settings())
        ctx.set(dut.folds.settings, dict(channels=c, in_folds=in_folds, out_folds=out_folds))
        if data_width is None:
            ctx.set(dut.gather.loaded, g.h)
            for word in g.ring():
                await stream_put(ctx, dut.gather.rows, word)
        else:
            ctx.set(dut.loader.settings, loader_settings(g, data_width))
        for word in weights:
            await stream_put(ctx, dut.folds.weights, word)

    if data_width is not None:
        # the frame from DRAM: rows into the ring as the gatherer releases their slots
        inputs.update(row=[{"base": (iy % g.ring_rows) * g.pitch, "iy": iy}
                           for iy in range(g.h)],
                      data=dram_rows(rng, g, data_width))

    node = Node("stem", "int_conv", [], dict(weight=torch.from_numpy(weight), kernel=kernel,
                                             stride=stride, dilation=dilation,
                                             padding=padding), channels=c_out)
    y = op_of(node).execute(node, [torch.from_numpy(g.maps[0]).unsqueeze(0)])[0]
    expected = [[int(y[fo * pe + p, oy, ox]) if fo * pe + p < c_out else 0
                 for p in range(pe)]
                for oy in range(g.oh) for ox in range(g.ow) for fo in range(out_folds)]
    result = run_streams(dut, inputs, {"o": len(expected)}, stall=stall, seed=seed,
                         setup=setup, max_cycles=4 * len(expected) * in_folds
                         + 50 * g.oh * g.ow + 40 * g.h * g.w * g.c + 1000)
    return expected, result, dut


def loader_settings(g, data_width):
    return dict(width=g.w, channels=g.c, row_beats=-(-g.w * g.c * 8 // data_width))


def dram_rows(rng, g, data_width):
    """The frame's rows as the read DMA gives them: a pixel's channels a byte each, the
    row padded to the bus word with random bytes."""
    words = []
    row_bytes = -(-g.w * g.c * 8 // data_width) * data_width // 8
    for iy in range(g.h):
        row = [int(g.maps[0, c, iy, ix]) for ix in range(g.w) for c in range(g.c)]
        row += [int(b) for b in rng.integers(0, 256, row_bytes - len(row))]
        words += [int.from_bytes(bytes(row[i:i + data_width // 8]), "little")
                  for i in range(0, row_bytes, data_width // 8)]
    return words


def test_the_loader_writes_each_pixel_a_ring_word():
    rng = np.random.default_rng(4)
    g = Geometry(rng, 1, 3, 8, 3, 4, 7, 3, 1, 1, 1, True)
    dut = StemRowLoader(lanes=3, data_width=32, ring_rows=g.ring_rows,
                        ring_words=g.ring_rows * g.pitch, max_size=16)

    async def setup(ctx):
        ctx.set(dut.settings, loader_settings(g, 32))
        ctx.set(dut.release, g.h)
    rows = [{"base": (iy % g.ring_rows) * g.pitch, "iy": iy} for iy in range(g.h)]
    expected = g.ring()
    result = run_streams(dut, {"row": rows, "data": dram_rows(rng, g, 32)},
                         {"o": len(expected)}, stall=0.3, seed=2, setup=setup)
    assert result.outputs["o"] == expected


# lanes (the frame's most channels), channels, h, w, kernel, stride, padding, C_out, pe,
# simd: ResNet's 7x7/2 stem on RGB (9-byte folds: three taps, a last fold of one),
# channels that are not all the lanes, a grey frame (nine taps a fold), a 3x3 CIFAR
# stem, C_out not a multiple of pe, a one-tap fold
STEMS = [(3, 3, 9, 8, 7, 2, 3, 5, 2, 9), (3, 1, 6, 7, 3, 1, 1, 4, 4, 9),
         (4, 3, 5, 5, 3, 1, 1, 3, 3, 6), (3, 3, 5, 6, 3, 2, 0, 7, 4, 3),
         (1, 1, 4, 4, 5, 1, 2, 2, 1, 1)]


@pytest.mark.parametrize("stem", STEMS)
def test_the_datapath_computes_the_irs_integer_convolution(stem):
    expected, result, _ = stem_run(*stem, seed=sum(stem))
    assert result.outputs["o"] == expected


def test_the_datapath_under_stalls():
    expected, result, _ = stem_run(*STEMS[0], stall=0.4, seed=3, rows_per_tile=1)
    assert result.outputs["o"] == expected


def test_a_pixel_takes_its_folds_not_its_taps():
    # ResNet's window on 9 lanes: 49 taps, 17 folds; with 4 output folds the folds (68
    # cycles a pixel) set the pace and the taps are gathered under them
    expected, result, dut = stem_run(3, 3, 7, 7, 7, 2, 3, 8, 2, 9, seed=9, rows_per_tile=4)
    assert result.outputs["o"] == expected
    pixels = len(expected) // 4
    shown = result.out_cycles["o"]
    assert shown[-1] - shown[0] <= pixels * 68 + 4     # a pixel's folds back to back


@pytest.mark.parametrize("data_width, stall", [(128, 0.0), (32, 0.3)])
def test_the_frame_from_dram_rows_through_a_ring_of_fewer_rows(data_width, stall):
    # ResNet's stem geometry on a 12-row frame through a ring of 8 rows: the loader
    # takes a row only once the gatherer has released its slot
    stem = (3, 3, 12, 6, 7, 2, 3, 3, 2, 9)
    expected, result, dut = stem_run(*stem, seed=11, stall=stall, data_width=data_width,
                                     ring_rows=8)
    assert result.outputs["o"] == expected
