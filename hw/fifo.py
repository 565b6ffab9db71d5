"""Stream FIFO: the buffer the compiler puts on fork branches."""

from dataclasses import dataclass

from amaranth.hdl import Elaboratable, Module, Shape, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

__all__ = ["StreamFIFO", "FIFOChoices", "FIFO_RAM_KINDS", "BLOCK_FIFO_DEPTH", "BlockRAMFIFO",
           "block_ram_fifo"]

#: How a FIFO's memory is built: ``auto``, as the synthesis flow maps it (registers,
#: distributed RAM or block RAM by its own rules); ``block``, marked
#: ``ram_style = "block"``, so that a family that honours the mark (ECP5, iCE40) puts it
#: in block RAM whatever its size.
FIFO_RAM_KINDS = ("auto", "block")


class _MarkedFIFO(SyncFIFOBuffered):
    """:class:`~amaranth.lib.fifo.SyncFIFOBuffered` whose storage memory carries
    ``attrs`` (its behaviour and cycles unchanged)."""

    def __init__(self, *, attrs, **kwargs):
        super().__init__(**kwargs)
        self._attrs = dict(attrs)

    def elaborate(self, platform):
        m = super().elaborate(platform)
        if self.depth >= 2:         # depth 1 is a register, no memory
            m.submodules.storage.attrs.update(self._attrs)
        return m


#: The shallowest :func:`block_ram_fifo`: Yosys puts a memory in Cyclone V M10Ks only
#: at 5 % of their bits or more (``bram_m10k.txt``'s ``min efficiency 5``), 13 words
#: of the 256 x 40 mode for a word of whole 40-bit slices, twice that for a word that
#: fills half its last; a 32-word FIFO keeps 30 in its memory.
BLOCK_FIFO_DEPTH = 32


class BlockRAMFIFO(Elaboratable):
    """A FIFO of wide words in block RAM rather than flip-flops and a read multiplexer
    of LUTs a bit, with :class:`~amaranth.lib.fifo.SyncFIFOBuffered`'s ports (``w_data``,
    ``w_en``, ``w_rdy``, ``r_data``, ``r_en``, ``r_rdy``, ``level``) and ``depth``.

    A :class:`SyncFIFOBuffered` whose storage is marked ``ram_style = "block"`` (ECP5 and
    iCE40 honour the mark; Yosys's Cyclone V flow goes by the depth) and
    ``no_rw_check``, then an output register, so that a consumer's logic starts at a
    flip-flop and not at a block RAM's slow read (on ECP5 the unregistered read cost
    the epilogue feeder 21 MHz).

    Parameters
    ----------
    width : int
    depth : int
        At least this many words (:data:`BLOCK_FIFO_DEPTH` or more); a caller that
        counts room counts to its own depth.

    Latency
    -------
    3 cycles from a write to ``r_rdy`` (one more than :class:`SyncFIFOBuffered`).

    Throughput
    ----------
    A word a cycle each way.
    """

    def __init__(self, *, width, depth):
        self.width, self.depth = width, max(depth, BLOCK_FIFO_DEPTH)
        self.w_data, self.w_en, self.w_rdy = Signal(width), Signal(), Signal()
        # no reset on the data: `r_rdy` says what it holds
        self.r_data = Signal(width, reset_less=True)
        self.r_en, self.r_rdy = Signal(), Signal()
        self.level = Signal(range(self.depth + 1))

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = _MarkedFIFO(width=self.width, depth=self.depth - 1,
                                               attrs={"ram_style": "block", "no_rw_check": 1})
        load = ~self.r_rdy | self.r_en
        m.d.comb += [fifo.w_data.eq(self.w_data), fifo.w_en.eq(self.w_en),
                     self.w_rdy.eq(fifo.w_rdy), fifo.r_en.eq(load)]
        # the words in it, a register of its own (the inner FIFO's level and the output
        # register's added up were the mixer's late path into its `ready` on ECP5)
        m.d.sync += self.level.eq(self.level + (self.w_en & self.w_rdy)
                                  - (self.r_en & self.r_rdy))
        with m.If(load):
            m.d.sync += [self.r_rdy.eq(fifo.r_rdy), self.r_data.eq(fifo.r_data)]
        return m


def block_ram_fifo(*, width, depth):
    """A :class:`BlockRAMFIFO` of ``width`` bits and at least ``depth`` words."""
    return BlockRAMFIFO(width=width, depth=depth)


