"""cocotb testbench: the engine's DMAs and register file against cocotb-bus's Avalon-MM
models (run by ``tests/test_engine_cocotb.py`` through
``groupnet_hw.sim.cocotb_runner.run_cocotb_module``; not collected by pytest).

The design is ``CopyEngine`` of the test: a read DMA into a write DMA, each on its own
Avalon-MM port, the register file on an agent port. Third-party models drive all three:
``cocotb_bus.drivers.avalon.AvalonMemory`` (one per port, sharing one memory dictionary,
as its docstring suggests for a dual-port RAM) and ``AvalonMaster`` (the host writing and
reading registers). The testbench only sends descriptors and checks; a monitor records
every command the DMAs put on the bus.

Parameters (JSON, see ``run_cocotb_module``): ``data_width``, ``read_latency``,
``write_waits`` (the model's ``WriteBurstWaitReq``), ``seed``, ``base``, ``limit``,
``reads`` and ``writes`` (``[[address, length], ...]``: the read descriptors' bytes, in
order, go to the write descriptors' regions), ``bad`` (``[address, length]`` of a read
descriptor outside the window), ``again`` (where the first read region is copied after
the soft reset).
"""

import json
import logging
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb_bus.drivers.avalon import AvalonMaster, AvalonMemory

from groupnet_hw import engine_registers as regs
from groupnet_hw.sim.cocotb_runner import MODULE_PARAMS_ENV

R = regs.BY_NAME


class _Collect(logging.Handler):
    """Warnings and errors the models log (a protocol complaint is a log line there)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        if ".rd" in record.name or ".wr" in record.name or ".csr" in record.name:
            self.lines.append(f"{record.name}: {record.getMessage()}")


async def _monitor(dut, commands):
    """Every command accepted on either DRAM port: (kind, address, burstcount)."""
    while True:
        await RisingEdge(dut.clk)
        if int(dut.rd__read.value) and not int(dut.rd__waitrequest.value):
            commands.append(("read", int(dut.rd__address.value),
                             int(dut.rd__burstcount.value)))
        if int(dut.wr__write.value) and not int(dut.wr__waitrequest.value):
            commands.append(("write", int(dut.wr__address.value),
                             int(dut.wr__burstcount.value)))


async def _send(dut, port, address, length):
    """One descriptor on ``<port>__payload`` (address in the low 32 bits, length above)."""
    payload = getattr(dut, f"{port}__payload")
    valid = getattr(dut, f"{port}__valid")
    ready = getattr(dut, f"{port}__ready")
    await RisingEdge(dut.clk)
    payload.value = address | (length << 32)
    valid.value = 1
    while True:
        await RisingEdge(dut.clk)
        if int(ready.value):            # sampled at this edge: taken
            break
    valid.value = 0


async def _wait_pulse(dut, signal, timeout):
    for _ in range(timeout):
        await RisingEdge(dut.clk)
        await ReadOnly()
        if int(signal.value):
            return
    raise AssertionError(f"no {signal._name} pulse within {timeout} cycles")


@cocotb.test()
async def copy_through_avalon_memory(dut):
    with open(os.environ[MODULE_PARAMS_ENV]) as f:
        p = json.load(f)
    rng = random.Random(p["seed"])
    random.seed(p["seed"])              # the models draw from the global generator
    bpw = p["data_width"] // 8
    log = _Collect()
    logging.getLogger("cocotb").addHandler(log)

    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    dut.rd_cmd__valid.value = 0
    dut.wr_cmd__valid.value = 0

    # memory: every byte the reads may touch is initialised (the model answers "x" for
    # others); the rest of the window too, to see that nothing else changes
    mem = {}
    for a in range(p["base"], p["limit"]):
        mem[a] = rng.getrandbits(8)
    props = {"readLatency": p["read_latency"], "WriteBurstWaitReq": p["write_waits"],
             "MaxWaitReqLen": 3}
    AvalonMemory(dut, "rd", dut.clk, memory=mem, avl_properties=props, bus_separator="__")
    AvalonMemory(dut, "wr", dut.clk, memory=mem, avl_properties=props, bus_separator="__")
    host = AvalonMaster(dut, "csr", dut.clk, bus_separator="__")
    commands = []
    cocotb.start_soon(_monitor(dut, commands))
    for _ in range(5):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)

    result = {"log": log.lines, "checks": {}}
    checks = result["checks"]
    checks["id"] = int(await host.read(R["ID"].index)) == regs.ID_VALUE
    await host.write(R["WINDOW_BASE"].index, p["base"])
    await host.write(R["WINDOW_LIMIT"].index, p["limit"])
    checks["window"] = (int(await host.read(R["WINDOW_BASE"].index)) == p["base"]
                        and int(await host.read(R["WINDOW_LIMIT"].index)) == p["limit"])

    # the copy: the read descriptors' bytes, in order, into the write descriptors' regions
    expected = dict(mem)
    data = [mem[a + k] for a, n in p["reads"] for k in range(n)]
    at = 0
    for a, n in p["writes"]:
        for k in range(n):
            expected[a + k] = data[at + k]
        at += n
    assert at == len(data)
    total_words = len(data) // bpw

    async def reads():
        for a, n in p["reads"]:
            await _send(dut, "rd_cmd", a, n)

    reader = cocotb.start_soon(reads())
    for a, n in p["writes"]:
        # one write descriptor at a time (see tests/test_engine_cocotb.py: the model
        # loses a write burst that follows another back to back)
        await _send(dut, "wr_cmd", a, n)
        await _wait_pulse(dut, dut.wr_done, 20000)
    await reader
    checks["copied"] = mem == expected
    checks["differences"] = sorted(a for a in expected if mem.get(a) != expected[a])[:10]
    checks["words_read"] = int(await host.read(R["WORDS_READ_LO"].index))
    checks["words_written"] = int(await host.read(R["WORDS_WRITTEN_LO"].index))
    checks["total_words"] = total_words
    checks["status_after_copies"] = int(await host.read(R["STATUS"].index))

    # a descriptor outside the window: an error, and not one command
    before = len(commands)
    await _send(dut, "rd_cmd", *p["bad"])
    for _ in range(20):
        await RisingEdge(dut.clk)
    status = int(await host.read(R["STATUS"].index))
    checks["bad_status"] = status
    checks["bad_commands"] = len(commands) - before
    # the soft reset clears the error and the DMA works again
    await host.write(R["CONTROL"].index, regs.with_field("CONTROL", "SOFT_RESET"))
    for _ in range(5):
        await RisingEdge(dut.clk)
    checks["status_after_reset"] = int(await host.read(R["STATUS"].index))
    src, length = p["reads"][0]
    dst = p["again"]
    for k in range(length):
        expected[dst + k] = mem[src + k]
    reader = cocotb.start_soon(_send(dut, "rd_cmd", src, length))
    await _send(dut, "wr_cmd", dst, length)
    await _wait_pulse(dut, dut.wr_done, 20000)
    await reader
    checks["copied_after_reset"] = mem == expected
    result["commands"] = commands
    with open(p["result_path"], "w") as f:
        json.dump(result, f)
