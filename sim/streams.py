"""Stream stimulus and capture for Amaranth-simulator testbenches.

Every hardware test drives ``amaranth.lib.stream`` interfaces the same way: a
producer that offers beats with random idle gaps (valid stalls) and a consumer
that takes them with random pauses (ready stalls). The helpers here are the one
implementation of that, so that each component test only states its inputs,
its expected outputs and its cycle budget.

Payloads are given and returned as plain Python values: ints for scalar
shapes, (nested) lists of ints for ``data.ArrayLayout`` payloads.
"""

from __future__ import annotations

import random

import numpy as np
from dataclasses import dataclass, field

from amaranth.lib import data
from amaranth.sim import Simulator

__all__ = ["to_python", "stream_put", "stream_get", "take_probing_ready", "StreamRun",
           "run_streams", "first_output_cycle"]


def to_python(value):
    """Turn a sampled payload into ints, lists (arrays) and dicts (structs)."""
    if isinstance(value, int):
        return value
    if isinstance(value, data.Const):
        layout = value.shape()
        if isinstance(layout, data.StructLayout):
            return {name: to_python(value[name]) for name, _ in layout}
        if isinstance(layout, data.ArrayLayout):
            return [to_python(v) for v in value]
        return value.as_value().value
    try:
        return [to_python(v) for v in value]
    except TypeError:
        return int(value)


async def stream_put(ctx, stream, payload):
    """Offer one beat and wait until it is accepted (valid never waits on ready)."""
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream):
    """Accept one beat; returns its payload as Python values."""
    ctx.set(stream.ready, 1)
    (payload,) = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return to_python(payload)


async def take_probing_ready(ctx, out, in_ready, count, p_ready, seed):
    """Take ``count`` beats from ``out`` with ``ready`` drawn at random each cycle and,
    every cycle, flip ``out.ready`` within the cycle to see whether ``in_ready`` follows
    it combinationally. Returns ``(payloads, reacted)``: the beats taken (lists of
    ints) and whether ``in_ready`` changed with ``out.ready`` in any cycle."""
    rng = np.random.default_rng(seed)
    received, reacted = [], False
    while len(received) < count:
        ready = int(rng.random() < p_ready)
        ctx.set(out.ready, 1 - ready)
        other = ctx.get(in_ready)
        ctx.set(out.ready, ready)
        reacted |= ctx.get(in_ready) != other
        *_, valid, payload = await ctx.tick().sample(out.valid, out.payload)
        if valid and ready:
            received.append([int(v) for v in payload])
    return received, reacted


@dataclass
class StreamRun:
    """What :func:`run_streams` observed.

    Attributes
    ----------
    outputs : dict
        Output stream name -> list of received payloads.
    cycles : int
        Clock cycles from the first beat offered to the last beat received.
    out_cycles : dict
        Output stream name -> cycle number at which each beat was accepted.
    """

    outputs: dict
    cycles: int
    out_cycles: dict = field(default_factory=dict)


async def _idle(ctx, cycles):
    """Wait ``cycles`` clock edges. Not ``ctx.tick().repeat(n)``: a background process
    still waiting in ``repeat`` when the simulation ends is closed mid-iteration, and
    Amaranth's ``repeat`` then fails in its own cleanup (an unraisable
    ``RuntimeError: aclose(): asynchronous generator is already running``)."""
    for _ in range(cycles):
        await ctx.tick()


