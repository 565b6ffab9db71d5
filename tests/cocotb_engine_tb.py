"""cocotb testbench: the engine's DMAs and register file against third-party Avalon-MM
models (run by ``tests/test_engine_cocotb.py`` through
``groupnet_hw.sim.cocotb_runner.run_cocotb_module``; not collected by pytest).

The design is ``CopyEngine`` of the test: a read DMA into a write DMA, each on its own
Avalon-MM port, the register file on an agent port. Third-party models drive all three
ports; this file only sends descriptors, glues the models to one memory and checks:

- the DRAM ports: ``model == "cocotb_bus"``: cocotb-bus's
  ``cocotb_bus.drivers.avalon.AvalonMemory``, one per port sharing one dictionary (as its
  docstring suggests for a dual-port RAM); ``model == "cocotbext_avalon"``:
  cocotbext-avalon's ``AvalonMMMemoryBFM`` with random ``waitrequest``, one per port on
  one memory object;
- the register port: cocotb-bus's ``AvalonMaster`` (the host).

A monitor records every command and write beat the DMAs put on the bus.

Parameters (JSON, see ``run_cocotb_module``): ``model``, ``data_width``,
``read_latency``, ``write_waits`` (cocotb-bus's ``WriteBurstWaitReq``), ``pace_writes``
(send a write descriptor only after the one before is done), ``seed``, ``base``,
``limit``, ``reads`` and ``writes`` (``[[address, length], ...]``: the read descriptors'
bytes, in order, go to the write descriptors' regions), ``bad`` (``[address, length]`` of
a read descriptor outside the window), ``reset_copy`` (``[src, dst, length]`` or null: a
copy interrupted by a soft reset in the middle of its third write burst), ``again``
(where the first read region is copied after the soft reset).
"""

import json
import logging
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
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
        self.lines.append(f"{record.name}: {record.getMessage()}")


class _Bytes:
    """The byte dictionary as the memory object cocotbext-avalon's BFM asks for; a byte
    never initialised is a KeyError (the test's memory covers the window only)."""

    def __init__(self, mem):
        self.mem = mem

    def read(self, address, length):
        return bytes(self.mem[a] for a in range(address, address + length))

    def write(self, address, data):
        for k, b in enumerate(data):
            self.mem[address + k] = b


async def _monitor(dut, log):
    """Every command accepted on either DRAM port, ``(kind, address, burstcount)``, and
    every write beat's byteenable, ``("beat", byteenable, 0)``."""
    in_burst = 0
    while True:
        await RisingEdge(dut.clk)       # values as this edge sampled them
        if int(dut.rd__read.value) and not int(dut.rd__waitrequest.value):
            log.append(("read", int(dut.rd__address.value), int(dut.rd__burstcount.value)))
        if int(dut.wr__write.value) and not int(dut.wr__waitrequest.value):
            if in_burst == 0:
                in_burst = int(dut.wr__burstcount.value)
                log.append(("write", int(dut.wr__address.value), in_burst))
            log.append(("beat", int(dut.wr__byteenable.value), 0))
            in_burst -= 1


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


class _Pulses:
    """Counts a one-cycle pulse output (a DMA's ``done``)."""

    def __init__(self, dut, signal):
        self.dut = dut
        self.signal = signal
        self.count = 0
        cocotb.start_soon(self._count())

    async def _count(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.count += int(self.signal.value)

    async def wait(self, count, timeout=20000):
        """Until ``count`` pulses have been seen in all."""
        for _ in range(timeout):
            if self.count >= count:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"{self.count} of {count} {self.signal._name} pulses "
                             f"within {timeout} cycles")


