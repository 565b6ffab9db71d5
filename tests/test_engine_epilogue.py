# amaranth: UnusedElaboratable=no
"""The intended engine's epilogue lanes (hw/engine/epilogue.py): every lane equals the IR
ops' own execution (postop, add, relu, threshold, as sim/engine_model.py applies them)
for random settings and constants, under stalls and reset."""

import numpy as np
import pytest
import torch

from groupnet_hw.compiler.graph import Node
from groupnet_hw.compiler.ops import op_of
from groupnet_hw.hw.engine.epilogue import EpilogueLanes
from groupnet_hw.sim.streams import run_streams


def _node(op, channels, **attrs):
    return Node("test", op, [], attrs, channels=channels)


def reference(beat, lanes):
    """The beat's outputs from the IR ops' ``execute`` (lanes as channels)."""
    st = beat["settings"]
    y = torch.tensor(beat["x"], dtype=torch.int64).view(1, lanes, 1, 1)
    if st["postop"]:
        node = _node("postop", lanes, A=torch.tensor(beat["a"]), B=torch.tensor(beat["b"]),
                     shift=st["shift"], pre_relu=bool(st["pre_relu"]),
                     post_relu=bool(st["post_relu"]))
        y = op_of(node).execute(node, [y])
    if st["add"]:
        side = torch.tensor(beat["side"], dtype=torch.int64).view(1, lanes, 1, 1)
        y = op_of(_node("add", lanes)).execute(_node("add", lanes), [y, side])
    if st["relu"]:
        y = y.clamp(min=0)
    if st["threshold"]:
        levels = st["levels"]
        T = torch.tensor([row[:levels] for row in beat["t"]], dtype=torch.int64)
        inv = torch.tensor([(beat["invert"] >> j) & 1 for j in range(lanes)])
        node = _node("threshold", lanes, T=T, invert=inv)
        y = op_of(node).execute(node, [y])
    return [int(v) for v in y.view(-1)]


def fits(values, width):
    return all(-(1 << (width - 1)) <= v < (1 << (width - 1)) for v in values)


def random_beats(rng, n, lanes, x_width, const_width, value_width, max_levels):
    """Beats with random settings and constants whose every intermediate value fits
    ``signed(value_width)`` (the compiler's proven ranges promise it)."""
    beats = []
    while len(beats) < n:
        levels = int(rng.integers(1, max_levels + 1))
        settings = dict(postop=int(rng.integers(0, 2)), pre_relu=int(rng.integers(0, 2)),
                        post_relu=int(rng.integers(0, 2)), shift=int(rng.integers(0, 12)),
                        add=int(rng.integers(0, 2)), relu=int(rng.integers(0, 2)),
                        threshold=int(rng.integers(0, 2)), levels=levels)
        xs = rng.integers(-(1 << (x_width - 1)), 1 << (x_width - 1), lanes)
        a = rng.integers(-(1 << (const_width - 1)), 1 << (const_width - 1), lanes)
        b = rng.integers(-(1 << (const_width - 1)), 1 << (const_width - 1), lanes)
        side = rng.integers(-(1 << (value_width - 2)), 1 << (value_width - 2), lanes)
        t = np.sort(rng.integers(-(1 << (value_width - 3)), 1 << (value_width - 3),
                                 (lanes, max_levels)), axis=1)
        beat = dict(x=[int(v) for v in xs], a=[int(v) for v in a], b=[int(v) for v in b],
                    side=[int(v) for v in side], t=[[int(v) for v in row] for row in t],
                    invert=int(rng.integers(0, 1 << lanes)), settings=settings)
        # the post-op's result and the sum must fit the value width
        probe = dict(beat, settings=dict(settings, add=0, relu=0, threshold=0))
        after_postop = reference(probe, lanes)
        after_add = reference(dict(beat, settings=dict(settings, relu=0, threshold=0)), lanes)
        if fits(after_postop, value_width) and fits(after_add, value_width):
            beats.append(beat)
    return beats


def run(lanes, *, x_width=10, const_width=12, value_width=20, max_levels=3, n=40,
        stall=0.0, seed=0, reset_at=None):
    rng = np.random.default_rng(seed)
    beats = random_beats(rng, n, lanes, x_width, const_width, value_width, max_levels)
    dut = EpilogueLanes(lanes=lanes, x_width=x_width, const_width=const_width,
                        value_width=value_width, max_levels=max_levels)
    result = run_streams(dut, {"i": beats}, {"o": n}, stall=stall, seed=seed,
                         reset_at=reset_at, max_cycles=40 * n + 200)
    return dut, beats, [reference(b, lanes) for b in beats], result


@pytest.mark.parametrize("lanes, x_width, const_width, max_levels", [
    (1, 10, 12, 1), (3, 10, 12, 3), (4, 14, 24, 15), (2, 20, 12, 1)])
