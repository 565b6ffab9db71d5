# amaranth: UnusedElaboratable=no
"""The intended engine's row writer (hw/engine/writer.py): every job's words, however
the packer interleaves them, leave as commands of consecutive words at the job's own
addresses; and the whole write path, output packer, row writer and write DMA behind an
Avalon-MM memory model, puts each base's map in DRAM exactly as ``TensorFormat.pack``
lays it out at its address."""

import random

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from groupnet_hw.hw.engine.dma import WriteDMA
from groupnet_hw.hw.engine.packer import OutputPacker
from groupnet_hw.hw.engine.writer import RowWriter
from groupnet_hw.sim.streams import run_streams
from test_engine_dma import AvalonDRAM
from test_engine_packer import Case


def interleaved(rng, jobs, rows, row_beats, data_width):
    """Each job's rows of random words, the jobs interleaved at random (each job's
    words in order), as the packer hands them on."""
    words = {k: [(rng.getrandbits(data_width), int(b == row_beats - 1))
                 for _ in range(rows) for b in range(row_beats)] for k in range(jobs)}
    order = [k for k in range(jobs) for _ in words[k]]
    rng.shuffle(order)
    at = {k: 0 for k in range(jobs)}
    beats = []
    for k in order:
        data, last = words[k][at[k]]
        at[k] += 1
        beats.append({"data": data, "job": k, "last": last})
    return words, beats