def run_streams(dut, inputs, outputs, *, stall=0.0, seed=0, max_cycles=1_000_000,
                vcd=None, reset_at=None, pace=1, setup=None):
    """Drive ``dut``'s input streams and collect its output streams.

    Parameters
    ----------
    dut : wiring.Component
        The component; its streams are looked up by attribute name.
    inputs : dict[str, list]
        Input stream name -> payloads to send, in order.
    outputs : dict[str, int]
        Output stream name -> number of beats to receive.
    stall : float
        Probability, per beat and per stream, of inserting 1..4 idle cycles
        (valid low on inputs, ready low on outputs). 0 gives full throughput.
    seed : int
        Seed of the stall pattern.
    max_cycles : int
        Deadline; exceeding it raises ``TimeoutError`` (deadlock or lost beats).
    reset_at : int, optional
        If given, the testbench pulses the component's reset at this cycle,
        then restarts every stream from its first beat (reset-recovery tests).
    pace : int
        Every output takes at most one beat per ``pace`` cycles (``ready`` low for
        ``pace - 1`` cycles after each beat), as a folded consumer does.
    setup : async callable ``(ctx)``, optional
        A testbench that runs first (loading memories, setting configuration ports);
        the streams start when it returns, and ``cycles`` counts from then.

    Returns
    -------
    StreamRun
    """
    top = dut
    if reset_at is not None:
        from amaranth.hdl import ResetInserter, Signal
        dut_reset = Signal()
        top = ResetInserter(dut_reset)(dut)
    sim = Simulator(top)
    sim.add_clock(1e-8)
    result = {name: [] for name in outputs}
    out_cycles = {name: [] for name in outputs}
    clock = {"cycle": 0, "epoch": 0, "done_at": 0, "started": setup is None, "start": 0}

    async def counter(ctx):
        async for _ in ctx.tick():
            clock["cycle"] += 1
            if clock["cycle"] > max_cycles:
                raise TimeoutError(f"no progress within {max_cycles} cycles "
                                   f"(received {{{', '.join(f'{k}: {len(v)}' for k, v in result.items())}}})")
            if reset_at is not None and clock["cycle"] == reset_at:
                clock["epoch"] += 1

    def make_producer(name, beats, rng):
        async def producer(ctx):
            stream = getattr(dut, name)
            while not clock["started"]:
                await ctx.tick()
            epoch = clock["epoch"]
            index = 0
            while index < len(beats):
                if clock["epoch"] != epoch:
                    epoch, index = clock["epoch"], 0
                    ctx.set(stream.valid, 0)
                    continue
                if stall and rng.random() < stall:
                    ctx.set(stream.valid, 0)
                    await _idle(ctx, rng.randint(1, 4))
                    continue
                ctx.set(stream.valid, 1)
                ctx.set(stream.payload, beats[index])
                *_, ready = await ctx.tick().sample(stream.ready)
                if clock["epoch"] != epoch:
                    continue
                if ready:
                    index += 1
            ctx.set(stream.valid, 0)
        return producer

    def make_consumer(name, count, rng):
        async def consumer(ctx):
            stream = getattr(dut, name)
            while not clock["started"]:
                await ctx.tick()
            epoch = clock["epoch"]
            while len(result[name]) < count:
                if clock["epoch"] != epoch:
                    epoch = clock["epoch"]
                    result[name].clear()
                    out_cycles[name].clear()
                if stall and rng.random() < stall:
                    ctx.set(stream.ready, 0)
                    await _idle(ctx, rng.randint(1, 4))
                    continue
                ctx.set(stream.ready, 1)
                *_, valid, payload = await ctx.tick().sample(stream.valid, stream.payload)
                if valid and clock["epoch"] == epoch:
                    result[name].append(to_python(payload))
                    out_cycles[name].append(clock["cycle"])
                    if pace > 1:
                        ctx.set(stream.ready, 0)
                        await _idle(ctx, pace - 1)
            ctx.set(stream.ready, 0)
            clock["done_at"] = max(clock["done_at"], clock["cycle"])
        return consumer

    async def resetter(ctx):
        await ctx.tick().repeat(reset_at - 1)
        ctx.set(dut_reset, 1)
        await ctx.tick()
        ctx.set(dut_reset, 0)

    async def set_up(ctx):
        await setup(ctx)
        clock["started"], clock["start"] = True, clock["cycle"]

    rng = random.Random(seed)
    sim.add_process(counter)
    if setup is not None:
        sim.add_testbench(set_up, background=True)
    for name, beats in inputs.items():
        sim.add_testbench(make_producer(name, list(beats), random.Random(rng.random())),
                          background=True)
    for name, count in outputs.items():
        sim.add_testbench(make_consumer(name, count, random.Random(rng.random())))
    if reset_at is not None:
        sim.add_testbench(resetter, background=True)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    return StreamRun(outputs=result, cycles=clock["done_at"] - clock["start"],
                     out_cycles=out_cycles)


def first_output_cycle(dut, beat, *, setup=None, i="i", o="o", limit=30):
    """Cycles from the edge that accepts ``beat`` on ``dut``'s stream ``i`` to the first
    cycle ``o`` is valid, with ``o.ready`` high throughout (a unit's stated latency).

    Parameters
    ----------
    dut : wiring.Component
    beat : payload
        The one beat offered.
    setup : callable ``(ctx)``, optional
        Sets the unit's configuration ports before the beat is offered (not async).
    limit : int
        Cycles to wait for it; ``None`` is returned if none came.
    """
    seen = {}

    async def bench(ctx):
        if setup is not None:
            setup(ctx)
        ctx.set(getattr(dut, o).ready, 1)
        await stream_put(ctx, getattr(dut, i), beat)
        for cycle in range(1, limit):
            if ctx.get(getattr(dut, o).valid):
                seen["cycle"] = cycle
                return
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen.get("cycle")
