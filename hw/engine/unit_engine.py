"""The engine built from the units (docs/architecture.md section 15): the register file,
the sequencer and the DMAs of :class:`~.sequencer.EngineShell`, with the convolution
runner as its compute unit.

The sequencer fetches descriptors and executes COPY and END itself; any other
descriptor goes whole to the :class:`~.runner.ConvRunner`, which has the DMAs' commands
and words until the sequencer's fence after it (``computing``). A descriptor the runner
cannot run stops the engine with the sequencer's error ``unsupported``; an address
outside the window stops it with the DMA's error, and the sequencer's abort resets the
runner with the DMAs. The top has :class:`~.sequencer.EngineShell`'s ports, so the fast
Verilator path (``sim/engine_rtl.py``) runs it as it runs the shell.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, ResetInserter, Value
from amaranth.lib import wiring

from .runner import ConvRunner
from .sequencer import Sequencer, engine_members, wire_engine

__all__ = ["UnitEngine"]


def _shared(m, owner, first, second, sink):
    """``sink`` driven by ``first`` while ``owner``, else by ``second``; each source's
    ``ready`` is the sink's while it owns it."""
    m.d.comb += [sink.valid.eq(Mux(owner, first.valid, second.valid)),
                 sink.payload.eq(Mux(owner, Value.cast(first.payload),
                                     Value.cast(second.payload))),
                 first.ready.eq(owner & sink.ready), second.ready.eq(~owner & sink.ready)]


class UnitEngine(wiring.Component):
    """Register file, sequencer, DMAs and the convolution runner.

    Parameters
    ----------
    data_width : int
        Bits of a bus word of both DRAM ports (128: the DE10-Nano's FPGA-to-SDRAM port);
        the program's port width.
    max_burst, max_outstanding, buffer_depth : int
        The DMAs' (:class:`~.sequencer.EngineShell`).
    **runner
        The runner's sizes (:class:`~.runner.ConvRunner`: ``arrays``, ``pe``, ``simd``,
        ``planes``, ring and buffer bounds); its row writer's commands are bursts of at
        most ``max_burst`` words.

    Ports
    -----
    rd, wr, csr, irq
        :class:`~.sequencer.EngineShell`'s.

    Latency
    -------
    Per descriptor: the fetch, the runner's transfers and compute, then the fence (the
    write DMA idle).

    Throughput
    ----------
    The runner's.
    """

    def __init__(self, *, data_width=128, max_burst=16, max_outstanding=4, buffer_depth=None,
                 **runner):
        self.sequencer = Sequencer(data_width=data_width, compute=True)
        runner.setdefault("chunk", max_burst)
        self.runner = ConvRunner(data_width=data_width, **runner)
        super().__init__(engine_members(self, data_width=data_width, max_burst=max_burst,
                                        max_outstanding=max_outstanding,
                                        buffer_depth=buffer_depth))

    def elaborate(self, platform):
        m = Module()
        wire_engine(m, self)
        rd, wr, seq = self.rdma, self.wdma, self.sequencer
        # the runner stops with the DMAs: a soft reset, or the sequencer's abort
        runner = ResetInserter(self.regs.soft_reset | seq.abort)(self.runner)
        m.submodules.runner = runner
        unit = self.runner
        c = seq.computing
        _shared(m, c, unit.rd_cmd, seq.rd_cmd, rd.cmd)
        _shared(m, c, unit.wr_cmd, seq.wr_cmd, wr.cmd)
        _shared(m, c, unit.wr, seq.copy, wr.i)
        m.d.comb += [unit.rd.valid.eq(c & rd.o.valid), unit.rd.payload.eq(rd.o.payload),
                     seq.words.valid.eq(~c & rd.o.valid), seq.words.payload.eq(rd.o.payload),
                     rd.o.ready.eq(Mux(c, unit.rd.ready, seq.words.ready)),
                     unit.desc.valid.eq(seq.compute.valid),
                     unit.desc.payload.eq(seq.compute.payload),
                     seq.compute.ready.eq(unit.desc.ready),
                     seq.compute_done.eq(unit.done), seq.compute_error.eq(unit.error),
                     seq.wr_idle.eq(~wr.busy)]
        return m