def writer_run(arrays, jobs, rows, row_beats, chunk, data_width=64, stall=0.0, seed=0,
               skip=0, skip_jobs=0, offset=0):
    rng = random.Random(seed)
    words, beats = interleaved(rng, jobs, rows, row_beats, data_width)
    wb = data_width // 8
    bases = [0x1000 * (k + 1) + wb * rng.randrange(8) for k in range(arrays)]
    dut = RowWriter(arrays=arrays, data_width=data_width, chunk=chunk, max_skip=max(skip, 1))

    async def setup(ctx):
        ctx.set(dut.bases, bases)
        ctx.set(dut.skip, skip)
        ctx.set(dut.skip_jobs, skip_jobs)
        ctx.set(dut.offset, offset)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.offset, 0)       # taken on start: a later value is not the slices'

    commands = jobs * rows * -(-row_beats // chunk)
    run = run_streams(dut, {"i": beats}, {"cmd": commands, "o": len(beats)}, stall=stall,
                      seed=seed, setup=setup, max_cycles=20 * len(beats) + 500)
    return dut, words, bases, run


def replay(run, wb):
    """The DRAM the commands and their words write: address -> word."""
    mem, out = {}, iter(run.outputs["o"])
    for c in run.outputs["cmd"]:
        assert c["length"] % wb == 0 and c["length"] > 0
        for a in range(c["address"], c["address"] + c["length"], wb):
            assert a not in mem, f"{a:#x} written twice"
            mem[a] = next(out)
    return mem


@pytest.mark.parametrize("arrays, jobs, rows, row_beats, chunk", [
    (5, 5, 3, 28, 8),       # ResNet's 56 x 64 binary row: 448 bytes, 28 words of 16
    (3, 3, 4, 5, 4),        # rows shorter than... longer than a chunk, not a multiple
    (2, 2, 3, 1, 2),        # a word a row: every word closes a chunk
    (4, 2, 2, 16, 16),      # fewer jobs than arrays; rows of one whole chunk
])
def test_each_jobs_words_land_at_its_addresses(arrays, jobs, rows, row_beats, chunk):
    _, words, bases, run = writer_run(arrays, jobs, rows, row_beats, chunk, seed=row_beats)
    mem = replay(run, 8)
    expected = {bases[k] + 8 * i: w for k in range(jobs) for i, (w, _) in enumerate(words[k])}
    assert mem == expected
    assert max(c["length"] for c in run.outputs["cmd"]) <= 8 * chunk


@pytest.mark.parametrize("row_beats, chunk, offset", [(3, 8, 0), (5, 2, 24), (1, 2, 40)])
def test_slices_skip_the_pixels_other_channels(row_beats, chunk, offset):
    """A row a pixel's slice: after each row's last word the address of a job below
    ``skip_jobs`` steps past the pixel's other channels (slices shorter than a chunk,
    longer than one, a word), its first slice ``offset`` bytes into its pixel; the jobs
    above write their rows one after another from their bases."""
    wb, skip = 8, 40
    _, words, bases, run = writer_run(4, 4, 5, row_beats, chunk, stall=0.2, seed=row_beats,
                                      skip=skip, skip_jobs=2, offset=offset)
    mem = replay(run, wb)
    expected = {}
    for k in range(4):
        pitch = row_beats * wb + (skip if k < 2 else 0)
        first = bases[k] + (offset if k < 2 else 0)
        for i, (w, _) in enumerate(words[k]):
            expected[first + (i // row_beats) * pitch + (i % row_beats) * wb] = w
    assert mem == expected


@pytest.mark.parametrize("seed", range(3))
def test_under_stalls(seed):
    _, words, bases, run = writer_run(3, 3, 3, 11, 4, stall=0.3, seed=seed)
    mem = replay(run, 8)
    assert mem == {bases[k] + 8 * i: w for k in range(3) for i, (w, _) in enumerate(words[k])}


def test_a_word_a_cycle():
    # one job, chunks of 8: once the first chunk has closed, a word a cycle goes out
    _, words, bases, run = writer_run(1, 1, 4, 16, 8)
    gaps = np.diff(run.out_cycles["o"])
    assert gaps.max() == 1, gaps
    # the eighth word closes the first chunk; its command and first word follow
    assert run.out_cycles["cmd"][0] <= 8 + 6 and run.out_cycles["o"][0] <= 8 + 9


@pytest.mark.parametrize("bad, message", [
    (dict(chunk=6), "power of two"), (dict(chunk=1), "power of two"),
    (dict(data_width=12), "whole bytes"), (dict(arrays=0), "arrays"),
])
def test_bad_sizes_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        RowWriter(**(dict(arrays=2) | bad))


class WritePath(Elaboratable):
    """Output packer, row writer and write DMA: epilogue beats to DRAM."""

    def __init__(self, case, chunk):
        self.packer = case.dut()
        self.writer = RowWriter(arrays=case.arrays, data_width=case.data_width, chunk=chunk)
        self.dma = WriteDMA(data_width=case.data_width, max_burst=chunk)

    def elaborate(self, platform):
        m = Module()
        m.submodules.packer, m.submodules.writer = self.packer, self.writer
        m.submodules.dma = self.dma
        wiring.connect(m, self.packer.o, self.writer.i)
        wiring.connect(m, self.writer.cmd, self.dma.cmd)
        wiring.connect(m, self.writer.o, self.dma.i)
        return m


@pytest.mark.parametrize("elem, channels, width, p_wait", [
    (1, 64, 7, 0.0),        # binary maps of ResNet's 64 channels
    (24, 13, 5, 0.3),       # 24-bit maps of 13 channels under wait states
    (2, 21, 6, 0.2),        # 2-bit levels
])
def test_the_write_path_puts_each_map_where_the_format_says(elem, channels, width, p_wait):
    case = Case(elem + channels, 3, 16, 8, channels, 3, width, elem, 64)
    top = WritePath(case, chunk=4)
    rng = random.Random(channels)
    size = 0x4000
    mem = bytearray(rng.getrandbits(8) for _ in range(size))
    nbytes = case.fmt.nbytes
    bases = [0x400 + k * (nbytes + 0x100) for k in range(case.arrays)]
    dram = AvalonDRAM(mem, top.dma.bus_signature, rng, latency=(1, 4), p_wait=p_wait,
                      window=(0x400, size))
    before = bytes(mem)

    async def bench(ctx):
        ctx.set(top.dma.window_base, 0x400)
        ctx.set(top.dma.window_limit, size)
        ctx.set(top.packer.settings, case.settings)
        ctx.set(top.writer.bases, bases)
        ctx.set(top.writer.start, 1)
        await ctx.tick()
        ctx.set(top.writer.start, 0)
        beats = list(case.beats)
        offered = None
        for cycle in range(40 * (len(beats) + case.words) + 1000):
            if offered is None and beats and rng.random() >= 0.2:
                offered = beats.pop(0)
            ctx.set(top.packer.i.valid, offered is not None)
            if offered is not None:
                ctx.set(top.packer.i.payload, offered)
                if ctx.get(top.packer.i.ready):
                    offered = None
            dram.step(ctx, top.dma.bus)
            await ctx.tick()
            if (not beats and offered is None and ctx.get(top.packer.idle)
                    and ctx.get(top.writer.idle) and not ctx.get(top.dma.busy)
                    and dram.idle()):
                return
        raise AssertionError("the write path did not finish")

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert dram.violations == []
    expected = bytearray(before)
    for k in range(case.jobs):
        expected[bases[k]:bases[k] + nbytes] = case.fmt.pack(case.maps[k]).tobytes()
    assert mem == expected
