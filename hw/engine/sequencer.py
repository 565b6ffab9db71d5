"""The engine's sequencer: it fetches the program from DRAM and executes it.

The host writes a program (fixed-size descriptors, ``groupnet_hw.engine_opcodes``) into
DRAM, sets the window and ``PROGRAM_ADDRESS`` in the register file and writes START.
:class:`Sequencer` then reads descriptor after descriptor through the read DMA (so every
fetch is checked against the window like any other access: a program counter that runs
out of the window stops the engine with the read DMA's error), executes it, and stops
at END with DONE. It executes COPY (a region through the read DMA into the write DMA)
and END itself; built with ``compute=True`` it hands every other descriptor, whole, to a
compute unit on ``compute`` (the units' :class:`~.runner.ConvRunner` in
:class:`~.unit_engine.UnitEngine`), which has the DMAs while ``computing`` and answers
with ``compute_done`` or ``compute_error``, or, a *detached* descriptor, hands it over and
goes on; WAIT (and END) then waits for ``background_idle``
(``groupnet_hw.engine_opcodes``).

Fence
    Avalon-MM has no write responses, and the read and write DMAs have separate ports:
    a read issued on the read port after a write was accepted on the write port is not
    guaranteed to see it (the HPS's SDRAM controller may reorder the two ports'
    commands). A later descriptor may read what an earlier one wrote (a layer's output
    is the next layer's input), so the sequencer waits for the write DMA's ``done`` (the
    descriptor's last beat accepted by the bus) before it fetches the next descriptor.
    That is the only ordering the engine relies on; it costs one write-to-fetch
    round trip per descriptor (the fetch's read latency), a few percent for the long
    descriptors of a layer program.

Errors
    A descriptor is checked before it is acted on: its ``magic`` (not a descriptor at
    all: ``bad_magic``), its ``index`` (not the next one: ``bad_index``, a program
    counter that skipped or a stale program) and its opcode (``unknown_opcode``). Any of
    them, or a DMA's refusal of an address (the DMA reports that error itself), stops
    the run: the sequencer pulses ``abort`` into the DMAs' soft reset, so that a DMA
    whose partner was refused does not wait for words forever (a started burst is still
    finished, the DMAs' reset rule) and STATUS.BUSY falls without the host's help.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...engine_opcodes import (COPY, COPY_FIELDS, DESCRIPTOR_BYTES, DESCRIPTOR_MAGIC,
                               DETACH_OFFSET, END, INDEX_OFFSET, MAGIC_OFFSET, OPCODE_OFFSET,
                               WAIT)
from ...engine_registers import ERROR_CAUSES, ERROR_SOURCES
from .avalon import AvalonRegisterSignature
from .csr import EngineCSR
from .dma import ReadDMA, WriteDMA, descriptor_layout

__all__ = ["Sequencer", "EngineShell", "SEQUENCER_ERRORS", "engine_members", "wire_engine"]

#: ``error_code`` values of the sequencer (``groupnet_hw.engine_registers.ERROR_CAUSES``).
SEQUENCER_ERRORS = {name: ERROR_CAUSES[name]
                    for name in ("unknown_opcode", "bad_magic", "bad_index", "unsupported")}


class Sequencer(wiring.Component):
    """Fetches descriptors through the read DMA and executes COPY and END.

    Parameters
    ----------
    data_width : int
        Bits per bus word of the DMAs (32 to 256); a descriptor is
        ``DESCRIPTOR_BYTES * 8 // data_width`` words.
    addr_width : int
        Bits of a byte address (default 32).

    Attributes
    ----------
    start : ``In(1)``
        Pulse: run the program at ``program_address`` (the register file's ``start``).
    soft_reset : ``In(1)``
        Pulse: stop at once and go idle (the DMAs get it too and finish their bursts).
    program_address : ``In(addr_width)``
        Byte address of descriptor 0.
    rd_cmd, wr_cmd : ``Out(stream.Signature(descriptor_layout(addr_width)))``
        Descriptors for the read and the write DMA.
    words : ``In(stream.Signature(data_width))``
        The read DMA's words: a fetched descriptor's, or a COPY's data.
    copy : ``Out(stream.Signature(data_width))``
        To the write DMA: ``words`` passed through while a COPY runs.
    rd_error, wr_error : ``In(1)``
        Pulse: a DMA refused a descriptor (it reports the cause to the register file).
    wr_done : ``In(1)``
        Pulse: the write DMA's descriptor is on the bus (the fence).
    abort : ``Out(1)``
        Pulse after an error: reset the DMAs (OR it into their ``soft_reset``).
    compute : ``Out(stream.Signature(DESCRIPTOR_BYTES * 8))``
        With ``compute=True``: a descriptor that is neither END nor COPY, its bytes as
        one little-endian number, once it has passed the magic and index checks.
    computing : ``Out(1)``
        From the hand-off on ``compute`` to the fence after ``compute_done``: the compute
        unit drives the DMAs' commands and words.
    compute_done, compute_error : ``In(1)``
        Pulses of the compute unit: the descriptor's words are all given to the write
        DMA; or it refused the descriptor (the run stops with ``unsupported``, whenever
        it comes: a detached descriptor's unit refuses it while the sequencer goes on).
    detach : ``Out(1)``
        With ``compute``: the descriptor is detached (its byte ``DETACH_OFFSET``): the
        sequencer fetches the next one once it is taken, and its unit's ``done`` is not
        ``compute_done`` (the top keeps it apart).
    background_idle : ``In(1)``
        No detached descriptor is running (WAIT and END wait for it, then for the fence).
    wr_idle : ``In(1)``
        The write DMA holds no descriptor and no word to write is held before it (the
        compute fence: a compute descriptor ends with many write descriptors, so the
        sequencer waits for the DMA to go idle after ``compute_done`` rather than for
        one ``done``).
    busy : ``Out(1)``
        A run is going on.
    done : ``Out(1)``
        Pulse: END was executed.
    error : ``Out(1)``
        Pulse: a descriptor was refused (``error_code``, :data:`SEQUENCER_ERRORS`).
    error_code : ``Out(4)``
        The cause, held until the next error.

    Latency
    -------
    A fetch command leaves on ``rd_cmd`` the cycle after ``start`` (or after the fence);
    the descriptor is decoded the cycle after its last word arrives on ``words``, and a
    COPY's two DMA descriptors are offered in the cycle after that. END raises ``done``
    2 cycles after its last word; an error is pulsed 2 cycles after the bad
    descriptor's last word. Per descriptor, the overhead over its DMA time is the
    fetch: the read DMA's command latency, the memory's read latency and
    ``DESCRIPTOR_BYTES / bytes_per_word`` words, then about 4 cycles.

    Throughput
    ----------
    One descriptor at a time (the fence), and one detached beside it; a COPY moves one
    word per cycle when the memory keeps up (the DMAs' rate).
    """

    def __init__(self, *, data_width=64, addr_width=32, compute=False):
        if data_width not in (32, 64, 128, 256):
            raise ValueError(f"data_width must be 32, 64, 128 or 256, not {data_width!r}")
        self.data_width, self.compute_unit = data_width, compute
        self.addr_width = addr_width
        self.bytes_per_word = data_width // 8
        self.descriptor_words = DESCRIPTOR_BYTES // self.bytes_per_word
        cmd = stream.Signature(descriptor_layout(addr_width))
        super().__init__({
            "start": In(1),
            "soft_reset": In(1),
            "program_address": In(unsigned(addr_width)),
            "rd_cmd": Out(cmd),
            "wr_cmd": Out(cmd),
            "words": In(stream.Signature(unsigned(data_width))),
            "copy": Out(stream.Signature(unsigned(data_width))),
            "rd_error": In(1),
            "wr_error": In(1),
            "wr_done": In(1),
            "abort": Out(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(1),
            "error_code": Out(unsigned(4)),
            **({"compute": Out(stream.Signature(unsigned(DESCRIPTOR_BYTES * 8))),
                "computing": Out(1), "compute_done": In(1), "compute_error": In(1),
                "detach": Out(1), "background_idle": In(1), "wr_idle": In(1)}
               if compute else {}),
        })

    def _captures(self):
        """(signal, word index, first bit in the word) of every field the sequencer
        reads; a field never straddles two words (offsets are multiples of its size,
        and words are at least 4 bytes)."""
        bpw = self.bytes_per_word
        fields = {"opcode": (OPCODE_OFFSET, 1), "index": (INDEX_OFFSET, 2),
                  "magic": (MAGIC_OFFSET, 2), "detach": (DETACH_OFFSET, 1), **COPY_FIELDS}
        out = {}
        for name, (offset, size) in fields.items():
            assert offset // bpw == (offset + size - 1) // bpw, name
            out[name] = (Signal(8 * size, name=f"d_{name}"), offset // bpw,
                         8 * (offset % bpw))
        return out

    def elaborate(self, platform):
        m = Module()
        aw = self.addr_width
        fields = self._captures()
        f = {name: sig for name, (sig, _, _) in fields.items()}
        pc = Signal(aw)
        index = Signal(16)
        count = Signal(range(self.descriptor_words))
        rd_sent = Signal()
        wr_sent = Signal()
        copying = Signal()
        dma_error = Signal()
        m.d.comb += dma_error.eq(self.rd_error | self.wr_error)

        # the read DMA's words go to the write DMA during a COPY, to the decoder otherwise
        m.d.comb += [
            self.copy.payload.eq(self.words.payload),
            self.copy.valid.eq(self.words.valid & copying),
        ]
        fetch_word = self.words.valid & self.words.ready & ~copying
        for name, (sig, word, bit) in fields.items():
            with m.If(fetch_word & (count == word)):
                m.d.sync += sig.eq(self.words.payload[bit:bit + len(sig)])
        if self.compute_unit:
            # the whole descriptor for the compute unit, its first word lowest
            raw = Signal(DESCRIPTOR_BYTES * 8)
            with m.If(fetch_word):
                m.d.sync += raw.eq(Cat(raw[self.data_width:], self.words.payload))
            m.d.comb += self.compute.payload.eq(raw)

        m.d.sync += [self.done.eq(0), self.error.eq(0), self.abort.eq(0)]
        with m.FSM(name="state") as fsm:
            with m.State("IDLE"):
                with m.If(self.start & ~self.soft_reset):
                    m.d.sync += [pc.eq(self.program_address), index.eq(0)]
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += [self.rd_cmd.valid.eq(1),
                             self.rd_cmd.payload.address.eq(pc),
                             self.rd_cmd.payload.length.eq(DESCRIPTOR_BYTES)]
                with m.If(self.rd_cmd.ready):
                    m.d.sync += count.eq(0)
                    m.next = "RECEIVE"
                self._exits(m, dma_error)
            with m.State("RECEIVE"):
                with m.If(fetch_word):
                    m.d.sync += count.eq(count + 1)
                    with m.If(count == self.descriptor_words - 1):
                        m.next = "DECODE"
                self._exits(m, dma_error)
            with m.State("DECODE"):
                with m.If(f["magic"] != DESCRIPTOR_MAGIC):
                    self._fail(m, "bad_magic")
                with m.Elif(f["index"] != index):
                    self._fail(m, "bad_index")
                if self.compute_unit:
                    # END waits for a detached descriptor too (the WAIT state ends it)
                    with m.Elif((f["opcode"] == END) | (f["opcode"] == WAIT)):
                        m.next = "WAIT"
                else:
                    with m.Elif(f["opcode"] == END):
                        m.d.sync += self.done.eq(1)
                        m.next = "IDLE"
                with m.Elif(f["opcode"] == COPY):
                    m.d.sync += [rd_sent.eq(0), wr_sent.eq(0)]
                    m.next = "ISSUE"
                with m.Else():
                    if self.compute_unit:
                        m.next = "COMPUTE"
                    else:
                        self._fail(m, "unknown_opcode")
                self._exits(m, dma_error)
            if self.compute_unit:
                self._compute_states(m, f, pc, index, dma_error)
            with m.State("ISSUE"):
                # both DMAs get their descriptor; each is held until taken
                m.d.comb += [
                    copying.eq(1),
                    self.rd_cmd.valid.eq(~rd_sent),
                    self.rd_cmd.payload.address.eq(f["source"][:aw]),
                    self.rd_cmd.payload.length.eq(f["length"][:aw]),
                    self.wr_cmd.valid.eq(~wr_sent),
                    self.wr_cmd.payload.address.eq(f["destination"][:aw]),
                    self.wr_cmd.payload.length.eq(f["length"][:aw]),
                ]
                rd_now = rd_sent | self.rd_cmd.ready
                wr_now = wr_sent | self.wr_cmd.ready
                m.d.sync += [rd_sent.eq(rd_now), wr_sent.eq(wr_now)]
                with m.If(rd_now & wr_now):
                    m.next = "FENCE"
                self._exits(m, dma_error)
            with m.State("FENCE"):
                # the write DMA's last beat is on the bus: a later fetch or read may
                # depend on it (see the module docstring)
                m.d.comb += copying.eq(1)
                with m.If(self.wr_done):
                    m.d.sync += [pc.eq(pc + DESCRIPTOR_BYTES), index.eq(index + 1)]
                    m.next = "FETCH"
                self._exits(m, dma_error)
            with m.State("ABORT"):
                m.d.sync += self.abort.eq(1)
                m.next = "IDLE"
                self._exits(m, dma_error)
        m.d.comb += [
            self.words.ready.eq(fsm.ongoing("RECEIVE") | (copying & self.copy.ready)),
            self.busy.eq(~fsm.ongoing("IDLE")),
        ]
        return m

    def _compute_states(self, m, f, pc, index, dma_error):
        """Hand the descriptor over, wait for the unit, then the fence: the write DMA
        idle, so that the next fetch (or a later descriptor's reads) sees every write.
        A detached descriptor is only handed over; WAIT and END wait for it."""
        detached = f["detach"] != 0
        with m.State("COMPUTE"):
            m.d.comb += [self.compute.valid.eq(1), self.computing.eq(1),
                         self.detach.eq(detached)]
            with m.If(self.compute.ready & detached):
                m.d.sync += [pc.eq(pc + DESCRIPTOR_BYTES), index.eq(index + 1)]
                m.next = "FETCH"
            with m.Elif(self.compute.ready):
                m.next = "COMPUTING"
            self._exits(m, dma_error)
        with m.State("COMPUTING"):
            m.d.comb += self.computing.eq(1)
            with m.If(self.compute_error):
                self._fail(m, "unsupported")
            with m.Elif(self.compute_done):
                m.next = "COMPUTE_FENCE"
            self._exits(m, dma_error)
        with m.State("COMPUTE_FENCE"):
            m.d.comb += self.computing.eq(1)
            with m.If(self.wr_idle):
                m.d.sync += [pc.eq(pc + DESCRIPTOR_BYTES), index.eq(index + 1)]
                m.next = "FETCH"
            self._exits(m, dma_error)
        with m.State("WAIT"):
            # WAIT and END: the detached descriptor done, then the fence
            with m.If(self.background_idle & self.wr_idle):
                with m.If(f["opcode"] == END):
                    m.d.sync += self.done.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [pc.eq(pc + DESCRIPTOR_BYTES), index.eq(index + 1)]
                    m.next = "FETCH"
            self._exits(m, dma_error)

    def _exits(self, m, dma_error):
        """The transitions every running state has, last so that they win: a compute
        unit's refusal (of a detached descriptor, in any state) and a DMA's end the run
        (the DMA reported its own), a soft reset stops at once."""
        if self.compute_unit:
            with m.If(self.compute_error):
                self._fail(m, "unsupported")
        with m.If(dma_error):
            m.next = "ABORT"
        with m.If(self.soft_reset):
            m.next = "IDLE"

    def _fail(self, m, cause):
        m.d.sync += [self.error.eq(1), self.error_code.eq(SEQUENCER_ERRORS[cause])]
        m.next = "ABORT"


def engine_members(top, *, data_width, max_burst, max_outstanding, buffer_depth):
    """Make an engine top's DMAs and register file (``top.rdma``, ``top.wdma``,
    ``top.regs``) and return the ports every engine top has, for its signature: ``rd``,
    ``wr``, ``csr`` and ``irq`` (:class:`EngineShell`'s). Shared by the shell, the core
    and :class:`~.unit_engine.UnitEngine`, which differ in their sequencers."""
    top.rdma = ReadDMA(data_width=data_width, max_burst=max_burst,
                       max_outstanding=max_outstanding, buffer_depth=buffer_depth)
    top.wdma = WriteDMA(data_width=data_width, max_burst=max_burst)
    top.regs = EngineCSR()
    return {"rd": Out(top.rdma.bus_signature), "wr": Out(top.wdma.bus_signature),
            "csr": In(AvalonRegisterSignature()), "irq": Out(1)}


def wire_engine(m, top, write_words=None):
    """Wire an engine top's read DMA, write DMA, register file and sequencer (``top``'s
    ``rdma``, ``wdma``, ``regs``, ``sequencer``) into ``m`` and to ``top``'s ports
    ``rd``, ``wr``, ``csr`` and ``irq``: the sequencer's commands to the DMAs, the read
    words to the sequencer, ``write_words`` (the sequencer's stream of words to store) to
    the write DMA, the host's window and soft reset to both DMAs, and the first error
    source's code, busy, done and counters to the registers. Shared by
    :class:`EngineShell` and :class:`~groupnet_hw.hw.engine.core.EngineCore`, whose
    sequencers differ only in what they compute. With ``write_words`` None the caller
    connects the DMAs' commands and words itself (a top whose compute unit shares
    them with the sequencer)."""
    rd, wr, csr, seq = top.rdma, top.wdma, top.regs, top.sequencer
    m.submodules.rdma = rd
    m.submodules.wdma = wr
    m.submodules.regs = csr
    m.submodules.sequencer = seq
    wiring.connect(m, wiring.flipped(top.rd), rd.bus)
    wiring.connect(m, wiring.flipped(top.wr), wr.bus)
    wiring.connect(m, wiring.flipped(top.csr), csr.bus)
    if write_words is not None:
        wiring.connect(m, seq.rd_cmd, rd.cmd)
        wiring.connect(m, seq.wr_cmd, wr.cmd)
        wiring.connect(m, rd.o, seq.words)
        wiring.connect(m, write_words, wr.i)
    for dma in (rd, wr):
        m.d.comb += [dma.window_base.eq(csr.window_base),
                     dma.window_limit.eq(csr.window_limit),
                     dma.soft_reset.eq(csr.soft_reset | seq.abort)]
    codes = [(rd.error, ERROR_SOURCES["read_dma"] << 4 | rd.error_code),
             (wr.error, ERROR_SOURCES["write_dma"] << 4 | wr.error_code),
             (seq.error, ERROR_SOURCES["sequencer"] << 4 | seq.error_code)]
    code = 0
    for cond, value in reversed(codes):
        code = Mux(cond, value, code)
    m.d.comb += [
        seq.start.eq(csr.start),
        seq.soft_reset.eq(csr.soft_reset),
        seq.program_address.eq(csr.program_address),
        seq.rd_error.eq(rd.error),
        seq.wr_error.eq(wr.error),
        seq.wr_done.eq(wr.done),
        csr.busy.eq(rd.busy | wr.busy | seq.busy),
        csr.done.eq(seq.done),
        csr.error.eq(rd.error | wr.error | seq.error),
        csr.error_code.eq(code),
        csr.stalled.eq(rd.waiting | wr.waiting),
        csr.words_read.eq(rd.words),
        csr.words_written.eq(wr.words),
        top.irq.eq(csr.irq),
    ]


class EngineShell(wiring.Component):
    """The engine's ports, register file, sequencer and DMAs, with COPY as its only
    operation: the top that the fast Verilator path (``sim/engine_rtl.py``) runs.

    The register file's window goes to both DMAs, its soft reset (or the sequencer's
    abort) to all units; the first error of the read DMA, the write DMA or the
    sequencer (in that order when several come in one cycle) goes to STATUS with its
    source; the counters count the DMAs' words (descriptor fetches included) and their
    waits.

    Parameters
    ----------
    data_width : int
        Bits per word of both DRAM ports: 32, 64, 128 (default) or 256.
    max_burst : int
        Longest burst in words (default 16).
    max_outstanding : int
        Read bursts in flight at most (default 4).
    buffer_depth : int, optional
        Words of the read DMA's buffer (default ``4 * max_burst``: full rate for read
        latencies up to ``3 * max_burst - 3``).

    Attributes
    ----------
    rd : ``Out(AvalonBurstSignature(..., read=True, write=False))``
        DRAM read port.
    wr : ``Out(AvalonBurstSignature(..., read=False, write=True))``
        DRAM write port.
    csr : ``In(AvalonRegisterSignature())``
        The host's register port (read latency 1).
    irq : ``Out(1)``
        Interrupt: ``IRQ_ENABLE and (DONE or ERROR)``.
    """

    def __init__(self, *, data_width=128, max_burst=16, max_outstanding=4,
                 buffer_depth=None):
        self.sequencer = Sequencer(data_width=data_width)
        super().__init__(engine_members(self, data_width=data_width, max_burst=max_burst,
                                        max_outstanding=max_outstanding,
                                        buffer_depth=buffer_depth))

    def elaborate(self, platform):
        m = Module()
        wire_engine(m, self, self.sequencer.copy)
        return m
