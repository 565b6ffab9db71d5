"""Base aggregation / soft gate (hw/mixer.py) against a torch reference of paper eq. 7."""

import numpy as np
import pytest
import torch
from amaranth.back import verilog

from groupnet_hw.compiler.cycles import elementwise_cycles
from groupnet_hw.hw.mixer import BaseMixer
from groupnet_hw.sim.streams import run_streams


# ---- reference (torch int64; independent of the RTL) ----------------------------

def ref_round_shift(v, s):
    return v if s == 0 else torch.div(v + (1 << (s - 1)), 1 << s, rounding_mode="floor")


def ref_mixer(G, lambdas, lambda_shift, gates, gate_shift):
    """G: [N, K, C] int64. Returns agg [N, C], or the gated x: [K, N, C]."""
    lam = torch.tensor(lambdas, dtype=torch.int64).view(1, -1, 1)
    agg = ref_round_shift((lam * G).sum(dim=1), lambda_shift)
    if gates is None:
        return agg
    g = torch.tensor(gates, dtype=torch.int64).view(1, -1, 1)
    x = ref_round_shift(g * G + ((1 << gate_shift) - g) * agg.unsqueeze(1), gate_shift)
    return x.permute(1, 0, 2)


def width_for(t):
    lo, hi = int(t.min()), int(t.max())
    return max((v if v >= 0 else ~v).bit_length() + 1 for v in (lo, hi))


# ---- harness -------------------------------------------------------------------

def flat_ports(dut):
    """Expose the array members as ``i0..``/``o0..`` for :func:`run_streams`, which
    looks streams up by attribute name."""
    for k, s in enumerate(dut.i):
        setattr(dut, f"i{k}", s)
    if dut.gates is not None:
        for k, s in enumerate(dut.o):
            setattr(dut, f"o{k}", s)
    return dut


def as_lists(t):
    return [[int(v) for v in row] for row in t]


def stimulus(rng, n, bases, channels, width):
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    G = torch.from_numpy(rng.integers(lo, hi + 1, size=(n, bases, channels)))
    # Range ends on every base, together and mixed, so the width analysis is exercised.
    G[0], G[1], G[2] = lo, hi, 0
    G[3, ::2], G[3, 1::2] = lo, hi
    return G


def expected_outputs(G, cfg):
    ref = ref_mixer(G, cfg["lambdas"], cfg["lambda_shift"], cfg["gates"], cfg["gate_shift"])
    if cfg["gates"] is None:
        return {"o": as_lists(ref)}
    return {f"o{k}": as_lists(ref[k]) for k in range(len(cfg["gates"]))}


CONFIGS = [
    # K=1, no gate (last block), plain aggregation.
    dict(bases=1, channels=3, in_width=6, lambdas=[37], lambda_shift=5, gates=None,
         gate_shift=0),
    # K=5 with the paper's C=0 / C=1 limits, a negative and a zero lambda.
    dict(bases=5, channels=4, in_width=7, lambdas=[41, -17, 0, 90, 3], lambda_shift=6,
         gates=[0, 128, 77, 1, 127], gate_shift=7),
    # gate_shift = 0: gates are exactly 0 or 1.
    dict(bases=3, channels=5, in_width=5, lambdas=[-9, 4, 11], lambda_shift=0,
         gates=[1, 0, 1], gate_shift=0),
    # K=2, no gate, lambda_shift 1 (rounding half up at its smallest).
    dict(bases=2, channels=8, in_width=8, lambdas=[-1, 3], lambda_shift=1, gates=None,
         gate_shift=0),
    # K=4, random everything.
    "random",
]


def config(index):
    cfg = CONFIGS[index]
    if cfg != "random":
        return dict(cfg)
    rng = np.random.default_rng(1234)
    bases = 4
    gate_shift = int(rng.integers(1, 9))
    return dict(bases=bases, channels=6, in_width=int(rng.integers(3, 9)),
                lambdas=[int(v) for v in rng.integers(-200, 201, size=bases)],
                lambda_shift=int(rng.integers(0, 9)),
                gates=[int(v) for v in rng.integers(0, (1 << gate_shift) + 1, size=bases)],
                gate_shift=gate_shift)


# ---- tests -----------------------------------------------------------------------

