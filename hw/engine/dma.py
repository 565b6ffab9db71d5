"""Read and write DMAs: Avalon-MM burst masters between DRAM and word streams.

The sequential engine keeps weights, constants and feature maps in the HPS's DRAM and
moves them through these two units. Each takes *descriptors* (a byte address and a length
in bytes) on a stream and moves the region between the bus and a stream of bus words: the
:class:`ReadDMA` from DRAM to its ``o`` stream, the :class:`WriteDMA` from its ``i``
stream to DRAM. Each has its own port (the HPS offers read-only and write-only Avalon-MM
ports as well as bidirectional ones), so a layer's reads and writes run at the same time.

Both share four rules:

Bursts
    A descriptor is split into bursts of at most ``max_burst`` words that do not cross a
    4 KiB boundary (``boundary``). The Avalon specification has no such rule, and the
    HPS's Avalon-MM FPGA-to-SDRAM port asks only for a power-of-two maximum
    ``burstcount``; the 4 KiB rule is AXI's (a burst must not cross a 4 KB address
    boundary, AMBA AXI A3.4.1), and it holds for the same port configured as AXI-3 and
    for an Avalon master bridged to the HPS's AXI slaves. Keeping it costs at most one
    shorter burst per 4 KiB and lets the same DMA sit behind either without a burst
    adapter; it is also a DRAM page, so no burst straddles two.

Window
    The DMA reaches only ``[window_base, window_limit)``: two inputs that the host sets
    through the register file (``EngineCSR``, which locks them while the engine runs).
    Every descriptor is checked in hardware before any bus command is issued for it. A
    descriptor that is empty, not a multiple of the bus word in address or length, wraps
    around the address space (``address + length`` computed one bit wider), starts below
    the base or ends past the limit issues no command at all: the DMA raises ``error``
    for a cycle with the cause in ``error_code`` (:data:`DMA_ERRORS`, the causes of
    ``groupnet_hw.engine_registers.ERROR_CAUSES``) and then *halts*: it takes no further
    descriptor until a soft reset. A corrupted program cannot reach the rest of the
    board's memory, where Linux lives, and cannot go on after its first bad descriptor.

Soft reset
    ``soft_reset`` (a pulse: the engine's reset, from the host through the register
    file) stops the DMA, but a burst that has started on the bus is finished first:
    Avalon has no way to abort a burst (the agent waits for every beat, arbitration stays
    locked to the burst, and a read burst's words arrive whatever the master does), and a
    master that dropped one would hang the HPS's SDRAM port for every other master,
    Linux included. So the write DMA sends the burst's remaining beats with ``byteenable``
    all zeros (memory is not changed; the beat already on the bus when the reset arrives
    cannot be altered, since Avalon forbids changing a command held by ``waitrequest``,
    and is written as it is), and the read DMA accepts and discards every word it has
    asked for. Only then does the DMA go idle; ``busy`` stays 1 until then. Queued words
    are dropped at once (the buffer is emptied). The system reset (``rst`` of the
    ``sync`` domain) is different: it resets the interconnect too and clears everything.

Descriptors
    Taken on ``cmd`` (:func:`descriptor_layout`) one at a time. The next descriptor is
    taken as soon as the last command of the current one is issued, so a chain of
    descriptors keeps the bus as busy as one long descriptor. ``done`` is a one-cycle
    pulse when a descriptor's last word has moved on the bus (received from the bus, for
    the read DMA; accepted by the bus, for the write DMA).
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...engine_registers import ERROR_CAUSES
from .avalon import AvalonBurstSignature

__all__ = ["ReadDMA", "WriteDMA", "descriptor_layout", "DMA_ERRORS", "COMMAND_LATENCY",
           "ERROR_LATENCY"]

#: ``error_code`` values of the DMAs (``groupnet_hw.engine_registers.ERROR_CAUSES``).
DMA_ERRORS = {name: ERROR_CAUSES[name] for name in
              ("empty", "misaligned", "wraps", "below_window", "above_window")}

#: Cycles from the cycle a descriptor is accepted on ``cmd`` to the cycle its error pulse
#: is raised: one to capture it, one to add ``address + length``, one to compare with the
#: window.
ERROR_LATENCY = 3
#: Cycles from the cycle a descriptor is accepted to the cycle its first read command is
#: on the bus (the error check, then the command register).
COMMAND_LATENCY = ERROR_LATENCY + 1

#: Size of the region a burst never crosses.
BOUNDARY = 4096


def descriptor_layout(addr_width=32):
    """Payload of a DMA's ``cmd`` stream.

    Parameters
    ----------
    addr_width : int
        Bits of a byte address (and of a length).

    Returns
    -------
    data.StructLayout
        ``address``: byte address of the region's first word; ``length``: its size in
        bytes. Both multiples of the bus word, length at least one word.
    """
    return data.StructLayout({"address": unsigned(addr_width),
                              "length": unsigned(addr_width)})


class _Buffer(SyncFIFOBuffered):
    """:class:`~amaranth.lib.fifo.SyncFIFOBuffered` whose memory is marked
    ``no_rw_check``: it reads a word only while it holds one and writes one only while
    it has room, so a read never meets a write of the same word, and Yosys need not put a
    collision multiplexer behind the block RAM (as ``hw.fifo.StreamFIFO`` does; this one
    is used directly because the DMAs need its ``level``)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        if self.depth >= 2:
            m.submodules.storage.attrs["no_rw_check"] = 1
        return m


