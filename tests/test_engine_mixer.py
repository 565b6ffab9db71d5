# amaranth: UnusedElaboratable=no
"""The intended engine's mixer lanes (hw/engine/mixer.py): every output equals the IR's
own ``mixer`` (``execute``: the aggregate of K bases, and with gates the K gated
bases), for K = 1 to 5, random coefficients and fractions (scaled to the lanes' own
fraction as the runner scales them), under stalls and reset."""

import numpy as np
import pytest
import torch

from groupnet_hw.compiler.graph import Node
from groupnet_hw.compiler.ops import op_of
from groupnet_hw.hw.engine.mixer import FRACTION, MixerLanes
from groupnet_hw.sim.streams import run_streams

#: the values' width; the coefficients' bits as the IR has them
VW, CW = 24, 12


def case(rng, lanes, jobs, gated, groups, fraction=FRACTION):
    lambdas = rng.integers(-(1 << (CW - 1)), 1 << (CW - 1), jobs)
    gates = rng.integers(-(1 << (CW - 1)), 1 << (CW - 1), jobs)
    # fractions as the paper's fixed-point lambdas and gates have them (up to the lanes'
    # own): the outputs stay within the value width (a value the compiler's range would
    # refuse is redrawn)
    # and scaled to it within the lanes' 18-bit coefficients
    least = fraction - (18 - CW)
    lambda_frac = int(rng.integers(max(min(6, fraction), least), fraction + 1))
    gate_frac = int(rng.integers(max(min(8, fraction), least), fraction + 1))
    node = Node("test", "mixer", [], dict(
        lambdas=torch.from_numpy(lambdas), lambda_frac=lambda_frac,
        gates=torch.from_numpy(gates) if gated else None, gate_frac=gate_frac),
        channels=lanes)
    beats, expected = [], []
    for _ in range(100 * groups):
        if len(expected) == groups * (jobs if gated else 1):
            break
        xs = rng.integers(-(1 << 12), 1 << 12, (jobs, lanes))
        ins = [torch.from_numpy(x).view(1, lanes, 1, 1) for x in xs]
        outs = op_of(node).execute(node, ins)
        outs = outs if gated else [outs]
        flat = [[int(v) for v in o.view(-1)] for o in outs]
        bare = Node("test", "mixer", [], dict(node.attrs, gates=None), channels=lanes)
        agg = [int(v) for v in op_of(bare).execute(bare, ins).view(-1)]
        if any(not -(1 << (VW - 1)) <= v < (1 << (VW - 1)) for o in flat + [agg] for v in o):
            continue                  # the compiler's proven range would not fit VW
        beats += [[int(v) for v in x] for x in xs]
        expected += flat
    assert len(expected) == groups * (jobs if gated else 1), "no values fit: redraw"
    # at the lanes' fraction, as the runner loads them (hw.engine.mixer.at_fraction)
    settings = dict(jobs=jobs, gated=int(gated),
                    lambdas=[int(v) << (fraction - lambda_frac) for v in lambdas] + [0] * (5 - jobs),
                    gates=[int(v) << (fraction - gate_frac) for v in gates] + [0] * (5 - jobs))
    return beats, expected, settings


def run(lanes, jobs, gated, *, groups=6, stall=0.0, seed=0, reset_at=None, pace=1,
        fraction=FRACTION):
    rng = np.random.default_rng(seed)
    beats, expected, settings = case(rng, lanes, jobs, gated, groups, fraction)
    dut = MixerLanes(lanes=lanes, value_width=VW, max_jobs=5, fraction=fraction)

    async def setup(ctx):
        ctx.set(dut.settings, settings)

    result = run_streams(dut, {"i": beats}, {"o": len(expected)}, stall=stall, seed=seed,
                         setup=setup, reset_at=reset_at, pace=pace,
                         max_cycles=30 * len(beats) + 300)
    return dut, beats, expected, result


@pytest.mark.parametrize("lanes, jobs, gated", [(1, 1, False), (3, 2, True), (2, 5, True),
                                                (4, 3, False), (3, 4, True)])
def test_outputs_equal_the_irs_mixer(lanes, jobs, gated):
    *_, expected, result = run(lanes, jobs, gated, seed=jobs + lanes)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("fraction", [6, 9, 16])
