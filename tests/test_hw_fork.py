# amaranth: UnusedElaboratable=no
"""Broadcast (hw/fork.py): every beat exactly once on every output, under stalls and reset."""

import itertools

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Module, signed, unsigned
from amaranth.lib import data
from amaranth.sim import Simulator

from groupnet_hw.hw.fork import Broadcast
from groupnet_hw.sim.streams import run_streams


class Named(Elaboratable):
    """Exposes ``dut.o[j]`` as ``o{j}`` so that :func:`run_streams` can name each output."""

    def __init__(self, dut):
        self.dut = dut
        self.i = dut.i
        for j, o in enumerate(dut.o):
            setattr(self, f"o{j}", o)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        return m


SHAPES = {
    "u8": (unsigned(8), lambda rng, n: [int(v) for v in rng.integers(0, 256, n)]),
    "fix": (data.ArrayLayout(signed(4), 3),
            lambda rng, n: [[int(v) for v in row] for row in rng.integers(-8, 8, (n, 3))]),
}


def run(shape_name, n, beats=60, *, stall=0.0, seed=0, reset_at=None):
    shape, make = SHAPES[shape_name]
    payloads = make(np.random.default_rng(seed), beats)
    result = run_streams(Named(Broadcast(shape, n)), {"i": payloads},
                         {f"o{j}": beats for j in range(n)}, stall=stall, seed=seed,
                         reset_at=reset_at, max_cycles=50 * beats + 100)
    return payloads, result


@pytest.mark.parametrize("seed, shape_name, n", [(0, "u8", 1), (1, "u8", 2), (2, "fix", 2),
                                                 (3, "u8", 3), (4, "fix", 4), (5, "u8", 5)])
def test_every_output_sees_every_beat_under_stalls(seed, shape_name, n):
    # Each output has its own random ready pattern, so they accept in different cycles.
    payloads, result = run(shape_name, n, stall=0.4, seed=seed)
    for j in range(n):
        assert result.outputs[f"o{j}"] == payloads


@pytest.mark.parametrize("n, reset_at", [(2, 17), (3, 40)])
def test_reset_mid_stream(n, reset_at):
    payloads, result = run("u8", n, stall=0.3, seed=11, reset_at=reset_at)
    for j in range(n):
        assert result.outputs[f"o{j}"] == payloads


@pytest.mark.parametrize("n", [1, 2, 4])
def test_full_throughput(n):
    """Latency 0, II 1: N beats take exactly N cycles when every output is ready."""
    payloads, result = run("u8", n, beats=50)
    assert result.cycles == 50
    for j in range(n):
        assert result.outputs[f"o{j}"] == payloads
        assert result.out_cycles[f"o{j}"] == list(range(1, 51))


def test_valid_independent_of_ready_and_no_duplicates():
    n = 3
    dut = Broadcast(unsigned(8), n)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    seen = []

    async def testbench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 0xA5)
        # Nothing taken yet: every output valid whatever the readies.
        for readies in itertools.product([0, 1], repeat=n):
            for o, r in zip(dut.o, readies):
                ctx.set(o.ready, r)
            seen.append(([ctx.get(o.valid) for o in dut.o], ctx.get(dut.i.ready)))
        # Output 1 takes the beat; the others stall.
        for o, r in zip(dut.o, (0, 1, 0)):
            ctx.set(o.ready, r)
        await ctx.tick()
        for readies in itertools.product([0, 1], repeat=n):
            for o, r in zip(dut.o, readies):
                ctx.set(o.ready, r)
            seen.append(([ctx.get(o.valid) for o in dut.o], ctx.get(dut.i.ready)))
        # Outputs 0 and 2 take it: the input beat is released in that cycle.
        for o, r in zip(dut.o, (1, 0, 1)):
            ctx.set(o.ready, r)
        seen.append(([ctx.get(o.valid) for o in dut.o], ctx.get(dut.i.ready)))
        await ctx.tick()
        ctx.set(dut.i.payload, 0x3C)
        seen.append(([ctx.get(o.valid) for o in dut.o], [ctx.get(o.payload) for o in dut.o]))

    sim.add_testbench(testbench)
    sim.run()

    combos = list(itertools.product([0, 1], repeat=n))
    for readies, (valids, i_ready) in zip(combos, seen[:8]):
        assert valids == [1, 1, 1]
        assert i_ready == all(readies)
    for readies, (valids, i_ready) in zip(combos, seen[8:16]):
        assert valids == [1, 0, 1]                       # output 1 must not see it again
        assert i_ready == (readies[0] and readies[2])
    assert seen[16] == ([1, 0, 1], 1)
    assert seen[17] == ([1, 1, 1], [0x3C] * 3)          # next beat goes to everyone


def test_converts_to_verilog():
    text = verilog.convert(Broadcast(data.ArrayLayout(signed(4), 3), 3), name="broadcast")
    assert "module broadcast" in text
    with pytest.raises(ValueError):
        Broadcast(unsigned(1), 0)