def _models(dut, p, mem):
    if p["model"] == "cocotb_bus":
        props = {"readLatency": p["read_latency"], "WriteBurstWaitReq": p["write_waits"],
                 "MaxWaitReqLen": 3}
        for port in ("rd", "wr"):
            AvalonMemory(dut, port, dut.clk, memory=mem, avl_properties=props,
                         bus_separator="__")
    elif p["model"] == "cocotbext_avalon":
        from cocotbext.avalon import AvalonMMBus, AvalonMMMemoryBFM
        for port in ("rd", "wr"):
            AvalonMMMemoryBFM(AvalonMMBus.from_prefix(dut, f"{port}_"), dut.clk, dut.rst,
                              memory=_Bytes(mem), read_latency=p["read_latency"],
                              randomize=True).start()
    else:
        raise ValueError(p["model"])


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

    # memory: the window, initialised (neither model may be asked for anything else)
    mem = {a: rng.getrandbits(8) for a in range(p["base"], p["limit"])}
    _models(dut, p, mem)
    host = AvalonMaster(dut, "csr", dut.clk, bus_separator="__")
    bus_log = []
    cocotb.start_soon(_monitor(dut, bus_log))
    written = _Pulses(dut, dut.wr_done)
    for _ in range(5):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)

    result = {"log": log.lines, "checks": {}, "bus": bus_log}
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
    for k, (a, n) in enumerate(p["writes"]):
        await _send(dut, "wr_cmd", a, n)
        if p["pace_writes"]:
            await written.wait(k + 1)
    await written.wait(len(p["writes"]))
    await reader
    checks["copied"] = mem == expected
    checks["differences"] = sorted(a for a in expected if mem.get(a) != expected[a])[:10]
    checks["words_read"] = int(await host.read(R["WORDS_READ_LO"].index))
    checks["words_written"] = int(await host.read(R["WORDS_WRITTEN_LO"].index))
    checks["total_words"] = total_words
    checks["status_after_copies"] = int(await host.read(R["STATUS"].index))

    # a descriptor outside the window: an error, and not one command
    before = len(bus_log)
    await _send(dut, "rd_cmd", *p["bad"])
    for _ in range(20):
        await RisingEdge(dut.clk)
    checks["bad_status"] = int(await host.read(R["STATUS"].index))
    checks["bad_commands"] = len(bus_log) - before
    await host.write(R["CONTROL"].index, regs.with_field("CONTROL", "SOFT_RESET"))

    # a soft reset in the middle of a write burst: the burst's remaining beats go out with
    # byteenable 0, so the region holds copied words up to a point and old ones after it
    if p.get("reset_copy"):
        src, dst, length = p["reset_copy"]
        old = [mem[a] for a in range(dst, dst + length)]
        first = len(bus_log)
        cocotb.start_soon(_send(dut, "rd_cmd", src, length))
        cocotb.start_soon(_send(dut, "wr_cmd", dst, length))
        while sum(1 for e in bus_log[first:] if e[0] == "write") < 3:
            await RisingEdge(dut.clk)
        await host.write(R["CONTROL"].index, regs.with_field("CONTROL", "SOFT_RESET"))
        for _ in range(200):
            if not regs.field_value("STATUS", "BUSY",
                                    int(await host.read(R["STATUS"].index))):
                break
        now = [mem[a] for a in range(dst, dst + length)]
        copied = [mem[a] for a in range(src, src + length)]
        kept = 0
        while kept < length and now[kept] == copied[kept]:
            kept += 1
        checks["reset_prefix_words"] = kept // bpw
        checks["reset_rest_unchanged"] = now[kept:] == old[kept:]
        checks["reset_quiet_beats"] = sum(1 for e in bus_log[first:]
                                          if e[0] == "beat" and e[1] == 0)
        checks["reset_bursts_whole"] = (
            sum(e[2] for e in bus_log[first:] if e[0] == "write")
            == sum(1 for e in bus_log[first:] if e[0] == "beat"))
        for a in range(dst, dst + length):
            expected[a] = mem[a]

    # after the reset the DMAs work again
    for _ in range(5):
        await RisingEdge(dut.clk)
    checks["status_after_reset"] = int(await host.read(R["STATUS"].index))
    src, length = p["reads"][0]
    dst = p["again"]
    for k in range(length):
        expected[dst + k] = mem[src + k]
    reader = cocotb.start_soon(_send(dut, "rd_cmd", src, length))
    # (one burst per descriptor when paced, as for the copy)
    step = 8 * bpw if p["pace_writes"] else length
    for k in range(0, length, step):
        done = written.count
        await _send(dut, "wr_cmd", dst + k, min(step, length - k))
        await written.wait(done + 1)
    await reader
    checks["copied_after_reset"] = mem == expected
    with open(p["result_path"], "w") as f:
        json.dump(result, f)
