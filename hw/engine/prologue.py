"""The intended engine's prologue threshold: a binary convolution's input thresholds,
applied as its rows arrive (fusion rule 3; docs/architecture.md section 15).

A row of a fixed-point map (DRAM ``fixed``: ``C`` elements of ``elem_bits`` = 8, 16 or 32
bits a pixel, little-endian two's complement, pixel after pixel, the row padded to the
port) comes in as bus words. Each element is compared with its channel's ``levels``
thresholds for the row's job, ``level = sum_l (x >= T[c][l]) ^ invert[c]`` (the IR's
``threshold``), and the levels go out as the same row of a map of levels (DRAM ``bits``
for one level, else ``uint`` of ``level_bits`` 2 or 4 bits), which the
:class:`~.loader.RowLoader` reads as if DRAM held it. Channels are taken eight at a time
(a *group*), so ``C`` must be a multiple of 8: a group's levels are whole bytes, a pixel
whole groups.

Each job's thresholds are loaded before its rows from its parameter block's ``in_thr``
section (``T[C][levels]`` constants of 4 bytes, then the ``C`` invert bits): a ``load``
command takes the section's bus words.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..arith import positive_int, sum_tree
from ..fifo import block_ram_fifo

__all__ = ["PrologueThreshold", "prologue_settings", "PROLOGUE_ELEMS", "PROLOGUE_LEVELS"]

#: the fixed-point element widths a prologue reads
PROLOGUE_ELEMS = (8, 16, 32)
#: the threshold counts it applies (levels of 1, 2 and 4 bits) and their level bits
PROLOGUE_LEVELS = {1: 1, 3: 2, 15: 4}
#: channels a group, compared in a cycle
GROUP = 8
#: bits of a threshold constant (the section's 4-byte constants)
_T_BITS = 32
#: commands queued: a row's, and the next rows' while its words still come, so that a
#: runner issues the next row's read before this row's words are all in (one command
#: at a time, each row's read waited for the words of the row before: a read latency a
#: row and job, 80,000 cycles of ResNet-18's frame at 224 x 224)
CMD_DEPTH = 4
#: words of the output FIFO (block RAM, which holds at least these) counted as room; a
#: group is issued only while every group in flight could still write a word: a group
#: completes a word at most, and most complete none, so the FIFO never holds more than
#: a few
_OUT_DEPTH = 16


def prologue_settings(max_size, max_channels, max_levels, max_beats):
    """A descriptor's prologue: the input's ``elem_bits``, ``channels`` and ``width``,
    its rows' ``row_beats`` bus words in DRAM (padding included), and ``levels``
    thresholds a channel."""
    return data.StructLayout({
        "elem_bits": range(max(PROLOGUE_ELEMS) + 1), "channels": range(max_channels + 1),
        "levels": range(max_levels + 1), "width": range(1, max_size + 1),
        "row_beats": range(1, max_beats + 1),
    })


class PrologueThreshold(wiring.Component):
    """Thresholds a fixed-point map's rows into rows of levels, eight channels a cycle.

    Parameters
    ----------
    arrays : int
        Jobs whose thresholds it holds.
    data_width : int
        The bus word: 128 or 256 bits (a group's constants are whole bus words).
    max_size, max_channels, max_levels : int
        Bounds of :func:`prologue_settings`; ``max_channels`` a multiple of 8,
        ``max_levels`` one of :data:`PROLOGUE_LEVELS`.

    Ports
    -----
    cmd : ``In(stream.Signature(StructLayout({"load": 1, "job": range(arrays)})))``
        ``load``: the job's ``in_thr`` section comes on ``i`` (``ceil((C * levels * 4 +
        C / 8) / bus bytes)`` words); else one row of the job's map comes on ``i``
        (``row_beats`` words) and its levels go out on ``o``. Up to :data:`CMD_DEPTH`
        commands wait, each taken once the one before is done with its words.
    settings : ``In(prologue_settings(...))``
        Held from the first load of a descriptor to its last row.
    i : ``In(stream.Signature(data_width))``
        The section's or the row's bus words (the read DMA's).
    o : ``Out(stream.Signature(data_width))``
        A row of levels: ``ceil(width * C * level_bits / data_width)`` words, channel
        ``c`` of pixel ``x`` at bit ``(x * C + c) * level_bits``, the last word's bits
        past the row 0.
    idle : ``Out(1)``
        No command is part-way and no word is on its way out.

    Latency
    -------
    7 cycles from the bus word that completes a group to the output word it completes
    (the buffer, the reads, the thresholds, the levels, the FIFO's three registers).

    Throughput
    ----------
    A group a cycle: a bus word a cycle of 16-bit elements (8 channels), one every
    second of 8-bit ones, two of 32-bit ones; a section's word a cycle.
    """

    def __init__(self, *, arrays, data_width=128, max_size=64, max_channels=512,
                 max_levels=1):
        for name, value in (("arrays", arrays), ("data_width", data_width),
                            ("max_size", max_size), ("max_channels", max_channels)):
            positive_int(f"PrologueThreshold: {name}", value)
        if data_width not in (128, 256):
            raise ValueError(f"PrologueThreshold: data_width must be 128 or 256, not "
                             f"{data_width}: a group's constants are whole bus words")
        if max_channels % GROUP:
            raise ValueError(f"PrologueThreshold: max_channels ({max_channels}) must be a "
                             f"multiple of {GROUP}")
        if max_levels not in PROLOGUE_LEVELS:
            raise ValueError(f"PrologueThreshold: max_levels must be one of "
                             f"{sorted(PROLOGUE_LEVELS)}, not {max_levels}")
        self.arrays, self.data_width, self.max_size = arrays, data_width, max_size
        self.max_channels, self.max_levels = max_channels, max_levels
        self.groups = max_channels // GROUP
        self.max_beats = -(-max_size * max_channels * max(PROLOGUE_ELEMS) // data_width)
        super().__init__({
            "cmd": In(stream.Signature(data.StructLayout({"load": 1, "job": range(arrays)}))),
            "settings": In(prologue_settings(max_size, max_channels, max_levels,
                                             self.max_beats)),
            "i": In(stream.Signature(data_width)),
            "o": Out(stream.Signature(data_width)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        dw, st, G, maxl = self.data_width, self.settings, self.groups, self.max_levels
        db = dw // 8
        levels_of = [L for L in PROLOGUE_LEVELS if L <= maxl]
        group_bits = GROUP * _T_BITS * maxl              # a group's constants
        words_of_group = {L: GROUP * _T_BITS * L // dw for L in levels_of}
        inv_words = -(-G // db)                          # a job's invert bits in bus words

        # a job's groups: their constants (channel j's threshold l at j * levels + l), a
        # memory a bus word of them (each word of the section written where it lies),
        # and their invert bits, a bus word of groups a word
        t_mems = []
        for q in range(group_bits // dw):
            mem = Memory(shape=unsigned(dw), depth=self.arrays * G, init=[])
            m.submodules[f"t_mem{q}"] = mem
            t_mems.append(mem)
        m.submodules.inv_mem = inv_mem = Memory(shape=unsigned(dw),
                                                depth=self.arrays * inv_words, init=[])
        t_wps = [mem.write_port() for mem in t_mems]
        t_rps = [mem.read_port() for mem in t_mems]
        inv_wp, inv_rp = inv_mem.write_port(), inv_mem.read_port()

        job = Signal(range(self.arrays))
        is_level = {L: Signal(name=f"levels_{L}") for L in levels_of}
        is_elem = {e: Signal(name=f"elem_{e}") for e in PROLOGUE_ELEMS}
        m.d.sync += [*(is_level[L].eq(st.levels == L) for L in levels_of),
                     *(is_elem[e].eq(st.elem_bits == e) for e in PROLOGUE_ELEMS)]
        level_bits = {L: PROLOGUE_LEVELS[L] for L in levels_of}
        groups_of_pixel = Signal(range(G + 1))
        m.d.sync += groups_of_pixel.eq(st.channels >> exact_log2(GROUP))

        # -- loading: the constants a group at a time, then the invert words --
        t_at = Signal(range(max(words_of_group.values()) + 1))
        g_load = Signal(range(G + 1))
        w_inv = Signal(range(inv_words + 1))
        taken = self.i.valid & self.i.ready
        last_of_group = Const(0)
        for L in levels_of:
            last_of_group = last_of_group | (is_level[L] & (t_at == words_of_group[L] - 1))
        m.d.comb += [inv_wp.addr.eq(job * inv_words + w_inv), inv_wp.data.eq(self.i.payload)]
        for wp in t_wps:
            m.d.comb += [wp.addr.eq(job * G + g_load), wp.data.eq(self.i.payload)]

        # -- a row: its groups out of the bus words, each thresholded and packed --
        e_bits = {e: GROUP * e for e in PROLOGUE_ELEMS}
        buf_bits = max(dw, max(e_bits.values()))
        buf = Signal(buf_bits)
        have = Signal(range(buf_bits + 1))
        group_size = Mux(is_elem[8], e_bits[8], Mux(is_elem[16], e_bits[16], e_bits[32]))
        beats_left = Signal(range(self.max_beats + 1))
        x = Signal(range(self.max_size))
        cg = Signal(range(G))
        groups_done = Signal()                           # the row's groups all issued
        out_level = Signal(range(_OUT_DEPTH + 1))
        m.submodules.out = out = block_ram_fifo(width=dw, depth=_OUT_DEPTH)
        in_flight = Signal(2)                            # groups in the three stages
        room = Signal()
        m.d.comb += out_level.eq(out.level)
        issue = Signal()
        row_last = (x == st.width - 1) & (cg == groups_of_pixel - 1)
        m.d.sync += room.eq(out_level + in_flight + issue < _OUT_DEPTH - 1)

        # stage 1: the group's elements sign-extended, its constants and inverts read
        s1_valid, s1_last = Signal(), Signal()
        s1_x = Signal(data.ArrayLayout(signed(_T_BITS), GROUP))
        s1_byte = Signal(range(db))
        group = {e: [buf[j * e:(j + 1) * e].as_signed() for j in range(GROUP)]
                 for e in PROLOGUE_ELEMS}
        m.d.comb += [inv_rp.addr.eq(job * inv_words + (cg >> exact_log2(db))),
                     inv_rp.en.eq(issue)]
        for rp in t_rps:
            m.d.comb += [rp.addr.eq(job * G + cg), rp.en.eq(issue)]
        m.d.sync += [s1_valid.eq(issue), s1_last.eq(issue & row_last)]
        with m.If(issue):
            m.d.sync += s1_byte.eq(cg[:exact_log2(db)])
            for j in range(GROUP):
                m.d.sync += s1_x[j].eq(Mux(is_elem[8], group[8][j],
                                           Mux(is_elem[16], group[16][j], group[32][j])))

        # stage 2: each lane's thresholds picked from the read words (the memories'
        # read into the comparisons in one stage was the late path on ECP5) and its
        # channel's invert bit, the elements passed on
        s2_valid, s2_last = Signal(), Signal()
        s2_x = Signal.like(s1_x)
        s2_t = [[Signal(signed(_T_BITS), name=f"t{j}_{l}") for l in range(maxl)]
                for j in range(GROUP)]
        s2_inv = Signal(8)
        inv_byte = Signal(8)
        with m.Switch(s1_byte):
            for b in range(db):
                with m.Case(b):
                    m.d.comb += inv_byte.eq(inv_rp.data[8 * b:8 * b + 8])
        consts = Cat(*(rp.data for rp in t_rps))
        m.d.sync += [s2_valid.eq(s1_valid), s2_last.eq(s1_last), s2_x.eq(s1_x),
                     s2_inv.eq(inv_byte)]
        for j in range(GROUP):
            for l in range(maxl):
                t = 0
                for L in levels_of:
                    if l < L:
                        at = (j * L + l) * _T_BITS
                        t = Mux(is_level[L], consts[at:at + _T_BITS], t)
                m.d.sync += s2_t[j][l].eq(t)

        # stage 3: the levels, each lane's count of thresholds met, inverted per channel
        s3_valid, s3_last = Signal(), Signal()
        s3_levels = Signal(data.ArrayLayout(unsigned(4), GROUP))
        m.d.sync += [s3_valid.eq(s2_valid), s3_last.eq(s2_last)]
        for j in range(GROUP):
            hits = []
            for l in range(maxl):
                used = 0
                for L in levels_of:
                    if l < L:
                        used = used | is_level[L]
                hit = Signal(name=f"hit{j}_{l}")
                m.d.comb += hit.eq(used & ((s2_x[j] >= s2_t[j][l]) ^ s2_inv[j]))
                hits.append(hit)
            m.d.sync += s3_levels[j].eq(sum_tree(hits))

        # stage 4: the group's levels into the output word (group `k` of it), out when
        # full or at the row's end
        acc = Signal(dw)
        k = Signal(range(dw // GROUP + 1))
        packed = {}
        for L in levels_of:
            b = level_bits[L]
            packed[L] = Cat(*(s3_levels[j][:b] for j in range(GROUP)))
        per_word = {L: dw // (GROUP * level_bits[L]) for L in levels_of}
        word = Signal(dw)
        full = Const(0)
        for L in levels_of:
            full = full | (is_level[L] & (k == per_word[L] - 1))
        parts = []
        for L in levels_of:
            bits = GROUP * level_bits[L]
            placed = Cat(*(Mux(k == q, packed[L], acc[q * bits:(q + 1) * bits])
                           for q in range(per_word[L])))
            parts.append((is_level[L], placed))
        merged = acc
        for flag, placed in parts:
            merged = Mux(flag, placed, merged)
        m.d.comb += [word.eq(merged), out.w_data.eq(word),
                     out.w_en.eq(s3_valid & (full | s3_last))]
        with m.If(s3_valid):
            with m.If(full | s3_last):
                m.d.sync += [acc.eq(0), k.eq(0)]
            with m.Else():
                m.d.sync += [acc.eq(word), k.eq(k + 1)]
        m.d.sync += in_flight.eq(issue + s1_valid + s2_valid)
        m.d.comb += [self.o.payload.eq(out.r_data), self.o.valid.eq(out.r_rdy),
                     out.r_en.eq(self.o.ready)]

        cmd_layout = self.cmd.payload.shape()
        m.submodules.cmds = cmds = SyncFIFO(width=cmd_layout.size, depth=CMD_DEPTH)
        queued = data.View(cmd_layout, cmds.r_data)
        m.d.comb += [cmds.w_data.eq(self.cmd.payload), cmds.w_en.eq(self.cmd.valid),
                     self.cmd.ready.eq(cmds.w_rdy)]
        with m.FSM(name="prologue") as fsm:
            with m.State("IDLE"):
                m.d.comb += cmds.r_en.eq(1)
                with m.If(cmds.r_rdy):
                    m.d.sync += [job.eq(queued.job), t_at.eq(0), g_load.eq(0),
                                 w_inv.eq(0), have.eq(0), x.eq(0), cg.eq(0),
                                 groups_done.eq(0), beats_left.eq(st.row_beats)]
                    with m.If(queued.load):
                        m.next = "CONSTS"
                    with m.Else():
                        m.next = "ROW"
            with m.State("CONSTS"):
                m.d.comb += self.i.ready.eq(1)
                for q, wp in enumerate(t_wps):
                    m.d.comb += wp.en.eq(self.i.valid & (t_at == q))
                with m.If(self.i.valid):
                    with m.If(last_of_group):
                        m.d.sync += [t_at.eq(0), g_load.eq(g_load + 1)]
                        with m.If(g_load == groups_of_pixel - 1):
                            m.next = "INVERTS"
                    with m.Else():
                        m.d.sync += t_at.eq(t_at + 1)
            with m.State("INVERTS"):
                m.d.comb += [self.i.ready.eq(1), inv_wp.en.eq(self.i.valid)]
                with m.If(self.i.valid):
                    m.d.sync += w_inv.eq(w_inv + 1)
                    with m.If(((w_inv + 1) << exact_log2(db)) >= groups_of_pixel):
                        m.next = "IDLE"
            with m.State("ROW"):
                m.d.comb += issue.eq(~groups_done & (have >= group_size) & room)
                # a word comes in, in the cycle a group leaves too, while the buffer lacks
                # the next group; once the row's groups are out the rest are its padding
                after = Signal.like(have)
                m.d.comb += [after.eq(have - Mux(issue, group_size, 0)),
                             self.i.ready.eq((beats_left != 0) & (
                                 groups_done | (~(issue & row_last) & (after < group_size))))]
                with m.If(issue):
                    with m.If(cg == groups_of_pixel - 1):
                        m.d.sync += [cg.eq(0), x.eq(x + 1)]
                    with m.Else():
                        m.d.sync += cg.eq(cg + 1)
                    m.d.sync += buf.eq(buf >> group_size)
                    with m.If(row_last):
                        m.d.sync += groups_done.eq(1)
                m.d.sync += have.eq(after)
                with m.If(taken & ~groups_done):
                    with m.Switch(after):
                        for at in range(0, buf_bits, dw):
                            with m.Case(at):
                                m.d.sync += buf[at:at + dw].eq(self.i.payload)
                    m.d.sync += have.eq(after + dw)
                with m.If(taken):
                    m.d.sync += beats_left.eq(beats_left - 1)
                with m.If(groups_done & (beats_left == 0)):
                    m.next = "IDLE"
        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & ~cmds.r_rdy & ~s1_valid & ~s2_valid
                                 & ~s3_valid
                                 & ~out.r_rdy
                                 & (out.level == 0))
        return m
