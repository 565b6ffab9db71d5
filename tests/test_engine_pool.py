# amaranth: UnusedElaboratable=no
"""The intended engine's pooling rows (hw/engine/pool.py): every pooled fold equals
PyTorch's ``max_pool2d`` of the map padded with -inf (padded taps never win, as the
reference model's ``_pool_rows``), for the ResNet stem's 3x3/2/1 and every supported
geometry, maps of 1x1 to 12x12, the sums' full signed range, under stalls and reset, a
fold a cycle."""

import numpy as np
import pytest
import torch
from amaranth.back import verilog
from amaranth.sim import Simulator

from groupnet_hw.hw.engine.pool import PoolRows
from groupnet_hw.sim.streams import run_streams, stream_put, take_probing_ready

#: (kernel, stride, padding) the unit supports: kernel <= 2 * stride, padding < stride,
#: padding < kernel; (1, 2, 0) leaves columns and rows in no window
GEOMETRIES = [(3, 2, 1), (2, 2, 0), (3, 2, 0), (1, 1, 0), (2, 1, 0), (4, 2, 1), (3, 3, 0),
              (1, 2, 0)]


def out_size(mid, k, s, p):
    return (mid + 2 * p - k) // s + 1


def reference(x, k, s, p):
    """``x[cy, cx, f, lane]`` pooled: the beats in (py, px, f) order, lists of ints."""
    h, w, folds, lanes = x.shape
    t = torch.from_numpy(x.astype(np.float64)).permute(2, 3, 0, 1).reshape(1, -1, h, w)
    t = torch.nn.functional.pad(t, (p, p, p, p), value=float("-inf"))
    y = torch.nn.functional.max_pool2d(t, k, s)       # exact: |x| < 2**53
    y = y.reshape(folds, lanes, *y.shape[2:]).permute(2, 3, 0, 1).reshape(-1, lanes)
    return [[int(v) for v in row] for row in y]


def beats_of(x):
    return [[int(v) for v in x[cy, cx, f]] for cy in range(x.shape[0])
            for cx in range(x.shape[1]) for f in range(x.shape[2])]


def draw(rng, shape, width, extreme=False):
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if extreme:
        # lane 0 mostly the least value, else the next (every pooled value is one of
        # them: no padded tap won), the last lane mostly the greatest but one, the
        # others both ends and 0
        x = rng.choice(np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi], dtype=np.int64), shape)
        x[..., 0] = rng.choice(np.array([lo, lo + 1], dtype=np.int64), shape[:-1],
                               p=[0.85, 0.15])
        x[..., -1] = rng.choice(np.array([hi - 1, hi], dtype=np.int64), shape[:-1],
                                p=[0.85, 0.15])
        return x
    return rng.integers(lo, hi, shape, endpoint=True)


def settings(dut, h, w, folds, k, s, p):
    values = dict(mid_h=h, mid_w=w, folds=folds, kernel=k, stride=s, padding=p,
                  out_h=out_size(h, k, s, p), out_w=out_size(w, k, s, p))

    async def setup(ctx):
        for name, v in values.items():
            ctx.set(getattr(dut.settings, name), v)
    return setup


def run(h, w, folds, lanes, k, s, p, *, width=32, maps=1, stall=0.0, seed=0,
        reset_at=None, extreme=False, max_size=12, max_folds=4):
    rng = np.random.default_rng(seed)
    xs = [draw(rng, (h, w, folds, lanes), width, extreme) for _ in range(maps)]
    beats = [b for x in xs for b in beats_of(x)]
    expected = [o for x in xs for o in reference(x, k, s, p)]
    dut = PoolRows(lanes=lanes, width=width, max_size=max_size, max_folds=max_folds,
                   max_kernel=4)
    result = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=stall, seed=seed,
                         reset_at=reset_at, setup=settings(dut, h, w, folds, k, s, p),
                         max_cycles=20 * len(beats) + 200)
    return dut, beats, expected, result


@pytest.mark.parametrize("h, w, folds, lanes", [(9, 9, 1, 3), (9, 9, 4, 1), (10, 12, 1, 1),
                                                (10, 12, 4, 3), (5, 6, 2, 16)])
def test_the_stems_pooling(h, w, folds, lanes):
    # 3x3/2/1 on an odd map (the last window clipped to two rows and columns) and an
    # even one (it ends at its last tap); one fold a pixel reads and writes one address
    # every cycle (the read ports' transparency forwards)
    *_, expected, result = run(h, w, folds, lanes, 3, 2, 1, seed=h * w + folds)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("k, s, p", GEOMETRIES)
@pytest.mark.parametrize("folds", [1, 3])
def test_every_geometry(k, s, p, folds):
    for size, (h, w) in enumerate([(7, 5), (1, 1), (2, 3)]):
        if out_size(min(h, w), k, s, p) < 1:
            continue
        *_, expected, result = run(h, w, folds, 2, k, s, p, seed=10 * k + s + size)
        assert result.outputs["o"] == expected, (h, w)


@pytest.mark.parametrize("width", [8, 32])
def test_extreme_sums(width):
    # the signed range's ends (a padded zero would beat the negative ones)
    *_, expected, result = run(6, 7, 2, 3, 3, 2, 1, width=width, extreme=True, seed=width)
    assert result.outputs["o"] == expected
    assert {o[0] for o in expected} == {-(1 << (width - 1)), -(1 << (width - 1)) + 1}
    assert {o[-1] for o in expected} == {(1 << (width - 1)) - 2, (1 << (width - 1)) - 1}