def test_lanes_equal_the_ir_ops(lanes, x_width, const_width, max_levels):
    # (4, 14, 24): a constant of two multiplier pieces; (2, 20, 12): the value is the
    # wide operand and the constant the narrow one
    *_, expected, result = run(lanes, x_width=x_width, const_width=const_width,
                               value_width=max(20, x_width + 2), max_levels=max_levels,
                               n=60, seed=lanes + max_levels)
    assert result.outputs["o"] == expected


def test_every_stage_alone_and_all_together():
    # the random draw above mixes settings; here each stage on its own and all of them
    rng = np.random.default_rng(3)
    beats = random_beats(rng, 40, 3, 10, 12, 20, 3)
    only = [dict(postop=1, pre_relu=1, post_relu=1, shift=5, add=0, relu=0, threshold=0),
            dict(postop=0, pre_relu=0, post_relu=0, shift=0, add=1, relu=0, threshold=0),
            dict(postop=0, pre_relu=0, post_relu=0, shift=0, add=0, relu=1, threshold=0),
            dict(postop=0, pre_relu=0, post_relu=0, shift=0, add=0, relu=0, threshold=1),
            dict(postop=1, pre_relu=0, post_relu=0, shift=0, add=1, relu=1, threshold=1)]
    beats = [dict(b, settings=dict(only[i % len(only)], levels=1 + i % 3))
             for i, b in enumerate(beats)]
    beats = [b for b in beats if fits(reference(dict(b, settings=dict(
        b["settings"], relu=0, threshold=0)), 3), 20)]
    dut = EpilogueLanes(lanes=3, x_width=10, const_width=12, value_width=20, max_levels=3)
    result = run_streams(dut, {"i": beats}, {"o": len(beats)}, max_cycles=2000)
    assert len(beats) > 30
    assert result.outputs["o"] == [reference(b, 3) for b in beats]


@pytest.mark.parametrize("seed", [1, 2])
def test_lanes_under_stalls(seed):
    *_, expected, result = run(3, stall=0.4, seed=seed, n=50)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("reset_at", [6, 17])
def test_reset_mid_stream_starts_clean(reset_at):
    *_, expected, result = run(2, stall=0.3, seed=9, n=30, reset_at=reset_at)
    assert result.outputs["o"] == expected


def test_thresholds_next_to_the_values_and_the_halves_boundaries():
    # the comparison goes by halves of the value's bits: values at and around the lower
    # half's carry (multiples of 2**10 at 20 bits), negative ones, and thresholds one
    # below, at and one above them, where the upper halves are equal or one apart
    rng = np.random.default_rng(9)
    lanes, vw = 3, 20
    centres = [0, -1, 1 << 10, (1 << 10) - 1, -(1 << 10), (1 << 19) - 1, -(1 << 19) + 1, 777,
               -12345, 5 << 10]
    beats = []
    for c in centres:
        for d in (-1, 0, 1):
            x = [c + int(rng.integers(-1, 2)) for _ in range(lanes)]
            x = [min(max(v, -(1 << 19)), (1 << 19) - 1) for v in x]
            t = [[min(max(v + d, -(1 << 19)), (1 << 19) - 1)] for v in x]
            beats.append(dict(x=x, a=[0] * lanes, b=[0] * lanes, side=[0] * lanes, t=t,
                              invert=int(rng.integers(0, 1 << lanes)),
                              settings=dict(postop=0, pre_relu=0, post_relu=0, shift=0, add=0,
                                            relu=0, threshold=1, levels=1)))
    dut = EpilogueLanes(lanes=lanes, x_width=vw, const_width=12, value_width=vw, max_levels=1)
    result = run_streams(dut, {"i": beats}, {"o": len(beats)}, max_cycles=1000)
    assert result.outputs["o"] == [reference(b, lanes) for b in beats]


def test_a_beat_a_cycle_at_the_stated_latency():
    dut, beats, expected, result = run(2, n=50)
    assert result.outputs["o"] == expected
    assert result.cycles <= len(beats) + dut.latency + 2
    assert dut.latency == 9


def test_the_first_result_after_the_stated_latency():
    from amaranth.sim import Simulator
    beat = random_beats(np.random.default_rng(4), 1, 2, 10, 12, 20, 3)[0]
    dut = EpilogueLanes(lanes=2, x_width=10, const_width=12, value_width=20, max_levels=3)
    seen = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.payload, beat)
        ctx.set(dut.i.valid, 1)
        await ctx.tick()                       # the beat is taken: cycle 0
        ctx.set(dut.i.valid, 0)
        for cycle in range(1, 15):
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                seen.append((cycle, [int(v) for v in payload]))

    sim.add_testbench(bench)
    sim.run()
    assert seen == [(dut.latency, reference(beat, 2))]


@pytest.mark.parametrize("bad", [dict(lanes=0), dict(max_levels=1.5)])
def test_bad_sizes_are_refused(bad):
    with pytest.raises((TypeError, ValueError), match="must be"):
        EpilogueLanes(**{**dict(lanes=1), **bad})
