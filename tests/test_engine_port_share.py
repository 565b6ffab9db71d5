# amaranth: UnusedElaboratable=no
"""The DMAs shared by a foreground and a background issuer (hw/engine/port_share.py),
behind the Python DRAM model: two issuers copy regions at once, each word back to its
own issuer and to its place, also when each issues a write command before the reads its
words come from (the pattern that would deadlock two issuers sharing the DMAs plainly),
with random stalls on both sides."""

import random
from collections import deque

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from groupnet_hw.hw.engine.dma import ReadDMA, WriteDMA
from groupnet_hw.hw.engine.port_share import PortShare

from test_engine_dma import MEM_SIZE, AvalonDRAM, random_memory, simulate

BPW = 16
HELD = 4


class SharedDMAs(Elaboratable):
    def __init__(self, piece=16, tags=16, max_outstanding=4):
        self.rdma = ReadDMA(data_width=8 * BPW, max_burst=16, max_outstanding=max_outstanding)
        self.wdma = WriteDMA(data_width=8 * BPW, max_burst=16)
        self.share = PortShare(data_width=8 * BPW, piece=piece, tags=tags)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rdma, m.submodules.wdma = self.rdma, self.wdma
        m.submodules.share = s = self.share
        wiring.connect(m, s.rd_cmd, self.rdma.cmd)
        wiring.connect(m, self.rdma.o, s.rd_words)
        wiring.connect(m, s.wr_cmd, self.wdma.cmd)
        wiring.connect(m, s.wr_words, self.wdma.i)
        for dma in (self.rdma, self.wdma):
            m.d.comb += [dma.window_base.eq(0), dma.window_limit.eq(MEM_SIZE)]
        return m


class Copier:
    """An issuer that copies regions: per region a read command and a write command
    (the write first if ``write_first``: its words then wait on reads issued after it),
    and the words read, in order, as the words to write, of which it holds at most
    :data:`HELD` (so it takes no read word while its writes do not move, as a unit
    whose output stalls its input); random stalls."""

    def __init__(self, name, regions, rng, p_stall, write_first):
        self.name, self.rng, self.p_stall = name, rng, p_stall
        self.cmds = deque()
        for src, dst, n in regions:
            pair = [("wr", dst, n), ("rd", src, n)]
            self.cmds.extend(pair if write_first else pair[::-1])
        self.rd_cmds, self.wr_cmds = deque(), deque()
        for kind, a, n in self.cmds:
            (self.rd_cmds if kind == "rd" else self.wr_cmds).append((a, n))
        self.words = deque()
        self.words_out = 0
        self.total = sum(n for _, _, n in regions) // BPW
        self.offered_word = None

    def drive(self, ctx, rd_cmd, wr_cmd, rd, wr):
        # one command a cycle in program order, each held until taken
        head = self.cmds[0] if self.cmds else None
        ctx.set(rd_cmd.valid, head is not None and head[0] == "rd")
        ctx.set(wr_cmd.valid, head is not None and head[0] == "wr")
        if head is not None:
            port = rd_cmd if head[0] == "rd" else wr_cmd
            ctx.set(port.payload, {"address": head[1], "length": head[2]})
        ready = self.rng.random() >= self.p_stall and \
            len(self.words) + (self.offered_word is not None) < HELD
        ctx.set(rd.ready, ready)
        if self.offered_word is None and self.words and self.rng.random() >= self.p_stall:
            self.offered_word = self.words.popleft()
        ctx.set(wr.valid, self.offered_word is not None)
        if self.offered_word is not None:
            ctx.set(wr.payload, self.offered_word)
        return head, ready

    def take(self, ctx, head, ready, rd_cmd, wr_cmd, rd, wr):
        if head is not None and ctx.get((rd_cmd if head[0] == "rd" else wr_cmd).ready):
            self.cmds.popleft()
        if ready and ctx.get(rd.valid):
            self.words.append(ctx.get(rd.payload))
        if self.offered_word is not None and ctx.get(wr.ready):
            self.offered_word = None
            self.words_out += 1

    def finished(self):
        return not self.cmds and self.words_out == self.total


