"""The engine's control and status registers: an Avalon-MM agent for the host.

The register map is data, in ``groupnet_hw/engine_registers.py`` (``REGISTERS``, the
error codes, helpers): that module imports nothing, so the host runtime (numpy only, on
the board's Linux) takes the map from it, and this register file is built from the same
definitions. Its docstring has the table; in short:

========  =================  ==================================================================
offset    register           contents
========  =================  ==================================================================
0x00      ID                 ``0x474E45`` << 8 | map version
0x04      CONTROL            [0] START, [1] SOFT_RESET (write 1: actions), [2] IRQ_ENABLE
0x08      STATUS             [0] BUSY, [1] DONE, [2] ERROR, [3] IGNORED (W1C), [15:8] ERROR_CODE
0x0C      WINDOW_BASE        DRAM window ``[base, limit)``, locked while BUSY
0x10      WINDOW_LIMIT
0x14      PROGRAM_ADDRESS    the layer program's byte address, locked while BUSY
0x20-0x3C counters           CYCLES_BUSY, CYCLES_STALLED, WORDS_READ, WORDS_WRITTEN (64 bits,
                             ``_LO`` then ``_HI``; reading ``_LO`` latches ``_HI``)
========  =================  ==================================================================

Decisions:

- *Locked while busy*, not write-once: the window and the program address can be changed
  between runs without a reset (a host runs several networks or images), but never while
  a run is going on, so every descriptor of a run is checked against the window the host
  set before START. A locked write is not silent: it sets STATUS.IGNORED.
- *Fixed read latency 1, no waitrequest* (:class:`~.avalon.AvalonRegisterSignature`):
  registers never need wait states.
- The first error of a run is kept (the one that stopped the engine; later ones are
  consequences).
- START clears the counters, so they describe the last run; SOFT_RESET does not, so an
  aborted run can still be looked at.
"""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...engine_registers import BY_NAME, COUNTERS, ID_VALUE, REGISTER_ADDRESS_WIDTH
from .avalon import AvalonRegisterSignature

__all__ = ["EngineCSR"]

_COUNTER_WIDTH = 64


def _index(name):
    return BY_NAME[name].index


def _field(register, name):
    return BY_NAME[register].field(name)


