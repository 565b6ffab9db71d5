# amaranth: UnusedElaboratable=no
"""The intended engine's input unpacker (hw/engine/unpacker.py), the output packer's
inverse: each job's map, packed by the compiler's own format (``TensorFormat.pack``:
bits, 2- and 4-bit levels, 8- to 32-bit fixed point), comes out as the feeder's beats
(a fold's parts, each part's jobs), sign-extended where fixed, zeros past the channels
and the jobs; rows padded to their bus words, stalls, and a packer-unpacker round trip."""

import numpy as np
import pytest

from groupnet_hw.hw.engine.packer import OutputPacker
from groupnet_hw.hw.engine.unpacker import InputUnpacker
from groupnet_hw.sim.streams import run_streams
from test_engine_packer import Case, random_case


def words_of(raw, data_width):
    step = data_width // 8
    return [int.from_bytes(raw[i:i + step].tobytes(), "little") for i in range(0, raw.size, step)]


def unpack_run(case, stall=0.0, seed=0):
    """The unpacker fed with each job's packed map; returns the run and its expected
    beats."""
    dut = InputUnpacker(arrays=case.arrays, pe=case.pe, lanes=case.lanes,
                        value_width=case.value_width, data_width=case.data_width,
                        max_size=32, max_channels=128, max_out_folds=8, max_beats=64)
    settings = dict(case.settings, signed=int(case.fmt.kind == "fixed"),
                    height=case.fmt.height)
    inputs = {f"i{k}": words_of(case.fmt.pack(case.maps[k]), case.data_width)
              for k in range(case.jobs)}
    # zeros where no channel or job is (the packer's beats hold garbage there)
    out_folds, parts = case.settings["out_folds"], case.pe // case.lanes
    expected = []
    for y in range(case.fmt.height):
        for x in range(case.fmt.width):
            for nf in range(out_folds):
                for p in range(parts):
                    for k in range(case.arrays):
                        c = nf * case.pe + p * case.lanes + np.arange(case.lanes)
                        beat = np.zeros(case.lanes, dtype=np.int64)
                        if k < case.jobs:
                            ok = c < case.fmt.channels
                            beat[ok] = case.maps[k, c[ok], y, x]
                        expected.append([int(v) for v in beat])

    async def setup(ctx):
        ctx.set(dut.settings, settings)
        await ctx.tick()
        ctx.set(dut.active, 1)

    run = run_streams(dut, inputs, {"o": len(expected)}, stall=stall, seed=seed, setup=setup,
                      max_cycles=40 * (len(expected) + sum(map(len, inputs.values()))) + 200)
    return run, expected


@pytest.mark.parametrize("arrays, pe, lanes, channels, width, elem, data_width", [
    (2, 16, 8, 64, 5, 1, 128),      # ResNet's 64 binary channels
    (3, 16, 8, 13, 7, 1, 64),       # 13 channels: a fold's tail empty
    (2, 8, 8, 21, 4, 2, 32),        # 2-bit levels
    (1, 16, 16, 40, 3, 4, 128),     # 4-bit levels
    (2, 16, 8, 20, 3, 8, 64),       # bytes, signed
    (2, 16, 8, 24, 5, 16, 128),     # 16-bit values
    (5, 16, 8, 64, 3, 24, 128),     # the intended engine's 24-bit maps
    (2, 8, 8, 9, 4, 32, 64),        # 32-bit containers of 24-bit values
])
def test_beats_are_each_jobs_map(arrays, pe, lanes, channels, width, elem, data_width):
    case = Case(channels + elem, arrays, pe, lanes, channels, 3, width, elem, data_width)
    run, expected = unpack_run(case)
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("seed", range(3))
def test_random_configurations_under_stalls(seed):
    case = random_case(200 + seed)
    run, expected = unpack_run(case, stall=0.3, seed=seed)
    assert run.outputs["o"] == expected


def test_jobs_past_the_descriptors_are_zeros():
    case = Case(12, 3, 16, 8, 24, 2, 3, 8, 64, jobs=1)
    run, expected = unpack_run(case, stall=0.2)
    assert run.outputs["o"] == expected


def test_rows_padded_to_a_port_wider_than_the_bus_word():
    case = Case(9, 2, 16, 8, 16, 2, 5, 1, 64, port_bytes=32)
    run, expected = unpack_run(case, stall=0.2)
    assert run.outputs["o"] == expected