def regions_for(rng, count, used):
    """``count`` copies (source, destination, bytes) whose destinations overlap no
    region in ``used`` (nor their sources), lengths from one word to several pieces."""
    out = []
    while len(out) < count:
        n = rng.choice([1, 3, 16, 17, 40, 70]) * BPW
        src = rng.randrange(0, MEM_SIZE // BPW - n // BPW) * BPW
        dst = rng.randrange(0, MEM_SIZE // BPW - n // BPW) * BPW
        spans = [(src, n), (dst, n)]
        if all(a + m <= b or b + k <= a for a, m in spans for b, k in used) \
                and not (src < dst + n and dst < src + n):
            used.extend(spans)
            out.append((src, dst, n))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_two_issuers_copy_at_once_each_word_to_its_place(seed):
    rng = random.Random(seed)
    mem = random_memory(rng)
    before = bytes(mem)
    used = []
    fg_regions, bg_regions = regions_for(rng, 6, used), regions_for(rng, 6, used)
    dut = SharedDMAs(tags=rng.choice([2, 16]), max_outstanding=rng.choice([1, 4]))
    p_wait = rng.choice([0.0, 0.3])
    rd = AvalonDRAM(mem, dut.rdma.bus_signature, rng, latency=rng.choice([(1, 1), (3, 20)]),
                    p_wait=p_wait, window=(0, MEM_SIZE))
    wr = AvalonDRAM(mem, dut.wdma.bus_signature, rng, latency=(1, 1), p_wait=p_wait,
                    window=(0, MEM_SIZE))
    s = dut.share
    fg = Copier("fg", fg_regions, rng, rng.choice([0.0, 0.5]), write_first=seed % 2 == 0)
    bg = Copier("bg", bg_regions, rng, rng.choice([0.0, 0.5]), write_first=seed % 3 != 2)
    idle_at_end = []

    async def tb(ctx):
        for cycle in range(40000):
            heads = [fg.drive(ctx, s.fg_rd_cmd, s.fg_wr_cmd, s.fg_rd, s.fg_wr),
                     bg.drive(ctx, s.bg_rd_cmd, s.bg_wr_cmd, s.bg_rd, s.bg_wr)]
            rd.step(ctx, dut.rdma.bus)
            wr.step(ctx, dut.wdma.bus)
            fg.take(ctx, *heads[0], s.fg_rd_cmd, s.fg_wr_cmd, s.fg_rd, s.fg_wr)
            bg.take(ctx, *heads[1], s.bg_rd_cmd, s.bg_wr_cmd, s.bg_rd, s.bg_wr)
            done = fg.finished() and bg.finished() and not ctx.get(dut.wdma.busy)
            if done and ctx.get(s.bg_idle):
                idle_at_end.append(cycle)
                return
            await ctx.tick()
        raise AssertionError(f"no progress: fg {fg.words_out}/{fg.total} words written, "
                             f"bg {bg.words_out}/{bg.total}")

    simulate(dut, tb)
    expected = bytearray(before)
    for src, dst, n in fg_regions + bg_regions:
        expected[dst:dst + n] = before[src:src + n]
    assert mem == expected
    assert rd.violations == [] and wr.violations == []
    assert idle_at_end
    # the background's commands went out in pieces of at most a burst
    assert all(count <= 16 for _, _, count, _ in rd.commands + wr.commands)


def test_bg_idle_is_low_while_the_background_has_words_to_write():
    """A background write command whose words are not all given keeps ``bg_idle`` low
    (a fence on it would otherwise pass before the words are on the bus)."""
    rng = random.Random(1)
    mem = random_memory(rng)
    dut = SharedDMAs()
    s = dut.share
    wr = AvalonDRAM(mem, dut.wdma.bus_signature, rng, window=(0, MEM_SIZE))
    rd = AvalonDRAM(mem, dut.rdma.bus_signature, rng, window=(0, MEM_SIZE))
    seen = []

    async def tb(ctx):
        ctx.set(s.bg_wr_cmd.valid, 1)
        ctx.set(s.bg_wr_cmd.payload, {"address": 0x100, "length": 20 * BPW})
        await ctx.tick()
        ctx.set(s.bg_wr_cmd.valid, 0)
        given = 0
        for cycle in range(200):
            give = given < 20 and cycle >= 50
            ctx.set(s.bg_wr.valid, give)
            ctx.set(s.bg_wr.payload, given)
            rd.step(ctx, dut.rdma.bus)
            wr.step(ctx, dut.wdma.bus)
            if give and ctx.get(s.bg_wr.ready):
                given += 1
            seen.append((given, ctx.get(s.bg_idle), ctx.get(dut.wdma.busy)))
            await ctx.tick()

    simulate(dut, tb)
    assert all(not idle for given, idle, _ in seen if given < 20)
    assert seen[-1][1] and not seen[-1][2]
    assert [int.from_bytes(mem[0x100 + BPW * k:0x100 + BPW * (k + 1)], "little")
            for k in range(20)] == list(range(20))
