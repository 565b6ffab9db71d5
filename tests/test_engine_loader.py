# amaranth: UnusedElaboratable=no
"""The intended engine's row loader (hw/engine/loader.py): rows packed by the compiler's
own DRAM formats (``TensorFormat.pack``: binary maps in ``bits``, 2- and 4-bit levels in
``uint``) land in the ring exactly as the gatherer reads them
(``test_engine_gather.Geometry``: a level's bits in planes), each base in its own slice,
for channels not a multiple of the lanes or of 8, bus words wider and narrower than a
pixel and than a ring word, binary maps and 2-bit levels in a loader of 4 planes, stalls
and random padding bytes, at a ring word a cycle; and a loader refilling a ring of fewer
rows than the map while a gatherer reads it gives numpy's windows."""

import random

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


def dram_format(elem_bits, channels, height, width, port):
    """The DRAM format of a binary map (``elem_bits`` 1) or of levels."""
    return TensorFormat("bits" if elem_bits == 1 else "uint", elem_bits, channels, height,
                        width, port)


def run(arrays, simd, channels, width, data_width, *, planes=1, elem_bits=1, height=3,
        stall=0.0, seed=0, dirty_padding=False):
    rng = np.random.default_rng(seed)
    g = Geometry(rng, arrays, simd, planes, channels, height, width, 3, 1, 1, 1,
                 elem_bits > 1)
    # levels of the map's own width, whatever the planes: a 2-bit level in 4 planes
    # leaves the upper two zero (the gatherer's word of it, `Geometry.word`)
    g.maps = rng.integers(0, 1 << elem_bits, g.maps.shape)
    port = data_width // 8
    fmt = dram_format(elem_bits, channels, height, width, port)
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
                    row_beats=fmt.row_bytes // port, elem_bits=elem_bits)
    dut = RowLoader(arrays=arrays, simd=simd, planes=planes, data_width=data_width,
                    ring_words=g.ring_rows * g.pitch, max_size=16, max_words=16)

    async def setup(ctx):
        ctx.set(dut.settings, settings)
        ctx.set(dut.release, height)             # every slot free

    writes = height * arrays * width * g.words
    result = run_streams(dut, {"row": rows, "data": data}, {"o": writes}, stall=stall,
                         seed=seed, setup=setup, max_cycles=20 * (writes + len(data)) + 200)
    ring = {}
    slice_bits = simd * planes
    mask = (1 << slice_bits) - 1
    for w in result.outputs["o"]:
        (k,) = [k for k in range(arrays) if w["en"] >> k & 1]
        word = ring.get(w["addr"], [0] * arrays)
        word[k] = (w["x"] >> (k * slice_bits)) & mask
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


@pytest.mark.parametrize("arrays, simd, planes, elem_bits, channels, width, data_width", [
    (2, 8, 2, 2, 13, 5, 32),     # 26 bits: four bytes a pixel, words of two, the last 5 levels
    (2, 8, 4, 4, 13, 3, 64),     # 52 bits: seven bytes, words of four, the last three
    (3, 16, 4, 4, 21, 4, 64),    # 84 bits: eleven bytes, words of eight, the last three
    (2, 8, 4, 2, 40, 3, 128),    # 2-bit levels in 4 planes: five words of two bytes
    (2, 16, 4, 2, 21, 4, 64),    # the last word's 5 levels in two bytes, upper planes zero
    (2, 32, 2, 2, 40, 4, 32),    # a ring word two bus words, the last one two bytes
    (1, 24, 4, 4, 13, 5, 96),    # 24 lanes: a word of 12 bytes, a pixel of 7
    (1, 24, 4, 4, 48, 3, 96),    # a word a bus word of 12 bytes: each ends at a bus word's end
    (1, 64, 2, 2, 100, 3, 128),  # 64 lanes: 25 bytes a pixel, the last word nine
    (1, 64, 4, 4, 64, 3, 128),   # ResNet's 64 channels of 4 bits: a word two bus words
])
def test_levels_land_in_planes_where_the_gatherer_reads_them(arrays, simd, planes, elem_bits,
                                                             channels, width, data_width):
    _, ring, expected, _, _ = run(arrays, simd, channels, width, data_width, planes=planes,
                                  elem_bits=elem_bits, seed=channels + planes)
    assert ring == expected


@pytest.mark.parametrize("arrays, simd, planes, channels, width, data_width", [
    (2, 8, 4, 21, 3, 128),       # three words a pixel: plane 0, zeros above
    (3, 16, 4, 13, 4, 32),
    (2, 16, 2, 40, 2, 64),
])
def test_a_binary_map_through_a_loader_of_levels(arrays, simd, planes, channels, width,
                                                 data_width):
    _, ring, expected, _, _ = run(arrays, simd, channels, width, data_width, planes=planes,
                                  seed=channels)
    assert ring == expected


@pytest.mark.parametrize("planes, elem_bits", [(1, 1), (4, 1), (2, 2), (4, 4)])
def test_rows_under_stalls(planes, elem_bits):
    _, ring, expected, result, _ = run(3, 16, 13, 4, 32, planes=planes, elem_bits=elem_bits,
                                       stall=0.4, seed=3)
    assert ring == expected


