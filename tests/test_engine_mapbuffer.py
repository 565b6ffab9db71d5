# amaranth: UnusedElaboratable=no
"""The intended engine's output map buffer (hw/engine/mapbuffer.py): a weight-streaming
descriptor's channel slices, each pixel's slice of each chunk packed as
``TensorFormat.pack`` packs a map of the chunk's channels, come out as every job's map
exactly as ``TensorFormat.pack`` writes it whole: every element width, chunks whose
slices are shorter than, as long as and longer than a bus word, a last chunk of fewer
channels, slices that cross a word, jobs interleaved at random, stalls on both sides, a
stale buffer (its padding bytes come out zero), and a word a cycle."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from groupnet_hw.compiler.engine.formats import TensorFormat
from groupnet_hw.hw.engine.mapbuffer import MapBuffer
from groupnet_hw.sim.streams import stream_put

KINDS = {1: "bits", 2: "uint", 4: "uint", 8: "fixed", 16: "fixed", 24: "fixed", 32: "fixed"}


def random_maps(rng, jobs, elem, channels, height, width):
    if KINDS[elem] == "fixed":
        lo, hi = -(1 << (elem - 1)), (1 << (elem - 1)) - 1
    else:
        lo, hi = 0, (1 << elem) - 1
    return rng.integers(lo, hi + 1, (jobs, channels, height, width))


def slice_words(maps, k, elem, c0, cc, db):
    """Job k's slices of channels [c0, c0 + cc), pixel after pixel: each the packer's row
    of one pixel (its bytes padded to a bus word)."""
    _, _, height, width = maps.shape
    fmt = TensorFormat(KINDS[elem], elem, cc, 1, 1, db)
    out = []
    for y in range(height):
        for x in range(width):
            raw = fmt.pack(maps[k, c0:c0 + cc, y:y + 1, x:x + 1]).tobytes()
            n = len(raw) // db
            out += [dict(data=int.from_bytes(raw[i * db:(i + 1) * db], "little"), job=k,
                         last=int(i == n - 1)) for i in range(n)]
    return out


def run(jobs, elem, channels, chunk, height, width, data_width, *, stall=0.0, seed=0,
        depth=None, rounds=1, elems=None, written=None, single=False):
    """Send every chunk's slices (the maps' words interleaved at random) and flush, for
    ``rounds`` descriptors of fresh maps one after the other; returns the formats of
    each kind of map (``elems``: their element bits, ``elem`` alone by default) and, for
    each round, (maps of each kind written, words, cycles of the flush, first word's).
    ``single``: one kind written, in regions of every kind's (the depth then holds each
    map in ``kinds`` regions only)."""
    db = data_width // 8
    rng = np.random.default_rng(seed)
    pyrng = random.Random(seed)
    elems = elems or [elem]
    kinds = len(elems)
    written = (1 << kinds) - 1 if written is None else written
    fmts = [TensorFormat(KINDS[e], e, channels, height, width, db) for e in elems]
    depth = depth or 2 * kinds * jobs * max(-(-f.nbytes // db) for f in fmts)
    if single:
        # each map is larger than a region of kinds * jobs, within kinds of them
        words = max(-(-f.nbytes // db) for f in fmts)
        region = -(-words // kinds)
        depth = kinds * jobs * region + (kinds * jobs * region) % 2
        assert max(f.nbytes for f in fmts) > db * (depth // (kinds * jobs))
    dut = MapBuffer(jobs=jobs, kinds=kinds, data_width=data_width, depth=depth, max_size=16)
    settings = dict(width=width, height=height, jobs=jobs, kinds=written, single=int(single),
                    formats=[dict(pixel_bytes=f.pixel_bytes, pitch=f.row_bytes,
                                  row_bytes=width * f.pixel_bytes) for f in fmts])
    results = []

    async def bench(ctx):
        for _ in range(rounds):
            maps = [random_maps(rng, jobs, e, channels, height, width) for e in elems]
            ctx.set(dut.settings, settings)
            for c0 in range(0, channels, chunk):
                cc = min(chunk, channels - c0)
                await stream_put(ctx, dut.chunk, [
                    dict(offset=c0 * e // 8, slice_bytes=-(-cc * e // 8)) for e in elems])
                queues = [[dict(w, job=n * jobs + k) for w in
                           slice_words(maps[n], k, elems[n], c0, cc, db)]
                          for n in range(kinds) if written >> n & 1 for k in range(jobs)]
                while any(queues):
                    if stall and pyrng.random() < stall:
                        await ctx.tick()
                        continue
                    q = pyrng.choice([q for q in queues if q])
                    await stream_put(ctx, dut.i, q.pop(0))
            await stream_put(ctx, dut.flush, 1)
            start = 0
            words = []
            expect = sum(jobs * height * f.row_bytes // db
                         for n, f in enumerate(fmts) if written >> n & 1)
            cycle = 0
            while len(words) < expect:
                ready = not (stall and pyrng.random() < stall)
                ctx.set(dut.o.ready, ready)
                *_, valid, p = await ctx.tick().sample(dut.o.valid, dut.o.payload)
                cycle += 1
                if ready and valid:
                    words.append(dict(data=p.data, job=p.job, last=p.last))
                    start = start or cycle
                assert cycle < 100 * expect + 100, "the buffer stopped"
            ctx.set(dut.o.ready, 0)
            for _ in range(3):
                await ctx.tick()
            assert ctx.get(dut.idle) and not ctx.get(dut.o.valid)
            results.append(([maps[n] if written >> n & 1 else None for n in range(kinds)],
                            words, cycle, start))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return fmts, results


def check(fmts, maps, words, db):
    """Each kind's maps, job after job, kind after kind, are ``TensorFormat.pack``'s."""
    expected_jobs = []
    for n, (fmt, kind_maps) in enumerate(zip(fmts, maps)):
        if kind_maps is None:
            continue
        jobs = kind_maps.shape[0]
        row_words = fmt.row_bytes // db
        expected_jobs += [n * jobs + k for k in range(jobs) for _ in range(fmt.height * row_words)]
        for k in range(jobs):
            mine = [w for w in words if w["job"] == n * jobs + k]
            got = b"".join(w["data"].to_bytes(db, "little") for w in mine)
            assert np.array_equal(np.frombuffer(got, np.uint8), fmt.pack(kind_maps[k])), \
                f"map {k} of kind {n} differs from TensorFormat.pack"
            assert [w["last"] for w in mine] == ([0] * (row_words - 1) + [1]) * fmt.height
    assert [w["job"] for w in words] == expected_jobs


@pytest.mark.parametrize("jobs, elem, channels, chunk, height, width, data_width", [
    (5, 1, 64, 16, 3, 4, 128),      # ResNet's layer: 2-byte slices of 8-byte pixels
    (2, 1, 20, 8, 3, 5, 128),       # a last chunk of 4 channels: half a byte
    (3, 2, 24, 8, 2, 7, 32),        # 2-bit levels, 2-byte slices that cross words
    (2, 4, 40, 16, 2, 3, 64),       # 4-bit levels: 8-byte slices of 20-byte pixels
    (2, 8, 48, 16, 2, 3, 64),       # bytes: slices of two words
    (3, 24, 32, 16, 2, 3, 128),     # the intended engine's 24-bit maps: 48-byte slices
    (1, 16, 20, 8, 3, 2, 128),      # 16-byte slices, a last one of 8 bytes
    (2, 32, 24, 8, 2, 2, 256),      # 32-byte slices in 32-byte words
])
def test_slices_become_the_formats_maps(jobs, elem, channels, chunk, height, width,
                                        data_width):
    fmts, results = run(jobs, elem, channels, chunk, height, width, data_width, seed=channels)
    for maps, words, _, _ in results:
        check(fmts, maps, words, data_width // 8)


@pytest.mark.parametrize("seed", range(4))
def test_random_configurations_under_stalls(seed):
    rng = np.random.default_rng(50 + seed)
    elem = int(rng.choice([1, 2, 4, 8, 16, 24, 32]))
    chunk = 8 * int(rng.integers(1, 4))
    channels = int(rng.integers(1, 60))
    data_width = int(rng.choice([32, 64, 128]))
    fmts, results = run(int(rng.integers(1, 4)), elem, channels, chunk,
                        int(rng.integers(1, 4)), int(rng.integers(1, 6)), data_width,
                        stall=0.3, seed=seed)
    for maps, words, _, _ in results:
        check(fmts, maps, words, data_width // 8)


def test_a_second_descriptor_over_a_stale_buffer():
    """The second maps' rows come out with zero padding over the first's bytes."""
    fmts, results = run(2, 1, 24, 8, 3, 5, 128, rounds=2, seed=4)
    assert fmts[0].row_bytes > 5 * fmts[0].pixel_bytes
    for maps, words, _, _ in results:
        check(fmts, maps, words, 16)


def test_a_word_a_cycle_out():
    fmts, results = run(2, 8, 32, 16, 4, 8, 64, seed=2)
    maps, words, cycles, first = results[0]
    check(fmts, maps, words, 8)
    assert cycles - first == len(words) - 1
    assert first <= 4


@pytest.mark.parametrize("elems, written", [
    ([24, 1], 3),       # a mixer's gated 24-bit maps and their signs (fusion rule 7)
    ([1, 2], 2),        # the level outputs alone (levels only)
    ([16, 4], 1),       # the first kind alone
])
def test_two_kinds_of_map_a_job(elems, written):
    fmts, results = run(3, None, 32, 16, 2, 3, 128, elems=elems, written=written,
                        stall=0.2, seed=sum(elems))
    for maps, words, _, _ in results:
        check(fmts, maps, words, 16)


@pytest.mark.parametrize("elems, written", [([24, 1], 1), ([1, 2], 2), ([16, 4, 1], 4)])
def test_one_kind_alone_takes_every_kinds_regions(elems, written):
    """A descriptor that writes one kind (a map written straight to DRAM beside its
    level outputs, or a map without them) holds maps larger than a region in the regions
    of every kind; two descriptors one after the other, under stalls."""
    fmts, results = run(3, None, 32, 16, 3, 3, 128, elems=elems, written=written,
                        single=True, stall=0.2, seed=len(elems), rounds=2)
    for maps, words, _, _ in results:
        check(fmts, maps, words, 16)


def test_an_odd_depth_is_refused():
    with pytest.raises(ValueError, match="even"):
        MapBuffer(jobs=2, depth=7)
