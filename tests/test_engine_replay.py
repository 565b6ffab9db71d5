# amaranth: UnusedElaboratable=no
"""The intended engine's row replay (hw/engine/replay.py): rows in once, each given out
for every job that reads it (a fresh command moves to the next row, the others repeat
it), in order, under stalls on every stream, at a word a cycle."""

import random

import pytest

from groupnet_hw.hw.engine.replay import RowReplay
from groupnet_hw.sim.streams import run_streams


def replay_run(rows, jobs, words, *, row_words=8, stall=0.0, seed=0):
    rng = random.Random(seed)
    data = [[rng.getrandbits(128) for _ in range(words)] for _ in range(rows)]
    cmds, expected = [], []
    for r in range(rows):
        for j in range(jobs):
            cmds.append({"fresh": int(j == 0)})
            expected += data[r]
    dut = RowReplay(data_width=128, row_words=row_words)

    async def setup(ctx):
        ctx.set(dut.words, words)
        await ctx.tick()

    run = run_streams(dut, {"i": [w for row in data for w in row], "cmd": cmds},
                      {"o": len(expected)}, stall=stall, seed=seed, setup=setup,
                      max_cycles=50 * len(expected) + 200)
    return run, expected


@pytest.mark.parametrize("rows, jobs, words, row_words", [
    (5, 3, 8, 8),        # full slots, odd rows
    (4, 1, 3, 8),        # one job: every row fresh
    (3, 5, 1, 2),        # one-word rows
])
def test_each_row_goes_out_once_a_job(rows, jobs, words, row_words):
    run, expected = replay_run(rows, jobs, words, row_words=row_words)
    assert run.outputs["o"] == expected


@pytest.mark.parametrize("seed", range(3))
def test_replay_under_stalls(seed):
    run, expected = replay_run(6, 3, 5, stall=0.4, seed=seed)
    assert run.outputs["o"] == expected


def test_a_word_a_cycle_while_the_next_row_comes_in():
    """Rows of 8 words, 4 jobs: the next row arrives during the passes over this one,
    so the passes follow one another with the command's few cycles between."""
    run, expected = replay_run(4, 4, 8)
    assert run.outputs["o"] == expected
    assert run.cycles <= 4 * 4 * (8 + 4) + 8


def test_replay_bounds():
    with pytest.raises(ValueError, match="power of two"):
        RowReplay(row_words=6)
    with pytest.raises(ValueError):
        RowReplay(data_width=0)


def test_the_runner_replays_the_rows_the_cycle_model_counts_replayed():
    """The runner's replay unit (``ConvRunner(replay_words=...)``, hw/) and the cycle
    model's bound (``EngineConfig.replay_row_bytes``, the compiler's) state one number:
    hw/ may not import the compiler, so this test ties them."""
    import inspect

    from groupnet_hw.compiler.engine.config import EngineConfig
    from groupnet_hw.hw.engine.runner import ConvRunner
    config = EngineConfig()
    words = inspect.signature(ConvRunner).parameters["replay_words"].default
    assert words * config.port_bytes == config.replay_row_bytes
