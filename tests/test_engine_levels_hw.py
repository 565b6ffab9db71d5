# amaranth: UnusedElaboratable=no
"""The intended engine's level lanes (hw/engine/levels.py, fusion rule 7 behind the
mixer): each mixer output's levels equal the IR's ``threshold`` (its own ``execute``)
with each job's thresholds, for 1 to 15 levels, gated outputs (several jobs) and the
aggregate alone, channels not a multiple of the lanes, stalls, reset and the stated
latency; and the thresholds come from the constant loader's words."""

import numpy as np
import pytest
import torch

from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from groupnet_hw.compiler.engine.layout import _threshold_bytes
from groupnet_hw.compiler.graph import Node
from groupnet_hw.compiler.ops import op_of
from groupnet_hw.hw.engine.constants import THR, ConstantLoader
from groupnet_hw.hw.engine.levels import LevelLanes
from groupnet_hw.sim.streams import first_output_cycle, run_streams, stream_put
from test_engine_constants import bus_words


class Case:
    """A mixer output of ``jobs`` maps, its thresholds and the beats that carry it."""

    def __init__(self, seed, jobs, pe, lanes, channels, pixels, levels, value_width=20,
                 folds=None):
        rng = np.random.default_rng(seed)
        self.jobs, self.pe, self.lanes, self.levels = jobs, pe, lanes, levels
        self.out_folds = -(-channels // pe)
        padded = self.out_folds * pe
        lo, hi = -(1 << (value_width - 2)), 1 << (value_width - 2)
        self.values = rng.integers(lo, hi, (jobs, padded, pixels))
        # thresholds around the values, some exactly at them
        self.t = np.sort(rng.integers(lo // 4, hi // 4, (jobs, padded, levels)), axis=2)
        self.t[:, :, 0] = np.where(rng.random((jobs, padded)) < 0.2, self.values[:, :, 0],
                                   self.t[:, :, 0])
        self.t = np.sort(self.t, axis=2)
        self.inv = rng.integers(0, 2, (jobs, padded))
        parts = pe // lanes
        # a weight chunk's folds (first, count): its beats, every fold's thresholds
        first, count = folds or (0, self.out_folds)
        self.beats, self.where = [], []
        for x in range(pixels):
            for nf in range(first, first + count):
                for p in range(parts):
                    for k in range(jobs):
                        c = nf * pe + p * lanes
                        self.beats.append([int(v) for v in self.values[k, c:c + lanes, x]])
                        self.where.append((k, c, x))
        self.words = []
        for k in range(jobs):
            for w in range(self.out_folds * parts):
                c = w * lanes
                self.words.append((k * self.out_folds * parts + w,
                                   [[int(v) for v in self.t[k, c + j]] for j in range(lanes)],
                                   sum(int(self.inv[k, c + j]) << j for j in range(lanes))))
        self.settings = dict(jobs=jobs, levels=levels, out_folds=count,
                             job_folds=self.out_folds, fold_base=first)
        self.value_width = value_width

    def dut(self, max_levels=None):
        return LevelLanes(lanes=self.lanes, pe=self.pe, value_width=self.value_width,
                          max_levels=max_levels or self.levels, max_jobs=8, max_out_folds=8)

    def expected(self):
        out = []
        for beat, (k, c, x) in zip(self.beats, self.where):
            node = Node("t", "threshold", [], {
                "T": torch.tensor(self.t[k, c:c + self.lanes]),
                "invert": torch.tensor(self.inv[k, c:c + self.lanes])}, channels=self.lanes)
            y = torch.tensor(beat, dtype=torch.int64).view(1, self.lanes, 1, 1)
            out.append([int(v) for v in op_of(node).execute(node, [y]).view(-1)])
        return out

    def run(self, dut=None, **kw):
        dut = dut or self.dut()
        max_levels = dut.max_levels

        async def setup(ctx):
            ctx.set(dut.settings, self.settings)
            for addr, t, inv in self.words:
                padded = [row + [0] * (max_levels - len(row)) for row in t]
                await stream_put(ctx, dut.thr, {"addr": addr, "t": padded})
                await stream_put(ctx, dut.inv, {"addr": addr, "invert": inv})

        return run_streams(dut, {"i": self.beats}, {"o": len(self.beats)}, setup=setup,
                           max_cycles=20 * len(self.beats) + 500, **kw)


@pytest.mark.parametrize("jobs, pe, lanes, channels, levels", [
    (5, 16, 8, 64, 1),       # K=5 gated outputs' signs, the intended 8 lanes of 16
    (1, 16, 8, 40, 1),       # the aggregate alone
    (3, 8, 8, 13, 3),        # 2-bit levels, 13 channels
    (2, 8, 8, 16, 15),       # 4-bit levels
])
def test_levels_equal_the_irs_threshold(jobs, pe, lanes, channels, levels):
    case = Case(channels + levels, jobs, pe, lanes, channels, 3, levels)
    assert case.run().outputs["o"] == case.expected()


@pytest.mark.parametrize("jobs, channels, levels, folds", [
    (5, 64, 1, (1, 2)), (3, 40, 3, (2, 1))])
def test_a_weight_chunks_folds_read_their_thresholds(jobs, channels, levels, folds):
    """Weight streaming: the beats of a chunk of the folds (the last of 40 channels
    among them) read their channels' thresholds among every fold's, under stalls."""
    case = Case(channels, jobs, 16, 8, channels, 3, levels, folds=folds)
    assert case.run(stall=0.3, seed=1).outputs["o"] == case.expected()


def test_fewer_levels_than_the_lanes_hold():
    # thresholds for 3 levels in lanes built for 15: the others must not count
    case = Case(4, 2, 8, 8, 8, 2, 3)
    assert case.run(dut=case.dut(max_levels=15)).outputs["o"] == case.expected()


def test_under_stalls_and_a_reset():
    case = Case(5, 3, 16, 8, 24, 3, 1)
    assert case.run(stall=0.3, seed=2).outputs["o"] == case.expected()
    assert case.run(reset_at=9).outputs["o"] == case.expected()


def test_a_beat_a_cycle_and_the_latency():
    case = Case(6, 2, 16, 8, 32, 4, 1)
    run = case.run()
    assert run.outputs["o"] == case.expected()
    cycles = run.out_cycles["o"]
    assert cycles[-1] - cycles[0] == len(case.beats) - 1
    dut = case.dut()
    cycles = first_output_cycle(dut, case.beats[0],
                                setup=lambda ctx: ctx.set(dut.settings, case.settings))
    assert cycles == LevelLanes.latency


@pytest.mark.parametrize("bad, message", [
    (dict(lanes=6), "divide pe"), (dict(max_levels=0), "max_levels"),
])
def test_bad_sizes_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        LevelLanes(**(dict(lanes=8, pe=16) | bad))


class LoadedLevels(Elaboratable):
    """The constant loader writing a level output's thresholds into the level lanes."""

    def __init__(self, case):
        self.levels = case.dut()
        self.loader = ConstantLoader(arrays=case.jobs, lanes=case.lanes, value_width=20,
                                     max_levels=case.levels, max_channels=64,
                                     max_words=self.levels.depth)
        self.i, self.o = self.levels.i, self.levels.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.loader, m.submodules.levels = self.loader, self.levels
        wiring.connect(m, self.loader.thr, self.levels.thr)
        wiring.connect(m, self.loader.inv, self.levels.inv)
        m.d.comb += self.loader.ab.ready.eq(1)
        return m


@pytest.mark.parametrize("cb", [4, 8])
def test_thresholds_from_the_constant_loader(cb):
    # a level output's parameter block is a threshold section (params.level_block_bytes)
    case = Case(11, 3, 16, 8, 20, 2, 3)
    top = LoadedLevels(case)
    channels = 20
    sections = []
    for k in range(case.jobs):
        node = Node("t", "threshold", [], {"T": torch.tensor(case.t[k, :channels]),
                                           "invert": torch.tensor(case.inv[k, :channels])},
                    channels=channels)
        raw = np.concatenate(_threshold_bytes(node, cb))
        words = bus_words(raw, 128)
        sections.append((dict(job=k, section=THR, channels=channels, levels=case.levels,
                              base=k * case.out_folds * 2, beats=len(words)), words))

    async def setup(ctx):
        ctx.set(top.loader.const_bytes, cb)
        ctx.set(top.levels.settings, case.settings)
        for cmd, words in sections:
            await stream_put(ctx, top.loader.cmd, cmd)
            for w in words:
                await stream_put(ctx, top.loader.data, w)
        while not ctx.get(top.loader.idle):
            await ctx.tick()

    run = run_streams(top, {"i": case.beats}, {"o": len(case.beats)}, setup=setup,
                      max_cycles=5000)
    # channels past 20 are the padded ones: thresholds the loader never wrote
    got, want = run.outputs["o"], case.expected()
    for (k, c, x), g, w in zip(case.where, got, want):
        n = max(0, min(case.lanes, channels - c))
        assert g[:n] == w[:n]
