# amaranth: UnusedElaboratable=no
"""The intended engine's base arrays (hw/engine/arrays.py): every output fold's sums equal
the dot products of numpy, for binary and n-bit activations, under stalls and reset."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from groupnet_hw.hw.engine.arrays import BaseArrays
from groupnet_hw.sim.streams import run_streams


def random_folds(rng, arrays, pe, simd, planes, outputs, levels, most_folds=4):
    """Beats of ``outputs`` output folds of 1 to ``most_folds`` folds each, with random masks on the
    last fold of each (a window's tail) and full masks elsewhere; and the lanes' values
    as numbers (x in {-1, +1} or levels, w in {-1, +1}) for the reference."""
    beats, windows = [], []
    for _ in range(outputs):
        folds = int(rng.integers(1, most_folds + 1))
        xs, ws = [], []
        for f in range(folds):
            x_bits = rng.integers(0, 2, (arrays, planes, simd))
            w_bits = rng.integers(0, 2, (arrays, pe, simd))
            mask = np.ones(simd, dtype=np.int64)
            if f == folds - 1:
                mask = rng.integers(0, 2, simd)
            if not levels:
                x_bits[:, 1:, :] = rng.integers(0, 2, (arrays, planes - 1, simd))  # ignored
            beats.append({
                "x": [int(sum(int(b) << (pl * simd + j) for pl in range(planes)
                              for j, b in enumerate(x_bits[k, pl]))) for k in range(arrays)],
                "w": [int(sum(int(b) << (p * simd + j) for p in range(pe)
                              for j, b in enumerate(w_bits[k, p]))) for k in range(arrays)],
                "mask": int(sum(int(b) << j for j, b in enumerate(mask))),
                "first": int(f == 0), "last": int(f == folds - 1),
                **({"levels": int(levels)} if planes > 1 else {})})
            if levels:
                x = sum(x_bits[:, pl, :] << pl for pl in range(planes))
            else:
                x = 2 * x_bits[:, 0, :] - 1
            xs.append(x * mask)
            ws.append(2 * w_bits - 1)
        windows.append((np.concatenate(xs, axis=1), np.concatenate(ws, axis=2)))
    return beats, windows


def reference(windows):
    """Per output fold, array-major then PE: the dot products of the masked windows."""
    return [[int(v) for v in np.einsum("kl,kpl->kp", x, w).reshape(-1)] for x, w in windows]


def run(arrays, pe, simd, planes, *, levels, outputs=12, stall=0.0, seed=0, reset_at=None):
    rng = np.random.default_rng(seed)
    beats, windows = random_folds(rng, arrays, pe, simd, planes, outputs, levels)
    dut = BaseArrays(arrays=arrays, pe=pe, simd=simd, planes=planes, max_window=4 * simd)
    result = run_streams(dut, {"i": beats}, {"o": outputs}, stall=stall, seed=seed,
                         reset_at=reset_at, max_cycles=40 * len(beats) + 200)
    return dut, beats, reference(windows), result


# arrays, pe, simd, planes: K = 1, odd lanes (not a multiple of the 6-lane chunks), the
# intended engine's 16 x 48 row shape cut to 3 PEs, 4 bit planes
SHAPES = [(1, 1, 5, 1), (3, 2, 13, 1), (2, 3, 48, 1), (5, 1, 8, 1), (2, 2, 7, 2),
          (2, 3, 16, 4), (1, 4, 11, 4)]
MODES = [(*shape, levels) for shape in SHAPES for levels in (False, True)
         if shape[3] > 1 or not levels]


@pytest.mark.parametrize("arrays, pe, simd, planes, levels", MODES)
def test_sums_equal_the_dot_products(arrays, pe, simd, planes, levels):
    *_, expected, result = run(arrays, pe, simd, planes, levels=levels, seed=simd + planes)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sums_under_stalls_of_both_streams(seed):
    shape = SHAPES[seed]
    *_, expected, result = run(*shape, levels=False, stall=0.4, seed=seed, outputs=20)
    assert result.outputs["o"] == expected
    *_, expected, result = run(2, 2, 9, 4, levels=True, stall=0.4, seed=seed, outputs=20)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("reset_at", [9, 14, 23, 31])
def test_reset_mid_stream_starts_clean(reset_at):
    # The reset lands at a different point of the pipeline each time (inside an output
    # fold, on a last fold, with results waiting at the output); the stream then starts
    # again from its first beat and every sum is exact and none is extra, so no fold or
    # partial sum survived the reset.
    *_, expected, result = run(3, 2, 13, 1, levels=False, stall=0.3, seed=7,
                               reset_at=reset_at, outputs=16)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("simd, planes, latency", [(24, 1, 4), (48, 1, 5), (16, 4, 5)])
def test_one_fold_a_cycle_at_the_stated_latency(simd, planes, latency):
    # Output folds of one fold each, offered every cycle, taken every cycle: one output a
    # cycle, each `latency` cycles after its beat was accepted.
    rng = np.random.default_rng(simd)
    beats, windows = random_folds(rng, 2, 3, simd, planes, 60, levels=planes > 1,
                                  most_folds=1)
    dut = BaseArrays(arrays=2, pe=3, simd=simd, planes=planes, max_window=simd)
    assert dut.latency == latency
    taken, shown, got = [], [], []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        cycle, sent = 0, 0
        while len(got) < len(beats):
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
            assert cycle < 10 * len(beats)

    sim.add_testbench(bench)
    sim.run()
    # every beat is taken and every output shown in consecutive cycles
    assert taken == list(range(taken[0], taken[0] + len(beats)))
    assert [s - t for s, t in zip(shown, taken)] == [latency] * len(beats)
    assert got == reference(windows)


@pytest.mark.parametrize("bad", [dict(pe=0), dict(simd=2.5), dict(planes=-1)])
def test_bad_sizes_are_refused(bad):
    with pytest.raises((TypeError, ValueError), match="must be"):
        BaseArrays(**{**dict(arrays=1, pe=1, simd=8), **bad})


def test_one_plane_has_no_mode_bit():
    # binary activations only: no mode bit fans out to every lane
    assert "levels" not in dict(BaseArrays(arrays=1, pe=1, simd=8).i.payload.shape())
    assert "levels" in dict(BaseArrays(arrays=1, pe=1, simd=8, planes=2).i.payload.shape())
