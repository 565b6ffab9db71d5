"""Output registers with a one-beat skid: a pipeline's enable from one flip-flop.

A pipeline that loads its output register only while the consumer is ready stalls on
``o.ready``: that signal, from another unit, then enables every register of the
pipeline. On ECP5 such enables fanned out from a far FIFO's level across a full device
(12.8 ns, 11.6 of it routing, on the whole-board digits design). With one more
register beside each output register, the skid, a result that meets a full output
register that is not being taken waits there instead; the pipeline stops only once a
skid is full, which a register of the unit says a cycle ahead. Latency and throughput
do not change; the unit holds one beat more per output.
"""

from amaranth.hdl import Cat, Mux, Signal

__all__ = ["skid_outputs", "staged"]


def skid_outputs(m, outputs, values, load, name="skid", advance=None):
    """Drive each stream of ``outputs`` from ``values`` through its own output register
    and skid; return ``room``, the pipeline's enable.

    Parameters
    ----------
    m : Module
        Where the registers go.
    outputs : sequence of stream interfaces
        The unit's output streams (``o.payload`` and ``o.valid`` are driven here, in
        ``sync``). Each keeps its beat until taken, independently of the others (a
        fork: the next result moves to the outputs without waiting for all of them).
    values : sequence of sequences of values
        Per output, the elements of its payload (``o.payload[j]``) for the result loaded.
    load : Value
        A result is loaded this cycle. Only when ``room`` is 1.
    name : str
        Prefix of the signals' names.
    advance : Value, optional
        The pipeline advances this cycle (``load`` is ``advance`` and the result's
        valid bit). Given, the output and skid registers take ``values`` on every
        advance, a result or not (what they hold counts only while ``o.valid`` or the
        skid's full bit says so), so that their enables, hundreds of registers wide,
        do not wait for the valid bit: on ECP5 that bit's route to them was a wide
        unit's late path.

    Returns
    -------
    room : Signal
        A register (reset 1): every skid is empty, so one more result can be loaded.
        The pipeline advances on it; it depends on ``o.ready`` only through its next
        state.

    Latency
    -------
    1 cycle: a result loaded in cycle ``t`` is valid from ``t + 1``, if its output
    register was empty or taken in ``t``; otherwise it waits in the skid and follows
    the beat ahead of it.

    Throughput
    ----------
    One result per cycle while every output is ready. A consumer that stalls stops the
    pipeline one result later.
    """
    room = Signal(init=1, name=f"{name}_room")
    full_next = []
    for k, (o, value) in enumerate(zip(outputs, values)):
        full = Signal(name=f"{name}{k}_full")
        held = Signal.like(o.payload, name=f"{name}{k}")
        free = ~o.valid | o.ready
        if advance is None:
            with m.If(load):
                with m.If(free):
                    m.d.sync += [o.valid.eq(1), *(o.payload[j].eq(v) for j, v in enumerate(value))]
                with m.Else():
                    m.d.sync += [full.eq(1), *(held[j].eq(v) for j, v in enumerate(value))]
            with m.Elif(full):
                # the output register is full while the skid is: `o.valid` stays 1
                with m.If(o.ready):
                    m.d.sync += [o.payload.eq(held), full.eq(0)]
            with m.Elif(o.ready):
                m.d.sync += o.valid.eq(0)
        else:
            # the payloads on `advance` (no advance while the skid is full: `room`)...
            with m.If(advance):
                with m.If(free):
                    m.d.sync += [o.payload[j].eq(v) for j, v in enumerate(value)]
                with m.Else():
                    m.d.sync += [held[j].eq(v) for j, v in enumerate(value)]
            with m.Elif(full & o.ready):
                m.d.sync += o.payload.eq(held)
            # ... and the valid and full bits on `load`, as above
            with m.If(load):
                with m.If(free):
                    m.d.sync += o.valid.eq(1)
                with m.Else():
                    m.d.sync += full.eq(1)
            with m.Elif(full):
                with m.If(o.ready):
                    m.d.sync += full.eq(0)
            with m.Elif(o.ready):
                m.d.sync += o.valid.eq(0)
        full_next.append(Mux(load, ~free, full & ~o.ready))
    m.d.sync += room.eq(~Cat(full_next).any())
    return room


def staged(m, advance):
    """A pipeline's stage registers: returns ``stage(value, name, reset)``, a register
    of ``value`` loaded whenever ``advance`` is high (``reset``: a reset register, for
    valid bits; else reset-less, for data whose validity a valid bit tracks)."""
    def stage(value, name, reset):
        r = Signal.like(value, name=name, reset_less=not reset)
        with m.If(advance):
            m.d.sync += r.eq(value)
        return r
    return stage