@pytest.mark.parametrize("k, s, p", [(3, 2, 1), (1, 2, 0), (2, 1, 0)])
def test_maps_back_to_back(k, s, p):
    # after a map's last fold the counters start over: three maps with no gap
    *_, expected, result = run(5, 7, 2, 2, k, s, p, maps=3, seed=k + s)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stalls_of_both_streams(seed):
    *_, expected, result = run(7, 6, 3, 3, 3, 2, 1, maps=2, stall=0.4, seed=seed)
    assert result.outputs["o"] == expected
    *_, expected, result = run(5, 5, 1, 2, *GEOMETRIES[seed + 3], stall=0.4, seed=seed)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("reset_at", [7, 30, 61])
def test_reset_mid_map_starts_clean(reset_at):
    # the partial maxima the reset leaves in the banks never win: a window's first tap
    # overwrites its word
    *_, expected, result = run(7, 7, 2, 2, 3, 2, 1, stall=0.3, seed=reset_at,
                               reset_at=reset_at)
    assert result.outputs["o"] == expected


def test_a_fold_a_cycle_at_the_stated_latency():
    # folds offered and pooled folds taken every cycle: every fold is taken in
    # consecutive cycles, and each pooled fold is valid `latency` cycles after the fold
    # that ends its window (its last row's last column inside the map)
    h, w, folds, lanes, (k, s, p) = 9, 10, 2, 2, (3, 2, 1)
    rng = np.random.default_rng(5)
    x = draw(rng, (h, w, folds, lanes), 32)
    beats, expected = beats_of(x), reference(x, k, s, p)
    dut = PoolRows(lanes=lanes, width=32, max_size=12, max_folds=4)
    assert dut.latency == 3
    setup = settings(dut, h, w, folds, k, s, p)
    taken, shown, got = [], [], []

    async def bench(ctx):
        await setup(ctx)
        ctx.set(dut.o.ready, 1)
        cycle, sent = 0, 0
        while len(got) < len(expected):
            if sent < len(beats):
                ctx.set(dut.i.payload, beats[sent])
            ctx.set(dut.i.valid, sent < len(beats))
            *_, ready, valid, payload = await ctx.tick().sample(
                dut.i.ready, dut.o.valid, dut.o.payload)
            if valid:
                shown.append(cycle)
                got.append([int(v) for v in payload])
            if ready and sent < len(beats):
                taken.append(cycle)
                sent += 1
            cycle += 1
            assert cycle < 4 * len(beats)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == expected
    assert taken == list(range(taken[0], taken[0] + len(beats)))
    oh, ow = out_size(h, k, s, p), out_size(w, k, s, p)
    ends = [(min(py * s - p + k - 1, h - 1) * w + min(px * s - p + k - 1, w - 1)) * folds + f
            for py in range(oh) for px in range(ow) for f in range(folds)]
    assert [t - taken[e] for t, e in zip(shown, ends)] == [dut.latency] * len(ends)
    # and as run_streams counts it: the N folds' cycles and the latency, nothing more
    # (the map's last fold ends its last window)
    *_, result = run(h, w, folds, lanes, k, s, p, seed=5)
    assert result.cycles == len(beats) + dut.latency


def test_input_ready_is_a_register():
    # i.ready does not follow o.ready within a cycle, under a consumer that pauses often
    h, w, folds, (k, s, p) = 6, 6, 2, (3, 2, 1)
    x = draw(np.random.default_rng(9), (h, w, folds, 2), 16)
    beats, expected = beats_of(x), reference(x, k, s, p)
    dut = PoolRows(lanes=2, width=16, max_size=8, max_folds=2)
    setup = settings(dut, h, w, folds, k, s, p)
    seen = {}

    async def producer(ctx):
        for beat in beats:
            await stream_put(ctx, dut.i, beat)

    async def consumer(ctx):
        await setup(ctx)
        seen["got"], seen["reacted"] = await take_probing_ready(
            ctx, dut.o, dut.i.ready, len(expected), 0.5, seed=9)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer, background=True)
    sim.add_testbench(consumer)
    sim.run()
    assert seen["got"] == expected
    assert not seen["reacted"]


def test_random_sweep():
    rng = np.random.default_rng(2024)
    for case in range(20):
        k, s, p = GEOMETRIES[case % len(GEOMETRIES)]
        h, w = (int(v) for v in rng.integers(1, 8, 2))
        if out_size(min(h, w), k, s, p) < 1:
            h, w = h + k, w + k
        folds, lanes = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        width = int(rng.choice([6, 16, 32]))
        stall = float(rng.choice([0.0, 0.3]))
        *_, expected, result = run(h, w, folds, lanes, k, s, p, width=width, stall=stall,
                                   seed=case, maps=1 + case % 2, extreme=case % 3 == 0)
        assert result.outputs["o"] == expected, (case, h, w, folds, lanes, k, s, p, width)


@pytest.mark.parametrize("bad", [dict(lanes=0), dict(width=2.5), dict(max_folds=-1)])
def test_bad_sizes_are_refused(bad):
    with pytest.raises((TypeError, ValueError), match="must be"):
        PoolRows(**{**dict(lanes=1, width=8, max_size=4, max_folds=1), **bad})


def test_the_verilog_converts():
    # the stem's shape: 16 lanes of 26-bit sums, a 112x112 map of 4 folds
    text = verilog.convert(PoolRows(lanes=16, width=26, max_size=112, max_folds=4),
                           name="pool_rows")
    assert "module pool_rows" in text
