"""The engine built from the units (docs/architecture.md section 15): the register file,
the sequencer and the DMAs of :class:`~.sequencer.EngineShell`, with the stem runner,
the convolution runner, the subsampler and the classifier head as its compute units.

The sequencer fetches descriptors and executes COPY and END itself; any other
descriptor goes whole to a compute unit, by its opcode: HEAD to the
:class:`~.classifier.PooledClassifier`, a CONV of integer weights (the stem) to the
:class:`~.stem_runner.StemRunner`, SUBSAMPLE (option-A shortcuts) to the
:class:`~.subsample_runner.SubsampleRunner`, INPUT (the host wrote the frame: nothing to do)
done at once, any other to the :class:`~.runner.ConvRunner`. The unit has the DMAs'
commands and words until the sequencer's fence after it (``computing``). A descriptor
its unit cannot run stops the engine with the sequencer's error ``unsupported``; an
address outside the window stops it with the DMA's error, and the sequencer's abort
resets the units with the DMAs. The top has :class:`~.sequencer.EngineShell`'s ports, so the fast
Verilator path (``sim/engine_rtl.py``) runs it as it runs the shell.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, ResetInserter, Signal, Value
from amaranth.lib import data, stream, wiring

from ...engine_format import FLAG_BITS, OPCODE_CODES
from .classifier import PooledClassifier
from .dma import descriptor_layout
from .runner import ConvRunner, descriptor_fields
from .sequencer import Sequencer, engine_members, wire_engine
from .stem_runner import StemRunner
from .subsample_runner import SubsampleRunner

__all__ = ["UnitEngine", "classifier_head"]


def classifier_head(*, lanes, pe, max_out_folds, data_width=128, addr_width=32,
                    value_width=32, head_size=8, max_classes=1024, loan_widths=None):
    """The :class:`~.classifier.PooledClassifier` of an engine of the units whose runner
    has these sizes: the epilogue's lanes, the runner's most output channels, maps of up
    to 24-bit elements (ResNet-18's aggregate proves 17 to 20 bits), 48-bit logits; with
    ``loan_widths``, on the mixer lanes' multipliers."""
    return PooledClassifier(lanes=lanes, data_width=data_width, addr_width=addr_width,
                            max_channels=max_out_folds * pe, max_classes=max_classes,
                            max_size=head_size, value_width=min(24, value_width),
                            acc_width=48, loan_widths=loan_widths)


def _shared(m, owner, first, second, sink):
    """``sink`` driven by ``first`` while ``owner``, else by ``second``; each source's
    ``ready`` is the sink's while it owns it."""
    m.d.comb += [sink.valid.eq(Mux(owner, first.valid, second.valid)),
                 sink.payload.eq(Mux(owner, Value.cast(first.payload),
                                     Value.cast(second.payload))),
                 first.ready.eq(owner & sink.ready), second.ready.eq(~owner & sink.ready)]


class UnitEngine(wiring.Component):
    """Register file, sequencer, DMAs, the stem runner, the convolution runner, the
    subsampler and the classifier head.

    Parameters
    ----------
    data_width : int
        Bits of a bus word of both DRAM ports (128: the DE10-Nano's FPGA-to-SDRAM port);
        the program's port width.
    max_burst, max_outstanding, buffer_depth : int
        The DMAs' (:class:`~.sequencer.EngineShell`); 8 bursts in flight by default
        (the DRAM model's ``max_pending``): a streaming descriptor's side slices of 6
        words need 48 words in flight to hide a latency of 48 cycles.
    head_size, max_classes : int
        The classifier head's bounds (:class:`~.classifier.PooledClassifier`): the
        largest height and width of its map (8: ResNet's 7 x 7 at 224 x 224) and the
        most classes; its channels are the runner's output channels, its lanes the
        epilogue's; it reads maps of up to 24-bit elements (ResNet-18's aggregate
        proves 17 to 20 bits), bounds its logits at 48 bits and multiplies on the
        mixer lanes' multipliers (the runner's ``loan``), which idle while it runs.
    stem : dict, optional
        The :class:`~.stem_runner.StemRunner`'s sizes beside ``data_width`` and the
        runner's address width (default: the DE10-Nano's, ``pe`` 16 x ``simd`` 9, RGB
        frames of up to 256 pixels a side, 7 x 7 windows of up to 17 folds, 4 output
        folds).
    subsample : dict or False, optional
        The :class:`~.subsample_runner.SubsampleRunner`'s bounds (default: maps of the
        runner's ``max_size``, strides up to 4, the runner's most output channels);
        ``False``: no subsampler (a SUBSAMPLE descriptor then stops the engine with
        ``unsupported``; 660 ALMs saved for networks without option-A shortcuts).
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

    def __init__(self, *, data_width=128, max_burst=16, max_outstanding=8, buffer_depth=None,
                 head_size=8, max_classes=1024, stem=None, subsample=None, **runner):
        self.sequencer = Sequencer(data_width=data_width, compute=True)
        runner.setdefault("chunk", max_burst)
        self.runner = ConvRunner(data_width=data_width, **runner)
        r = self.runner
        self.head = classifier_head(lanes=r.lanes, pe=r.pe, max_out_folds=r.max_out_folds,
                                    data_width=data_width, addr_width=r.addr_width,
                                    value_width=r.value_width, head_size=head_size,
                                    max_classes=max_classes,
                                    loan_widths=(r.value_width, r.mixer.coef_width))
        self.stem = StemRunner(data_width=data_width, addr_width=r.addr_width, **(stem or {}))
        self.subsample = None if subsample is False else SubsampleRunner(
            data_width=data_width, addr_width=r.addr_width,
            **{"max_size": r.max_size, "max_channels": r.max_out_folds * r.pe,
               **(subsample or {})})
        super().__init__(engine_members(self, data_width=data_width, max_burst=max_burst,
                                        max_outstanding=max_outstanding,
                                        buffer_depth=buffer_depth))

    def elaborate(self, platform):
        m = Module()
        wire_engine(m, self)
        rd, wr, seq = self.rdma, self.wdma, self.sequencer
        # the units stop with the DMAs: a soft reset, or the sequencer's abort
        stop = self.regs.soft_reset | seq.abort
        m.submodules.runner = ResetInserter(stop)(self.runner)
        m.submodules.head = ResetInserter(stop)(self.head)
        m.submodules.stem = ResetInserter(stop)(self.stem)
        runner, head, stem, sub = self.runner, self.head, self.stem, self.subsample
        if sub is not None:
            m.submodules.subsample = ResetInserter(stop)(sub)
        # the head's products on the mixer lanes' multipliers, idle while the head runs
        # (the two never run at once)
        wiring.connect(m, head.loan, runner.loan)
        # the head, the stem runner and the subsampler have the DMAs from their
        # descriptor to their done, the convolution runner otherwise
        heading, stemming = ~head.idle, ~stem.idle
        subsampling = ~sub.idle if sub is not None else None
        cmd = stream.Signature(descriptor_layout(runner.addr_width))
        words = stream.Signature(rd.o.payload.shape())
        rd_cmd, wr_cmd, wr_words = runner.rd_cmd, runner.wr_cmd, runner.wr
        whole_units = ((stemming, stem), (heading, head)) + \
            (((subsampling, sub),) if sub is not None else ())
        for owner, unit in whole_units:
            shared = cmd.create(), cmd.create(), words.create()
            _shared(m, owner, unit.rd_cmd, rd_cmd, shared[0])
            _shared(m, owner, unit.wr_cmd, wr_cmd, shared[1])
            _shared(m, owner, unit.wr, wr_words, shared[2])
            rd_cmd, wr_cmd, wr_words = shared
        c = seq.computing
        _shared(m, c, rd_cmd, seq.rd_cmd, rd.cmd)
        _shared(m, c, wr_cmd, seq.wr_cmd, wr.cmd)
        _shared(m, c, wr_words, seq.copy, wr.i)
        running = c & ~heading & ~stemming
        others_ready = runner.rd.ready
        if sub is not None:
            running = running & ~subsampling
            others_ready = Mux(subsampling, sub.rd.ready, runner.rd.ready)
        m.d.comb += [runner.rd.valid.eq(running & rd.o.valid),
                     head.rd.valid.eq(c & heading & rd.o.valid),
                     stem.rd.valid.eq(c & stemming & rd.o.valid),
                     runner.rd.payload.eq(rd.o.payload), head.rd.payload.eq(rd.o.payload),
                     stem.rd.payload.eq(rd.o.payload),
                     seq.words.valid.eq(~c & rd.o.valid), seq.words.payload.eq(rd.o.payload),
                     rd.o.ready.eq(Mux(c, Mux(heading, head.rd.ready,
                                              Mux(stemming, stem.rd.ready, others_ready)),
                                       seq.words.ready))]
        if sub is not None:
            m.d.comb += [sub.rd.valid.eq(c & subsampling & rd.o.valid),
                         sub.rd.payload.eq(rd.o.payload)]
        # the descriptor to the unit of its opcode; INPUT is done at once
        fields = data.View(descriptor_fields(), seq.compute.payload)
        to_head = fields.opcode == OPCODE_CODES["HEAD"]
        to_input = fields.opcode == OPCODE_CODES["INPUT"]
        # without the subsampler a SUBSAMPLE goes to the runner, which refuses it
        to_sub = fields.opcode == OPCODE_CODES["SUBSAMPLE"] if sub is not None else Const(0)
        to_stem = (fields.opcode == OPCODE_CODES["CONV"]) & \
            ((fields.flags & FLAG_BITS["int_weights"]) != 0)
        input_done = Signal()
        m.d.sync += input_done.eq(seq.compute.valid & to_input)
        runner_ready = to_input | runner.desc.ready
        done = runner.done | head.done | stem.done
        error = runner.error | head.error | stem.error
        if sub is not None:
            runner_ready = Mux(to_sub, sub.desc.ready, runner_ready)
            done, error = done | sub.done, error | sub.error
        m.d.comb += [runner.desc.valid.eq(seq.compute.valid & ~to_head & ~to_input & ~to_stem
                                          & ~to_sub),
                     head.desc.valid.eq(seq.compute.valid & to_head),
                     stem.desc.valid.eq(seq.compute.valid & to_stem),
                     runner.desc.payload.eq(seq.compute.payload),
                     head.desc.payload.eq(seq.compute.payload),
                     stem.desc.payload.eq(seq.compute.payload),
                     seq.compute.ready.eq(Mux(to_head, head.desc.ready,
                                              Mux(to_stem, stem.desc.ready, runner_ready))),
                     seq.compute_done.eq(done | input_done),
                     seq.compute_error.eq(error),
                     *([sub.desc.valid.eq(seq.compute.valid & to_sub),
                        sub.desc.payload.eq(seq.compute.payload)] if sub is not None else []),
                     seq.wr_idle.eq(~wr.busy)]
        return m