class _DMA(wiring.Component):
    """What the two DMAs share: parameters, descriptor intake and window check, burst
    sizing. Subclasses add the bus side."""

    def __init__(self, *, data_width, max_burst, addr_width, buffer_depth, boundary,
                 read, extra):
        self.bus_signature = AvalonBurstSignature(
            data_width=data_width, max_burst=max_burst, addr_width=addr_width,
            read=read, write=not read)
        if (not isinstance(boundary, int) or boundary & (boundary - 1)
                or not self.bus_signature.bytes_per_word <= boundary < 1 << addr_width):
            raise ValueError(f"boundary must be a power of two of at least one word and "
                             f"below 2**addr_width, not {boundary!r}")
        if buffer_depth is None:
            buffer_depth = 4 * max_burst if read else 2 * max_burst
        if not isinstance(buffer_depth, int) or buffer_depth < max(max_burst, 3):
            raise ValueError(f"buffer_depth must be at least max_burst ({max_burst}) and 3, "
                             f"not {buffer_depth!r}")
        self.data_width = data_width
        self.max_burst = max_burst
        self.addr_width = addr_width
        self.buffer_depth = buffer_depth
        self.boundary = boundary
        self.bytes_per_word = self.bus_signature.bytes_per_word
        self._word_bits = exact_log2(self.bytes_per_word)
        self.descriptor = descriptor_layout(addr_width)
        super().__init__({
            "bus": Out(self.bus_signature),
            "cmd": In(stream.Signature(self.descriptor)),
            **extra,
            "window_base": In(unsigned(addr_width)),
            "window_limit": In(unsigned(addr_width)),
            "soft_reset": In(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(1),
            "error_code": Out(unsigned(4)),
            "words": Out(1),
            "waiting": Out(1),
        })

    def _intake(self, m):
        """Descriptor capture, window check and burst sizing, outside the state machine.

        Returns a namespace of signals: ``addr`` and ``left`` (the next burst's byte
        address and the words left to issue, loaded on leaving CHECK for RUN), ``n`` (the
        next burst's words), ``code`` (the descriptor's error cause in CHECK, 0 if none)
        and ``states`` (filled by the caller with each state's ``fsm.ongoing``)."""
        aw = self.addr_width
        wb = self._word_bits
        r = SimpleNamespace()
        r.states = {}
        r.d_addr = Signal(aw)
        r.d_len = Signal(aw)
        r.end = Signal(aw + 1)
        r.empty = Signal()
        r.misaligned = Signal()
        r.addr = Signal(aw)
        r.left = Signal(aw - wb + 1)
        r.code = Signal(4)
        r.n = self._burst_words(m, r.addr, r.left)
        return r

    def _intake_logic(self, m, r):
        """The logic of :meth:`_intake`'s signals, once ``r.states`` is known."""
        aw = self.addr_width
        wb = self._word_bits
        states = r.states
        m.d.comb += self.cmd.ready.eq(states["IDLE"] & ~self.soft_reset)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [r.d_addr.eq(self.cmd.payload.address),
                         r.d_len.eq(self.cmd.payload.length)]
        # SUM: the end address one bit wider, so that a wrap shows as its top bit, and the
        # cheap checks; CHECK compares with the window. Two stages keep the adder and the
        # comparators off one path.
        with m.If(states["SUM"]):
            m.d.sync += [r.end.eq(r.d_addr + r.d_len),
                         r.empty.eq(r.d_len == 0),
                         r.misaligned.eq((r.d_addr[:wb] | r.d_len[:wb]).any() if wb else 0)]
        m.d.comb += r.code.eq(
            _first_of([(r.empty, DMA_ERRORS["empty"]),
                       (r.misaligned, DMA_ERRORS["misaligned"]),
                       # past 2**aw; ending exactly there is not a wrap (but no
                       # window reaches it: the limit is an aw-bit register)
                       (r.end[aw] & r.end[:aw].any(), DMA_ERRORS["wraps"]),
                       (r.d_addr < self.window_base, DMA_ERRORS["below_window"]),
                       (r.end > self.window_limit, DMA_ERRORS["above_window"])]))
        m.d.sync += self.error.eq(0)
        with m.If(states["CHECK"] & ~self.soft_reset):
            with m.If(r.code != 0):
                m.d.sync += [self.error.eq(1), self.error_code.eq(r.code)]
            with m.Else():
                m.d.sync += [r.addr.eq(r.d_addr), r.left.eq(r.d_len[wb:])]

    def _front_states(self, m, r):
        """The states every DMA has before RUN (inside ``with m.FSM()``); RUN and DRAIN
        are the subclass's."""
        with m.State("IDLE"):
            with m.If(self.soft_reset):
                m.next = "DRAIN"
            with m.Elif(self.cmd.valid):
                m.next = "SUM"
        with m.State("SUM"):
            m.next = "CHECK"
            with m.If(self.soft_reset):
                m.next = "DRAIN"
        with m.State("CHECK"):
            with m.If(self.soft_reset):
                m.next = "DRAIN"
            with m.Elif(r.code != 0):
                m.next = "HALT"
            with m.Else():
                m.next = "RUN"
        with m.State("HALT"):
            with m.If(self.soft_reset):
                m.next = "DRAIN"

    def _burst_words(self, m, addr, left):
        """Words of the next burst from ``addr`` with ``left`` words to go: the least of
        ``left``, ``max_burst`` and the words to the next ``boundary``."""
        wb = self._word_bits
        page_words = self.boundary // self.bytes_per_word
        to_boundary = Signal(range(page_words + 1))
        offset = addr[wb:exact_log2(self.boundary)] if page_words > 1 else Const(0, 1)
        m.d.comb += to_boundary.eq(page_words - offset)
        cap = Signal(range(max(self.max_burst, page_words) + 1))
        m.d.comb += cap.eq(Mux(to_boundary < self.max_burst, to_boundary, self.max_burst))
        n = Signal(range(self.max_burst + 1))
        m.d.comb += n.eq(Mux(left < cap, left, cap))
        return n


def _first_of(cases):
    """The value of the first true condition of ``[(condition, value), ...]``, else 0
    (a priority encoder of error causes)."""
    out = Const(0, 4)
    for cond, value in reversed(cases):
        out = Mux(cond, value, out)
    return out


class ReadDMA(_DMA):
    """Reads descriptors' regions from DRAM into a stream of bus words.

    Bursts are issued while the receive buffer (a block-RAM FIFO of ``buffer_depth``
    words in front of ``o``) has room for every word asked for: a credit counter starts
    at ``buffer_depth``, a burst of ``n`` words is issued only if it holds ``n`` or
    more and takes them, and each word leaving on ``o`` gives one back. Read data cannot
    be held back on Avalon, so this is what guarantees that no word is dropped however
    long ``o`` stalls. At most ``max_outstanding`` bursts are in flight (issued, not
    fully received).

    Parameters
    ----------
    data_width : int
        Bits per bus word: 32, 64 (default), 128 or 256.
    max_burst : int
        Longest burst in words, a power of two up to 1,024 (default 16).
    addr_width : int
        Bits of a byte address (default 32).
    buffer_depth : int, optional
        Words of the receive buffer, at least ``max_burst`` and 3 (default
        ``4 * max_burst``).
    max_outstanding : int
        Bursts in flight at most (default 4). 1 waits for each burst's last word before
        the next command (for an agent that cannot pipeline reads).
    boundary : int
        Bursts do not cross a multiple of this many bytes (default 4,096).

    Attributes
    ----------
    bus : ``Out(AvalonBurstSignature(..., read=True, write=False))``
        The DRAM port. ``byteenable`` is all ones.
    cmd : ``In(stream.Signature(descriptor_layout(addr_width)))``
        Descriptors; ``ready`` while the DMA is idle (from the cycle after the last read
        command of the previous descriptor was issued), not halted and not in soft reset.
    o : ``Out(stream.Signature(data_width))``
        The words read, in address order; ``valid`` is a register of the buffer.
    window_base, window_limit : ``In(addr_width)``
        The DRAM window ``[window_base, window_limit)``.
    soft_reset : ``In(1)``
        The engine's reset (a pulse; see the module's docstring).
    busy : ``Out(1)``
        A descriptor is being checked or issued, a burst is in flight, or the DMA is
        finishing bursts after a soft reset.
    done : ``Out(1)``
        Pulse: the last word of a descriptor was received from the bus (it is in the
        buffer or on ``o``).
    error : ``Out(1)``
        Pulse: a descriptor was refused; the DMA then halts until ``soft_reset``.
    error_code : ``Out(4)``
        The cause (:data:`DMA_ERRORS`), held until the next error.
    words : ``Out(1)``
        A word was received and kept this cycle (for the words-read counter).
    waiting : ``Out(1)``
        Bursts are in flight (or a command is held by ``waitrequest``) and no word arrives
        this cycle (for the stalled-on-memory counter).

    Latency
    -------
    The first read command is on the bus :data:`COMMAND_LATENCY` (4) cycles after the
    descriptor is accepted; a word is valid on ``o`` 2 cycles after the cycle its
    ``readdatavalid`` was high (the buffer's latency). An error pulse comes
    :data:`ERROR_LATENCY` (3) cycles after the descriptor.

    Throughput
    ----------
    One word per cycle when the bus does not stall and ``o`` is ready, once the credit
    loop covers the memory's latency: words in flight are bounded by ``buffer_depth``,
    and a credit comes back a few cycles more than the read latency after its burst was
    issued (command register, the memory, 2 cycles of buffer, the credit register). With
    ``L`` the cycles from the cycle a command is accepted to the cycle its first word is
    returned, ``buffer_depth >= L + max_burst + 3`` sustains one word per cycle
    (``tests/test_engine_dma.py`` checks it at that bound); the default ``4 * max_burst``
    covers ``L`` up to ``3 * max_burst - 3``. One bus command per cycle at most.
    """

    def __init__(self, *, data_width=64, max_burst=16, addr_width=32, buffer_depth=None,
                 max_outstanding=4, boundary=BOUNDARY):
        if not isinstance(max_outstanding, int) or max_outstanding < 1:
            raise ValueError(f"max_outstanding must be a positive integer, not "
                             f"{max_outstanding!r}")
        self.max_outstanding = max_outstanding
        super().__init__(data_width=data_width, max_burst=max_burst, addr_width=addr_width,
                         buffer_depth=buffer_depth, boundary=boundary, read=True,
                         extra={"o": Out(stream.Signature(unsigned(data_width)))})

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        # the receive buffer; emptied by the soft reset (words already asked for are
        # discarded as they arrive, below)
        fifo = m.submodules.buffer = ResetInserter(self.soft_reset)(
            _Buffer(width=self.data_width, depth=self.buffer_depth))
        # the bursts in flight: their lengths and whether each ends a descriptor, so that
        # the receiver knows where a burst and a descriptor end
        bw = self.bus_signature.burstcount_width
        queue = m.submodules.bursts = SyncFIFO(width=bw + 1, depth=self.max_outstanding)

        r = self._intake(m)
        addr, left, n = r.addr, r.left, r.n
        credit = Signal(range(self.buffer_depth + 1), init=self.buffer_depth)
        bursts = Signal(range(self.max_outstanding + 1))
        slot = Signal()        # the command register is free at the next edge
        issue = Signal()

        with m.FSM(name="state") as fsm:
            self._front_states(m, r)
            with m.State("RUN"):
                with m.If(self.soft_reset):
                    m.next = "DRAIN"
                with m.Elif(issue & (left == n)):
                    m.next = "IDLE"
            with m.State("DRAIN"):
                # every burst asked for has been received (a command still held by
                # waitrequest counts as in flight)
                with m.If(~self.soft_reset & (bursts == 0)):
                    m.next = "IDLE"
        states = r.states
        states.update({name: fsm.ongoing(name)
                       for name in ("IDLE", "SUM", "CHECK", "RUN", "HALT", "DRAIN")})
        self._intake_logic(m, r)
        m.d.comb += [
            slot.eq(~bus.read | ~bus.waitrequest),
            issue.eq(states["RUN"] & ~self.soft_reset & slot & (n <= credit)
                     & (bursts < self.max_outstanding)),
        ]

        # the command register
        m.d.comb += bus.byteenable.eq(~0)
        with m.If(issue):
            m.d.sync += [bus.read.eq(1), bus.address.eq(addr), bus.burstcount.eq(n),
                         addr.eq(addr + (n << self._word_bits)), left.eq(left - n)]
        with m.Elif(~bus.waitrequest):
            m.d.sync += bus.read.eq(0)
        m.d.comb += [queue.w_en.eq(issue), queue.w_data.eq(Cat(n, left == n))]

        # the receiver: count each burst's words down; the first word of a burst takes
        # its length from the queue
        rx_left = Signal(range(max(self.max_burst, 2)))
        rx_last = Signal()
        beat = bus.readdatavalid
        head_n = queue.r_data[:bw]
        head_last = queue.r_data[bw]
        first = Signal()
        burst_end = Signal()
        ends_descriptor = Signal()
        m.d.comb += [
            first.eq(beat & (rx_left == 0)),
            queue.r_en.eq(first),
            burst_end.eq(beat & Mux(first, head_n == 1, rx_left == 1)),
            ends_descriptor.eq(Mux(first, head_last, rx_last)),
        ]
        with m.If(first):
            m.d.sync += [rx_left.eq(head_n - 1), rx_last.eq(head_last)]
        with m.Elif(beat):
            m.d.sync += rx_left.eq(rx_left - 1)
        m.d.sync += bursts.eq(bursts + issue - burst_end)

        discard = Signal()
        m.d.comb += [
            discard.eq(states["DRAIN"] | self.soft_reset),
            fifo.w_data.eq(bus.readdata),
            fifo.w_en.eq(beat & ~discard),
            self.o.payload.eq(fifo.r_data),
            self.o.valid.eq(fifo.r_rdy),
            fifo.r_en.eq(self.o.ready),
        ]
        taken = self.o.valid & self.o.ready
        with m.If(states["DRAIN"] & ~self.soft_reset & (bursts == 0)):
            m.d.sync += credit.eq(self.buffer_depth)      # the buffer is empty again
        with m.Else():
            m.d.sync += credit.eq(credit + taken - Mux(issue, n, 0))

        m.d.sync += self.done.eq(burst_end & ends_descriptor & ~discard)
        m.d.comb += [
            self.busy.eq(~(states["IDLE"] | states["HALT"]) | (bursts != 0)),
            self.words.eq(beat & ~discard),
            self.waiting.eq((bursts != 0) & ~beat),
        ]
        return m


class WriteDMA(_DMA):
    """Writes a stream of bus words into descriptors' regions of DRAM.

    Words are queued in a block-RAM FIFO of ``buffer_depth`` words; a burst starts only
    once the FIFO holds all of its words, so its beats follow each other on consecutive
    cycles (``write`` never drops inside a burst) and a slow producer never holds the
    SDRAM port's arbitration locked.

    Parameters
    ----------
    data_width : int
        Bits per bus word: 32, 64 (default), 128 or 256.
    max_burst : int
        Longest burst in words, a power of two up to 1,024 (default 16).
    addr_width : int
        Bits of a byte address (default 32).
    buffer_depth : int, optional
        Words of the FIFO, at least ``max_burst`` and 3 (default ``2 * max_burst``).
    boundary : int
        Bursts do not cross a multiple of this many bytes (default 4,096).

    Attributes
    ----------
    bus : ``Out(AvalonBurstSignature(..., read=False, write=True))``
        The DRAM port. ``address`` and ``burstcount`` stay constant through a burst.
    cmd : ``In(stream.Signature(descriptor_layout(addr_width)))``
        Descriptors; ``ready`` while the DMA is idle (from the cycle after the last burst
        of the previous descriptor started), not halted and not in soft reset.
    i : ``In(stream.Signature(data_width))``
        The words to write, in address order; ``ready`` while the FIFO has room.
    window_base, window_limit : ``In(addr_width)``
        The DRAM window ``[window_base, window_limit)``.
    soft_reset : ``In(1)``
        The engine's reset (a pulse; see the module's docstring). Empties the FIFO.
    busy : ``Out(1)``
        A descriptor is being checked or written, or a burst is being finished after a
        soft reset.
    done : ``Out(1)``
        Pulse: the last word of a descriptor was accepted by the bus.
    error : ``Out(1)``
        Pulse: a descriptor was refused; the DMA then halts until ``soft_reset``.
    error_code : ``Out(4)``
        The cause (:data:`DMA_ERRORS`), held until the next error.
    words : ``Out(1)``
        A word with its byte enables set was accepted by the bus this cycle.
    waiting : ``Out(1)``
        A beat is held by ``waitrequest`` this cycle.

    Latency
    -------
    A descriptor's first beat is on the bus :data:`COMMAND_LATENCY` (4) cycles after the
    descriptor is accepted if its first burst's words are queued, else 2 cycles after
    the cycle in which the burst's last word is accepted on ``i``. ``done`` pulses in the
    cycle after the last beat is accepted. An error pulse comes :data:`ERROR_LATENCY` (3)
    cycles after the descriptor.

    Throughput
    ----------
    One word per cycle when the bus does not stall and ``i`` delivers one per cycle: a
    burst starts in the cycle the previous one's last beat is accepted if its words are
    queued, which they are in steady state (the FIFO then holds a burst's worth ahead).
    """

    def __init__(self, *, data_width=64, max_burst=16, addr_width=32, buffer_depth=None,
                 boundary=BOUNDARY):
        super().__init__(data_width=data_width, max_burst=max_burst, addr_width=addr_width,
                         buffer_depth=buffer_depth, boundary=boundary, read=False,
                         extra={"i": In(stream.Signature(unsigned(data_width)))})

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        fifo = m.submodules.buffer = ResetInserter(self.soft_reset)(
            _Buffer(width=self.data_width, depth=self.buffer_depth))
        m.d.comb += [
            fifo.w_data.eq(self.i.payload),
            fifo.w_en.eq(self.i.valid),
            self.i.ready.eq(fifo.w_rdy),
        ]

        beats_left = Signal(range(max(self.max_burst, 2)))    # beats after the one on the bus
        burst_last = Signal()       # the burst on the bus ends its descriptor
        abort = Signal()            # the burst on the bus is being finished after a reset

        r = self._intake(m)
        addr, left, n = r.addr, r.left, r.n
        slot = Signal()         # the beat register is free at the next edge
        more = Signal()         # the burst on the bus has beats to come
        start = Signal()

        with m.FSM(name="state") as fsm:
            self._front_states(m, r)
            with m.State("RUN"):
                with m.If(self.soft_reset):
                    m.next = "DRAIN"
                with m.Elif(start & (left == n)):
                    m.next = "IDLE"
            with m.State("DRAIN"):
                # the burst on the bus (if any) has had its last beat accepted
                with m.If(~self.soft_reset & ~bus.write):
                    m.next = "IDLE"
        states = r.states
        states.update({name: fsm.ongoing(name)
                       for name in ("IDLE", "SUM", "CHECK", "RUN", "HALT", "DRAIN")})
        self._intake_logic(m, r)
        m.d.comb += [
            slot.eq(~bus.write | ~bus.waitrequest),
            more.eq(bus.write & (beats_left != 0)),
            # all of the burst's words are queued, the first in the FIFO's output
            # register, so the rest follow one per cycle
            start.eq(states["RUN"] & ~self.soft_reset & slot & ~more
                     & (fifo.level >= n) & fifo.r_rdy),
        ]

        quiet = abort | self.soft_reset     # beats from now on leave memory unchanged
        accepted = bus.write & ~bus.waitrequest
        with m.If(slot & more):
            # the next beat of the burst on the bus
            m.d.sync += beats_left.eq(beats_left - 1)
            with m.If(quiet):
                m.d.sync += [bus.writedata.eq(0), bus.byteenable.eq(0), abort.eq(1)]
            with m.Else():
                m.d.comb += fifo.r_en.eq(1)
                m.d.sync += [bus.writedata.eq(fifo.r_data), bus.byteenable.eq(~0)]
        with m.Elif(start):
            m.d.comb += fifo.r_en.eq(1)
            m.d.sync += [
                bus.write.eq(1), bus.address.eq(addr), bus.burstcount.eq(n),
                bus.writedata.eq(fifo.r_data), bus.byteenable.eq(~0),
                beats_left.eq(n - 1), burst_last.eq(left == n), abort.eq(0),
                addr.eq(addr + (n << self._word_bits)), left.eq(left - n),
            ]
        with m.Elif(slot):
            m.d.sync += [bus.write.eq(0), abort.eq(0)]
        with m.Elif(self.soft_reset & more):
            # the beat held by waitrequest stays as it is; the ones after it are quiet
            m.d.sync += abort.eq(1)

        m.d.sync += self.done.eq(accepted & ~more & burst_last & ~quiet & ~states["DRAIN"])
        m.d.comb += [
            self.busy.eq(~(states["IDLE"] | states["HALT"]) | bus.write),
            self.words.eq(accepted & bus.byteenable.any()),
            self.waiting.eq(bus.write & bus.waitrequest),
        ]
        return m