@pytest.mark.parametrize("simd, planes, elem_bits", [(64, 1, 1), (48, 1, 1), (64, 4, 1),
                                                     (32, 4, 2), (16, 2, 2), (32, 4, 4)])
def test_a_ring_word_a_cycle(simd, planes, elem_bits):
    # `simd` channels on as many lanes, 128-bit bus words: a row of 7 pixels is 7 ring
    # words and 4 bus words (3 of 48 binary lanes, 2 of 16 2-bit levels, 7 of 32 4-bit
    # ones); three rows of two bases in a few cycles more than their 42 words, also
    # where a bus word is not whole ring words (16 bytes, 6 a word) and where a binary
    # map goes through a loader of 4 planes
    dut, ring, expected, result, beats = run(2, simd, simd, 7, 128, planes=planes,
                                             elem_bits=elem_bits)
    assert ring == expected
    assert result.cycles <= 42 + 3 * 2 * 3


def test_a_bus_word_a_cycle_where_a_ring_word_is_wider():
    # 64 4-bit levels: a ring word of 32 bytes is two bus words of 16, so the bus sets
    # the pace: 84 bus words for three rows of two bases
    dut, ring, expected, result, beats = run(2, 64, 64, 7, 128, planes=4, elem_bits=4)
    assert ring == expected
    assert beats == 84
    assert result.cycles <= beats + 3 * 2 * 3


@pytest.mark.parametrize("planes, elem_bits", [(1, 1), (2, 2), (4, 4), (4, 2)])
def test_a_rows_padding_is_dropped_whatever_it_holds(planes, elem_bits):
    # 21 channels: 3 (6, 11) bytes a pixel, 5 pixels 15 (30, 55) bytes, the row padded
    # to 16 (32, 64) and 32 (32, 64)
    for data_width in (128, 256):
        _, ring, expected, _, _ = run(2, 8, 21, 5, data_width, planes=planes,
                                      elem_bits=elem_bits, seed=5, dirty_padding=True)
        assert ring == expected


@pytest.mark.parametrize("seed", range(24))
def test_random_geometries(seed):
    # lanes, planes and element widths, channels, widths, bus words, stalls and padding
    # drawn at random
    r = random.Random(seed)
    simd = r.choice([8, 16, 24, 32, 48, 64])
    planes, elem_bits = r.choice([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4)])
    _, ring, expected, _, _ = run(
        r.randint(1, 3), simd, r.randint(1, 4 * simd), r.randint(1, 6),
        8 * r.choice([4, 8, 12, 16, 32]), planes=planes, elem_bits=elem_bits,
        height=2, stall=r.choice([0.0, 0.3]), seed=seed, dirty_padding=r.random() < 0.5)
    assert ring == expected


@pytest.mark.parametrize("bad, message", [(dict(simd=12), "multiples of 8"),
                                          (dict(arrays=0), "must be positive"),
                                          (dict(planes=3), "1, 2 or 4"),
                                          (dict(planes=0), "must be positive")])
def test_bad_sizes_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        RowLoader(**{**dict(arrays=1, simd=8), **bad})


class RingPair(Elaboratable):
    """A row loader filling a gatherer's ring as the gatherer reads it."""

    def __init__(self, g, data_width):
        ring_words = g.ring_rows * g.pitch
        self.loader = RowLoader(arrays=g.arrays, simd=g.simd, planes=g.planes,
                                data_width=data_width, ring_words=ring_words,
                                ring_rows=g.ring_rows, max_size=16, max_words=4)
        self.gather = WindowGather(arrays=g.arrays, simd=g.simd, planes=g.planes,
                                   ring_rows=g.ring_rows, ring_words=ring_words,
                                   max_size=16, max_words=4, max_kernel=5)
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
                                                     # only row is not the last one's
    ((2, 8, 2, 13, 11, 5, 3, 1, 1, 1, True), 4),     # 2-bit levels, padded with 0
    ((1, 16, 4, 21, 9, 4, 3, 2, 1, 1, False), 4),    # a binary map in 4 planes
])
def test_the_loader_refills_the_ring_as_the_gatherer_reads_it(geometry, ring_rows):
    # A ring of fewer rows than the map: rows wrap around their slots, the loader waits
    # for the gatherer to release a slot and the gatherer for the loader to fill it,
    # and every window equals numpy's.
    g = Geometry(np.random.default_rng(ring_rows), *geometry)
    g.ring_rows = ring_rows
    data_width = 64
    elem_bits = g.planes if g.levels else 1
    fmt = dram_format(elem_bits, g.c, g.h, g.w, data_width // 8)
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
                                          row_beats=fmt.row_bytes // (data_width // 8),
                                          elem_bits=elem_bits))
        ctx.set(dut.gather.settings, g.settings())

    expected = g.windows()
    result = run_streams(dut, {"row": rows, "data": data, "tile": g.tiles(2)},
                         {"window": len(expected)}, setup=setup, stall=0.3, seed=ring_rows,
                         max_cycles=20 * (len(expected) + len(data)) + 500)
    assert result.outputs["window"] == expected
