# amaranth: UnusedElaboratable=no
"""The intended engine's prologue threshold (hw/engine/prologue.py): each job's ``in_thr``
section, packed by the compiler's own functions (``pack_consts``, ``pack_bitvec``), then
rows of a fixed-point map packed by its own format (``TensorFormat.pack``, 8- to 32-bit
elements, rows padded to the bus word) come out as the rows of the levels the IR's
``threshold`` gives (``TensorFormat`` of bits or 2-bit levels), under stalls on every
stream, jobs' rows interleaved."""

import numpy as np
import pytest
import torch

from groupnet_hw.compiler.engine.formats import TensorFormat
from groupnet_hw.compiler.engine.params import pack_bitvec, pack_consts
from groupnet_hw.compiler.ops import op_of
from amaranth.sim import Simulator

from groupnet_hw.hw.engine.prologue import CMD_DEPTH, PROLOGUE_LEVELS, PrologueThreshold
from groupnet_hw.sim.engine_model import _node
from groupnet_hw.sim.streams import run_streams
from test_engine_unpacker import words_of as unpacker_words


def words_of(raw, data_width):
    """The unpacker tests' bus words, of bytes or a byte array."""
    return unpacker_words(np.frombuffer(bytes(raw), dtype=np.uint8), data_width)


def prologue_run(jobs, channels, width, height, elem, levels, data_width=128, stall=0.0,
                 seed=0, max_levels=3):
    rng = np.random.default_rng(seed)
    port = data_width // 8
    fmt = TensorFormat("fixed", elem, channels, height, width, port)
    lo, hi = -(1 << (elem - 1)), 1 << (elem - 1)
    maps = rng.integers(lo, hi, size=(jobs, channels, height, width))
    T = rng.integers(lo // 2, hi // 2, size=(jobs, channels, levels))
    T.sort(axis=2)
    # thresholds at the extremes too: never met, always met
    T[:, 0, 0] = lo
    T[:, -1, -1] = hi - 1
    invert = rng.integers(0, 2, size=(jobs, channels))
    bits = PROLOGUE_LEVELS[levels]
    out_fmt = TensorFormat("bits" if bits == 1 else "uint", bits, channels, height, width, port)
    cmds, words, expected = [], [], []
    for k in range(jobs):
        cmds.append({"load": 1, "job": k})
        section = bytes(pack_consts(T[k].reshape(-1), 4)) + bytes(pack_bitvec(invert[k]))
        section += bytes(-len(section) % port)
        words += words_of(section, data_width)
    node = [_node("threshold", channels, T=torch.from_numpy(T[k]),
                  invert=torch.from_numpy(invert[k])) for k in range(jobs)]
    rows_in = [fmt.pack(maps[k]) for k in range(jobs)]
    for y in range(height):
        for k in range(jobs):
            cmds.append({"load": 0, "job": k})
            row = bytes(rows_in[k][y * fmt.row_bytes:(y + 1) * fmt.row_bytes])
            words += words_of(row, data_width)
            lv = op_of(node[k]).execute(node[k], [torch.from_numpy(maps[k][None])])[0].numpy()
            packed = bytes(out_fmt.pack(lv))
            # the unit's words: the row's levels, the last word's bits past them 0
            used = -(-width * channels * bits // data_width)
            expected += words_of(packed[y * out_fmt.row_bytes:][:used * port], data_width)
    dut = PrologueThreshold(arrays=jobs, data_width=data_width, max_size=16, max_channels=64,
                            max_levels=max_levels)
    settings = dict(elem_bits=elem, channels=channels, levels=levels, width=width,
                    row_beats=fmt.row_bytes // port)

    async def setup(ctx):
        ctx.set(dut.settings, settings)
        await ctx.tick()

    run = run_streams(dut, {"cmd": cmds, "i": words}, {"o": len(expected)}, stall=stall,
                      seed=seed, setup=setup, max_cycles=20 * len(words) + 500)
    return run, expected


@pytest.mark.parametrize("jobs, channels, width, height, elem, levels, data_width", [
    (2, 64, 5, 2, 16, 1, 128),     # the stem's 16-bit map of 64 channels, binary
    (3, 24, 3, 2, 8, 1, 128),      # 8-bit elements: two groups a bus word
    (2, 16, 3, 2, 32, 3, 128),     # 32-bit elements, two words a group; 2-bit levels
    (1, 8, 7, 1, 16, 3, 256),      # one group a pixel, 256-bit words
    (2, 40, 2, 2, 8, 1, 256),      # five groups a pixel, rows padded
])
def test_prologue_rows_are_the_thresholded_levels(jobs, channels, width, height, elem, levels,
                                                   data_width):
    run, expected = prologue_run(jobs, channels, width, height, elem, levels, data_width)
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("seed", range(3))
def test_prologue_under_stalls(seed):
    run, expected = prologue_run(3, 16, 4, 2, 16, 3, stall=0.4, seed=seed)
    assert run.outputs["o"] == expected


def test_prologue_keeps_up_with_a_word_a_cycle():
    # 16-bit elements: a bus word is a group, one a cycle once the thresholds are in
    run, expected = prologue_run(1, 64, 8, 2, 16, 1)
    assert run.outputs["o"] == expected
    words = 2 * 64 * 8 * 16 // 128
    assert run.cycles < words + 64 // 8 * 4 + 40


def test_prologue_queues_the_next_rows_commands():
    """A runner gives the next row's command while this row's words still come (so that
    its read goes out early): with no word yet, the unit takes a row's command and
    :data:`CMD_DEPTH` more, then holds the next; and it is not idle with them queued."""
    dut = PrologueThreshold(arrays=2, data_width=128, max_size=16, max_channels=64)
    accepted = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(dut.settings, dict(elem_bits=16, channels=64, levels=1, width=4,
                                   row_beats=32))
        await ctx.tick()
        ctx.set(dut.cmd.valid, 1)
        ctx.set(dut.cmd.payload, dict(load=0, job=1))
        for cycle in range(20):
            *_, ready, idle = await ctx.tick().sample(dut.cmd.ready, dut.idle)
            if ready:
                accepted.append(cycle)
            if cycle > 0:
                assert not idle
    sim.add_testbench(bench)
    sim.run()
    assert len(accepted) == CMD_DEPTH + 1, accepted


def test_prologue_bounds():
    with pytest.raises(ValueError):
        PrologueThreshold(arrays=1, data_width=64)
    with pytest.raises(ValueError):
        PrologueThreshold(arrays=1, max_channels=12)
    with pytest.raises(ValueError):
        PrologueThreshold(arrays=1, max_levels=2)