class EngineCSR(wiring.Component):
    """Control, status, DRAM window, program address and performance counters.

    Parameters
    ----------
    addr_width : int
        Bits of the DRAM addresses it holds (window and program), at most 32 (one
        register each); default 32.
    increment_width : int
        Bits of the words-read and words-written increments (default 2: up to 3 words a
        cycle, for an engine with several DMAs).

    Attributes
    ----------
    bus : ``In(AvalonRegisterSignature(addr_width=REGISTER_ADDRESS_WIDTH))``
        The host's port: word addresses (register indices), 32-bit data, read latency 1.
    start : ``Out(1)``
        Pulse, the cycle after the host wrote CONTROL.START while not BUSY: run the
        program at ``program_address``.
    soft_reset : ``Out(1)``
        Pulse, the cycle after the host wrote CONTROL.SOFT_RESET: the engine's reset
        (the DMAs' ``soft_reset``).
    window_base, window_limit : ``Out(addr_width)``
        The DRAM window ``[window_base, window_limit)`` (the DMAs' inputs).
    program_address : ``Out(addr_width)``
        Byte address of the layer program.
    running : ``Out(1)``
        From START until the engine reports ``done`` or ``error``, or a soft reset.
    irq : ``Out(1)``
        Interrupt (level): ``IRQ_ENABLE and (DONE or ERROR)``.
    busy : ``In(1)``
        Some unit of the engine is still working (a DMA finishing a burst after a soft
        reset, say). STATUS.BUSY is ``running or busy``.
    done : ``In(1)``
        Pulse: the run finished.
    error : ``In(1)``
        Pulse: a unit stopped the run with ``error_code``.
    error_code : ``In(8)``
        ``source << 4 | cause`` (``engine_registers.error_code``), valid with ``error``.
    stalled : ``In(1)``
        The engine waited on memory this cycle (counted in CYCLES_STALLED).
    words_read, words_written : ``In(increment_width)``
        Bus words read from and written to DRAM this cycle.

    Latency
    -------
    A write takes effect at the rising edge that accepts it (a read in the next cycle
    returns the new value); ``start`` and ``soft_reset`` pulse in the cycle after the
    write. Read data is valid in the cycle after the read command. An input event is
    visible in STATUS one cycle after it (a read command in the cycle after ``done``
    returns DONE set).

    Throughput
    ----------
    One command per cycle, read or write.
    """

    def __init__(self, *, addr_width=32, increment_width=2):
        if not isinstance(addr_width, int) or not 1 <= addr_width <= 32:
            raise ValueError(f"addr_width must be an integer from 1 to 32, not {addr_width!r}")
        if not isinstance(increment_width, int) or not 1 <= increment_width <= 8:
            raise ValueError(f"increment_width must be an integer from 1 to 8, not "
                             f"{increment_width!r}")
        self.addr_width = addr_width
        self.increment_width = increment_width
        # the counters are made here, not in elaborate(), so that a testbench can preset
        # one near 2**32 to check the upper half
        self._counters = {name: Signal(_COUNTER_WIDTH, name=f"count_{name.lower()}")
                          for name in COUNTERS}
        super().__init__({
            "bus": In(AvalonRegisterSignature(addr_width=REGISTER_ADDRESS_WIDTH)),
            "start": Out(1),
            "soft_reset": Out(1),
            "window_base": Out(unsigned(addr_width)),
            "window_limit": Out(unsigned(addr_width)),
            "program_address": Out(unsigned(addr_width)),
            "running": Out(1),
            "irq": Out(1),
            "busy": In(1),
            "done": In(1),
            "error": In(1),
            "error_code": In(unsigned(8)),
            "stalled": In(1),
            "words_read": In(unsigned(increment_width)),
            "words_written": In(unsigned(increment_width)),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        irq_enable = Signal()
        done = Signal()
        error = Signal()
        ignored = Signal()
        code = Signal(8)
        status_busy = Signal()
        m.d.comb += [
            status_busy.eq(self.running | self.busy),
            self.irq.eq(irq_enable & (done | error)),
        ]

        counters = self._counters
        shadows = {name: Signal(32, name=f"shadow_{name.lower()}") for name in COUNTERS}
        increments = {
            "CYCLES_BUSY": status_busy,
            "CYCLES_STALLED": self.stalled,
            "WORDS_READ": self.words_read,
            "WORDS_WRITTEN": self.words_written,
        }

        # ---- host writes
        write = Signal()
        m.d.comb += write.eq(bus.write)
        wd = bus.writedata
        start_bit = wd[_field("CONTROL", "START").lsb]
        reset_bit = wd[_field("CONTROL", "SOFT_RESET").lsb]
        to_control = write & (bus.address == _index("CONTROL"))
        to_status = write & (bus.address == _index("STATUS"))
        do_reset = to_control & reset_bit
        # the reset wins over a START written with it
        do_start = to_control & start_bit & ~reset_bit & ~status_busy
        start_refused = to_control & start_bit & ~reset_bit & status_busy
        locked_write = Signal()

        m.d.sync += [self.start.eq(do_start), self.soft_reset.eq(do_reset)]
        with m.If(to_control):
            m.d.sync += irq_enable.eq(wd[_field("CONTROL", "IRQ_ENABLE").lsb])

        locked = {"WINDOW_BASE": self.window_base, "WINDOW_LIMIT": self.window_limit,
                  "PROGRAM_ADDRESS": self.program_address}
        hits = []
        for name, reg in locked.items():
            hit = write & (bus.address == _index(name))
            hits.append(hit)
            with m.If(hit & ~status_busy):
                m.d.sync += reg.eq(wd[:self.addr_width])
        m.d.comb += locked_write.eq(Cat(hits).any() & status_busy)

        # ---- status flags: an event of the engine wins over a clear in the same cycle
        # (it is not lost); START and SOFT_RESET clear everything of the last run
        def w1c(field):
            return to_status & wd[_field("STATUS", field).lsb]

        with m.If(do_reset | do_start):
            m.d.sync += [done.eq(0), error.eq(0), code.eq(0), ignored.eq(0),
                         self.running.eq(do_start)]
        with m.Else():
            with m.If(self.done):
                m.d.sync += done.eq(1)
            with m.Elif(w1c("DONE")):
                m.d.sync += done.eq(0)
            with m.If(self.error & ~error):
                m.d.sync += [error.eq(1), code.eq(self.error_code)]
            with m.Elif(w1c("ERROR")):
                m.d.sync += [error.eq(0), code.eq(0)]
            with m.If(locked_write | start_refused):
                m.d.sync += ignored.eq(1)
            with m.Elif(w1c("IGNORED")):
                m.d.sync += ignored.eq(0)
            with m.If(self.done | self.error):
                m.d.sync += self.running.eq(0)

        # ---- counters: cleared by START, counting otherwise
        for name, counter in counters.items():
            with m.If(do_start):
                m.d.sync += counter.eq(0)
            with m.Else():
                m.d.sync += counter.eq(counter + increments[name])

        # ---- host reads: data in the next cycle
        status = Signal(32)
        m.d.comb += [
            status[_field("STATUS", "BUSY").lsb].eq(status_busy),
            status[_field("STATUS", "DONE").lsb].eq(done),
            status[_field("STATUS", "ERROR").lsb].eq(error),
            status[_field("STATUS", "IGNORED").lsb].eq(ignored),
            status[_field("STATUS", "ERROR_CODE").lsb:][:8].eq(code),
        ]
        with m.If(bus.read):
            with m.Switch(bus.address):
                with m.Case(_index("ID")):
                    m.d.sync += bus.readdata.eq(ID_VALUE)
                with m.Case(_index("CONTROL")):
                    m.d.sync += bus.readdata.eq(
                        irq_enable << _field("CONTROL", "IRQ_ENABLE").lsb)
                with m.Case(_index("STATUS")):
                    m.d.sync += bus.readdata.eq(status)
                for name, reg in locked.items():
                    with m.Case(_index(name)):
                        m.d.sync += bus.readdata.eq(reg)
                for name, counter in counters.items():
                    with m.Case(_index(f"{name}_LO")):
                        m.d.sync += [bus.readdata.eq(counter[:32]),
                                     shadows[name].eq(counter[32:])]
                    with m.Case(_index(f"{name}_HI")):
                        m.d.sync += bus.readdata.eq(shadows[name])
                with m.Default():
                    m.d.sync += bus.readdata.eq(0)
        return m
