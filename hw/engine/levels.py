"""The intended engine's level lanes: a mixer output's levels for the binary convolutions
that read it (fusion rule 7, "levels at the producer", docs/architecture.md sections 12
and 15).

Where a mixer's outputs are read only through thresholds (the next convolutions' input
signs or levels), the mixer's descriptor writes those levels as tensors of their own,
so that the readers read bits. Behind the mixer, each such output is a threshold per
channel: one unit of these lanes and a packer (:class:`~.packer.OutputPacker`) for each
(one or two a mixer). The mixer's beats are ``lanes`` channels of one job in the
feeder's order (a pixel's output folds, each fold's parts, each part's jobs), so the
lanes count the beat's job and channels and read that job's thresholds for them from
their own buffers, written by the constant loader (:class:`~.constants.ConstantLoader`;
a level output's parameter block is a threshold section). The comparison is the
epilogue's (:func:`~.epilogue.compared_halves` and the functions after it).
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith import positive_int
from ..skid import skid_outputs, staged
from .constants import constant_layouts, word_streams
from .epilogue import compared_halves, joined_halves, level_count

__all__ = ["LevelLanes", "level_settings"]


def level_settings(max_jobs, max_levels, max_out_folds):
    """A level output's geometry: the mixer's output ``jobs`` (its gated bases, or 1
    for the aggregate alone), ``levels`` thresholds a channel, ``out_folds`` of ``pe``
    channels a pixel (a weight chunk's, from fold ``fold_base`` of a job's
    ``job_folds``: its thresholds' stride in the buffers)."""
    return data.StructLayout({"jobs": range(1, max_jobs + 1),
                              "levels": range(1, max_levels + 1),
                              "out_folds": range(1, max_out_folds + 1),
                              "job_folds": range(1, max_out_folds + 1),
                              "fold_base": range(max_out_folds)})


class LevelLanes(wiring.Component):
    """Thresholds each mixer output beat into levels, ``lanes`` channels a cycle.

    Parameters
    ----------
    lanes, pe : int
        The beats' channels and the arrays' output fold (``pe / lanes`` parts a fold).
    value_width : int
        The mixer's values and the thresholds (signed).
    max_levels : int
        Thresholds a channel at most (1 for signs, 3 or 15 for 2- and 4-bit levels).
    max_jobs, max_out_folds : int
        Bounds of :func:`level_settings`; the buffers hold ``max_jobs * max_out_folds *
        pe / lanes`` words.

    Ports
    -----
    thr, inv : ``In(stream.Signature(...))``
        Threshold and invert words at ``(k * job_folds + nf) * pe / lanes + p`` (the
        constant loader's ``thr`` and ``inv``); always taken, write them only while
        ``idle``.
    settings : ``In(level_settings(...))``
        Held while not ``idle``.
    i : ``In(stream.Signature(ArrayLayout(signed(value_width), lanes)))``
        The mixer's beats.
    o : ``Out(stream.Signature(ArrayLayout(signed(level_width), lanes)))``
        Each lane's level (``level_width`` holds ``max_levels``), to a packer.
    idle : ``Out(1)``

    Latency
    -------
    :attr:`latency` = 5 cycles from a beat's acceptance to its levels on ``o``.

    Throughput
    ----------
    A beat a cycle; ``i.ready`` is a register (the output's skid room).
    """

    latency = 5

    def __init__(self, *, lanes, pe, value_width=32, max_levels=1, max_jobs=8,
                 max_out_folds=32):
        for name, value in (("lanes", lanes), ("pe", pe), ("value_width", value_width),
                            ("max_levels", max_levels), ("max_jobs", max_jobs),
                            ("max_out_folds", max_out_folds)):
            positive_int(f"LevelLanes: {name}", value)
        if pe % lanes:
            raise ValueError(f"LevelLanes: lanes ({lanes}) must divide pe ({pe})")
        self.lanes, self.pe, self.parts = lanes, pe, pe // lanes
        self.value_width, self.max_levels = value_width, max_levels
        self.max_jobs, self.max_out_folds = max_jobs, max_out_folds
        self.level_width = max_levels.bit_length() + 1
        self.depth = max_jobs * max_out_folds * self.parts
        addr = range(self.depth)
        super().__init__({
            **{name: In(sig) for name, sig in word_streams(
                constant_layouts(lanes, 1, value_width, max_levels), ("thr", "inv"),
                addr).items()},
            "settings": In(level_settings(max_jobs, max_levels, max_out_folds)),
            "i": In(stream.Signature(data.ArrayLayout(signed(value_width), lanes))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(self.level_width), lanes))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, levels, parts = self.lanes, self.max_levels, self.parts
        st = self.settings
        t_layout = self.thr.payload.shape()["t"].shape
        m.submodules.thresholds = tmem = Memory(shape=t_layout, depth=self.depth, init=[])
        m.submodules.inverts = imem = Memory(shape=unsigned(lanes), depth=self.depth, init=[])
        for mem, port, field in ((tmem, self.thr, "t"), (imem, self.inv, "invert")):
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(port.payload.addr), wp.data.eq(port.payload[field]),
                         wp.en.eq(port.valid), port.ready.eq(1)]

        adv = Signal()
        m.d.comb += self.i.ready.eq(adv)

        stage = staged(m, adv)

        # 0: the beat's job k, part p and fold nf counted; its thresholds' word read
        k = Signal(range(self.max_jobs))
        p = Signal(range(parts))
        nf = Signal(range(self.max_out_folds))
        base = Signal(range(self.depth + 1))           # k * job_folds * parts
        fold = Signal(range(self.depth + 1))           # (fold_base + nf) * parts
        first = st.fold_base * parts
        take = self.i.valid & adv
        with m.If(take):
            with m.If(k != st.jobs - 1):
                m.d.sync += [k.eq(k + 1), base.eq(base + st.job_folds * parts)]
            with m.Else():
                with m.If(p != parts - 1):
                    m.d.sync += p.eq(p + 1)
                with m.Elif(nf != st.out_folds - 1):
                    m.d.sync += [p.eq(0), nf.eq(nf + 1), fold.eq(fold + parts)]
                with m.Else():
                    m.d.sync += [p.eq(0), nf.eq(0), fold.eq(first)]
                m.d.sync += [k.eq(0), base.eq(0)]
        with m.Elif((k == 0) & (p == 0) & (nf == 0)):
            # between pixels: a chunk's first fold
            m.d.sync += fold.eq(first)
        trp, irp = tmem.read_port(), imem.read_port()
        # the address of the beat being taken: its job's, fold's and part's word
        addr = base + fold + p
        m.d.comb += [trp.addr.eq(addr), irp.addr.eq(addr), trp.en.eq(adv), irp.en.eq(adv)]
        z = stage(self.i.payload, "z", False)
        valid0 = valid = stage(self.i.valid, "valid0", True)
        n_levels = stage(st.levels, "levels0", False)

        # 1: the memories' data registered (an ECP5 block RAM's data leave it late: the
        # register moves into the block, docs/architecture.md section 5)
        t = stage(trp.data, "t1", False)
        invert = stage(irp.data, "invert1", False)
        z = stage(z, "z1", False)
        n_levels = stage(n_levels, "levels1", False)
        valid1 = valid = stage(valid, "valid1", True)

        # 2: each threshold compared by halves
        halves = [stage(compared_halves(z[j], t[j], levels), f"halves{j}", False)
                  for j in range(lanes)]
        invert = stage(invert, "invert2", False)
        n_levels = stage(n_levels, "levels2", False)
        valid2 = valid = stage(valid, "valid2", True)

        # 3: the halves joined
        hits = [stage(joined_halves(h, levels), f"hits{j}", False)
                for j, h in enumerate(halves)]
        invert = stage(invert, "invert3", False)
        n_levels = stage(n_levels, "levels3", False)
        valid = stage(valid, "valid3", True)

        # 4: the levels counted, into the output register and its skid
        outs = [level_count(hits[j], invert[j], n_levels, levels) for j in range(lanes)]
        m.d.comb += adv.eq(skid_outputs(m, [self.o], [outs], adv & valid, name="out",
                                        advance=adv))
        in_flight = Signal()
        m.d.comb += in_flight.eq(valid0 | valid1 | valid2 | valid | self.o.valid)
        m.d.comb += self.idle.eq(~in_flight & (k == 0) & (p == 0) & (nf == 0))
        return m