def test_a_beat_a_cycle():
    # binary maps: a byte a beat, a bus word every 16 beats of a job
    case = Case(1, 2, 16, 8, 64, 2, 8, 1, 128)
    run, expected = unpack_run(case)
    assert run.outputs["o"] == expected
    beats, words = len(expected), 2 * 2 * 4
    gaps = np.diff(run.out_cycles["o"]) - 1
    assert gaps.sum() <= words                  # a cycle at most for each word taken
    assert run.cycles <= beats + words + 10     # and the pipeline's fill


@pytest.mark.parametrize("elem, cycles_a_beat", [(16, 1.0), (24, 1.5), (32, 2.0)])
def test_a_word_taken_and_a_beat_given_in_one_cycle(elem, cycles_a_beat):
    # a beat of 8 lanes: 16-bit values are a bus word a beat, 24-bit ones a word and a
    # half, 32-bit two: the word that completes a beat comes in the cycle the beat goes
    case = Case(2, 5, 16, 8, 64, 2, 8, elem, 128)
    run, expected = unpack_run(case)
    assert run.outputs["o"] == expected
    beats = len(expected)
    span = run.out_cycles["o"][-1] - run.out_cycles["o"][0] + 1
    assert span <= cycles_a_beat * beats + 4, (span, beats)


def test_the_packer_takes_back_what_the_unpacker_gives():
    # unpacked beats packed again: the same DRAM bytes
    case = Case(3, 3, 16, 8, 21, 2, 4, 24, 128)
    run, _ = unpack_run(case)
    packer = OutputPacker(arrays=case.arrays, pe=case.pe, lanes=case.lanes,
                          value_width=case.value_width, data_width=case.data_width,
                          max_size=32, max_channels=128, max_out_folds=8, max_beats=64)

    async def setup(ctx):
        ctx.set(packer.settings, case.settings)

    again = run_streams(packer, {"i": run.outputs["o"]}, {"o": case.words}, setup=setup,
                        max_cycles=5000)
    case.check(again.outputs["o"])


@pytest.mark.parametrize("bad, message", [
    (dict(lanes=12), "multiple of 8"), (dict(data_width=60), "whole bytes"),
    (dict(elems=(3,)), "elems"),
])
def test_bad_sizes_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        InputUnpacker(**(dict(arrays=2, pe=16, lanes=8) | bad))


def test_two_maps_one_after_the_other():
    """The counters stop at a map's last beat; after ``active`` falls the next map, of
    another format and geometry, starts clean; ``idle`` in between."""
    from amaranth.sim import Simulator
    first = Case(21, 2, 16, 8, 13, 2, 3, 24, 64)
    second = Case(22, 2, 16, 8, 40, 3, 2, 1, 64)
    runs = []
    for case in (first, second):
        run, expected = unpack_run(case)             # the expected beats of each alone
        runs.append((case, expected))
    dut = InputUnpacker(arrays=2, pe=16, lanes=8, value_width=first.value_width,
                        data_width=64, max_size=32, max_channels=128, max_out_folds=8,
                        max_beats=64)
    got, idle_between = [], []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for case, expected in runs:
            ctx.set(dut.settings, dict(case.settings, signed=int(case.fmt.kind == "fixed"),
                                       height=case.fmt.height))
            await ctx.tick()
            ctx.set(dut.active, 1)
            words = {k: words_of(case.fmt.pack(case.maps[k]), 64) for k in range(case.jobs)}
            at = {k: 0 for k in words}
            out = []
            for _ in range(20 * len(expected) + 200):
                for k in words:
                    stream = getattr(dut, f"i{k}")
                    ctx.set(stream.valid, at[k] < len(words[k]))
                    if at[k] < len(words[k]):
                        ctx.set(stream.payload, words[k][at[k]])
                taken = {k: ctx.get(getattr(dut, f"i{k}").ready) and at[k] < len(words[k])
                         for k in words}
                valid, payload = ctx.get(dut.o.valid), ctx.get(dut.o.payload)
                await ctx.tick()
                for k in words:
                    at[k] += int(taken[k])
                if valid:
                    out.append([int(v) for v in payload])
                if len(out) == len(expected):
                    break
            got.append((out, expected))
            for _ in range(12):
                await ctx.tick()
            idle_between.append(ctx.get(dut.idle))
            ctx.set(dut.active, 0)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for out, expected in got:
        assert out == expected
    assert idle_between == [1, 1]
