# amaranth: UnusedElaboratable=no
"""The intended engine's row loader (hw/engine/loader.py): rows of binary maps packed by
the compiler's own DRAM format (``TensorFormat.pack``) land in the ring exactly as the
gatherer reads them (``test_engine_gather.Geometry``), each base in its own slice, for
channels not a multiple of the lanes or of 8, bus words wider and narrower than a pixel,
and stalls; and a loader refilling a ring of fewer rows than the map while a gatherer
reads it gives numpy's windows."""

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from groupnet_hw.compiler.engine.formats import TensorFormat
from groupnet_hw.hw.engine.gather import WindowGather
from groupnet_hw.hw.engine.loader import RowLoader
from groupnet_hw.sim.streams import run_streams
from test_engine_gather import Geometry


def bus_words(row_bytes, data_width):
    step = data_width // 8
    return [int.from_bytes(bytes(row_bytes[i:i + step]), "little")
            for i in range(0, len(row_bytes), step)]


def run(arrays, simd, channels, width, data_width, *, height=3, stall=0.0, seed=0,
        dirty_padding=False):
    g = Geometry(np.random.default_rng(seed), arrays, simd, 1, channels, height, width,
                 3, 1, 1, 1, False)
    port = data_width // 8
    fmt = TensorFormat("bits", 1, channels, height, width, port)
    rows, data = [], []
    for iy in range(height):
        for k in range(arrays):
            packed = fmt.pack(g.maps[k]).reshape(height, -1)[iy].copy()
            if dirty_padding:       # what the DMA reads past a row's pixels is not ours
                pixels = width * fmt.pixel_bytes
                packed[pixels:] = np.random.default_rng(seed + iy).integers(
                    1, 256, packed.size - pixels)
            rows.append({"base": (iy % g.ring_rows) * g.pitch, "array": k, "iy": iy,
                         "last": int(k == arrays - 1)})
            data += bus_words(packed, data_width)
    settings = dict(width=width, pixel_bytes=fmt.pixel_bytes, words=g.words,
                    row_beats=fmt.row_bytes // port)
    dut = RowLoader(arrays=arrays, simd=simd, data_width=data_width,
                    ring_words=g.ring_rows * g.pitch, max_size=16, max_words=16)

    async def setup(ctx):
        ctx.set(dut.settings, settings)
        ctx.set(dut.release, height)             # every slot free

    writes = height * arrays * width * g.words
    result = run_streams(dut, {"row": rows, "data": data}, {"o": writes}, stall=stall,
                         seed=seed, setup=setup, max_cycles=20 * (writes + len(data)) + 200)
    ring = {}
    mask = (1 << simd) - 1
    for w in result.outputs["o"]:
        (k,) = [k for k in range(arrays) if w["en"] >> k & 1]
        word = ring.get(w["addr"], [0] * arrays)
        word[k] = (w["x"] >> (k * simd)) & mask
        ring[w["addr"]] = word
    expected = {(iy % g.ring_rows) * g.pitch + ix * g.words + j:
                [g.word(k, iy, ix, j) for k in range(arrays)]
                for iy in range(height) for ix in range(width) for j in range(g.words)}
    return dut, ring, expected, result, len(data)


@pytest.mark.parametrize("arrays, simd, channels, width, data_width", [
    (2, 8, 8, 5, 64),        # a pixel a byte, eight pixels a bus word
    (3, 16, 13, 4, 32),      # 13 channels: two bytes a pixel, one word of 16 lanes
    (2, 8, 21, 3, 128),      # three bytes a pixel, three words, the last 5 channels
    (1, 64, 64, 7, 128),     # ResNet's 64 channels: a word a pixel, two a bus word
    (2, 16, 40, 2, 64),      # five bytes a pixel: the last word one byte
])
def test_rows_land_where_the_gatherer_reads_them(arrays, simd, channels, width, data_width):
    _, ring, expected, result, _ = run(arrays, simd, channels, width, data_width,
                                       seed=channels)
    assert ring == expected


def test_rows_under_stalls():
    _, ring, expected, result, _ = run(3, 16, 13, 4, 32, stall=0.4, seed=3)
    assert ring == expected


@pytest.mark.parametrize("simd", [64, 48])
def test_a_ring_word_a_cycle(simd):
    # 64 (48) channels on as many lanes, 128-bit bus words: a row of 7 pixels is 7 ring
    # words and 4 (3) bus words; three rows of two bases in a few cycles more than their
    # 42 words, also where a bus word is not whole ring words (16 bytes, 6 a word)
    dut, ring, expected, result, beats = run(2, simd, simd, 7, 128)
    assert ring == expected
    assert result.cycles <= 42 + 3 * 2 * 3


def test_a_rows_padding_is_dropped_whatever_it_holds():
    # 21 channels: three bytes a pixel, 5 pixels 15 bytes, the row padded to 16 and 32
    for data_width in (128, 256):
        _, ring, expected, _, _ = run(2, 8, 21, 5, data_width, seed=5, dirty_padding=True)
        assert ring == expected


@pytest.mark.parametrize("bad, message", [(dict(simd=12), "multiples of 8"),
                                          (dict(arrays=0), "must be positive")])
def test_bad_sizes_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        RowLoader(**{**dict(arrays=1, simd=8), **bad})


class RingPair(Elaboratable):
    """A row loader filling a gatherer's ring as the gatherer reads it."""

    def __init__(self, g, data_width):
        ring_words = g.ring_rows * g.pitch
        self.loader = RowLoader(arrays=g.arrays, simd=g.simd, data_width=data_width,
                                ring_words=ring_words, ring_rows=g.ring_rows, max_size=16,
                                max_words=4)
        self.gather = WindowGather(arrays=g.arrays, simd=g.simd, ring_rows=g.ring_rows,
                                   ring_words=ring_words, max_size=16, max_words=4,
                                   max_kernel=5)
        self.row, self.data = self.loader.row, self.loader.data
        self.tile, self.window = self.gather.tile, self.gather.window

    def elaborate(self, platform):
        m = Module()
        m.submodules.loader, m.submodules.gather = self.loader, self.gather
        wiring.connect(m, self.loader.o, self.gather.rows)
        m.d.comb += [self.gather.loaded.eq(self.loader.loaded),
                     self.loader.release.eq(self.gather.release)]
        return m


@pytest.mark.parametrize("geometry, ring_rows", [
    ((2, 8, 1, 13, 11, 5, 3, 1, 1, 1, False), 4),    # 3x3: three rows and the next
    ((1, 16, 1, 16, 12, 4, 3, 2, 1, 1, False), 4),   # stride 2
    ((2, 8, 1, 8, 12, 5, 3, 1, 2, 2, False), 8),     # dilation 2: five rows a window
    ((2, 16, 1, 16, 12, 4, 1, 2, 1, 0, False), 2),   # 1x1 stride 2: a new output row's
])                                                   # only row is not the last one's
def test_the_loader_refills_the_ring_as_the_gatherer_reads_it(geometry, ring_rows):
    # A ring of fewer rows than the map: rows wrap around their slots, the loader waits
    # for the gatherer to release a slot and the gatherer for the loader to fill it,
    # and every window equals numpy's.
    g = Geometry(np.random.default_rng(ring_rows), *geometry)
    g.ring_rows = ring_rows
    data_width = 64
    fmt = TensorFormat("bits", 1, g.c, g.h, g.w, data_width // 8)
    rows, data = [], []
    for iy in range(g.h):
        for k in range(g.arrays):
            rows.append({"base": (iy % ring_rows) * g.pitch, "array": k, "iy": iy,
                         "last": int(k == g.arrays - 1)})
            data += bus_words(fmt.pack(g.maps[k]).reshape(g.h, -1)[iy], data_width)
    dut = RingPair(g, data_width)

    async def setup(ctx):
        ctx.set(dut.loader.settings, dict(width=g.w, pixel_bytes=fmt.pixel_bytes,
                                          words=g.words,
                                          row_beats=fmt.row_bytes // (data_width // 8)))
        ctx.set(dut.gather.settings, g.settings())

    expected = g.windows()
    result = run_streams(dut, {"row": rows, "data": data, "tile": g.tiles(2)},
                         {"window": len(expected)}, setup=setup, stall=0.3, seed=ring_rows,
                         max_cycles=20 * (len(expected) + len(data)) + 500)
    assert result.outputs["window"] == expected
