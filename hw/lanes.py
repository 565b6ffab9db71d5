"""Channel-serial ("lane-folded") processing of a pixel for the per-pixel units.

A per-pixel unit at full rate builds its arithmetic once per channel, but at the frame
intervals a real board allows (the convolutions fold to hundreds of cycles per frame) it
is idle most of the time: on the default digits design the post-ops and base mixers see
one pixel every 8 cycles and held 545 constant multipliers. Folded, a unit holds the
pixel it works on in a shift register and processes ``lanes`` channels per cycle, so
its arithmetic is built ``lanes`` times instead of ``channels`` times.

:func:`build_lane_folded` is the sequencer shared by the folded post-op and base
mixer: join of one or more input streams (a pixel is taken from all of them in the
same cycle), ``folds = ceil(channels / lanes)`` steps, fork to one or more output
streams. Every ``ready`` it drives is a register (``~busy``): a folded unit also ends
the combinational ready path, so chains of units meet timing. With two steps or more
its step enable does not depend on the outputs' ``ready`` either (only on its own output
register being empty before the last step), at the cost of an output register beside
the steps' results.

Latency and throughput (``L`` pipeline registers inside a lane): a pixel accepted in
cycle ``a`` is on the outputs in cycle ``a + folds + 1 + L``; one pixel per
``max(folds + 1, L + 2)`` cycles with two steps or more (the next pixel's steps overlap
the lanes' pipeline; its last step waits for the output register), ``L + 1`` with one
(:func:`folded_interval`).
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Mux, Signal, Value, unsigned
from amaranth.lib import data
from amaranth.lib.memory import Memory

__all__ = ["lane_folds", "folded_interval", "lane_rom", "fold_rom", "build_lane_folded"]


def lane_folds(channels, lanes):
    """Steps of a channel-serial per-pixel unit: ``ceil(channels / lanes)``."""
    return -(-channels // lanes)


def folded_interval(channels, lanes, lane_latency=0):
    """Cycles per pixel of a channel-serial per-pixel unit with ``lane_latency``
    registers in its lanes: one cycle to take the pixel and one per step; the last step
    waits for the previous pixel's results to have passed the lanes' pipeline and left
    the output register (``lane_latency + 2`` cycles after its own last step). With one
    step that wait is every step's: ``lane_latency + 1``. Its latency is
    ``lane_folds + 1 + lane_latency``."""
    folds = lane_folds(channels, lanes)
    if folds == 1:
        return 1 + 1 + max(0, lane_latency - 1)
    return max(folds + 1, lane_latency + 2)


def lane_rom(values, lanes, lane, fold, shape):
    """Per-channel constant for ``lane`` at step ``fold``: ``values[fold*lanes + lane]``
    (0 for the padding channels past the end), as a small ROM indexed by ``fold``."""
    folds = lane_folds(len(values), lanes)
    table = [values[f * lanes + lane] if f * lanes + lane < len(values) else 0
             for f in range(folds)]
    if len(set(table)) == 1:
        return Const(table[0], shape)
    return Array(Const(v, shape) for v in table)[fold]


def fold_rom(m, name, channels, widths, values_of, fold, en):
    """Per-channel constants of an MVU's output folds (its activation's thresholds, or
    scales and offsets, :mod:`.mvu`): a ROM word per fold, every PE's fields side by
    side, read synchronously at ``fold`` when ``en``.

    ``channels[f][p]`` is the channel PE ``p`` holds in fold ``f`` (``None``: padding,
    zeros); ``values_of(c)`` are channel ``c``'s fields, of ``widths`` bits each (two's
    complement, least significant field first). Returns, per PE, its fields as unsigned
    slices of the read data (valid the cycle after the read)."""
    lane = sum(widths)
    offsets = [sum(widths[:j]) for j in range(len(widths))]
    words = []
    for fold_channels in channels:
        word = 0
        for p, c in enumerate(fold_channels):
            if c is None:
                continue
            for v, w, o in zip(values_of(c), widths, offsets):
                word |= (int(v) & ((1 << w) - 1)) << (p * lane + o)
        words.append(word)
    pe = len(channels[0])
    m.submodules[name] = rom = Memory(shape=unsigned(pe * lane), depth=len(channels),
                                      init=words)
    rd = rom.read_port()
    m.d.comb += [rd.addr.eq(fold), rd.en.eq(en)]
    return [[rd.data[p * lane + o:p * lane + o + w] for w, o in zip(widths, offsets)]
            for p in range(pe)]


def build_lane_folded(m, inputs, outputs, channels, lanes, lane_fn, lane_latency=0):
    """Sequence ``inputs`` -> ``lane_fn`` -> ``outputs`` channel-serially.

    Parameters
    ----------
    m : Module
    inputs : list of stream interfaces
        Payload ``data.ArrayLayout(elem, channels)`` each (element shapes may differ).
    outputs : list of stream interfaces
        Payload ``data.ArrayLayout(elem, channels)`` each.
    channels, lanes : int
    lane_fn : callable ``(m, fold, lane, [input element per input], step) -> [output value per output]``
        The per-channel arithmetic of lane ``lane`` (channel ``fold*lanes + lane``);
        ``fold`` is the step counter signal (for per-channel constants via :func:`lane_rom`).
        It may hold ``lane_latency`` stages of pipeline registers (free-running, or
        enabled on ``step``, the cycle a step's inputs are on the lanes); its outputs are
        taken ``lane_latency`` cycles after the step.
    lane_latency : int
        Pipeline registers inside ``lane_fn``. Adds to the latency; with two steps or
        more it adds to the interval only beyond ``ceil(channels/lanes) - 1``
        (:func:`folded_interval`).
    """
    folds = lane_folds(channels, lanes)
    padded = folds * lanes
    # With two steps or more ("paced") the output register is apart from the steps'
    # results and only the last step needs it empty (and no earlier last step still in
    # the lanes), so the step enable depends on the unit's own registers alone and is
    # itself a register, computed a cycle ahead: it fans out to every lane and held
    # register, and on ECP5 the logic and routes in front of that fan-out limited Fmax.
    # One output register more, and no cycle more.
    paced = folds >= 2
    in_layouts = [data.ArrayLayout(s.payload.shape().elem_shape, padded) for s in inputs]
    out_layouts = [data.ArrayLayout(o.payload.shape().elem_shape, padded) for o in outputs]
    held = [Signal(layout, name=f"held{j}") for j, layout in enumerate(in_layouts)]
    # results of the steps before the last (paced), or of all steps (the output itself)
    kept = padded - lanes if paced else padded
    results = [Signal(data.ArrayLayout(o.payload.shape().elem_shape, kept), name=f"result{j}")
               for j, o in enumerate(outputs)]
    busy = Signal()
    fold = Signal(range(max(folds, 2)))
    last = Signal()
    m.d.comb += last.eq(fold == folds - 1)

    take = Signal()
    m.d.comb += take.eq(Cat(s.valid for s in inputs).all() & ~busy)
    m.d.comb += [s.ready.eq(take) for s in inputs]
    go = Signal()

    lane_values = [lane_fn(m, fold, p, [h[p] for h in held], go) for p in range(lanes)]
    # The step that writes the results, `lane_latency` cycles behind the step that read
    # the lanes; `in_flight` are the last steps on their way to the output register.
    write, write_last = go, go & last
    in_flight = []
    for d in range(lane_latency):
        w_next, l_next = Signal(name=f"write{d}"), Signal(name=f"write_last{d}")
        m.d.sync += [w_next.eq(write), l_next.eq(write_last)]
        write, write_last = w_next, l_next
        in_flight.append(l_next)
    steps, finals = [], []
    for j, (r, layout, o) in enumerate(zip(results, out_layouts, outputs)):
        w = len(Value.cast(r[0]))
        fitted = []
        for p in range(lanes):
            # Assignment truncates or sign-extends to the element width.
            lane_out = Signal(layout.elem_shape, name=f"out{j}_lane{p}")
            m.d.comb += lane_out.eq(lane_values[p][j])
            fitted.append(lane_out)
        new = Cat(*fitted)
        # Results enter at the top and move down: after `folds` steps step 0's lanes
        # hold channels 0..lanes-1.
        steps.append(Value.cast(r).eq(Cat(Value.cast(r)[lanes * w:], new) if folds > 1 else new))
        if paced:
            # the last step's lanes join the earlier steps' straight in the output register
            finals.append(Value.cast(o.payload).eq(Cat(Value.cast(r), new)[:channels * w]))
        else:
            m.d.comb += Value.cast(o.payload).eq(Value.cast(r)[:channels * w])
    with m.If(write):
        m.d.sync += steps
    if paced:
        with m.If(write_last):
            m.d.sync += finals

    # Sequencer: the next state of every register the step enable depends on.
    busy_next = Signal()
    fold_next = Signal.like(fold)
    valid_next = [Signal(name=f"valid_next{j}") for j in range(len(outputs))]
    m.d.comb += [
        busy_next.eq(Mux(take, 1, Mux(go & last, 0, busy))),
        fold_next.eq(Mux(take, 0, Mux(go, fold + 1, fold))),
        *(v.eq(Mux(write_last, 1, Mux(o.ready, 0, o.valid))) for v, o in zip(valid_next, outputs)),
    ]
    m.d.sync += [busy.eq(busy_next), fold.eq(fold_next),
                 *(o.valid.eq(v) for o, v in zip(outputs, valid_next))]
    if paced:
        # go = busy & (~last | (no last step in flight & every output register empty)),
        # registered from the next state
        flight_next = Cat(go & last, *in_flight[:-1]) if in_flight else Const(0, 1)
        m.d.sync += go.eq(busy_next & ((fold_next != folds - 1)
                                       | (~flight_next.any() & ~Cat(*valid_next).any())))
        # While idle the held registers load every cycle (the pixel taken is the one
        # there when `take`), so their enable and select are the unit's own registers.
        for h, s in zip(held, inputs):
            w = len(Value.cast(h[0]))
            with m.If(~busy):
                m.d.sync += Value.cast(h).eq(Value.cast(s.payload))
            with m.Elif(go):
                # Shift the held pixel down by one step, so the lanes always read
                # positions 0..lanes-1: a shift register, not a `folds`-way multiplexer.
                m.d.sync += Value.cast(h).eq(Value.cast(h) >> (lanes * w))
    else:
        # One step: it waits for the output register, which the consumer may be
        # emptying in the same cycle, and the lanes' pipeline to drain.
        drained = ~Cat(*in_flight).any() if in_flight else Const(1, 1)
        m.d.comb += go.eq(busy & drained & Cat(~o.valid | o.ready for o in outputs).all())
        with m.If(take):
            m.d.sync += [Value.cast(h).eq(Value.cast(s.payload)) for h, s in zip(held, inputs)]