@dataclass(frozen=True)
class FIFOChoices:
    """How big a stream FIFO is and how it is built: the choices the schedule makes for
    the FIFO in front of each input of a join, handed to :class:`StreamFIFO` whole.

    Parameters
    ----------
    depth : int
        Number of beats held. ``0`` makes the FIFO a plain wire (``o`` is ``i``), so the
        compiler can size every fork branch uniformly.
    ram : {"auto", "block"}
        How its memory is built (:data:`FIFO_RAM_KINDS`): where the flow maps it, or
        marked for block RAM (on ECP5 a DP16KD instead of distributed RAM, which a
        board runs out of first). Same behaviour and cycles.
    out_register : bool
        One more register after the memory's read port, so that the read data leaves the
        FIFO from a flip-flop: for a memory in block RAM whose read is late (ECP5: a
        DP16KD's clock-to-output is 5.6 ns of a 10 ns period, and the join behind the FIFO
        adds on it). One cycle more of latency; holds ``depth + 1`` beats; same
        throughput. Ignored (``False``) at ``depth=0``.

    Raises
    ------
    ValueError
        A negative or non-integer depth, an unknown ``ram``: one line.
    """

    depth: int
    ram: str = "auto"
    out_register: bool = False

    def __post_init__(self):
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 0:
            raise ValueError(f"depth must be a non-negative integer, not {self.depth!r}")
        if self.ram not in FIFO_RAM_KINDS:
            raise ValueError(f"ram must be one of {', '.join(FIFO_RAM_KINDS)}, "
                             f"not {self.ram!r}")
        object.__setattr__(self, "out_register", bool(self.out_register) and self.depth > 0)


class StreamFIFO(wiring.Component):
    """First-in first-out queue between two streams.

    A thin stream wrapper around :class:`amaranth.lib.fifo.SyncFIFOBuffered`, whose storage
    is a :class:`~amaranth.lib.memory.Memory` with a synchronous read port (block RAM) and
    whose output is a register. The payload is stored as raw bits, so any shape (including
    ``data`` layouts) passes through unchanged.

    Parameters
    ----------
    shape : shape-like
        Payload shape.
    choices : FIFOChoices
        Its depth, its memory and its output register.

    Attributes
    ----------
    i : ``In(stream.Signature(shape))``
        Input stream; ``ready`` while there is room.
    o : ``Out(stream.Signature(shape))``
        Output stream; ``valid`` is a register, independent of ``o.ready``.
    depth, ram, out_register : int, str, bool
        The fields of ``choices``.

    latency : int
        Cycles from a beat accepted into an empty FIFO to it being valid on ``o``.

    Latency
    -------
    2 cycles (3 with ``out_register``; 0 for ``depth=0``).

    Throughput
    ----------
    One beat per cycle for ``depth >= 3``. ``depth`` 1 and 2 move one beat every two cycles
    (the memory inside ``SyncFIFOBuffered`` then has a single row), so use ``depth >= 3``
    where the rate matters.
    """

    def __init__(self, shape, choices):
        if not isinstance(choices, FIFOChoices):
            raise ValueError(f"choices must be a FIFOChoices, not {choices!r}")
        self.choices = choices
        self.depth, self.ram, self.out_register = choices.depth, choices.ram, choices.out_register
        self.latency = 0 if self.depth == 0 else 2 + self.out_register
        self._width = Shape.cast(shape).width
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()

        if self.depth == 0:
            m.d.comb += [
                self.o.payload.eq(self.i.payload),
                self.o.valid.eq(self.i.valid),
                self.i.ready.eq(self.o.ready),
            ]
            return m

        # no_rw_check: the FIFO reads a word only while it holds it, and writes one only
        # while it has room, so a read never meets a write of its word; without the mark
        # Yosys adds a delayed write, a compare and a multiplexer behind a block RAM's
        # data (the CIFAR-size network's slowest paths on ECP5: 11.63 ns, and the skip
        # FIFOs that Yosys put in block RAM unmarked, 10.29 ns). Every memory gets it,
        # whichever RAM the flow picks.
        attrs = {"no_rw_check": 1}
        if self.ram == "block":
            attrs["ram_style"] = "block"
        fifo = _MarkedFIFO(width=self._width, depth=self.depth, attrs=attrs)
        m.submodules.fifo = fifo
        m.d.comb += [
            fifo.w_data.eq(Value.cast(self.i.payload)),
            fifo.w_en.eq(self.i.valid),
            self.i.ready.eq(fifo.w_rdy),
        ]
        if not self.out_register:
            m.d.comb += [
                self.o.payload.eq(fifo.r_data),
                self.o.valid.eq(fifo.r_rdy),
                fifo.r_en.eq(self.o.ready),
            ]
            return m
        # a pipeline register: loads whenever it is empty or being emptied. The payload has
        # no reset (``valid`` says what it holds), so that on ECP5 it is the DP16KD's own
        # output register (toolchain.bram_registers), not a flip-flop a route away.
        payload = Signal(self._width, reset_less=True)
        load = Signal()
        m.d.comb += [load.eq(~self.o.valid | self.o.ready), fifo.r_en.eq(load)]
        with m.If(load):
            m.d.sync += [self.o.valid.eq(fifo.r_rdy), payload.eq(fifo.r_data)]
        m.d.comb += Value.cast(self.o.payload).eq(payload)
        return m
