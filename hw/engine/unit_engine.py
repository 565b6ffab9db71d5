"""The engine built from the units (docs/architecture.md section 15): the register file,
the sequencer and the DMAs of :class:`~.sequencer.EngineShell`, with the stem runner,
the convolution runner, the subsampler and the classifier head as its compute units.

The sequencer fetches descriptors and executes COPY and END itself; any other
descriptor goes whole to a compute unit, by its opcode: HEAD to the
:class:`~.classifier.PooledClassifier`, a CONV of integer weights (the stem) to the
:class:`~.stem_runner.StemRunner`, SUBSAMPLE (option-A shortcuts) to the
:class:`~.subsample_runner.SubsampleRunner`, INPUT (the host wrote the frame: nothing to do)
done at once, any other to the :class:`~.runner.ConvRunner`. The unit has the DMAs'
commands and words until the sequencer's fence after it (``computing``), except the
stem runner, which is on the background side of a :class:`~.port_share.PortShare` and
may run *detached* (the next frame's stem beside this frame's other descriptors,
``groupnet_hw.engine_opcodes``): its ``done`` then is not the foreground's, and WAIT and
END wait for it. A descriptor
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
from .port_share import PortShare
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
    Per descriptor: the fetch, the unit's transfers and compute, then the fence (the
    write DMA idle, the stem's buffered words written); a detached stem's fetch only.

    Throughput
    ----------
    The runner's, with a detached stem beside it (sharing the DMAs).
    """

    def __init__(self, *, data_width=128, max_burst=16, max_outstanding=8, buffer_depth=None,
                 head_size=8, max_classes=1024, stem=None, subsample=None, **runner):
        self.sequencer = Sequencer(data_width=data_width, compute=True)
        self.max_burst = max_burst
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
        # the stem runner is on the background side of the DMAs (it may run detached,
        # beside the rest); the head and the subsampler have the foreground from their
        # descriptor to their done, the convolution runner otherwise, the sequencer
        # between descriptors
        m.submodules.share = share = ResetInserter(stop)(PortShare(
            data_width=rd.o.payload.shape().width, addr_width=runner.addr_width,
            piece=self.max_burst))
        wiring.connect(m, stem.rd_cmd, share.bg_rd_cmd)
        wiring.connect(m, stem.wr_cmd, share.bg_wr_cmd)
        wiring.connect(m, stem.wr, share.bg_wr)
        wiring.connect(m, share.bg_rd, stem.rd)
        wiring.connect(m, share.rd_cmd, rd.cmd)
        wiring.connect(m, share.wr_cmd, wr.cmd)
        wiring.connect(m, share.wr_words, wr.i)
        wiring.connect(m, rd.o, share.rd_words)
        heading = ~head.idle
        subsampling = ~sub.idle if sub is not None else None
        cmd = stream.Signature(descriptor_layout(runner.addr_width))
        words = stream.Signature(rd.o.payload.shape())
        rd_cmd, wr_cmd, wr_words = runner.rd_cmd, runner.wr_cmd, runner.wr
        whole_units = ((heading, head),) + (((subsampling, sub),) if sub is not None else ())
        for owner, unit in whole_units:
            shared = cmd.create(), cmd.create(), words.create()
            _shared(m, owner, unit.rd_cmd, rd_cmd, shared[0])
            _shared(m, owner, unit.wr_cmd, wr_cmd, shared[1])
            _shared(m, owner, unit.wr, wr_words, shared[2])
            rd_cmd, wr_cmd, wr_words = shared
        c = seq.computing
        _shared(m, c, rd_cmd, seq.rd_cmd, share.fg_rd_cmd)
        _shared(m, c, wr_cmd, seq.wr_cmd, share.fg_wr_cmd)
        _shared(m, c, wr_words, seq.copy, share.fg_wr)
        fg = share.fg_rd
        running = c & ~heading
        others_ready = runner.rd.ready
        if sub is not None:
            running = running & ~subsampling
            others_ready = Mux(subsampling, sub.rd.ready, runner.rd.ready)
        m.d.comb += [runner.rd.valid.eq(running & fg.valid),
                     head.rd.valid.eq(c & heading & fg.valid),
                     runner.rd.payload.eq(fg.payload), head.rd.payload.eq(fg.payload),
                     seq.words.valid.eq(~c & fg.valid), seq.words.payload.eq(fg.payload),
                     fg.ready.eq(Mux(c, Mux(heading, head.rd.ready, others_ready),
                                     seq.words.ready))]
        if sub is not None:
            m.d.comb += [sub.rd.valid.eq(c & subsampling & fg.valid),
                         sub.rd.payload.eq(fg.payload)]
        # the descriptor to the unit of its opcode; INPUT is done at once
        fields = data.View(descriptor_fields(), seq.compute.payload)
        to_head = fields.opcode == OPCODE_CODES["HEAD"]
        to_input = fields.opcode == OPCODE_CODES["INPUT"]
        # without the subsampler a SUBSAMPLE goes to the runner, which refuses it
        to_sub = fields.opcode == OPCODE_CODES["SUBSAMPLE"] if sub is not None else Const(0)
        to_stem = (fields.opcode == OPCODE_CODES["CONV"]) & \
            ((fields.flags & FLAG_BITS["int_weights"]) != 0)
        runner_ready = to_input | runner.desc.ready
        # a detached stem's done is not the foreground's (the sequencer has gone on);
        # only the stem detaches
        stem_detached = Signal()
        with m.If(stem.desc.valid & stem.desc.ready & seq.detach):
            m.d.sync += stem_detached.eq(1)
        with m.Elif(stem.done | stem.error | stop):
            m.d.sync += stem_detached.eq(0)
        bad_detach = seq.compute.valid & seq.detach & ~to_stem
        offer = seq.compute.valid & ~bad_detach
        input_done = Signal()
        m.d.sync += input_done.eq(offer & to_input)
        done = runner.done | head.done | (stem.done & ~stem_detached)
        error = runner.error | head.error | stem.error | bad_detach
        if sub is not None:
            runner_ready = Mux(to_sub, sub.desc.ready, runner_ready)
            done, error = done | sub.done, error | sub.error
        m.d.comb += [runner.desc.valid.eq(offer & ~to_head & ~to_input & ~to_stem & ~to_sub),
                     head.desc.valid.eq(offer & to_head),
                     stem.desc.valid.eq(offer & to_stem),
                     runner.desc.payload.eq(seq.compute.payload),
                     head.desc.payload.eq(seq.compute.payload),
                     stem.desc.payload.eq(seq.compute.payload),
                     seq.compute.ready.eq(~bad_detach & Mux(to_head, head.desc.ready,
                                                            Mux(to_stem, stem.desc.ready,
                                                                runner_ready))),
                     seq.compute_done.eq(done | input_done),
                     seq.compute_error.eq(error),
                     *([sub.desc.valid.eq(offer & to_sub),
                        sub.desc.payload.eq(seq.compute.payload)] if sub is not None else []),
                     seq.background_idle.eq(~stem_detached),
                     # a foreground fence waits for the stem's words only where the stem
                     # is the foreground (a detached stem's are WAIT's business)
                     seq.wr_idle.eq(~wr.busy & (share.bg_idle | stem_detached))]
        return m