@pytest.mark.parametrize("index", range(len(CONFIGS)))
def test_mixer_stalls_and_reset(index):
    cfg = config(index)
    rng = np.random.default_rng(index)
    G = stimulus(rng, 50, cfg["bases"], cfg["channels"], cfg["in_width"])
    expected = expected_outputs(G, cfg)
    out_width = max(width_for(torch.tensor(v)) for v in expected.values())
    dut = flat_ports(BaseMixer(**cfg))
    # Default out_width is the exact bound: never narrower than what these inputs reach.
    assert dut.out_width >= out_width
    inputs = {f"i{k}": as_lists(G[:, k]) for k in range(cfg["bases"])}
    counts = {name: len(v) for name, v in expected.items()}
    # The harness re-rolls each stall per cycle, so a stream is active about half the
    # time and a K-way join fires about 2**-K of the cycles: K=5 needs ~35 cycles/pixel.
    budget = 200 + int(20 * len(G) * 2.1 ** cfg["bases"])
    run = run_streams(dut, inputs, counts, stall=0.3, seed=index, max_cycles=budget)
    assert run.outputs == expected
    run = run_streams(dut, inputs, counts, stall=0.3, seed=index + 50, reset_at=37,
                      max_cycles=budget)
    assert run.outputs == expected


def test_gate_limits_are_exact():
    """C_k = 0 passes the aggregate, C_k = 1 passes the base, bit for bit."""
    cfg = dict(bases=3, channels=4, in_width=6, lambdas=[45, -20, 70], lambda_shift=6,
               gates=[0, 16, 0], gate_shift=4)
    G = stimulus(np.random.default_rng(5), 30, 3, 4, 6)
    agg = ref_mixer(G, cfg["lambdas"], cfg["lambda_shift"], None, 0)
    dut = flat_ports(BaseMixer(**cfg))
    run = run_streams(dut, {f"i{k}": as_lists(G[:, k]) for k in range(3)},
                      {f"o{k}": len(G) for k in range(3)}, stall=0.3, seed=9,
                      max_cycles=20_000)
    assert run.outputs["o0"] == as_lists(agg)
    assert run.outputs["o1"] == as_lists(G[:, 1])
    assert run.outputs["o2"] == as_lists(agg)


def test_narrow_out_width_from_compiler():
    """A compiler-given out_width narrower than the worst case is honoured (exact for
    the inputs its range analysis allows)."""
    cfg = dict(bases=2, channels=3, in_width=8, lambdas=[3, 5], lambda_shift=3,
               gates=[2, 6], gate_shift=3)
    G = torch.from_numpy(np.random.default_rng(3).integers(-10, 11, size=(40, 2, 3)))
    dut = flat_ports(BaseMixer(**cfg, out_width=5))
    assert dut.out_width == 5 and dut.agg_width > 5
    expected = expected_outputs(G, cfg)
    assert max(width_for(torch.tensor(v)) for v in expected.values()) <= 5
    run = run_streams(dut, {f"i{k}": as_lists(G[:, k]) for k in range(2)},
                      {name: len(v) for name, v in expected.items()}, stall=0.3, seed=1,
                      max_cycles=20_000)
    assert run.outputs == expected


@pytest.mark.parametrize("index", [0, 1])
def test_full_throughput(index):
    """F frames take F*elementwise_cycles(H, W) + latency (2 without gates: products,
    aggregate; 4 with: products, aggregate, the aggregate's share of each gate, gates)."""
    cfg = config(index)
    frames, height, width = 3, 4, 5
    n = frames * height * width
    G = stimulus(np.random.default_rng(index), n, cfg["bases"], cfg["channels"],
                 cfg["in_width"])
    expected = expected_outputs(G, cfg)
    dut = flat_ports(BaseMixer(**cfg))
    assert dut.latency == (2 if cfg["gates"] is None else 4)
    run = run_streams(dut, {f"i{k}": as_lists(G[:, k]) for k in range(cfg["bases"])},
                      {name: n for name in expected}, max_cycles=10 * n)
    assert run.outputs == expected
    assert run.cycles == frames * elementwise_cycles(height, width) + dut.latency
    for cycles in run.out_cycles.values():
        assert np.all(np.diff(cycles) == 1)


