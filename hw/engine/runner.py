"""The intended engine's convolution runner: one binary convolution descriptor, from
DRAM to DRAM, on the units of docs/architecture.md section 15.

A descriptor comes in whole (its 128 bytes, the program format's fields:
:func:`descriptor_fields`); the runner reads its job table, then each job's prologue
thresholds into the :class:`~.prologue.PrologueThreshold`, its post-op and
threshold sections into the feeder's constant buffers (through the
:class:`~.constants.ConstantLoader`; a level output's thresholds into the level lanes',
a mixer's coefficients into registers), each job's binary weights into the fold issuer,
then the input maps row by row into the gatherer's ring (through the
:class:`~.loader.RowLoader`; a fixed-point map through the prologue first, which hands
the loader the rows of its levels), while the layer datapath computes and the
:class:`~.packer.OutputPacker` and :class:`~.writer.RowWriter` write each job's output
map. It reads through one read DMA's ``cmd`` and words and writes through one write
DMA's, so every address it makes is checked against the host's window by the DMAs.

The geometry the units step by (words a pixel, a window's folds, the ring's pitch, the
gatherer's steps, a pixel's bytes, the windows) is the descriptor's *unit geometry*,
which the compiler computes (``compiler/engine/gather.py``): the runner multiplies
nothing but small counts once a descriptor.

The constants are loaded before the first row, a read at a time, and the weights
through the weight loader (below); rows and side maps overlap their reads (``ConvRunner``'s latency). A map every job of a round
reads (``shared_input``, no residual add) is read a row at a time into the
:class:`~.replay.RowReplay`, which gives each row to every job in turn, the next row's
read overlapping. What it runs: a CONV of binary weights and one channel group,
with any of the post-op, residual add, ReLU and threshold stages, binary or 2-/4-bit
level inputs or a prologue threshold of a fixed-point map (8-, 16- or 32-bit elements,
a multiple of 8 channels, 4-byte thresholds, levels of the ring's bits), every output
format of the packer, any number of jobs (more than ``arrays`` run in rounds of
``arrays``, each as a descriptor of its own: the job table's next entries); and a
block's mixer on chip (every array a base: its K gated outputs or its aggregate alone,
and with fusion rule 7 one level output each, through the :class:`~.mixer.MixerLanes`,
the :class:`~.levels.LevelLanes` and a second packer; with two level outputs an output
and no wide one, the second's through a second unit of level lanes and the main
packer).

Weights that pass half the fold issuer's buffer stream (the descriptor's
``weight_stream``, in chunks of ``chunk_c`` output channels): each chunk's weights go
into the half not issued while the arrays compute the chunk before, read by the
*weight loader* from the moment the chunk before begins its rows, a piece of 8 weight
words at a time between the side slices' reads (a weight word at a time, once the
rows' words are in, while input rows are still to be read; each read command's words
are tagged weights or not in issue order, so weights reach the fold issuer wherever
they fall in the read DMA's words), the input rows are read again for each chunk unless
the ring holds the whole map (``in_h <= ring_rows``: the first chunk's rows stay for
the others), a residual add's side slices (each pixel's chunk of channels, whole bus
words) are read for each chunk, and the
packers write each pixel's slice of the chunk as a row of its own into the
:class:`~.mapbuffer.MapBuffer`, which gives the writer the whole maps after the last
chunk (a map and its level output a region each, a kind alone two); an output map
larger than its region of the map buffer whose slices are whole bus words goes straight
to DRAM instead, each slice at its pixel (the writer starts each chunk at the chunk's
offset in a pixel and skips the pixel's other channels after each slice), and its level
outputs take two regions each. A chunk is committed once the one before has all its slices in the buffer, so
the units' settings (the chunk's first fold, folds and channels) change between
chunks only.

Anything else (a prologue of other maps, two level outputs beside a wide one, a fused
max pool, integer weights, a mixer of more bases than arrays, a streaming output map
larger than its region of the map buffer whose slices are not whole bus words, a
streaming level output larger than its region, a streaming residual add of option A or of
slices that are not whole bus words) is refused with ``error`` and the cause
``unsupported`` before any transfer.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...engine_format import (DESCRIPTOR_FIELDS, FLAG_BITS, JOB_FIELDS, OPCODE_CODES,
                              STAGE_BITS, field_offsets)
from ...engine_registers import ERROR_CAUSES
from ..arith import multiplier_loan, positive_int
from .constants import POSTOP, THR, ConstantLoader
from .dma import descriptor_layout
from .layer import LayerDatapath
from .levels import LevelLanes
from .loader import RowLoader
from .mapbuffer import MapBuffer
from .mixer import MixerLanes, at_fraction
from .packer import ELEMS, OutputPacker
from .prologue import PROLOGUE_ELEMS, PROLOGUE_LEVELS, PrologueThreshold
from .replay import RowReplay
from .unpacker import InputUnpacker
from .writer import RowWriter

__all__ = ["ConvRunner", "descriptor_fields", "compute_unit_members", "job_entry_field",
           "refuse_or_read_entry",
           "RUNNER_STAGES", "RUNNER_FLAGS"]

#: the stages the runner executes (STAGE_BITS)
RUNNER_STAGES = (STAGE_BITS["prologue_threshold"] | STAGE_BITS["postop"] | STAGE_BITS["add"]
                 | STAGE_BITS["relu"] | STAGE_BITS["threshold"] | STAGE_BITS["mixer"]
                 | STAGE_BITS["gated"])
#: the flags it executes: all jobs reading one input (or one side input) is a job table
#: whose entries share an address, read once a job; the add's order is the sum's
RUNNER_FLAGS = (FLAG_BITS["shared_input"] | FLAG_BITS["shared_side"] | FLAG_BITS["side_first"]
                 | FLAG_BITS["levels_out"] | FLAG_BITS["levels_only"]
                 | FLAG_BITS["weight_stream"])
#: the level outputs' element widths (fusion rule 7: signs and 2- and 4-bit levels)
_LEVEL_ELEMS = (1, 2, 4)
_FIXED_FORMAT = 2          # a fixed-point map (two's complement elements)
_ENTRY_BITS = 8 * sum(size for _, size in field_offsets(JOB_FIELDS).values())
_BITS_FORMAT = 0           # in_fmt / out_fmt: a binary map (one bit a channel)
#: read commands whose words may still come: a side row's batches (four of a chunk a
#: job), a row's, the weight loader's and the replay's
_TAGS = 32
#: Bits of a read's words (its tag's count): rows, main or side, of fewer than 2**16 bus
#: words, which `supported` checks, so that counts and offsets in a row are this narrow.
_ROW_WORD_BITS = 16
#: weight words a command of the weight loader (its reads go out between the side
#: slices' without holding them long), and while input rows are still to be read: a
#: weight word, only once every row word asked for is in (the loader, at a ring word a
#: cycle, keeps the ring ahead of the arrays only with its rows' words coming as soon
#: as it takes them: behind two pieces of 8, a stride-2 layer's rows came a piece late
#: each and its arrays waited on them)
_WEIGHT_PIECE = 8
_WEIGHT_PIECE_BESIDE_ROWS = 1
#: input rows read past the arrays' window from which the weight loader takes pieces of
#: 8 again (two pieces' words delay the next row by about as long as the arrays take
#: for a row of a 14x14 stride-2 layer's chunk)
_ROWS_AHEAD = 3


def descriptor_fields():
    """The 128-byte descriptor as a layout of its fields (``engine_format``'s list, each
    little-endian field an unsigned value): the bytes read as one little-endian number
    are this view."""
    offsets = field_offsets(DESCRIPTOR_FIELDS)
    return data.StructLayout({name: unsigned(8 * size) for name, (_, size) in offsets.items()})


def compute_unit_members(data_width, addr_width):
    """The ports of a compute unit of the engine of the units (the runner's, the
    classifier head's): a descriptor in, the read and write DMAs' commands and words,
    and ``done``, ``error``, ``error_code``, ``idle``."""
    cmd = stream.Signature(descriptor_layout(addr_width))
    return {"desc": In(stream.Signature(descriptor_fields())),
            "rd_cmd": Out(cmd), "rd": In(stream.Signature(data_width)),
            "wr_cmd": Out(cmd), "wr": Out(stream.Signature(data_width)),
            "done": Out(1), "error": Out(1), "error_code": Out(4), "idle": Out(1)}


def refuse_or_read_entry(m, unit, d, ok, entry, next_state):
    """A compute unit's ``DECIDE``, ``TABLE`` and ``ENTRY`` states (inside its FSM): the
    registered checks ``ok`` refuse the descriptor ``d`` (``error``, cause
    ``unsupported``, back to ``IDLE``), or the bus word that holds its job table's first
    entry is read into ``entry`` and the FSM goes on to ``next_state``."""
    db = unit.data_width // 8
    log_db = exact_log2(db)
    with m.State("DECIDE"):
        with m.If(~ok.all()):
            m.d.comb += [unit.error.eq(1), unit.error_code.eq(ERROR_CAUSES["unsupported"])]
            m.next = "IDLE"
        with m.Else():
            m.next = "TABLE"
    with m.State("TABLE"):
        m.d.comb += [unit.rd_cmd.valid.eq(1),
                     unit.rd_cmd.payload.address.eq(d.table_addr >> log_db << log_db),
                     unit.rd_cmd.payload.length.eq(db)]
        with m.If(unit.rd_cmd.ready):
            m.next = "ENTRY"
    with m.State("ENTRY"):
        m.d.comb += unit.rd.ready.eq(1)
        with m.If(unit.rd.valid):
            at = d.table_addr[:log_db] >> 4
            picked = unit.rd.payload.word_select(at, 128) if db > 16 else unit.rd.payload
            m.d.sync += entry.eq(picked)
            m.next = next_state


def job_entry_field(entry, name):
    """Field ``name`` of a job-table entry's 16 bytes (``JOB_FIELDS``)."""
    at, size = field_offsets(JOB_FIELDS)[name]
    return entry[8 * at:8 * (at + size)]


class ConvRunner(wiring.Component):
    """Runs a binary convolution descriptor on the layer units, DRAM to DRAM.

    Parameters
    ----------
    arrays, pe, simd, planes, lanes : int
        The layer datapath's (:class:`~.layer.LayerDatapath`); ``pe * simd`` a multiple
        of ``data_width`` (a weight word is whole bus words).
    data_width : int
        The DMAs' bus word: a power of two and a multiple of 128 bits (a job-table entry
        is 16 bytes), the program's port width.
    addr_width : int
        Bits of a byte address.
    ring_rows, ring_words, max_size, max_words, max_kernel, max_weight_words,
    max_out_folds, const_width, value_width, max_levels : int
        Bounds of the units (:class:`~.layer.LayerDatapath`).
    chunk : int
        Words of the row writer's commands (:class:`~.writer.RowWriter`).
    replay_words : int
        Bus words of a row the :class:`~.replay.RowReplay` holds (a power of two): an
        input map all jobs read (``shared_input``) whose rows are at most this is read
        once for every job of a round, else once a job.
    map_words : int
        Bus words of the output map buffer (:class:`~.mapbuffer.MapBuffer`) that a
        weight-streaming descriptor's outputs are assembled in: each job's map and its
        level output within ``map_words // (2 * arrays)`` words.

    Ports
    -----
    desc : ``In(stream.Signature(descriptor_fields()))``
        A CONV descriptor; taken when the runner is idle.
    rd_cmd : ``Out(stream.Signature(descriptor_layout(addr_width)))``
        To the read DMA's ``cmd``.
    rd : ``In(stream.Signature(data_width))``
        The read DMA's words.
    wr_cmd : ``Out(stream.Signature(descriptor_layout(addr_width)))``
        To the write DMA's ``cmd``.
    wr : ``Out(stream.Signature(data_width))``
        To the write DMA's ``i``.
    done : ``Out(1)``
        Pulse: every output word of the descriptor has been handed to the write DMA
        (whose ``done`` says when it is on the bus).
    error : ``Out(1)``
        Pulse: the descriptor was refused (``error_code`` ``unsupported``); nothing was
        read or written.
    error_code : ``Out(4)``
    idle : ``Out(1)``
    loan : ``In(multiplier_loan(lanes, value_width, 18))``
        The mixer lanes' multipliers, lent between descriptors
        (:class:`~.mixer.MixerLanes`'s ``loan``).

    Latency
    -------
    Per descriptor: the job table's read, then each section's and each job's weights'
    read latency in turn, plus the datapath's latency. Rows' and side maps' reads
    overlap (a row's goes out while the loader, or the prologue, takes the one before
    it; a side row's chunks a batch of every job at a time, three batches deep, while
    the rows before still arrive, and the rows after while its words do; a shared
    map's next row while the replay unit gives out this one).

    Throughput
    ----------
    The units' while a row's words stream: the ring takes a ring word a cycle, a
    prologue 8 channels a cycle (4 of 32-bit elements); a weight chunk after the first
    begins once the one before is drained into the map buffer.
    """

    def __init__(self, *, arrays, pe, simd, planes=1, lanes=None, data_width=128,
                 addr_width=32, ring_rows=4, ring_words=1024, max_size=64, max_words=8,
                 max_kernel=3, max_weight_words=512, max_out_folds=16, const_width=32,
                 value_width=32, max_levels=1, chunk=8, map_words=256,
                 replay_words=512):
        for name, value in (("arrays", arrays), ("pe", pe), ("simd", simd),
                            ("data_width", data_width), ("chunk", chunk)):
            positive_int(f"ConvRunner: {name}", value)
        if data_width % 128 or data_width & (data_width - 1):
            raise ValueError(f"ConvRunner: data_width ({data_width}) must be a power of two "
                             "of at least 128 bits: a job-table entry is 16 bytes")
        if (pe * simd) % data_width:
            raise ValueError(f"ConvRunner: a weight word of pe x simd = {pe * simd} bits must "
                             f"be whole bus words of {data_width}")
        self.layer = LayerDatapath(arrays=arrays, pe=pe, simd=simd, lanes=lanes, planes=planes,
                                   ring_rows=ring_rows, ring_words=ring_words,
                                   max_size=max_size, max_words=max_words,
                                   max_kernel=max_kernel, max_weight_words=max_weight_words,
                                   max_out_folds=max_out_folds, const_width=const_width,
                                   value_width=value_width, max_levels=max_levels)
        lanes = self.layer.feeder.lanes
        self.loader = RowLoader(arrays=arrays, simd=simd, planes=planes, data_width=data_width,
                                ring_words=ring_words, ring_rows=ring_rows, max_size=max_size,
                                max_words=max_words)
        max_channels = max_out_folds * pe
        self.const_words = arrays * max_out_folds * pe // lanes
        self.constants = ConstantLoader(arrays=arrays, lanes=lanes, const_width=const_width,
                                        value_width=value_width, max_levels=max_levels,
                                        data_width=data_width, max_channels=max_channels,
                                        max_words=self.const_words)
        self.packer = OutputPacker(arrays=arrays, pe=pe, lanes=lanes, value_width=value_width,
                                   data_width=data_width, max_size=max_size,
                                   max_channels=max_channels, max_out_folds=max_out_folds)
        self.mixer = MixerLanes(lanes=lanes, value_width=value_width, max_jobs=arrays)
        self.levels = LevelLanes(lanes=lanes, pe=pe, value_width=value_width,
                                 max_levels=max_levels, max_jobs=arrays,
                                 max_out_folds=max_out_folds)
        # an output's second level output (two readers threshold it apart, fusion rule
        # 7): its own lanes, and the main packer, which such a mixer leaves free (it
        # writes no wide output)
        self.levels2 = LevelLanes(lanes=lanes, pe=pe, value_width=value_width,
                                  max_levels=max_levels, max_jobs=arrays,
                                  max_out_folds=max_out_folds)
        self.level_packer = OutputPacker(arrays=arrays, pe=pe, lanes=lanes,
                                         value_width=self.levels.level_width,
                                         data_width=data_width, elems=_LEVEL_ELEMS,
                                         max_size=max_size, max_channels=max_channels,
                                         max_out_folds=max_out_folds)
        # a weight-streaming descriptor's outputs, a chunk's channels of every pixel at
        # a time, meet in the map buffer before the writer
        self.maps = MapBuffer(jobs=arrays, kinds=2, data_width=data_width, depth=map_words,
                              max_size=max_size)
        # a job's output map and its level output (fusion rule 7): twice the jobs; a
        # streaming output map too large for the map buffer is written a slice at a time,
        # each skipping the pixel's other channels (up to a region of the map buffer)
        self.writer = RowWriter(arrays=2 * arrays, data_width=data_width, chunk=chunk,
                                addr_width=addr_width, max_skip=self.maps.region_bytes)
        # what the check reads of products registered in SIZE: the maps written fit
        # their regions of the map buffer, a streaming add's side slices are whole words
        self._map_fits = Signal(name="map_fits")
        self._side_aligned = Signal(name="side_aligned")
        self.unpacker = InputUnpacker(arrays=arrays, pe=pe, lanes=lanes, value_width=value_width,
                                      data_width=data_width, max_size=max_size,
                                      max_channels=max_channels, max_out_folds=max_out_folds)
        # a prologue's levels are the ring's: a bit plane a level bit
        self.prologue_levels = max(L for L, b in PROLOGUE_LEVELS.items() if b <= planes)
        self.prologue = PrologueThreshold(arrays=arrays, data_width=data_width,
                                          max_size=max_size, max_channels=max_words * simd,
                                          max_levels=self.prologue_levels) \
            if data_width in (128, 256) else None
        # a map every job reads: each row read once, given out once a job
        self.replay = RowReplay(data_width=data_width, row_words=replay_words)
        self.chunk = chunk
        self.arrays, self.pe, self.simd, self.planes, self.lanes = arrays, pe, simd, planes, lanes
        self.data_width, self.addr_width = data_width, addr_width
        self.ring_rows, self.ring_words, self.max_size = ring_rows, ring_words, max_size
        self.max_words, self.max_kernel = max_words, max_kernel
        self.max_weight_words, self.max_out_folds = max_weight_words, max_out_folds
        self.max_levels, self.value_width = max_levels, value_width
        # the mixer's multipliers, lent between descriptors (to the classifier head)
        loan = multiplier_loan(lanes, value_width, self.mixer.coef_width)
        super().__init__({**compute_unit_members(data_width, addr_width), "loan": In(loan)})

    def supported(self, d):
        """Whether the units can run descriptor ``d`` (a value of
        :func:`descriptor_fields`): one comparison a bound, no product wider than the
        counts'."""
        fits = lambda value, bound: value <= bound               # noqa: E731
        streams = d.flags & FLAG_BITS["weight_stream"] != 0
        conditions = [
            d.opcode == OPCODE_CODES["CONV"],
            (d.stages & ~RUNNER_STAGES) == 0,
            (d.flags & ~RUNNER_FLAGS) == 0,
            d.groups == 1, d.jobs != 0,
            d.words != 0, fits(d.words, self.max_words),
            d.kernel != 0, fits(d.kernel, self.max_kernel),
            d.stride != 0, fits(d.stride, self.max_kernel), d.dilation != 0,
            d.in_h != 0, d.in_w != 0, fits(d.in_h, self.max_size), fits(d.in_w, self.max_size),
            # (a read's words are counted in 16 bits)
            d.in_pitch < (1 << _ROW_WORD_BITS) * (self.data_width // 8),
            d.side_pitch < (1 << _ROW_WORD_BITS) * (self.data_width // 8),
            d.out_h != 0, d.out_w != 0, fits(d.out_h, self.max_size),
            fits(d.out_w, self.max_size),
            d.out_folds != 0, fits(d.out_folds, self.max_out_folds),
            fits(d.in_folds, self.layer.issuer.max_in_folds),
            Mux(streams, self._streaming_ok(d),
                fits(self.weight_words_of(d), self.max_weight_words)),
            fits(d.pitch * self.ring_rows, self.ring_words), d.span < self.ring_rows,
            fits(d.out_levels, self.max_levels),
            (d.const_bytes == 4) | (d.const_bytes == 8),
            Mux(d.stages & STAGE_BITS["prologue_threshold"] != 0, self._prologue_ok(d),
                _elem_ok(d.in_fmt, d.in_elem, [1] + [b for b in (2, 4) if b <= self.planes])),
            _elem_ok(d.out_fmt, d.out_elem, ELEMS),
            # a block's mixer on chip: its K gated outputs, every array a base (the
            # mixer takes a part's beats of every array as one group)
            (d.stages & STAGE_BITS["mixer"] == 0) | (d.jobs == self.arrays),
            (d.stages & STAGE_BITS["gated"] == 0) | (d.stages & STAGE_BITS["mixer"] != 0),
            (d.flags & FLAG_BITS["levels_out"] == 0) | (
                (d.stages & STAGE_BITS["mixer"] != 0)
                & ((d.aux_outputs == 1) | ((d.aux_outputs == 2)
                                           & (d.flags & FLAG_BITS["levels_only"] != 0)))
                & (d.aux_levels != 0) & fits(d.aux_levels, self.max_levels)
                & _elem_ok(d.aux_fmt, d.aux_elem, _LEVEL_ELEMS)),
            (d.flags & FLAG_BITS["levels_only"] == 0) | (d.flags & FLAG_BITS["levels_out"] != 0),
            (d.stages & STAGE_BITS["add"] == 0) | (
                _elem_ok(d.side_fmt, d.side_elem, ELEMS) & (d.side_c != 0)
                & fits(d.side_c, d.out_c)),
            d.weight_tile_bytes == self.weight_words_of(d) * (self.pe * self.simd // 8),
        ]
        ok = Const(1)
        for c in conditions:
            ok = ok & c
        return ok

    def _streaming_ok(self, d):
        """Whether the units stream ``d``'s weights: chunks of whole PE folds of whole
        bytes of outputs whose weights fit a half of the fold issuer, each output map
        and level output within its region of the map buffer (the products registered:
        ``SIZE``) or, an output map, of slices of whole bus words (written straight to
        DRAM), and a residual add's side slices whole bus words."""
        if self.pe & (self.pe - 1):
            return Const(0)
        pe_bits = exact_log2(self.pe)
        chunk = d.chunk_c[:bits_of(self.max_out_folds * self.pe)]
        return ((d.chunk_c != 0) & (d.chunk_c == chunk) & (chunk[:max(pe_bits, 3)] == 0)
                & ((chunk >> pe_bits) * d.in_folds[:bits_of(self.layer.issuer.max_in_folds)]
                   <= self.max_weight_words)
                & ((d.stages & STAGE_BITS["add"] == 0) | self._side_slices_ok(d))
                & (d.aux_pitch <= self.maps.region_bytes) & self._map_fits)

    def _side_slices_ok(self, d):
        """A streaming residual add reads each pixel's slice of the side map, a chunk's
        channels, as whole bus words: the side map as many channels as the output (no
        option A), its pixels and the chunks' slices whole bus words (registered in
        ``SIZE``)."""
        return (d.side_c == d.out_c) & self._side_aligned

    def _prologue_ok(self, d):
        """Whether the prologue unit thresholds ``d``'s input: a fixed-point map of 8-,
        16- or 32-bit elements and a multiple of 8 channels that the ring holds, 4-byte
        thresholds, and levels of as many bits as the ring's planes take (one level: a
        binary convolution)."""
        if self.prologue is None:
            return Const(0)
        levels = Const(0)
        for L in PROLOGUE_LEVELS:
            if L <= self.prologue_levels:
                levels = levels | ((d.in_levels == L) & ((d.act_bits == 0) == (L == 1)))
        elems = Const(0)
        for e in PROLOGUE_ELEMS:
            elems = elems | (d.in_elem == e)
        return ((d.in_fmt == _FIXED_FORMAT) & elems & levels & (d.const_bytes == 4)
                & (d.in_c[:3] == 0) & (d.in_c <= self.prologue.max_channels))

    def weight_words_of(self, d):
        """A job's weight words, ``out_folds x in_folds``, of the fields cut to their
        bounds (so the product is of a few bits; a field past its bound fails the
        bound's own check)."""
        return (d.out_folds[:bits_of(self.max_out_folds)]
                * d.in_folds[:bits_of(self.layer.issuer.max_in_folds)])

    def elaborate(self, platform):
        m = Module()
        # a streaming output map written straight to DRAM, its slices through the writer
        direct = Signal(name="direct")
        m.submodules.layer, m.submodules.loader = self.layer, self.loader
        m.submodules.constants, m.submodules.packer = self.constants, self.packer
        m.submodules.writer, m.submodules.unpacker = self.writer, self.unpacker
        m.submodules.mixer, m.submodules.levels = self.mixer, self.levels
        wiring.connect(m, wiring.flipped(self.loan), self.mixer.loan)
        m.submodules.levels2 = levels2 = self.levels2
        m.submodules.level_packer = self.level_packer
        m.submodules.maps = maps = self.maps
        pro = self.prologue
        if pro is not None:
            m.submodules.prologue = pro
        m.submodules.replay = replay_unit = self.replay
        layer, loader, consts = self.layer, self.loader, self.constants
        unpacker, mixer, levels, lpacker = self.unpacker, self.mixer, self.levels, self.level_packer
        packer, writer = self.packer, self.writer
        arrays, pe, simd, dw = self.arrays, self.pe, self.simd, self.data_width
        jobs_of = lambda d: d.jobs[:bits_of(arrays)]                 # noqa: E731
        db = dw // 8
        log_db = exact_log2(db)

        # -- the units, connected; their settings are the held descriptor's --
        d = Signal(descriptor_fields())
        wiring.connect(m, loader.o, layer.rows)
        wiring.connect(m, consts.ab, layer.ab)
        # thresholds and invert bits go to the feeder, or to a level lanes unit while a
        # level output's block is loaded (`to_levels`: 0 the feeder, 1 and 2 the units)
        to_levels = Signal(2)
        for name in ("thr", "inv"):
            src = getattr(consts, name)
            dst = (getattr(layer, name), getattr(levels, name), getattr(levels2, name))
            for j, sink in enumerate(dst):
                m.d.comb += [sink.valid.eq(src.valid & (to_levels == j)),
                             sink.payload.eq(src.payload)]
            m.d.comb += src.ready.eq(_pick(to_levels, [sink.ready for sink in dst]))
        # the epilogue's beats to the packer, or through the mixer to the packer (its
        # gated outputs) and the level lanes (their levels, to the level packer)
        mixing = d.stages & STAGE_BITS["mixer"] != 0
        levels_out = d.flags & FLAG_BITS["levels_out"] != 0
        wide_out = d.flags & FLAG_BITS["levels_only"] == 0
        # a mixer's aggregate alone is one beat a part where the packers count every
        # array's: each is followed by `arrays - 1` beats of zeros, which the packers
        # drop as jobs past the descriptor's (one output)
        aggregate = mixing & (d.stages & STAGE_BITS["gated"] == 0)
        # the descriptor's outputs: a job's each, or the aggregate alone
        outputs = Mux(aggregate, 1, jobs_of(d))
        m.d.comb += [mixer.i.payload.eq(layer.o.payload),
                     mixer.i.valid.eq(layer.o.valid & mixing)]
        # two level outputs an output (levels only): the second's levels take the main
        # packer
        two_levels = levels_out & (d.aux_outputs == 2)
        second = Signal.like(layer.o.payload)
        for j in range(self.lanes):
            m.d.comb += second[j].eq(levels2.o.payload[j])
        # the mixer's outputs to every consumer at once (their `ready`s are registers)
        main_valid = Mux(two_levels, levels2.o.valid,
                         Mux(mixing, mixer.o.valid & wide_out & (~levels_out | levels.i.ready),
                             layer.o.valid))
        main_ready = _spread(m, "main", arrays, aggregate, main_valid,
                             Mux(two_levels, Value.cast(second),
                                 Mux(mixing, Value.cast(mixer.o.payload),
                                     Value.cast(layer.o.payload))), packer.i)
        m.d.comb += [
            layer.o.ready.eq(Mux(mixing, mixer.i.ready, main_ready)),
            levels.i.payload.eq(mixer.o.payload),
            levels.i.valid.eq(mixer.o.valid & levels_out & (~wide_out | main_ready)
                              & (~two_levels | levels2.i.ready)),
            levels2.i.payload.eq(mixer.o.payload),
            levels2.i.valid.eq(mixer.o.valid & two_levels & levels.i.ready),
            levels2.o.ready.eq(two_levels & main_ready),
            mixer.o.ready.eq((~wide_out | main_ready) & (~levels_out | levels.i.ready)
                             & (~two_levels | levels2.i.ready)),
        ]
        m.d.comb += levels.o.ready.eq(_spread(m, "levels", arrays, aggregate, levels.o.valid,
                                              levels.o.payload, lpacker.i))
        # both packers' words to the writer, a job's level output as writer job
        # `arrays + k`: the two take turns when both have a word; a weight-streaming
        # descriptor's packers write slices into the map buffer, which gives the writer
        # whole rows, but for a map written straight to DRAM (`direct`: the main
        # packer's slices go to the writer, which skips the pixels' other channels)
        streaming = d.flags & FLAG_BITS["weight_stream"] != 0
        w = stream.Signature(writer.i.payload.shape()).create()
        wi = writer.i
        to_maps = Signal()
        w_direct = Signal()               # a word of `w` to the writer
        m.d.comb += [to_maps.eq(streaming & ~(direct & (w.payload.job < arrays))),
                     w_direct.eq(w.valid & ~to_maps),
                     maps.i.valid.eq(w.valid & to_maps),
                     *(getattr(maps.i.payload, f).eq(getattr(w.payload, f))
                       for f in ("data", "job", "last")),
                     *(getattr(wi.payload, f).eq(Mux(w_direct, getattr(w.payload, f),
                                                     getattr(maps.o.payload, f)))
                       for f in ("data", "job", "last")),
                     wi.valid.eq(w_direct | (streaming & maps.o.valid)),
                     maps.o.ready.eq(streaming & ~w_direct & wi.ready),
                     w.ready.eq(Mux(to_maps, maps.i.ready, wi.ready))]
        pick_levels = Signal()
        last_levels = Signal()
        m.d.comb += pick_levels.eq(lpacker.o.valid & (~packer.o.valid | ~last_levels))
        m.d.comb += [w.valid.eq(packer.o.valid | lpacker.o.valid),
                     w.payload.data.eq(Mux(pick_levels, lpacker.o.payload.data,
                                           packer.o.payload.data)),
                     w.payload.job.eq(Mux(pick_levels, arrays + lpacker.o.payload.job,
                                          packer.o.payload.job)),
                     w.payload.last.eq(Mux(pick_levels, lpacker.o.payload.last,
                                           packer.o.payload.last)),
                     lpacker.o.ready.eq(pick_levels & w.ready),
                     packer.o.ready.eq(~pick_levels & w.ready)]
        with m.If(w.valid & w.ready):
            m.d.sync += last_levels.eq(pick_levels)
        slices_in = Signal(range(arrays * self.max_size ** 2 + 1))
        with m.If(w.valid & w.ready & w.payload.last):
            m.d.sync += slices_in.eq(slices_in + 1)
        wiring.connect(m, writer.cmd, wiring.flipped(self.wr_cmd))
        wiring.connect(m, writer.o, wiring.flipped(self.wr))
        wiring.connect(m, unpacker.o, layer.side)
        # a tile that reads its map again (a descriptor's, a round's, a chunk's when the
        # ring does not hold the map) must not count the rows the loader holds of the
        # map before: until the loader takes this map's row 0 (which starts its count
        # again), the gatherer sees none loaded. Without it a descriptor's first windows
        # read the ring's stale rows of the descriptor before
        stale_rows = Signal()
        with m.If(loader.row.valid & loader.row.ready & (loader.row.payload.iy == 0)):
            m.d.sync += stale_rows.eq(0)
        m.d.comb += [layer.loaded.eq(Mux(stale_rows, 0, loader.loaded)),
                     loader.release.eq(layer.release),
                     layer.postops.eq(consts.postops), consts.const_bytes.eq(d.const_bytes)]
        binary_in = d.act_bits == 0
        in_elem = _elem_bits(d.in_fmt, d.in_elem)
        out_elem = _elem_bits(d.out_fmt, d.out_elem)
        # weight streaming: the chunk computed (its first fold, folds, channels and
        # slices' bytes) and the chunk loaded next (its first fold and weight words)
        max_folds = self.max_out_folds
        pe_shift = max(self.pe.bit_length() - 1, 0)
        chunk_folds = d.chunk_c[:bits_of(max_folds * pe)] >> pe_shift
        fold_base = Signal(range(max_folds), name="fold_base")
        cur_folds = Signal(range(max_folds + 1), name="cur_folds")
        cur_channels = Signal(range(max_folds * pe + 1), name="cur_channels")
        # each kind of map's (the main packer's, the level packer's): a chunk's slice's
        # bytes and its first byte in a pixel
        region = self.maps.region_bytes
        slice_bytes = [Signal(range(region + 1), name=f"slice_bytes{n}") for n in range(2)]
        slice_offset = [Signal(range(region + 1), name=f"slice_offset{n}") for n in range(2)]
        ld_fold = Signal(range(max_folds + 1))
        ld_folds = Signal(range(max_folds + 1))
        ld_words = Signal(range(self.max_weight_words + 1))
        w_offset = Signal(self.addr_width)
        in_folds = d.in_folds[:bits_of(self.layer.issuer.max_in_folds)]
        folds_left = d.out_folds - ld_fold
        m.d.sync += [ld_folds.eq(Mux(folds_left > chunk_folds, chunk_folds, folds_left)),
                     ld_words.eq(ld_folds * in_folds)]
        ld_channels = Mux(folds_left > chunk_folds, d.chunk_c,
                          d.out_c - (ld_fold << pe_shift))
        aux_elem = _elem_bits(d.aux_fmt, d.aux_elem)
        pixel_bytes = [Signal(range(region + 1), name=f"pixel_bytes{n}") for n in range(2)]
        row_bytes = [Signal(range(region + 1), name=f"row_bytes{n}") for n in range(2)]
        chunk_bytes = [Signal(range(region + 1), name=f"chunk_bytes{n}") for n in range(2)]
        for n, elem in enumerate((Mux(two_levels, aux_elem, out_elem), aux_elem)):
            m.d.sync += [pixel_bytes[n].eq(_bytes_of(d.out_c, elem)),
                         row_bytes[n].eq(d.out_w[:bits_of(self.max_size)]
                                         * pixel_bytes[n][:bits_of(region)]),
                         chunk_bytes[n].eq(_bytes_of(ld_channels, elem))]
        rows = d.out_h[:bits_of(self.max_size)]
        main_pitch = Mux(two_levels, d.aux_pitch, d.out_pitch)
        # a map's bytes against a region, and against the two regions of a kind alone
        # (the map buffer's `single`: a map written straight to DRAM beside its level
        # outputs, or a map without them)
        main_bytes, levels_bytes = Signal(32), Signal(32)
        m.d.sync += [main_bytes.eq(rows * main_pitch[:bits_of(region)]),
                     levels_bytes.eq(rows * d.aux_pitch[:bits_of(region)])]
        main_fits, levels_fit = Signal(), Signal()
        # the main map in the buffer: beside its level outputs, each in a region; alone,
        # in two
        m.d.comb += main_fits.eq((main_pitch <= region) & Mux(
            levels_out, (main_bytes <= region) & (levels_bytes <= region),
            main_bytes <= 2 * region))
        # a streaming output map that does not fit its region: its slices go straight to
        # DRAM, each at its pixel, when they are whole bus words (so are its pixels, and
        # its rows have no padding) and a pixel is within the writer's skip
        out_pixel, out_slice = Signal(32), Signal(32)
        m.d.sync += [out_pixel.eq(_bytes_of(d.out_c, out_elem)),
                     out_slice.eq(_bytes_of(d.chunk_c, out_elem))]
        m.d.comb += direct.eq(streaming & wide_out & ~two_levels & ~main_fits
                              & (out_pixel[:log_db] == 0) & (out_slice[:log_db] == 0)
                              & (out_pixel <= region))
        # the level outputs alone (no main map in the buffer) take two regions a map
        single = ~((wide_out | two_levels) & ~direct & levels_out)
        m.d.comb += levels_fit.eq(levels_bytes <= Mux(single, 2 * region, region))
        m.d.comb += self._map_fits.eq((~(wide_out | two_levels) | main_fits | direct)
                                      & (~levels_out | levels_fit))
        side_elem = _elem_bits(d.side_fmt, d.side_elem)
        # (a side row is fewer than 2**16 bus words: `supported`; offsets in it are
        # counted in as few bits)
        side_pixel = Signal(len(_bytes_of(d.side_c, side_elem)))
        side_chunk_bytes = Signal(32)
        side_slice_ld = Signal(32)                   # the next chunk's side slice
        side_row_ld = Signal(range(self.max_size * (1 << 16)))
        side_slice_words = Signal(16)
        side_row_words = Signal.like(side_row_ld)
        side_slice_at = Signal(len(side_pixel) + 1)  # this chunk's, in a side pixel
        side_slice_next = Signal.like(side_slice_at)
        side_row_off = Signal(self.addr_width)       # the side row's, in each job's map
        m.d.comb += self._side_aligned.eq((side_pixel[:log_db] == 0)
                                          & (side_chunk_bytes[:log_db] == 0))
        m.d.sync += [side_pixel.eq(_bytes_of(d.side_c, side_elem)),
                     side_chunk_bytes.eq(_bytes_of(d.chunk_c, side_elem)),
                     side_slice_ld.eq((_bytes_of(ld_channels, side_elem) + db - 1) >> log_db),
                     side_row_ld.eq(d.out_w[:bits_of(self.max_size)] * side_slice_ld[:16])]
        slices_expected = Signal(range(arrays * self.max_size ** 2 + 1))
        slices_one = Signal.like(slices_expected)
        both = (levels_out & wide_out) | two_levels       # two packers write
        m.d.sync += [slices_one.eq(d.windows[:bits_of(self.max_size ** 2)] * outputs),
                     slices_expected.eq(Mux(both, slices_one << 1, slices_one))]
        g = layer.gather_settings
        m.d.comb += [g.height.eq(d.in_h), g.width.eq(d.in_w), g.words.eq(d.words),
                     g.tail.eq(Cat(lane < d.tail for lane in range(simd))),
                     g.kernel.eq(d.kernel), g.stride.eq(d.stride), g.dilation.eq(d.dilation),
                     g.padding.eq(d.padding), g.out_w.eq(d.out_w), g.pitch.eq(d.pitch),
                     g.x_step.eq(d.x_step), g.dx_words.eq(d.dx_words),
                     g.pad_words.eq(d.pad_words), g.pad_ones.eq(binary_in), g.span.eq(d.span)]
        # a prologue hands the loader rows of levels: their element bits, pixel bytes
        # and bus words a row (the row's product registered), not the fixed map's
        has_pro = d.stages & STAGE_BITS["prologue_threshold"] != 0
        # a map every job of a round reads, its rows through the replay unit (not
        # beside a residual add, whose side rows come between input rows)
        replay = Signal(name="replay")
        m.d.sync += replay.eq((d.flags & FLAG_BITS["shared_input"] != 0)
                              & (d.stages & STAGE_BITS["add"] == 0)
                              & (d.in_pitch <= self.replay.row_words * db))
        level_bits = Mux(d.in_levels == 1, 1, Mux(d.in_levels == 3, 2, 4))
        level_pixel = Mux(d.in_levels == 1, d.in_c >> 3, Mux(d.in_levels == 3, d.in_c >> 2,
                                                               d.in_c >> 1))
        level_row = Signal(32)
        m.d.sync += level_row.eq(d.in_w * level_pixel[:bits_of(self.max_words * simd)])
        ls = loader.settings
        m.d.comb += [ls.width.eq(d.in_w),
                     ls.pixel_bytes.eq(Mux(has_pro, level_pixel, d.pixel_bytes)),
                     ls.words.eq(d.words),
                     ls.row_beats.eq(Mux(has_pro, (level_row + db - 1) >> log_db,
                                         d.in_pitch >> log_db)),
                     ls.elem_bits.eq(Mux(has_pro, level_bits, in_elem))]
        if pro is not None:
            m.d.comb += [pro.settings.elem_bits.eq(d.in_elem), pro.settings.channels.eq(d.in_c),
                         pro.settings.levels.eq(d.in_levels), pro.settings.width.eq(d.in_w),
                         pro.settings.row_beats.eq(d.in_pitch >> log_db)]
        es = layer.epilogue_settings
        m.d.comb += [es.postop.eq(d.stages & STAGE_BITS["postop"] != 0),
                     es.add.eq(d.stages & STAGE_BITS["add"] != 0),
                     es.relu.eq(d.stages & STAGE_BITS["relu"] != 0),
                     es.threshold.eq(d.stages & STAGE_BITS["threshold"] != 0),
                     es.levels.eq(d.out_levels),
                     layer.out_folds.eq(Mux(streaming, cur_folds, d.out_folds)),
                     layer.job_folds.eq(d.out_folds),
                     layer.fold_base.eq(Mux(streaming, fold_base, 0))]
        us = unpacker.settings
        # a streaming descriptor's side rows: each pixel's slice, whole bus words, so a
        # row of slices is a row of a map of the chunk's channels
        m.d.comb += [us.elem_bits.eq(side_elem),
                     us.signed.eq(d.side_fmt == _FIXED_FORMAT),
                     us.channels.eq(Mux(streaming, cur_channels, d.side_c)),
                     us.width.eq(d.out_w), us.height.eq(d.out_h),
                     us.out_folds.eq(Mux(streaming, cur_folds, d.out_folds)),
                     us.jobs.eq(d.jobs),
                     us.row_beats.eq(Mux(streaming, side_row_words, d.side_pitch >> log_db))]
        # a streaming descriptor's chunk: each pixel's slice a row of its own
        ps = packer.settings
        m.d.comb += [ps.elem_bits.eq(Mux(two_levels, _elem_bits(d.aux_fmt, d.aux_elem),
                                         out_elem)),
                     ps.channels.eq(Mux(streaming, cur_channels, d.out_c)),
                     ps.width.eq(Mux(streaming, 1, d.out_w)),
                     ps.out_folds.eq(Mux(streaming, cur_folds, d.out_folds)),
                     ps.jobs.eq(outputs),
                     ps.row_beats.eq(Mux(streaming, (slice_bytes[0] + db - 1) >> log_db,
                                         Mux(two_levels, d.aux_pitch, d.out_pitch) >> log_db))]
        # the map buffer: the main packer's maps (kind 0), the level packer's (kind 1)
        mbs = maps.settings
        m.d.comb += [mbs.width.eq(d.out_w), mbs.height.eq(d.out_h), mbs.jobs.eq(outputs),
                     mbs.kinds.eq(Cat((wide_out | two_levels) & ~direct, levels_out)),
                     mbs.single.eq(single)]
        for n, pitch in enumerate((Mux(two_levels, d.aux_pitch, d.out_pitch), d.aux_pitch)):
            f = mbs.formats[n]
            m.d.comb += [f.pixel_bytes.eq(pixel_bytes[n]), f.pitch.eq(pitch),
                         f.row_bytes.eq(row_bytes[n])]

        lps = lpacker.settings
        m.d.comb += [lps.elem_bits.eq(aux_elem),
                     lps.channels.eq(Mux(streaming, cur_channels, d.out_c)),
                     lps.width.eq(Mux(streaming, 1, d.out_w)),
                     lps.out_folds.eq(Mux(streaming, cur_folds, d.out_folds)),
                     lps.jobs.eq(outputs),
                     lps.row_beats.eq(Mux(streaming, (slice_bytes[1] + db - 1) >> log_db,
                                          d.aux_pitch >> log_db))]
        for unit in (levels, levels2):
            m.d.comb += [unit.settings.jobs.eq(outputs), unit.settings.levels.eq(d.aux_levels),
                         unit.settings.out_folds.eq(Mux(streaming, cur_folds, d.out_folds)),
                         unit.settings.job_folds.eq(d.out_folds),
                         unit.settings.fold_base.eq(Mux(streaming, fold_base, 0))]
        ms = mixer.settings
        coef = ms.lambdas[0].shape()
        lambdas = [Signal(coef, name=f"lambda{k}") for k in range(arrays)]
        gates = [Signal(coef, name=f"gate{k}") for k in range(arrays)]
        m.d.comb += [ms.jobs.eq(d.jobs), ms.gated.eq(d.stages & STAGE_BITS["gated"] != 0),
                     *(ms.lambdas[k].eq(lambdas[k]) for k in range(arrays)),
                     *(ms.gates[k].eq(gates[k]) for k in range(arrays))]

        # -- the job table: each job's addresses --
        entry_bits = _ENTRY_BITS
        per_word = dw // entry_bits
        in_addr = [Signal(self.addr_width, name=f"in_addr{k}") for k in range(arrays)]
        param_addr = [Signal(self.addr_width, name=f"param_addr{k}") for k in range(arrays)]
        side_addr = [Signal(self.addr_width, name=f"side_addr{k}") for k in range(arrays)]
        # the jobs' output maps, then (fusion rule 7) their level outputs: the job
        # table's entries after the jobs', and the writer's jobs `arrays` and up
        out_addr = Signal(data.ArrayLayout(unsigned(self.addr_width), 2 * arrays))
        level_param = [Signal(self.addr_width, name=f"level_param{k}") for k in range(arrays)]
        level_param2 = [Signal(self.addr_width, name=f"level_param2_{k}") for k in range(arrays)]
        # a direct map's slices: from the chunk's offset in the pixel, skipping the rest
        m.d.comb += [*(writer.bases[k].eq(out_addr[k]) for k in range(2 * arrays)),
                     writer.offset.eq(slice_offset[0]),
                     writer.skip.eq(Mux(direct, pixel_bytes[0] - slice_bytes[0], 0)),
                     writer.skip_jobs.eq(Mux(direct, arrays, 0))]

        # -- a parameter block's sections, from the descriptor, each at a bus word --
        def round_up(n):
            return (n + db - 1) & ~Const(db - 1, len(n) + 1)
        wide = d.const_bytes == 8
        postop_bytes = Mux(wide, (d.out_c + 1) << 4, (d.out_c + 1) << 3)

        def threshold_bytes(channels, levels, max_levels, name):
            """A threshold section's bytes: ``channels x levels`` constants (their
            product registered), then the invert bits."""
            consts = Signal(32, name=name)
            m.d.sync += consts.eq(channels * levels[:bits_of(max_levels)])
            return Mux(wide, consts << 3, consts << 2) + ((channels + 7) >> 3)
        thr_bytes = threshold_bytes(d.out_c, d.out_levels, self.max_levels, "thr_consts")
        # the prologue's thresholds come first, then the weights
        pro_bytes = threshold_bytes(d.in_c, d.in_levels, self.prologue_levels, "pro_consts")
        weights_at = Signal(self.addr_width)
        postop_at = Signal(self.addr_width)
        thr_at = Signal(self.addr_width)
        mix_at = Signal(self.addr_width)
        has_postop = d.stages & STAGE_BITS["postop"] != 0
        has_thr = d.stages & STAGE_BITS["threshold"] != 0
        has_side = d.stages & STAGE_BITS["add"] != 0
        # jobs that share one side map read it once, every word into each job's FIFO
        shared_side = d.flags & FLAG_BITS["shared_side"] != 0
        side_jobs = Mux(shared_side, 1, d.jobs)
        # the weights are whole weight words, so whole bus words: the post-op follows
        m.d.sync += [weights_at.eq(Mux(has_pro, round_up(pro_bytes), 0)),
                     postop_at.eq(weights_at + d.weight_tile_bytes),
                     thr_at.eq(postop_at + Mux(has_postop, round_up(postop_bytes), 0)),
                     mix_at.eq(thr_at + Mux(has_thr, round_up(thr_bytes), 0))]
        # a level output's block: its thresholds (aux_levels a channel), then the
        # invert bits
        level_bytes = threshold_bytes(d.out_c, d.aux_levels, self.max_levels, "level_consts")
        # the mixer section (lambda_frac, gate_frac, this base's lambda and gate): four
        # constants of 4 or 8 bytes, one or two bus words, written where they lie
        mix_raw = Signal(max(256, dw))
        mix_word = Signal(range(max(256 // dw, 1) + 1))
        to_mix = Signal()

        def mix_const(i):
            """Constant ``i`` of the section read last: its low 32 bits (the compiler's
            coefficients and fractions fit them)."""
            return Mux(wide, mix_raw[64 * i:64 * i + 32], mix_raw[32 * i:32 * i + 32])
        mix_bytes = Mux(wide, 32, 16)
        const_base = Signal(range(self.const_words + 1))     # job k's feeder words
        parts = exact_log2(pe // self.lanes)

        # -- reads: a command, then its words, routed by the phase; weights by a tag --
        # Every command's words are tagged in issue order (`tags`: weights or not, and
        # its words), so that the weight loader's reads (`w_left` words to come) go out
        # between the phases' own (`left`) and their words reach the fold issuer
        # wherever they fall: a chunk's weights come in while the arrays compute the
        # chunk before and its side slices are read (one after the other, the 14x14
        # stage's mixer took 36 % more cycles than the model)
        # the phases' words still to come: at most two rows' (of fewer than 2**16 words)
        # and the side batches'
        left = Signal(_ROW_WORD_BITS + 2)
        rd_busy = Signal()
        to_consts, to_loader, to_table = Signal(), Signal(), Signal()
        to_side = Signal()
        to_pro = Signal()                 # a prologue's thresholds
        # the side maps: a FIFO a job in front of the unpacker, which takes the jobs'
        # words in turn; a row is read a chunk of every job at a time, the jobs' reads
        # back to back (their latencies overlap: one at a time, a 56 x 56 x 64 side map
        # of 24 bits paid 11,760 latencies a descriptor), and batches of chunks of the
        # same size while the last three's words arrive (a streaming descriptor's
        # slices of 6 words: two batches in flight hid 17 cycles of latency, not 48),
        # only into room for four chunks in every job's FIFO (those in flight and its
        # own), so that no read waits on another job's words
        side_chunk = self.chunk
        side_fifos = []
        for k in range(arrays):
            fifo = SyncFIFOBuffered(width=dw, depth=8 * side_chunk)
            m.submodules[f"side_fifo{k}"] = fifo
            side_fifos.append(fifo)
            port = getattr(unpacker, f"i{k}")
            m.d.comb += [port.valid.eq(fifo.r_rdy), port.payload.eq(fifo.r_data),
                         fifo.r_en.eq(port.ready), fifo.w_data.eq(self.rd.payload)]
        w_side = Signal(range(arrays))            # the job whose side words arrive
        w_count = Signal(range(side_chunk))       # their words of its chunk so far
        batch_n = Signal(range(side_chunk + 1))   # words a job's chunk of the batch
        batch_words = Signal(range(arrays * side_chunk + 1))     # and of every job
        # side words still to come (at most four batches: the FIFOs' room)
        s_words = Signal(range(5 * arrays * side_chunk + 1))
        side_in = s_words == 0
        cmd_side = Signal()               # the command issued is a side batch's
        weight_words = pe * simd // dw
        tag_layout = data.StructLayout({"weights": 1, "job_end": 1, "words": _ROW_WORD_BITS,
                                        "side": 1})
        # (in block RAM: a word waits for its tag, which is a command's issue old)
        m.submodules.tags = tags = SyncFIFOBuffered(width=tag_layout.size, depth=_TAGS)
        head = data.View(tag_layout, tags.r_data)
        w_head = tags.r_rdy & head.weights
        o_head = tags.r_rdy & ~head.weights
        # a side batch's words go to the side FIFOs by their tag, so that the rows'
        # reads and the side rows' follow one another without waiting for the words
        # before them (each wait a read latency: two an output row, 55,000 cycles of
        # ResNet-18's frame at 224 x 224)
        s_head = o_head & head.side
        p_head = o_head & ~head.side
        head_taken = Signal(_ROW_WORD_BITS)           # the head command's words so far
        taken_any = self.rd.valid & self.rd.ready
        taken = taken_any & o_head        # a phase's word
        taken_side = taken_any & s_head   # a side batch's
        taken_w = taken_any & w_head      # a weight loader's word
        head_last = head_taken == head.words - 1
        m.d.comb += tags.r_en.eq(taken_any & head_last)
        with m.If(taken_any):
            m.d.sync += head_taken.eq(Mux(head_last, 0, head_taken + 1))
        # the weight loader's words still to come: a piece is issued while at most a
        # piece's are
        w_left = Signal(range(2 * _WEIGHT_PIECE * weight_words + 1))
        w_job_in = Signal(range(arrays))  # the job whose weights come in
        w_on = Signal()                   # the weight loader reads
        w_next = Signal()                 # ... once the chunk's rows begin
        w_job = Signal(range(arrays + 1))  # the job it reads, and its bytes read
        # a job's weight bytes (or its chunk's) are at most the fold issuer's half: `supported`
        w_bytes = self.max_weight_words * (pe * simd // 8)
        w_off = Signal(range(w_bytes + 1))
        part = Signal(range(max(weight_words, 2)))
        held = Signal(max(dw * (weight_words - 1), 1))
        w_addr = Signal(range(self.max_weight_words + 1))
        job = Signal(range(arrays + 1))
        word_done = part == weight_words - 1
        # rows go to the loader, or through the prologue (as its thresholds do) and
        # then to the loader; a map every job reads, into the replay unit, and from it
        # once a job to the prologue or the loader
        rd_words = self.rd.valid & p_head & rd_busy & (left != 0)
        fill = to_loader & replay
        pro_in = to_pro | (to_loader & has_pro & ~replay)
        replayed = replay & ~to_pro          # the rows' words come from the replay unit
        row_valid = Mux(replayed, replay_unit.o.valid, rd_words & to_loader)
        row_payload = Mux(replayed, replay_unit.o.payload, self.rd.payload)
        pro_ready = Const(0)
        if pro is not None:
            pro_ready = pro.i.ready
            m.d.comb += [pro.i.valid.eq(Mux(replayed, has_pro & row_valid, rd_words & pro_in)),
                         pro.i.payload.eq(row_payload),
                         pro.o.ready.eq(has_pro & loader.data.ready)]
        m.d.comb += [
            self.rd.ready.eq((s_head & rd_busy & (left != 0))
                             | (p_head & rd_busy & (left != 0) & (
                to_table | to_mix | (to_consts & consts.data.ready)
                | (to_loader & ~has_pro & ~replay & loader.data.ready) | (pro_in & pro_ready)
                | (fill & replay_unit.i.ready)))
                | (w_head & (~word_done | layer.weights.ready))),
            replay_unit.i.valid.eq(rd_words & fill), replay_unit.i.payload.eq(self.rd.payload),
            replay_unit.o.ready.eq(replayed & Mux(has_pro, pro_ready, loader.data.ready)),
            replay_unit.words.eq(d.in_pitch >> log_db),
            consts.data.valid.eq(rd_words & to_consts),
            consts.data.payload.eq(self.rd.payload),
            loader.data.valid.eq(Mux(has_pro, pro.o.valid if pro is not None else 0,
                                     row_valid)),
            loader.data.payload.eq(Mux(has_pro, pro.o.payload if pro is not None else 0,
                                       row_payload)),
        ]
        # a weight word: `weight_words` bus words, the last completing it
        wv = layer.weights
        m.d.comb += [wv.valid.eq(self.rd.valid & w_head & word_done),
                     wv.payload.addr.eq(w_addr),
                     wv.payload.en.eq(Const(1, arrays) << w_job_in)]
        word = Cat(held, self.rd.payload) if weight_words > 1 else self.rd.payload
        for k in range(arrays):
            m.d.comb += wv.payload.w[k].eq(word)
        for k, fifo in enumerate(side_fifos):
            m.d.comb += fifo.w_en.eq(taken_side & Mux(shared_side, k < d.jobs, w_side == k))
        with m.If(taken_side):
            with m.If(w_count == batch_n - 1):
                m.d.sync += [w_count.eq(0),
                             w_side.eq(Mux(w_side == side_jobs - 1, 0, w_side + 1))]
            with m.Else():
                m.d.sync += w_count.eq(w_count + 1)
        with m.If(taken & to_mix):
            m.d.sync += mix_word.eq(mix_word + 1)
            for j in range(len(mix_raw) // dw):
                with m.If(mix_word == j):
                    m.d.sync += mix_raw[j * dw:(j + 1) * dw].eq(self.rd.payload)
        with m.If(taken):
            m.d.sync += left.eq(left - 1)
        with m.If(taken_w):
            m.d.sync += part.eq(Mux(word_done, 0, part + 1))
            if weight_words > 1:
                m.d.sync += held.eq(Cat(held[dw:], self.rd.payload))
            with m.If(word_done):
                m.d.sync += w_addr.eq(w_addr + 1)
            # a job's last word: the next job's weights start at its word 0
            with m.If(head_last & head.job_end):
                m.d.sync += [w_addr.eq(0),
                             w_job_in.eq(Mux(w_job_in == d.jobs - 1, 0, w_job_in + 1))]
        entry = Signal(range(3 * arrays + per_word + 1))
        with m.If(taken & to_table):
            for j in range(per_word):
                raw = self.rd.payload[j * entry_bits:(j + 1) * entry_bits]
                for k in range(arrays):
                    with m.If(entry + j == k):
                        m.d.sync += [in_addr[k].eq(job_entry_field(raw, "in_addr")),
                                     side_addr[k].eq(job_entry_field(raw, "side_addr")),
                                     out_addr[k].eq(job_entry_field(raw, "out_addr")),
                                     param_addr[k].eq(job_entry_field(raw, "param_addr"))]
                    # an output's level outputs, `aux_outputs` entries an output: the
                    # first to the level packer, a second to the main packer
                    with m.If(entry + j == d.jobs + Mux(two_levels, 2 * k, k)):
                        m.d.sync += [out_addr[arrays + k].eq(job_entry_field(raw, "out_addr")),
                                     level_param[k].eq(job_entry_field(raw, "param_addr"))]
                    with m.If(two_levels & (entry + j == d.jobs + 2 * k + 1)):
                        m.d.sync += [out_addr[k].eq(job_entry_field(raw, "out_addr")),
                                     level_param2[k].eq(job_entry_field(raw, "param_addr"))]
            m.d.sync += entry.eq(entry + per_word)

        # the phases' read commands (the weight loader's go out when they issue none)
        fc = stream.Signature(descriptor_layout(self.addr_width)).create()

        def read(address, length):
            """Issue a read command and take its words (a state's action)."""
            m.d.comb += [fc.valid.eq(1), fc.payload.address.eq(address),
                         fc.payload.length.eq(length)]
            with m.If(fc.ready):
                m.d.sync += [rd_busy.eq(1), left.eq(length >> log_db)]

        words_in = ~rd_busy | (left == 0)
        # a row command waiting for the loader: its read is issued as it is set, so that
        # the row's words are on their way while the loader takes the row before it (a
        # read a row and job, each after the last one's words, paid 864 latencies in
        # ResNet-18's 28x28 stride-2 descriptor at 224x224)
        held_row = Signal.like(loader.row.payload)
        held_valid = Signal()
        m.d.comb += [loader.row.payload.eq(held_row), loader.row.valid.eq(held_valid)]
        with m.If(loader.row.valid & loader.row.ready):
            m.d.sync += held_valid.eq(0)
        rows_in = words_in & ~held_valid
        # a replayed map's rows: read (`fill_iy`) while the replay unit has a slot
        # free, i.e. at most one row ahead of the last given out fresh (`fresh_rows`)
        filling = Signal()
        fill_iy = Signal(range(self.max_size + 1))
        fresh_rows = Signal(range(self.max_size + 1))
        row_addr = [Signal(self.addr_width, name=f"row_addr{k}") for k in range(arrays)]
        iy = Signal(range(self.max_size + 1))
        rows_out = Signal(range(arrays * self.max_size + 1))
        rows_expected = Signal.like(rows_out)
        # the rows that go out whole (a direct map's slices are counted as slices)
        with m.If(writer.i.valid & writer.i.ready & writer.i.payload.last & ~(
                direct & w_direct)):
            m.d.sync += rows_out.eq(rows_out + 1)
        # the side rows: the next one's output row, the last input row it needs (its
        # windows' last row: negative in the padding), the job and place of its chunks
        oy_side = Signal(range(self.max_size + 1))
        need = Signal(signed(bits_of(2 * self.max_size * self.max_kernel) + 1))
        s_job = Signal(range(arrays))
        # (offsets in a side row: fewer than 2**16 bus words, `supported`)
        side_row_bits = _ROW_WORD_BITS + log_db
        s_left = Signal(_ROW_WORD_BITS + 1)
        s_pixel_at = Signal(side_row_bits)
        s_offset = Signal(side_row_bits + 1)
        s_x = Signal(range(self.max_size + 1))          # a streaming side row's pixel
        slot_base = Signal(range(self.ring_words))
        slot = iy[:exact_log2(self.ring_rows)] if self.ring_rows > 1 else Const(0)
        m.d.comb += slot_base.eq(sum(Mux(slot[b], d.pitch << b, 0) for b in range(len(slot))))

        # rounds: a descriptor of more jobs than arrays runs `arrays` of them at a time
        # (no mixer then: it needs every base at once), each round as a descriptor of
        # its own
        jobs_left = Signal.like(d.jobs)
        flushed = Signal()
        round_jobs = Mux(d.jobs > arrays, arrays, d.jobs)
        left_round = Mux(jobs_left > arrays, arrays, jobs_left)

        with m.FSM(name="phase") as fsm:
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.desc.ready.eq(1)]
                # (the next descriptor's rows are not this one's)
                m.d.sync += filling.eq(0)
                with m.If(self.desc.valid):
                    m.d.sync += d.eq(self.desc.payload)
                    m.next = "SIZE"
            with m.State("SIZE"):
                # the products the check reads, registered from the descriptor
                m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(~self.supported(d)):
                    m.d.comb += [self.error.eq(1),
                                 self.error_code.eq(ERROR_CAUSES["unsupported"])]
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [d.jobs.eq(round_jobs), jobs_left.eq(d.jobs - round_jobs)]
                    m.next = "ROUND"
            with m.State("ROUND"):
                # a round's jobs as a descriptor of their own (the held descriptor's
                # `jobs` and `table_addr` are the round's)
                # a row an output, and as many again with a second packer's output
                m.d.sync += [entry.eq(0), rows_out.eq(0),
                             rows_expected.eq(Mux(direct,
                                                  Mux(levels_out, d.out_h * outputs, 0),
                                                  Mux(both, (d.out_h * outputs) << 1,
                                                      d.out_h * outputs))),
                             job.eq(0), w_addr.eq(0), part.eq(0), iy.eq(0), w_job_in.eq(0),
                             w_next.eq(0), w_on.eq(0),
                             const_base.eq(0), to_table.eq(1), flushed.eq(0),
                             ld_fold.eq(0), w_offset.eq(0),
                             *(o.eq(0) for o in slice_offset),
                             slices_in.eq(0), side_slice_next.eq(0)]
                m.next = "TABLE"
            with m.State("TABLE"):
                with m.If(~rd_busy):
                    entries = d.jobs + Mux(levels_out, Mux(two_levels, outputs << 1, outputs), 0)
                    read(d.table_addr, round_up(entries << 4))
                with m.Elif(left == 0):
                    # the jobs' output addresses are known now
                    m.d.comb += writer.start.eq(1)
                    m.d.sync += [rd_busy.eq(0), to_table.eq(0), to_consts.eq(1)]
                    m.next = "PRO"
            # each job's prologue thresholds: the prologue unit takes a load, then the words
            with m.State("PRO"):
                with m.If(~has_pro):
                    m.next = "POSTOP"
                with m.Elif(~rd_busy):
                    if pro is not None:
                        m.d.comb += [pro.cmd.valid.eq(1), pro.cmd.payload.load.eq(1),
                                     pro.cmd.payload.job.eq(job)]
                        with m.If(pro.cmd.ready):
                            m.d.sync += [to_pro.eq(1), to_consts.eq(0)]
                            m.next = "PRO_READ"
                with m.Elif(left == 0):
                    m.d.sync += [rd_busy.eq(0), to_pro.eq(0), to_consts.eq(1)]
                    m.next = "POSTOP"
            with m.State("PRO_READ"):
                read(_pick(job, param_addr), round_up(pro_bytes))
                with m.If(fc.ready):
                    m.next = "PRO"
            # each job's sections: the constant loader takes its command, then its words
            # (a level output's thresholds go to the level lanes: `to_levels`, switched
            # only while the loader is idle)
            out_levels = Mux(d.out_levels != 0, d.out_levels, 1)
            for state, section, present, blocks, at, nbytes, lv, after in (
                    ("POSTOP", POSTOP, has_postop, param_addr, postop_at, postop_bytes,
                     out_levels, "THR"),
                    ("THR", THR, has_thr, param_addr, thr_at, thr_bytes, out_levels, "LEVEL"),
                    ("LEVEL", THR, levels_out & (job < outputs), level_param, 0, level_bytes,
                     d.aux_levels, "LEVEL2"),
                    ("LEVEL2", THR, two_levels & (job < outputs), level_param2, 0, level_bytes,
                     d.aux_levels, "MIX")):
                with m.State(state):
                    with m.If(~present):
                        m.next = after
                    with m.Elif(~rd_busy):
                        c = consts.cmd
                        m.d.comb += [c.valid.eq(consts.idle), c.payload.job.eq(job),
                                     c.payload.section.eq(section),
                                     c.payload.channels.eq(d.out_c), c.payload.levels.eq(lv),
                                     c.payload.base.eq(const_base),
                                     c.payload.beats.eq(round_up(nbytes) >> log_db)]
                        with m.If(c.valid & c.ready):
                            m.d.sync += to_levels.eq({"LEVEL": 1, "LEVEL2": 2}.get(state, 0))
                            m.next = f"{state}_READ"
                    with m.Elif((left == 0) & consts.idle):
                        m.d.sync += [rd_busy.eq(0), to_levels.eq(0)]
                        m.next = after
                with m.State(f"{state}_READ"):
                    address = _pick(job, blocks)
                    read(address + at, round_up(nbytes))
                    with m.If(fc.ready):
                        m.next = state
            with m.State("MIX"):
                # this base's lambda and gate, and the group's fractions
                with m.If(~mixing):
                    m.next = "NEXT_JOB"
                with m.Elif(~rd_busy):
                    address = _pick(job, param_addr)
                    m.d.sync += [mix_word.eq(0), to_consts.eq(0), to_mix.eq(1)]
                    read(address + mix_at, round_up(mix_bytes))
                with m.Elif(left == 0):
                    ms = mixer.settings
                    m.d.sync += [rd_busy.eq(0), to_mix.eq(0), to_consts.eq(1)]
                    # the coefficients at the mixer's own fraction (its shifts are wiring)
                    lam = at_fraction(mix_const(2), mix_const(0), mixer.fraction, coef.width)
                    gate = at_fraction(mix_const(3), mix_const(1), mixer.fraction, coef.width)
                    for k in range(arrays):
                        with m.If(job == k):
                            m.d.sync += [lambdas[k].eq(lam), gates[k].eq(gate)]
                    m.next = "NEXT_JOB"
            with m.State("NEXT_JOB"):
                m.d.sync += const_base.eq(const_base + (d.out_folds << parts))
                with m.If(job == d.jobs - 1):
                    m.d.sync += [job.eq(0), to_consts.eq(0), w_on.eq(1), w_job.eq(0),
                                 w_off.eq(0)]
                    m.next = "WEIGHTS"
                with m.Else():
                    m.d.sync += job.eq(job + 1)
                    m.next = "PRO"
            with m.State("WEIGHTS"):
                # every job's weights, or with weight streaming its chunk's (the next
                # chunk's: the weight loader began them as this chunk's rows began), all in
                m.d.sync += w_on.eq(1)
                with m.If(w_on & (w_job == d.jobs) & (w_left == 0)):
                    m.d.sync += w_on.eq(0)
                    m.next = "CHUNK"
            with m.State("CHUNK"):
                # with weight streaming, once the previous chunk's slices are all in the
                # map buffer (its settings are this chunk's from now on)
                ch = layer.chunk
                mc = maps.chunk
                # (and a direct map's written: the writer starts again at the chunk's
                # offset in each pixel)
                previous_out = ((ld_fold == 0) | (slices_in == slices_expected)) & (
                    ~direct | writer.idle)
                ring_holds_map = (ld_fold != 0) & (d.in_h <= self.ring_rows)
                go = consts.idle & (~streaming | (previous_out & mc.ready))
                m.d.comb += [ch.valid.eq(go),
                             ch.payload.out_folds.eq(Mux(streaming, ld_folds, d.out_folds)),
                             ch.payload.in_folds.eq(d.in_folds), ch.payload.windows.eq(d.windows),
                             mc.valid.eq(go & streaming & ch.ready),
                             *(mc.payload[n].offset.eq(slice_offset[n]) for n in range(2)),
                             *(mc.payload[n].slice_bytes.eq(chunk_bytes[n]) for n in range(2))]
                if self.planes > 1:
                    m.d.comb += ch.payload.levels.eq(~binary_in)
                with m.If(ch.ready & go):
                    m.d.comb += writer.start.eq(direct)
                    m.d.sync += [fold_base.eq(ld_fold), cur_folds.eq(ld_folds),
                                 cur_channels.eq(ld_channels),
                                 *(slice_bytes[n].eq(chunk_bytes[n]) for n in range(2)),
                                 *(slice_offset[n].eq(slice_offset[n] + chunk_bytes[n])
                                   for n in range(2)),
                                 ld_fold.eq(ld_fold + ld_folds), slices_in.eq(0),
                                 w_offset.eq(w_offset + ld_words * (pe * simd // 8)),
                                 # a map the ring holds whole is read for the first chunk
                                 # alone: the next gather it from the ring again
                                 iy.eq(Mux(ring_holds_map, d.in_h, 0)),
                                 fill_iy.eq(Mux(ring_holds_map, d.in_h, 0)),
                                 fresh_rows.eq(0), filling.eq(replay),
                                 stale_rows.eq(~ring_holds_map),
                                 side_slice_words.eq(side_slice_ld),
                                 side_row_words.eq(side_row_ld),
                                 side_slice_at.eq(side_slice_next),
                                 side_slice_next.eq(side_slice_next + (side_slice_ld << log_db)),
                                 side_row_off.eq(0)]
                    # the unpacker is lowered a cycle between chunks, and raised a cycle
                    # after their settings (TILE)
                    # the next chunk's weights, once its rows begin (its first fold and
                    # words are set two cycles from now)
                    m.d.sync += [w_job.eq(0), w_off.eq(0), w_on.eq(0),
                                 w_next.eq(streaming & (ld_fold + ld_folds != d.out_folds))]
                    m.d.sync += [job.eq(0), to_loader.eq(1), oy_side.eq(0),
                                 need.eq(Cat(d.span, 0).as_signed()
                                         - Cat(d.padding, 0).as_signed()),
                                 unpacker.active.eq(0)]
                    for k in range(arrays):
                        m.d.sync += row_addr[k].eq(in_addr[k])
                    m.next = "TILE"
            with m.State("TILE"):
                # one tile of every output row: the ring holds what is on chip
                t = layer.tile
                m.d.comb += [t.valid.eq(1), t.payload.iy0.eq(-d.padding),
                             t.payload.rows.eq(d.out_h)]
                m.d.sync += unpacker.active.eq(has_side)
                with m.If(t.ready):
                    m.next = "ROW"
            with m.State("ROW"):
                # input rows as far as the next side row's output row needs them, then
                # that side row; a row's jobs one after another
                with m.If(w_next):
                    m.d.sync += [w_next.eq(0), w_on.eq(1)]
                iy_s = Signal(signed(len(iy) + 1))
                m.d.comb += iy_s.eq(iy)
                side_wanted = has_side & (oy_side != d.out_h)
                row_next = (iy != d.in_h) & ((job != 0) | ~side_wanted | (iy_s <= need))
                # the next row's command once the held one leaves (through a prologue
                # too: it queues the rows' commands, so that this row's words are on
                # their way while it takes the row before)
                free = ~held_valid | loader.row.ready
                with m.If(row_next & free):
                    m.d.sync += [held_valid.eq(1), held_row.base.eq(slot_base),
                                 held_row.array.eq(job), held_row.iy.eq(iy),
                                 held_row.last.eq(job == d.jobs - 1)]
                    with m.If(has_pro):
                        m.next = "ROW_PRO"
                    with m.Elif(replay):
                        m.next = "ROW_PLAY"
                    with m.Else():
                        m.next = "ROW_READ"
                with m.Elif(~row_next & side_wanted):
                    # (the rows' words may still come: they go to the loader by their tag)
                    m.d.sync += [to_side.eq(1), s_job.eq(0),
                                 s_x.eq(0), s_pixel_at.eq(0),
                                 s_offset.eq(Mux(streaming, side_slice_at, 0)),
                                 s_left.eq(Mux(streaming, side_slice_words,
                                               d.side_pitch >> log_db))]
                    m.next = "SIDE"
                with m.Elif(rows_in & ~row_next):
                    m.d.sync += [rd_busy.eq(0), to_loader.eq(0)]
                    with m.If(streaming & (ld_fold != d.out_folds)):
                        # the next chunk: the rest of its weights into the free half
                        m.next = "WEIGHTS"
                    with m.Else():
                        m.next = "DRAIN"
            with m.State("SIDE"):
                n = Mux(s_left > side_chunk, side_chunk, s_left)
                room = Const(1)
                for k, fifo in enumerate(side_fifos):
                    room = room & ((fifo.level <= 4 * side_chunk) | (k >= d.jobs))
                # a batch: every job's chunk, once the last batch's words are all in or,
                # chunks of the same size, once only the last three batches' are still
                # to come (then none of an earlier batch: they arrive in order)
                overlap = ~side_in & (n == batch_n) & (s_words <= 3 * batch_words)
                with m.If((s_job != 0) | ((side_in | overlap) & (s_left != 0) & room)):
                    address = _pick(s_job, side_addr)
                    m.d.comb += [fc.valid.eq(1), cmd_side.eq(1),
                                 fc.payload.address.eq(address + side_row_off + s_offset),
                                 fc.payload.length.eq(n << log_db)]
                    with m.If(fc.ready):
                        # the batch's words still to come: this chunk's too (a word may
                        # arrive in the same cycle)
                        m.d.sync += [rd_busy.eq(1), left.eq(left + n - taken)]
                        with m.If((s_job == 0) & side_in):
                            m.d.sync += [batch_n.eq(n), w_side.eq(0), w_count.eq(0),
                                         batch_words.eq(n * side_jobs[:bits_of(arrays)])]
                        with m.If(s_job == side_jobs - 1):
                            m.d.sync += [s_job.eq(0), s_offset.eq(s_offset + (n << log_db)),
                                         s_left.eq(s_left - n)]
                        with m.Else():
                            m.d.sync += s_job.eq(s_job + 1)
                with m.Elif((s_left == 0) & streaming & (s_x != d.out_w - 1)):
                    # the next pixel's slice (its batch may overlap this one's words)
                    m.d.sync += [s_x.eq(s_x + 1), s_pixel_at.eq(s_pixel_at + side_pixel),
                                 s_offset.eq(s_pixel_at + side_pixel + side_slice_at),
                                 s_left.eq(side_slice_words)]
                with m.Elif(s_left == 0):
                    # (the side row's words may still come: they go to its FIFOs by
                    # their tag)
                    m.d.sync += [side_row_off.eq(side_row_off + d.side_pitch),
                                 to_side.eq(0),
                                 oy_side.eq(oy_side + 1), need.eq(need + d.stride)]
                    m.next = "ROW"
            with m.State("ROW_PRO"):
                # the row's job to the prologue, then its read
                if pro is not None:
                    m.d.comb += [pro.cmd.valid.eq(1), pro.cmd.payload.load.eq(0),
                                 pro.cmd.payload.job.eq(job)]
                    with m.If(pro.cmd.ready):
                        with m.If(replay):
                            m.next = "ROW_PLAY"
                        with m.Else():
                            m.next = "ROW_READ"
            with m.State("ROW_READ"):
                address = Signal(self.addr_width)
                m.d.comb += [address.eq(_pick(job, row_addr)), fc.valid.eq(1),
                             fc.payload.address.eq(address),
                             fc.payload.length.eq(d.in_pitch)]
                with m.If(fc.ready):
                    # the row's words, after those still to come (a word may arrive now)
                    m.d.sync += [rd_busy.eq(1), left.eq(left + (d.in_pitch >> log_db) - taken)]
                    for k in range(arrays):
                        with m.If(job == k):
                            m.d.sync += row_addr[k].eq(address + d.in_pitch)
                    with m.If(job == d.jobs - 1):
                        m.d.sync += [job.eq(0), iy.eq(iy + 1)]
                    with m.Else():
                        m.d.sync += job.eq(job + 1)
                    m.next = "ROW"
            with m.State("ROW_PLAY"):
                # the row's job from the replay unit: the next row for the first job
                rc = replay_unit.cmd
                m.d.comb += [rc.valid.eq(1), rc.payload.fresh.eq(job == 0)]
                with m.If(rc.ready):
                    with m.If(job == 0):
                        m.d.sync += fresh_rows.eq(fresh_rows + 1)
                    with m.If(job == d.jobs - 1):
                        m.d.sync += [job.eq(0), iy.eq(iy + 1)]
                    with m.Else():
                        m.d.sync += job.eq(job + 1)
                    m.next = "ROW"
            with m.State("DRAIN"):
                # with weight streaming, the maps go out once the last chunk's slices are in
                m.d.comb += maps.flush.valid.eq(streaming & ~flushed
                                                & (slices_in == slices_expected))
                with m.If(maps.flush.valid & maps.flush.ready):
                    m.d.sync += flushed.eq(1)
                with m.If((rows_out == rows_expected) & loader.idle & layer.idle & packer.idle
                          & writer.idle & unpacker.idle & maps.idle & (flushed | ~streaming)
                          & (pro.idle if pro is not None else 1) & replay_unit.idle):
                    m.d.sync += unpacker.active.eq(0)
                    with m.If(jobs_left != 0):
                        # the next round's jobs: the job table's next `arrays` entries
                        m.d.sync += [d.jobs.eq(left_round), jobs_left.eq(jobs_left - left_round),
                                     d.table_addr.eq(d.table_addr + (arrays << 4))]
                        m.next = "ROUND"
                    with m.Else():
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
        # a replayed map's rows, read ahead of the jobs' passes (in the row states, which
        # issue no read of their own then)
        with m.If(filling & (fill_iy != d.in_h) & (fill_iy <= fresh_rows)):
            m.d.comb += [fc.valid.eq(1), fc.payload.address.eq(row_addr[0]),
                         fc.payload.length.eq(d.in_pitch)]
            with m.If(fc.ready):
                m.d.sync += [rd_busy.eq(1), left.eq(left + (d.in_pitch >> log_db) - taken),
                             row_addr[0].eq(row_addr[0] + d.in_pitch), fill_iy.eq(fill_iy + 1)]

        # -- the weight loader: each job's weights (or the chunk's) in pieces, while no
        # phase reads, at most two pieces' words on their way --
        # rows the ring still needs soon: input rows to read, fewer than `_ROWS_AHEAD`
        # past the arrays' window
        ahead = Signal()
        m.d.sync += ahead.eq(iy > layer.release + d.span[:bits_of(self.ring_rows)] + _ROWS_AHEAD)
        rows_to_read = to_loader & ~to_side & ~ahead & (
            (iy != d.in_h) | (filling & (fill_iy != d.in_h)))
        piece = Mux(rows_to_read, _WEIGHT_PIECE_BESIDE_ROWS, _WEIGHT_PIECE)
        piece_bytes = piece * (pe * simd // 8)
        w_total = Mux(streaming, ld_words * (pe * simd // 8),
                      d.weight_tile_bytes[:bits_of(w_bytes)])
        w_rest = Signal.like(w_off)
        m.d.comb += w_rest.eq(w_total - w_off)
        w_len = Mux(w_rest > piece_bytes, piece_bytes, w_rest)
        # (the rows' words in: a side batch's still to come do not hold the weights back)
        row_words_in = ~rd_busy | (left == s_words)
        w_issue = (w_on & (w_job != d.jobs) & ~fc.valid & (w_left <= piece * weight_words)
                   & (~rows_to_read | row_words_in))
        cmd_weights = Signal()
        cmd_end = Signal()
        m.d.comb += [self.rd_cmd.valid.eq(fc.valid), self.rd_cmd.payload.eq(fc.payload)]
        with m.If(w_issue):
            m.d.comb += [self.rd_cmd.valid.eq(1), cmd_weights.eq(1),
                         cmd_end.eq(w_rest <= piece_bytes),
                         self.rd_cmd.payload.address.eq(_pick(w_job, param_addr) + weights_at
                                                        + w_offset + w_off),
                         self.rd_cmd.payload.length.eq(w_len)]
        # a command goes out with its tag
        sent = self.rd_cmd.valid & self.rd_cmd.ready
        m.d.comb += [fc.ready.eq(self.rd_cmd.ready & tags.w_rdy),
                     tags.w_en.eq(sent & ((self.rd_cmd.payload.length >> log_db) != 0)),
                     tags.w_data.eq(Cat(cmd_weights, cmd_end,
                                        (self.rd_cmd.payload.length >> log_db)[:_ROW_WORD_BITS],
                                        cmd_side & ~cmd_weights))]
        with m.If(~tags.w_rdy):
            m.d.comb += self.rd_cmd.valid.eq(0)
        side_sent = fc.valid & fc.ready & cmd_side
        m.d.sync += s_words.eq(s_words + Mux(side_sent, fc.payload.length >> log_db, 0)
                               - taken_side)
        with m.If(sent & cmd_weights):
            m.d.sync += [w_left.eq(w_left + (w_len >> log_db) - taken_w),
                         w_off.eq(Mux(cmd_end, 0, w_off + w_len)),
                         w_job.eq(w_job + cmd_end)]
        with m.Elif(taken_w):
            m.d.sync += w_left.eq(w_left - 1)
        self._phase = {name: fsm.ongoing(name) for name in fsm.encoding}
        return m


def _pick(index, values):
    """``values[index]``, a chain of multiplexers (0 past the last)."""
    out = Mux(index == 0, values[0], 0)
    for k in range(1, len(values)):
        out = Mux(index == k, values[k], out)
    return out


def _bytes_of(channels, elem):
    """``ceil(channels * elem / 8)``: the bytes of ``channels`` elements of ``elem``
    bits (1, 2, 4, 8, 16, 24 or 32), by shifts and one add."""
    bits = Mux(elem == 24, (channels << 4) + (channels << 3), channels << 5)
    for e in (16, 8, 4, 2, 1):
        bits = Mux(elem == e, channels << (e.bit_length() - 1), bits)
    return (bits + 7) >> 3


def _elem_bits(fmt, elem):
    """A map format's bits an element: 1 for a binary map, else its element's."""
    return Mux(fmt == _BITS_FORMAT, 1, elem)


def _spread(m, name, arrays, on, valid, payload, sink):
    """Drive ``sink`` from a stream of ``valid`` and ``payload``; with ``on``, each beat
    followed by ``arrays - 1`` beats of zeros. Returns the source's ``ready``."""
    k = Signal(range(arrays), name=f"{name}_spread")
    filling = k != 0
    m.d.comb += [sink.valid.eq(filling | valid),
                 sink.payload.eq(Mux(filling, 0, Value.cast(payload)))]
    with m.If(sink.valid & sink.ready & on):
        m.d.sync += k.eq(Mux(k == arrays - 1, 0, k + 1))
    return ~filling & sink.ready


def bits_of(bound):
    """Bits of the numbers ``0 .. bound``."""
    return max(bound, 1).bit_length()


def _elem_ok(fmt, elem, widths):
    """A map format the units read or write: a binary map, or elements of ``widths``."""
    ok = fmt == _BITS_FORMAT
    for w in widths:
        ok = ok | ((fmt != _BITS_FORMAT) & (elem == w))
    return ok