def test_any_fraction_of_the_lanes(fraction):
    # the lanes' own fraction, and a program's fractions up to it, scaled to it
    for seed in range(3):
        *_, expected, result = run(3, 3, True, seed=seed, fraction=fraction)
        assert result.outputs["o"] == expected


@pytest.mark.parametrize("seed, jobs, gated", [(1, 4, True), (2, 4, True), (3, 1, False)])
def test_under_stalls(seed, jobs, gated):
    # (one base, no gates: an aggregate every cycle, so its FIFO fills when the
    # consumer stalls)
    *_, expected, result = run(3, jobs, gated, groups=12, stall=0.4, seed=seed)
    assert result.outputs["o"] == expected


@pytest.mark.parametrize("jobs, gated", [(1, False), (3, True)])
def test_a_consumer_slower_than_the_beats(jobs, gated):
    # beats offered every cycle, outputs taken one in three cycles: the FIFOs fill
    *_, expected, result = run(2, jobs, gated, groups=12, pace=3)
    assert result.outputs["o"] == expected


def test_reset_mid_group_starts_clean():
    *_, expected, result = run(2, 3, True, groups=8, stall=0.3, seed=4, reset_at=13)
    assert result.outputs["o"] == expected


def test_a_beat_a_cycle():
    dut, beats, expected, result = run(2, 5, True, groups=8)
    assert result.outputs["o"] == expected
    shown = result.out_cycles["o"]
    assert shown[-1] - shown[0] == len(expected) - 1


@pytest.mark.parametrize("bad, message", [(dict(lanes=0), "must be positive"),
                                          (dict(coef_width=19), "at most 18"),
                                          (dict(fraction=17), "at most coef_width - 2")])
def test_bad_sizes_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        MixerLanes(**{**dict(lanes=1), **bad})


def test_the_first_output_after_the_stated_latency():
    from amaranth.sim import Simulator
    beats, expected, settings = case(np.random.default_rng(0), 2, 3, True, 1)
    dut = MixerLanes(lanes=2, value_width=VW, max_jobs=5)
    seen = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(dut.settings, settings)
        ctx.set(dut.o.ready, 1)
        for beat in beats:
            ctx.set(dut.i.payload, beat)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)    # the group's last beat: cycle 0
        ctx.set(dut.i.valid, 0)
        for cycle in range(1, 20):
            *_, valid = await ctx.tick().sample(dut.o.valid)
            if valid:
                seen.append(cycle)

    sim.add_testbench(bench)
    sim.run()
    assert seen == [dut.latency + n for n in range(3)]


@pytest.mark.parametrize("jobs, gated", [(5, True), (1, False)])
def test_a_consumer_far_slower_fills_both_fifos_to_the_brim(jobs, gated):
    # a beat taken every 25 cycles: the values' FIFO (gated) or the aggregates' (K = 1:
    # a group end every beat)
    # fills to its last word and stays full, so a count of the words in flight that is
    # one short would drop a beat
    *_, expected, result = run(2, jobs, gated, groups=8, seed=11, pace=25)
    assert result.outputs["o"] == expected


def test_the_runners_scaling_to_the_lanes_fraction():
    """``at_fraction``, as the runner loads a descriptor's 32-bit constants: a
    coefficient of every fraction up to the lanes' own, negative ones among them, is
    shifted to it exactly whenever the result fits the lanes' 18 bits."""
    from amaranth.hdl import Module, Signal, signed
    from amaranth.sim import Simulator
    from groupnet_hw.hw.engine.mixer import at_fraction
    m = Module()
    coefficient, frac = Signal(32), Signal(32)
    out = Signal(signed(18))
    m.d.comb += out.eq(at_fraction(coefficient, frac, FRACTION, 18))
    rng = np.random.default_rng(7)
    cases = [(int(c), f) for f in range(FRACTION + 1)
             for c in rng.integers(-(1 << (17 - FRACTION + f)), 1 << (17 - FRACTION + f), 8)]
    cases += [(-(1 << 17), FRACTION), ((1 << 17) - 1, FRACTION), (-1, 0), (1, 0)]
    seen = []
    sim = Simulator(m)

    async def bench(ctx):
        for c, f in cases:
            ctx.set(coefficient, c & 0xFFFF_FFFF)
            ctx.set(frac, f)
            seen.append(ctx.get(out))

    sim.add_testbench(bench)
    sim.run()
    assert seen == [c << (FRACTION - f) for c, f in cases]