@pytest.mark.parametrize("index", [0, 1, 4])
def test_input_ready_ignores_output_ready(index):
    """At full rate the stages advance on a register (the outputs' skids are empty), so
    flipping any output's ``ready`` within a cycle never changes an input's ``ready``;
    every output still receives every pixel, in order, under random stalls."""
    from amaranth.sim import Simulator

    cfg = config(index)
    n = 40
    G = stimulus(np.random.default_rng(index + 7), n, cfg["bases"], cfg["channels"],
                 cfg["in_width"])
    expected = expected_outputs(G, cfg)
    dut = flat_ports(BaseMixer(**cfg))
    outs = {name: getattr(dut, name) for name in expected}
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    received = {name: [] for name in outs}
    reacted = []

    async def producer(ctx):
        for k, s in enumerate(dut.i):
            ctx.set(s.valid, 1)
        sent = 0
        while sent < n:
            for k, s in enumerate(dut.i):
                ctx.set(s.payload, [int(v) for v in G[sent, k]])
            await ctx.tick().until(dut.i[0].ready)
            sent += 1
        for s in dut.i:
            ctx.set(s.valid, 0)

    async def consumer(ctx):
        rng = np.random.default_rng(index)
        while any(len(received[k]) < n for k in outs):
            ready = {k: int(rng.random() < 0.4) for k in outs}
            for name, o in outs.items():
                ctx.set(o.ready, 1 - ready[name])
                before = ctx.get(dut.i[0].ready)
                ctx.set(o.ready, ready[name])
                reacted.append(ctx.get(dut.i[0].ready) != before)
            samples = await ctx.tick().sample(*(o.valid for o in outs.values()),
                                               *(o.payload for o in outs.values()))
            samples = samples[len(samples) - 2 * len(outs):]     # after the clock's
            valids, payloads = samples[:len(outs)], samples[len(outs):]
            for name, valid, payload in zip(outs, valids, payloads):
                if valid and ready[name]:
                    received[name].append([int(v) for v in payload])

    sim.add_testbench(producer, background=True)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * 40 * n)
    assert received == expected
    assert not any(reacted)


@pytest.mark.parametrize("index", [0, 1])
def test_converts_to_verilog(index):
    dut = BaseMixer(**config(index))
    assert "module" in verilog.convert(dut, name="BaseMixer")


# ---- channel-serial (lane-folded) mixer -------------------------------------------

@pytest.mark.parametrize("index,lanes", [(0, 1), (1, 3), (2, 2), (3, 8), (4, 4), (1, 1),
                                         (2, 1), (3, 2), (4, 1)])
def test_folded_mixer_stalls_and_reset(index, lanes):
    """Folded: same outputs, lanes dividing the channels or not, one lane or all, with
    the shallow lane pipeline and the deep one (enough steps: gated K=4 over 6 steps,
    the K=2 aggregate over 8)."""
    cfg = config(index)
    rng = np.random.default_rng(index + 7)
    G = stimulus(rng, 30, cfg["bases"], cfg["channels"], cfg["in_width"])
    expected = expected_outputs(G, cfg)
    dut = flat_ports(BaseMixer(**cfg, lanes=lanes))
    inputs = {f"i{k}": as_lists(G[:, k]) for k in range(cfg["bases"])}
    counts = {name: len(v) for name, v in expected.items()}
    budget = 400 + int(20 * len(G) * 2.1 ** cfg["bases"]) * (cfg["channels"] + 1)
    run = run_streams(dut, inputs, counts, stall=0.3, seed=index, max_cycles=budget)
    assert run.outputs == expected
    run = run_streams(dut, inputs, counts, stall=0.3, seed=index + 50, reset_at=37,
                      max_cycles=budget)
    assert run.outputs == expected


@pytest.mark.parametrize("index,lanes,lane_latency", [
    (1, 3, 2), (3, 3, 2), (1, 4, 2), (1, 1, 2), (3, 2, 2), (3, 1, 4), (2, 1, 2), (4, 1, 5)])
def test_folded_mixer_interval(index, lanes, lane_latency):
    """One pixel per ``folded_interval`` cycles, the first after ``latency``: the shallow
    lane pipeline with few steps, the deep one (4 registers for the aggregate, 5 with
    gates) with enough steps for it to cost no cycle (interval ``steps + 1``)."""
    from groupnet_hw.hw.lanes import folded_interval
    cfg = config(index)
    G = stimulus(np.random.default_rng(0), 10, cfg["bases"], cfg["channels"], cfg["in_width"])
    expected = expected_outputs(G, cfg)
    dut = flat_ports(BaseMixer(**cfg, lanes=lanes))
    inputs = {f"i{k}": as_lists(G[:, k]) for k in range(cfg["bases"])}
    run = run_streams(dut, inputs, {n: len(v) for n, v in expected.items()}, max_cycles=2000)
    folds = -(-cfg["channels"] // lanes)
    interval = folded_interval(cfg["channels"], lanes, lane_latency)
    assert dut.lane_latency == lane_latency
    assert dut.interval == interval and dut.latency == folds + 1 + lane_latency
    if lane_latency > 2:
        assert interval == folds + 1
    assert run.outputs == expected
    for name in expected:
        assert np.all(np.diff(run.out_cycles[name]) == interval)
    assert run.cycles == (len(G) - 1) * interval + dut.latency + 1
