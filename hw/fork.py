"""Stream fan-out: one producer, several consumers that each see every beat."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Broadcast"]


class Broadcast(wiring.Component):
    """Delivers every input beat exactly once to each of ``n`` outputs.

    The outputs need not accept in the same cycle: each output has a flag recording that it
    already took the current beat, and the input beat is released once every output has
    taken it (in the cycle the last one does). An output that has taken the beat shows
    ``valid`` low until the next beat, so no beat is duplicated; ``valid`` of an output
    depends on the input's ``valid`` and the flags only, never on any ``ready``.

    The component has no buffering. Where the branches drain at different rates (a
    residual path beside a convolution), put a :class:`~groupnet_hw.hw.fifo.StreamFIFO` on
    the faster branch so the slower one cannot stall it into a deadlock.

    Parameters
    ----------
    shape : shape-like
        Payload shape.
    n : int
        Number of outputs (``n >= 1``).

    Attributes
    ----------
    i : ``In(stream.Signature(shape))``
        Input stream.
    o : ``Out(stream.Signature(shape)).array(n)``
        Output streams; ``o[j].payload`` is ``i.payload``.

    Latency
    -------
    0 cycles: combinational from ``i`` to every ``o[j]``.

    Throughput
    ----------
    One beat per cycle when all outputs are ready (``i.ready`` then is high). Otherwise a
    beat leaves in the cycle its last output accepts it.
    """

    def __init__(self, shape, n):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, not {n!r}")
        self.n = n
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)).array(n),
        })

    def elaborate(self, platform):
        m = Module()

        taken = Signal(self.n)
        done = []
        for j, o in enumerate(self.o):
            m.d.comb += [
                o.payload.eq(self.i.payload),
                o.valid.eq(self.i.valid & ~taken[j]),
            ]
            done.append(taken[j] | o.ready)
        m.d.comb += self.i.ready.eq(Cat(*done).all())

        with m.If(self.i.valid & self.i.ready):
            m.d.sync += taken.eq(0)
        with m.Else():
            for j, o in enumerate(self.o):
                with m.If(o.valid & o.ready):
                    m.d.sync += taken[j].eq(1)

        return m

