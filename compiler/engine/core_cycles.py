"""The cycle model of the engine as built: ``hw/engine/core.py``'s ``EngineCore``.

:mod:`.cycles` predicts the engine the contract describes (``arrays`` arrays side by
side, transfers overlapped with compute). The RTL that exists is a sequential,
correctness-first state machine (``ComputeSequencer``): every phase of a descriptor
follows the previous one. This module mirrors that state machine phase by phase, so
that a build report predicts what the built engine does. Each phase is a function
whose docstring names the states it counts; a state that waits for nothing takes one
cycle, and so does a scratchpad read (its address is driven by the state before).

Phases of a descriptor (docs/architecture.md section 13):

- *fetch*: FETCH, RECEIVE (the read DMA: 128 bytes), DECODE; INPUT then NEXT;
- *setup*: CHECK, FOLDS (``ceil`` by subtraction), SECTIONS0-4, STREAM0-1, TILESZ0-1,
  REGIONS0-4 (twice when the weights stream), TABLE_CMD, TABLE_RECV;
- per row tile: TILE0-3, the *loads* (LOAD_ENTRY, LOAD_CMD, LOAD_RECV per kind and
  job), CLEAR (none when the output rows are whole words of elements), START, the
  *compute* (CORE and what follows it per output element),
  the *stores* (STORE_ADDR, STORE_CMD, STORE_RD, STORE_SEND per job), per weight chunk
  when the weights stream (a convolution's output channels, a head's classes); with
  channel slices one tile, each chunk loading its side slices and weights and storing
  its output slices (a descriptor a pixel's piece, STORE_PIECES until the last is
  taken);
- *fence*: FENCE (the write DMA's last ``done``), NEXT.

Compute per output pixel, channel and job:

- XNOR-popcount array (``vec``): per pixel and job the *gather* (CORE, POOL_TAP, G_TAP
  for the window's first tap, then per group of lanes read from one word G_IN and,
  with a one-level prologue threshold, G_INV (unless its word was the last read) and
  G_THR; a padded tap's groups G_TAP; with a prologue of more levels, TAP, per lane
  IN_D, PINV_D and PT_D, WEIGHT, a padded lane WEIGHT, EPI) and the *folds* (MVU, one fold
  of PE x SIMD lanes a cycle, pipelined; MVU_END); then CORE and per channel and job
  ACC_D and the epilogue (with a post-op only the pixel's first ACC_D: a job's
  accumulator is read with its post-op's pair A, B);
- the stem's multiplier array (``svec``): the gather as the array's (bytes of
  ``stem_simd`` lanes), then SMVU per PE fold, SIMD fold and ``stem_channels``
  output channels, MVU_END;
- a PIXEL on the window lanes (``pvec``): per pixel and job CORE, POOL_TAP, the
  gather with a one-level prologue's reads (G_TAP, G_IN, G_INV, G_THR), EPI and a PW
  per ``simd`` channels;
- a PIXEL of 8- to 32-bit inputs on the threshold lanes (``ptv``, the core's
  ``pixel_thresholds``): per pixel CORE, POOL_TAP, TV_A, then per job and PE fold
  PT_X (its inputs) and the threshold lanes (:func:`_threshold_lanes`);
- a convolution's one-bit thresholds on the lanes (``tvec``): after the folds TV_A,
  then per job and PE fold TV_T, with TV_I and TV_O where the fold starts a word of
  invert bits or of outputs (or is the job's first), instead of the per-channel
  epilogue;
- an array's 32-bit sums without a stage, one job (``swr``, the core's
  ``sums_writer``): after the folds SW_A, then per PE fold its sums written a word a
  cycle (SW_W);
- a head's channel sums, once per descriptor: HSUM, per channel an HSUM_D per input
  pixel and HSUM_WR, START (:func:`_head_sums`); its classes then take a 1x1 window;
- a MAXPOOL on the lanes (``mvec``): per pixel and channel CORE; per word of channels
  the *pool*: POOL_TAP, then a cycle a tap (MP_TAP, MP_D), the last starting the
  epilogue;
- scalar path: per channel and job CORE, POOL_TAP, TAP, per tap IN_D, W_D (a
  product: stem, head, binary convolutions the array cannot take; a padded tap
  WEIGHT, W_D; IN_D alone when the tap's weight word is held and no prologue
  applies, :func:`_held_weight_taps`) or IN_D, WEIGHT (a maximum: MAXPOOL, PIXEL, SUBSAMPLE, a MIXER's
  inputs), EPI; a fused max pooling repeats the convolution per pooling tap
  (POOL_TAP, POOL_NEXT); a read's address is driven by the state before its data
  state, and the state that ends a tap starts the next;
- epilogue per channel and job: BIAS_D (head), PA_D (the pair A, B; the side input
  after a post-op), PCALC (post-op and that add; PS_D and PF_D at a block's first
  element; on the arrays without a threshold a job whose pair was read ahead during
  the job before's data state takes PCALC alone, :func:`_read_ahead`), SIDE_D (an
  add without a post-op), EINV_D, ET_D per level
  (threshold); per channel the fused mixer (AGG with the last job's lambda product:
  each other job's is added in the cycle after its result; GATE for the first gated
  output: each next one's gate is computed while OUT_WD writes the one before; a GATE
  descriptor GATE; its constants read at the descriptor's first mix: LF_D, GF_D, LAML_D
  per job, GATEL_D per gate, and that mix's LAM for every job) and per output written
  OUT_WD (a MIXER or GATE descriptor runs OUT and its epilogue before each); outputs
  of 8 bits or more but a MIXER's or GATE's go to the output writer, which gates and
  writes them beside the next channel: only a chunk's last channel's cost their cycles
  (DRAIN, :func:`_writes_behind`).

The DMAs (``hw/engine/dma.py``) and the DRAM model (``sim/dram_model.h``): a read of
``n`` words accepted in cycle ``t`` has its first word on the bus ``4 + latency``
cycles later (the DMA's command latency), in the sequencer two cycles after that (the
receive buffer), then a word whenever the DRAM model's token bucket holds one
(:class:`_Bucket`: a word every ``word / bytes_per_cycle`` cycles on average, a
16-byte port at 10 bytes per cycle five words in eight cycles; the bucket is capped at
what a draining port can have left of a word plus a cycle's bytes, so a transfer after
an idle gap starts from the same full bucket). Stores push a word every two cycles
(STORE_RD, STORE_SEND) into the write DMA's FIFO, which starts a burst once it holds
all of its words; when the DRAM is slower than that the FIFO fills and the pushes
wait (modelled word by word, :class:`_WriteDMA`). The read DMA's bursts are followed
when ``max_outstanding`` or its buffer's credit bind (:meth:`_Core.read`). Reads and
writes overlap only when a row tile's loads start while the previous tile's last
bursts drain; which port the DRAM model serves first then depends on the parity of
the cycle, and the model charges half the remaining beats (:func:`_shared`: up to 44
cycles off in the tests' tiled networks, the only phase not followed exactly).

The cycles are per descriptor from its FETCH to the next descriptor's FETCH; a frame
adds the END descriptor's fetch and the host's START and STATUS (:data:`RUN_OVERHEAD`).
Measured against Verilator: ``tests/test_engine_core_cycles.py``,
``benchmarks/engine_core_cycles.py``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ...engine_format import (DENSE_PIXEL_BYTES, accumulator_channels, pair_table_bits,
                              window_words)
from .program import FLAG_BITS, OPCODE_CODES, STAGE_BITS, job_table
from .sizing import CORE_DEFAULTS, core_paths_of, full_core_params
from .tiling import core_layout

__all__ = ["CoreDescriptorCycles", "CoreFrameCycles", "CORE_DEFAULTS", "RUN_OVERHEAD",
           "descriptor_core_cycles", "predict_core"]

_OPCODES = {v: k for k, v in OPCODE_CODES.items()}
#: opcodes whose jobs are the inputs of one mix: one parameter block and side input
_MULTI = ("MIXER", "GATE")

#: Cycles of a run outside its descriptors: START reaching the sequencer, the END
#: descriptor's DECODE raising DONE, the register file and the host's STATUS read.
RUN_OVERHEAD = 3

#: Cycles from a read-DMA command's acceptance to the sequencer's first word, less the
#: DRAM latency: SUM, CHECK, RUN, the command register (4), the receive buffer (2).
_READ_DELAY = 6
#: Burst boundary of both DMAs (no burst crosses 4 KiB).
_BOUNDARY = 4096


def _ceil(a, b):
    return -(-a // b)


def _has(d, stage):
    return bool(d["stages"] & STAGE_BITS[stage])


def _flag(d, name):
    return bool(d["flags"] & FLAG_BITS[name])


@dataclass(frozen=True)
class CoreDescriptorCycles:
    """One descriptor's predicted cycles on ``EngineCore``.

    Attributes
    ----------
    index, opcode, jobs, label
        As :class:`.cycles.DescriptorCycles`'s.
    cycles : int
        From the descriptor's FETCH to the next descriptor's FETCH.
    phases : dict
        Cycles per phase (``fetch``, ``setup``, ``loads``, ``clear``, ``gather``,
        ``folds``, ``scalar``, ``pool``, ``epilogue``, ``outputs``, ``stores``,
        ``fence``); they
        add up to ``cycles``.
    dominant : str
        The phase with the most cycles.
    """

    index: int
    opcode: str
    jobs: int
    cycles: int
    phases: dict
    dominant: str
    label: str = ""

    def as_dict(self):
        return asdict(self)


@dataclass(frozen=True)
class CoreFrameCycles:
    """A program's predicted cycles on ``EngineCore``: per descriptor and per frame.

    Attributes
    ----------
    descriptors : list of CoreDescriptorCycles
    end : int
        The END descriptor's fetch and :data:`RUN_OVERHEAD`.
    cycles : int
        The frame: the descriptors and ``end`` (START to the STATUS read that sees
        DONE, as ``sim.engine_rtl.run_engine_rtl`` counts).
    clock_mhz : float
    """

    descriptors: list
    end: int
    cycles: int
    clock_mhz: float = 100.0
    phases: dict = field(default_factory=dict)

    @property
    def frame_interval(self):
        """Cycles from one frame to the next in a stream: a frame's (the core runs one
        frame at a time)."""
        return self.cycles

    @property
    def fps(self):
        return self.clock_mhz * 1e6 / self.cycles


class _Core:
    """The core's parameters and the DRAM's, with the derived constants."""

    def __init__(self, core_params, latency, bytes_per_cycle):
        p = full_core_params(core_params)
        self.bpw = p["data_width"] // 8
        self.pe, self.simd = p["pe"], p["simd"]
        self.stem_pe, self.stem_simd = p["stem_pe"], p["stem_simd"]
        self.buffer_bytes, self.max_burst = p["buffer_bytes"], p["max_burst"]
        paths = core_paths_of(p)
        self.banks, self.vector = paths["banks"], paths["vector"]
        self.stem_vector, self.stem_channels = paths["stem_vector"], paths["stem_channels"]
        self.pixel_vector = paths["pixel_vector"]
        self.threshold_vector = paths["threshold_vector"]
        self.pixel_thresholds = paths["pixel_thresholds"]
        self.sums_writer = paths["sums_writer"]
        self.max_act_bits = paths["max_act_bits"]
        self.window_pairs = paths["window_pairs"]
        self.window_words = window_words(p["max_window"], self.simd)
        self.maxc = accumulator_channels(p["max_out_c"], self.pe)
        self.pair_c = 1 << pair_table_bits(p["max_out_c"])      # the pair table's channels
        self.wr_depth = p["buffer_depth"] or 2 * self.max_burst
        self.latency = latency
        self.bytes_per_cycle = bytes_per_cycle
        # the DRAM model's token bucket (sim/dram_model.h): full after any idle gap the
        # core leaves between transfers; a word every `per_word` cycles on average
        self.bucket_cap = max(self.bpw, self.bpw - 1 + bytes_per_cycle)
        self.per_word = max(1.0, self.bpw / bytes_per_cycle)
        self.max_outstanding = p["max_outstanding"]
        self.rd_depth = p["buffer_depth"] or 4 * self.max_burst
        self.reads_seen = {}     # read()'s cycles by where its pieces fall in 4 KiB
        self.stores_seen = {}    # _stores' result by where its stores fall in 4 KiB

    def ru(self, x):
        return _ceil(x, self.bpw) * self.bpw

    def stream_end(self, words):
        """Cycles from a transfer's first word to its last, the bucket full at the first
        and every word due as soon as the bucket holds it."""
        bucket = _Bucket(self)
        first = bucket.take(0)
        return bucket.follow(words - 1) - first

    def read(self, nbytes, addr=0, pieces=None):
        """Cycles from the command state (FETCH, TABLE_CMD, LOAD_CMD) to the state after
        the last word: the command, the DMA's latency, the words as the DRAM's bucket
        lets them (:meth:`stream_end`).
        ``pieces``: a strided read's ``(addr, nbytes)`` descriptors (``nbytes`` their
        sum), each taken the cycle after the one before issued its last command, its
        own first command three cycles later.

        The read DMA's bursts (:func:`_burst_sizes`) are accepted one a cycle while
        fewer than ``max_outstanding`` are in flight and its buffer has credit for all
        of a burst's words (a word's credit returns three cycles after it arrives);
        with the defaults neither limit is reached at the tests' DRAM settings (the
        next burst is accepted well before the words in flight are used up), so only
        the first word waits for the latency. Smaller limits (not measured) make a
        burst wait for the latency again.

        A read starts from the full bucket and its bursts break at 4 KiB boundaries, so
        its cycles depend on its pieces' sizes and offsets in 4 KiB alone: they are
        computed once for each."""
        key = _in_pages(addr, nbytes, pieces)
        if key not in self.reads_seen:
            self.reads_seen[key] = self._read(nbytes, addr, pieces)
        return self.reads_seen[key]

    def _read(self, nbytes, addr, pieces):
        bursts = [(n, i == 0) for a, m in (pieces or [(addr, nbytes)])
                  for i, n in enumerate(_burst_sizes(a, m, self))]
        sizes = [n for n, _ in bursts]
        if not pieces and len(sizes) <= self.max_outstanding \
                and nbytes // self.bpw <= self.rd_depth:
            words = nbytes // self.bpw
            return int(1 + _READ_DELAY + self.latency + self.stream_end(words))
        accepted, ends = [], []                     # per burst
        starts, runs = [], []   # per burst: its first word's index; its cycle, tokens after it
        bucket = _Bucket(self)
        asked = 0

        def arrival(j):         # the cycle word j arrives
            b = bisect.bisect_right(starts, j) - 1
            first, left = runs[b]
            return first + bucket.span(left, j - starts[b])

        for b, (n, opens) in enumerate(bursts):
            # SUM, CHECK, RUN, command (a later descriptor: taken after the last command)
            c = 4 if b == 0 else accepted[-1] + (4 if opens else 1)
            if b >= self.max_outstanding:
                c = max(c, ends[b - self.max_outstanding] + 2)
            # credit: the words asked for before this burst, less those already taken
            asked += n
            need = asked - self.rd_depth
            if need > 0:
                c = max(c, arrival(need - 1) + 4)
            accepted.append(c)
            # a burst's first word waits for the latency and the word before; the others
            # follow as the bucket lets them
            first = bucket.take(c + self.latency)
            starts.append(asked - n)
            runs.append((first, bucket.left))
            arrive = bucket.follow(n - 1)
            ends.append(arrive)
        # the sequencer takes the last word two cycles after it arrives, then moves on
        return int(arrive + 3)


# ---- the descriptor's layout, as the CHECK .. REGIONS states compute it ----------------

def _in_pages(addr, nbytes, pieces=None):
    """A transfer's ``(offset in 4 KiB, bytes)`` per piece (``pieces``, else the one
    piece ``addr, nbytes``): what its DMA cycles depend on."""
    return tuple((a % _BOUNDARY, n) for a, n in (pieces or [(addr, nbytes)]))


def _layout(d, core):
    """The run-time layout (:func:`.tiling.core_layout`: CHECK, FOLDS, SECTIONS*,
    STREAM*, TILESZ*, REGIONS*) and whether the array (``vec``) runs this descriptor."""
    lay = core_layout(d, bpw=core.bpw, pe=core.pe, simd=core.simd, stem_pe=core.stem_pe,
                      stem_simd=core.stem_simd, buffer_bytes=core.buffer_bytes)
    vec = (core.vector and lay["is_conv"] and not lay["int_w"] and not lay["pooling"]
           and d["act_bits"] <= core.max_act_bits and lay["fs"] <= core.window_words
           and lay["fo"] * core.pe <= core.maxc)
    # a PE fold's one-bit thresholds: pe of them in one wide read, pe channels a fold
    fold_thresholds = (d["out_levels"] == 1 and d["out_elem"] == 1 and d["out_c"] % core.pe == 0
                       and core.pe * 8 * d["const_bytes"] <= core.banks * core.bpw * 8)
    # the sums' one-bit thresholds, a PE fold at a time (TV_*)
    tvec = (vec and core.threshold_vector and fold_thresholds
            and d["stages"] & ~STAGE_BITS["prologue_threshold"] == STAGE_BITS["threshold"])
    # the stem's multiplier array: 8-bit inputs and weights
    svec = (core.stem_vector and lay["is_conv"] and lay["int_w"] and not lay["pooling"]
            and not _has(d, "prologue_threshold") and d["in_elem"] <= 8
            and d["weight_bytes"] == 1 and lay["fs"] <= core.window_words
            and lay["fo"] * core.pe <= core.maxc)
    # a PIXEL that only thresholds to one bit per channel: on the threshold lanes
    pvec = (core.pixel_vector and d["opcode"] == OPCODE_CODES["PIXEL"]
            and d["stages"] == STAGE_BITS["threshold"] and d["out_levels"] == 1
            and d["out_elem"] == 1 and d["kernel"] == 1 and d["in_c"] == d["out_c"]
            and d["out_c"] % core.simd == 0)
    # such a PIXEL of 8- to 32-bit inputs on the threshold lanes: a fold's PE inputs
    # start on a word (whole-word pixels, PE elements at least a word)
    ptv = (pvec and core.pixel_thresholds and fold_thresholds and d["in_elem"] in (8, 16, 32)
           and core.pe * d["in_elem"] >= core.bpw * 8
           and (d["in_c"] * d["in_elem"] // 8) % core.bpw == 0)
    # an array's 32-bit sums without a stage: a PE fold's written as whole words
    swr = (core.sums_writer and (vec or svec) and d["stages"] == 0 and d["jobs"] == 1
           and not lay["is_head"]
           and not d["flags"] & FLAG_BITS["sliced"] and d["out_elem"] == 32
           and (d["out_c"] * 4) % core.bpw == 0 and d["out_c"] % core.pe == 0)
    # a MAXPOOL of 32-bit elements whose pixels fill whole words: on the lanes
    mvec = (d["opcode"] == OPCODE_CODES["MAXPOOL"] and not _has(d, "prologue_threshold")
            and d["jobs"] == 1 and d["in_c"] == d["out_c"] and d["in_elem"] == 32
            and d["in_c"] % (core.bpw * 8 // 32) == 0
            and d["in_pitch"] % core.bpw == 0)
    # a head's classes take their products over its channel sums: a 1x1 window
    win = (1, 1) if lay["is_head"] else (lay["kh"], d["kernel"])
    return dict(lay, op=_OPCODES.get(d["opcode"], ""), vec=vec, svec=svec, pvec=pvec, ptv=ptv,
                tvec=tvec, swr=swr,
                mvec=mvec,
                win_h=win[0], win_w=win[1],
                chunk_c=lay["chunk_in"] if lay["stream"] else d["out_c"],
                pad=0 if lay["is_head"] else d["padding"],
                folds_cycles=max(lay["fs"], lay["fo"], lay["fpc"]) + 1)


def _fetch(core):
    """FETCH, RECEIVE (the 128-byte descriptor through the read DMA) and DECODE."""
    return core.read(128) + 1


def _setup(d, lay, core):
    """CHECK, FOLDS, SECTIONS0-4, STREAM0-1, TILESZ0-1, REGIONS0-4 (again when the
    weights stream), TABLE_CMD and TABLE_RECV (the job table)."""
    regions = 10 if lay["stream"] else 5
    return 1 + lay["folds_cycles"] + 5 + 2 + 2 + regions + core.read(lay["jt_bytes"])


def _tile_rows(d, lay, t):
    """The rows of tile ``t`` as TILE0-3 compute them: output rows, input rows loaded."""
    rpt = d["rows_per_tile"]
    r0 = t * rpt
    r1 = min(r0 + rpt, d["out_h"])
    if lay["pooling"]:
        c0 = max(r0 * d["pool_stride"] - d["pool_padding"], 0)
        c1 = min((r1 - 1) * d["pool_stride"] - d["pool_padding"] + d["pool_kernel"],
                 d["mid_h"])
    else:
        c0, c1 = r0, r1
    y0 = c0 * lay["st"] - lay["pad"]
    y1 = (c1 - 1) * lay["st"] - lay["pad"] + lay["dil"] * (lay["kh"] - 1) + 1
    return r0, r1, max(y0, 0), min(y1, d["in_h"])


def _loads(d, lay, table, core, tile, rows, chunk, writing=0):
    """LOAD_ENTRY (a job-table field: two cycles), LOAD_CMD and LOAD_RECV for every job
    of each kind a tile loads: the parameter blocks (first tile; without the weights
    and their later part when streaming), input rows, side rows, the weight chunk;
    a later chunk of a tile loads its weights only. A skipped load costs LOAD_ENTRY and
    LOAD_CMD. ``writing``: cycles from the first LOAD_ENTRY until the previous tile's
    last write is done; the beats still to go take their share of the DRAM's
    bandwidth from the reads (:func:`_shared`)."""
    r0, r1, ly0, ly1 = rows
    op, jobs, stream = lay["op"], d["jobs"], lay["stream"]
    if chunk and lay["sliced"]:
        kinds = ([2] if _has(d, "add") else []) + [4]   # the chunk's side slices too
    elif chunk:
        kinds = [4]
    else:
        kinds = ([0, 3] if stream else [0]) if tile == 0 else []
        kinds += [1, 2] + ([4] if stream else [])
    total = 0
    for kind in kinds:
        for k in range(jobs):
            e = table[k]
            total += 2 + 1
            if kind == 0:
                skip = (d["param_bytes"] == 0 or (op in _MULTI and k != 0)
                        or (stream and lay["off_w"] == 0))
                fld, n = e["param_addr"], lay["off_w"] if stream else d["param_bytes"]
            elif kind == 1:
                skip = _flag(d, "shared_input") and k != 0
                fld, n = e["in_addr"], (ly1 - ly0) * d["in_pitch"]
            elif kind == 2:
                skip = not _has(d, "add") or (
                    (_flag(d, "shared_side") or op in _MULTI) and k != 0)
                fld = e["side_addr"]
                n = lay["side"] if lay["sliced"] else (r1 - r0) * d["side_pitch"]
            elif kind == 3:
                skip = lay["post_bytes"] == 0
                fld, n = e["param_addr"], lay["post_bytes"]
            else:
                skip = False
                fld = e["param_addr"]
                cstart = chunk * lay["chunk_bytes"]
                cend = min(cstart + lay["chunk_bytes"], lay["wbytes"])
                n = core.ru(cend) - (cstart & ~(core.bpw - 1))
            if not (skip or fld == 0):
                at = fld + _load_offset(d, lay, kind, rows, chunk, core)
                pieces = _slices(d, lay, at, d["side_elem"], d["side_c"]) \
                    if kind == 2 and lay["sliced"] else None
                total += core.read(n, at, pieces) - 1 + _shared(core, writing - total)
                writing = 0
    return total


def _load_offset(d, lay, kind, rows, chunk, core):
    """Where a load of ``kind`` starts in its DRAM region (LOAD_CMD's ``load_from``)."""
    r0, _, ly0, _ = rows
    if kind == 1:
        return ly0 * d["in_pitch"]
    if kind == 2:
        if lay["sliced"]:
            return chunk * lay["chunk_in"] * d["side_elem"] // 8
        return r0 * d["side_pitch"]
    if kind == 3:
        return d["param_bytes"] - lay["post_bytes"]
    if kind == 4:
        return lay["off_w"] + ((chunk * lay["chunk_bytes"]) & ~(core.bpw - 1))
    return 0


def _slices(d, lay, at, elem, channels):
    """A sliced tensor's pieces from ``at`` (the chunk's first channel of pixel 0): the
    chunk's channels of each pixel, a pixel's channels apart."""
    piece, pix = lay["chunk_in"] * elem // 8, channels * elem // 8
    return [(at + i * pix, piece) for i in range(d["out_h"] * d["out_w"])]


def _shared(core, writing):
    """Cycles a read (LOAD_CMD ``writing`` cycles before the write DMA's ``done``) waits
    for the write beats still to go. The DRAM model's tokens serve one word at a time
    and its round robin alternates the ports every cycle, so while both wait, the port
    that wins is set by the parity of the cycle the bucket fills: the reads wait for
    every remaining beat or for none. The model charges half of them (measured: within
    about 0.1 % of such a descriptor, tests/test_engine_core_cycles.py)."""
    due = 1 + 4 + core.latency            # LOAD_CMD, the DMA's command latency, DRAM
    beats = math.ceil(max(0, writing - 1 - due) / core.per_word)
    return math.ceil(_ceil(beats, 2) * core.per_word)


def _clear(d, lay, core):
    """CLEAR: every job's output region of a tile (and a head's channel sums after
    them) zeroed, one word a cycle; none when the output rows are whole words of
    elements and nothing else (every bit is then written by a merge)."""
    if _dense_out(d, lay, core):
        return 0
    sums = core.ru(8 * d["in_c"]) if lay["is_head"] else 0
    return (d["jobs"] * lay["out_tile"] + sums) // core.bpw


def _dense_out(d, lay, core):
    """FOLDS's test: no head, pixels of a power of two bytes up to
    ``DENSE_PIXEL_BYTES``, rows of exactly ``out_w`` pixels and whole bus words."""
    bits = d["out_c"] * d["out_elem"]
    pix = bits // 8
    return (not lay["is_head"] and bits % 8 == 0 and pix & (pix - 1) == 0
            and pix <= DENSE_PIXEL_BYTES and d["out_pitch"] == d["out_w"] * pix
            and d["out_pitch"] % core.bpw == 0)


def _valid_taps(n_out, stride, pad, dil, k, size, offset=0):
    """Per output row (or column) ``o`` of ``n_out``: window taps inside ``[0, size)``
    (a window tap is valid when its row and its column are, so a pixel's count is the
    product of its row's and its column's)."""
    out = []
    for o in range(n_out):
        base = (o + offset) * stride - pad
        out.append(sum(1 for i in range(k) if 0 <= base + i * dil < size))
    return out


def _epilogue(d, lay, oc):
    """One output element of one job after its core value: BIAS_D (head), post-op
    (PA_D, one read of the pair A[oc], B[oc], and PCALC; PS_D and PF_D too for a block's
    first element of the descriptor, :func:`_post_first`), SIDE_D (when
    ``oc < side_c``; after a post-op none: PA_D reads the side input and PCALC adds
    it), threshold (EINV_D,
    ET_D per level): each read is addressed by the state before it, and a stage that
    does not apply costs nothing (ReLU on the way; the result goes on to the next job,
    the mixer or the outputs from the last stage)."""
    c = 1 if lay["is_head"] else 0
    c += 2 if _has(d, "postop") else 0
    c += 1 if _has(d, "add") and oc < d["side_c"] and not _has(d, "postop") else 0
    c += 1 + d["out_levels"] if _has(d, "threshold") else 0
    return c


def _read_ahead(d, lay, oc, core=None):
    """The jobs of channel ``oc`` whose post-op runs from a pair read ahead (PCALC to
    PCALC, no PA_D): on the arrays, with a post-op and no threshold after it. From the
    pair table (``core`` given: a pixel after the descriptor's first; constants of at
    most 32 bits, at most the table's channels) every job after the first; else
    through the read port, every job after the first when the channel has no side
    input, after the second when it is shared (job 0 reads it, the others keep it),
    none when each job reads its own. Not at a descriptor's first channel
    (:func:`_post_first`): the next job's shift and flags are not kept yet."""
    if not _post_ahead(d, lay):
        return 0
    if _table(d, core) or not (_has(d, "add") and oc < d["side_c"]):
        return max(0, d["jobs"] - 1)
    return max(0, d["jobs"] - 2) if _flag(d, "shared_side") else 0


def _post_ahead(d, lay):
    """A job's post-op can run from a pair read ahead (the core's ``ahead_ok``)."""
    return ((lay["vec"] or lay["svec"]) and _has(d, "postop")
            and not _has(d, "threshold") and lay["op"] not in _MULTI)


def _table(d, core):
    """Whether a pixel after the descriptor's first takes its pairs from the pair table
    (``core`` given: constants of at most 32 bits, at most the table's channels)."""
    return core is not None and d["const_bytes"] <= 4 and d["out_c"] <= core.pair_c


def _chained(d, lay, core):
    """Whether a channel after a pixel's first (of a chunk) skips job 0's PA_D too: a
    fused mixer whose outputs go to the writer, its pairs in the table (a pixel after the
    descriptor's first); the last job's PCALC reads job 0's pair and sum ahead for AGG."""
    return (_post_ahead(d, lay) and _table(d, core) and _mixing(d, lay)
            and _writes_behind(d, lay))


def _post_first(d, lay):
    """PS_D and PF_D: the post-op's shift and flags, read at each parameter block's
    first output element of a descriptor and kept (a MIXER's epilogue: block 0); on
    the arrays ACC_D for the first channel's jobs after the first (their shift is not
    kept yet, so their accumulator is not read with their pair)."""
    if not _has(d, "postop"):
        return 0
    arrays = (lay["vec"] or lay["svec"]) and not lay["tvec"] and not lay["pvec"]
    return (2 * (1 if lay["op"] in _MULTI else d["jobs"]) + (d["jobs"] - 1 if arrays else 0)
            + _read_ahead(d, lay, 0))


def _mixing(d, lay):
    return (lay["op"] == "CONV" and _has(d, "mixer")) or lay["op"] == "MIXER"


def _mixer(d, lay):
    """Per output channel after the jobs, from the kept constants: AGG (with the last
    job's lambda product: each other job's is added in the cycle after its result,
    while the next job starts), and GATE when gated (the first output's gate: each next
    output's is computed while OUT_WD writes the one before); a GATE descriptor GATE."""
    op = lay["op"]
    if op == "GATE":
        return 1
    if not _mixing(d, lay):
        return 0
    return 1 + (1 if _has(d, "gated") else 0)


def _mix_first(d, lay):
    """The mixer's constants, read at a descriptor's first mix and kept: LF_D, GF_D,
    LAML_D per job, GATEL_D per gated output (a GATE descriptor GF_D and GATEL_D); and
    that first mix's LAM for every job (no product was added before the constants were
    read; its AGG then adds none)."""
    if lay["op"] == "GATE":
        return 1 + _n_out(d, lay)
    if not _mixing(d, lay):
        return 0
    return 2 + d["jobs"] + (_n_out(d, lay) if _has(d, "gated") else 0) + d["jobs"]


def _n_out(d, lay):
    if lay["op"] == "GATE":
        return d["jobs"] - 1
    return 1 if _mixing(d, lay) and not _has(d, "gated") else d["jobs"]


def _writes_behind(d, lay):
    """The output writer writes this descriptor's outputs (8 bits or more, not a MIXER's
    or GATE's: byte enables, no read of their word)."""
    return lay["op"] not in _MULTI and d["out_elem"] >= 8


def _outputs(d, lay, oc):
    """Per output channel: OUT_WD per output written (its word read by the state before);
    a MIXER (GATE) descriptor's OUT and epilogue (:func:`_epilogue`) before each."""
    n = _n_out(d, lay)
    if lay["op"] in _MULTI:
        return n * (2 + _epilogue(d, lay, oc))
    return n


def _tap_costs(d, lay):
    """(valid, padded) cycles of one window tap: IN_D, the prologue threshold (PINV_D,
    PT_D per level), then W_D (a product) or WEIGHT; a padded tap WEIGHT (and W_D).
    Each read is addressed by the state before it, and the state that ends a tap
    starts the next: a window's first tap adds TAP."""
    prologue = 1 + d["in_levels"] if _has(d, "prologue_threshold") else 0
    per_channel = lay["op"] not in ("CONV", "HEAD")
    w = 0 if (per_channel or lay["vec"]) else 1
    return 2 + prologue, 1 + w


def _wide_gather(d, lay, core, r0, r1):
    """G_TAP, G_IN, G_INV, G_THR over one job's windows of the tile's pixels. A group
    takes the lanes left of its tap, of the window word being built (``simd``), of
    the input word and, with a prologue, of the threshold and invert-bit words (the
    regions start on words, so the offsets in a word are the pixel's and channel's);
    with window pairs, a binary group that starts a buffer word (two window words)
    takes ``2 * simd`` lanes where its tap and its input word have them.
    A valid tap: G_TAP when it is the window's first (a later tap's input word is read
    by the last group of the tap before), then per group G_IN (a later group's input
    word is read by the state before), with the prologue G_INV when its invert-bit word
    is not the one last read (none after START; the jobs' words alternate when there
    are several), and G_THR; a padded tap: G_TAP per group."""
    w, c = core.bpw * 8, d["in_c"]
    simd = core.stem_simd if lay["svec"] else core.simd      # lanes of a window word
    e, cbits = d["in_elem"], d["const_bytes"] * 8
    prologue = _has(d, "prologue_threshold") or lay["pvec"]
    in_pix = _ceil(c * e, 8) * 8
    inv0 = c * cbits

    # window pairs: a group takes a whole input word of 2 * simd binary lanes where it
    # starts a buffer word (two window words) and the tap has them
    pairs = (core.window_pairs and lay["vec"] and not prologue and e == 1)
    span = 2 * simd if pairs else simd       # lane positions that decide a group

    def tap(valid, l0, off, held, window_first):
        ci, pos, cycles, first = 0, l0, 0, True
        if valid and not window_first:
            cycles -= 1
        while ci < c:
            j = pos % simd
            n = min(c - ci, simd - j)
            if not valid:
                cycles += 1
            elif prologue:
                n = min(n, (w - (off + ci * e) % w) // e,
                        (w - (ci * cbits) % w) // cbits, w - (inv0 + ci) % w)
                word = (inv0 + ci) // w
                cycles += (3 if first else 2) + (word != held)
                held = word
            else:
                lim_in = (w - (off + ci * e) % w) // e
                if pairs and pos == 0 and c - ci >= 2 * simd and lim_in >= 2 * simd:
                    n = 2 * simd
                else:
                    n = min(n, lim_in)
                cycles += 2 if first else 1
            ci, pos, first = ci + n, (pos + n) % span, False
        return cycles, held
    memo, total, held = {}, 0, None
    kh, kw, st, pad, dil = lay["kh"], d["kernel"], lay["st"], lay["pad"], lay["dil"]
    for oy in range(r0, r1):
        for ox in range(d["out_w"]):
            if d["jobs"] > 1:
                held = None
            for ky in range(kh):
                iy = oy * st - pad + ky * dil
                for kx in range(kw):
                    ix = ox * st - pad + kx * dil
                    valid = 0 <= iy < d["in_h"] and 0 <= ix < d["in_w"]
                    key = (valid, ((ky * kw + kx) * c) % span,
                           (ix * in_pix) % w if valid else 0, held, ky == kx == 0)
                    if key not in memo:
                        memo[key] = tap(*key)
                    cycles, held = memo[key]
                    total += cycles
    return total


def _window_sums(d, lay, r0, r1):
    """Over the tile's output pixels: (pixels, valid taps, all taps) of one job's window
    per channel position (conv, head) or per channel (element-wise ops), and for a
    pooled stem the same over the pooling taps inside the convolution's map
    (``(pool taps in range, pool taps)`` added)."""
    kh, kw, st, pad, dil = lay["win_h"], lay["win_w"], lay["st"], lay["pad"], lay["dil"]
    ci_n = d["in_c"] if lay["op"] in ("CONV", "HEAD") else 1
    if lay["pooling"]:
        ps, pp, pk = d["pool_stride"], d["pool_padding"], d["pool_kernel"]
        rows = [oy * ps - pp + i for oy in range(r0, r1) for i in range(pk)]
        cols = [ox * ps - pp + i for ox in range(d["out_w"]) for i in range(pk)]
        rows_in = [y for y in rows if 0 <= y < d["mid_h"]]
        cols_in = [x for x in cols if 0 <= x < d["mid_w"]]
        vy = sum(sum(1 for i in range(kh) if 0 <= y * st - pad + i * dil < d["in_h"])
                 for y in rows_in)
        vx = sum(sum(1 for i in range(kw) if 0 <= x * st - pad + i * dil < d["in_w"])
                 for x in cols_in)
        evals = len(rows_in) * len(cols_in)
        return dict(pixels=(r1 - r0) * d["out_w"], pool_in=evals, pool_taps=len(rows) * len(cols),
                    valid=vy * vx * ci_n, taps=evals * kh * kw * ci_n,
                    rows_valid=_per_tap(rows_in, st, pad, dil, kh, d["in_h"]),
                    cols_valid=_per_tap(cols_in, st, pad, dil, kw, d["in_w"]))
    vy = sum(_valid_taps(r1 - r0, st, pad, dil, kh, d["in_h"], offset=r0))
    vx = sum(_valid_taps(d["out_w"], st, pad, dil, kw, d["in_w"]))
    px = (r1 - r0) * d["out_w"]
    return dict(pixels=px, valid=vy * vx * ci_n, taps=px * kh * kw * ci_n, pool_in=px,
                pool_taps=px, rows_valid=_per_tap(range(r0, r1), st, pad, dil, kh, d["in_h"]),
                cols_valid=_per_tap(range(d["out_w"]), st, pad, dil, kw, d["in_w"]))


def _per_tap(positions, st, pad, dil, k, size):
    """Per kernel row (or column) ``i``: the evaluated positions whose tap ``i`` lies
    inside ``[0, size)``."""
    return [sum(1 for y in positions if 0 <= y * st - pad + i * dil < size) for i in range(k)]


def _held_weight_taps(d, lay, core, channels, chunk, ws):
    """Valid product taps whose weight lies in the word of the tap before (the
    scalar path's held weight word, ``wc_*`` in the core: such a tap takes its product
    in IN_D, without W_D), summed over the channels ``[c0, c1)`` of weight chunk
    ``chunk`` and the tile's evaluations. A window's first tap never finds its word
    held (POOL_TAP clears it); every other tap's word is the one of the tap before,
    whether that tap read it or found it held, padded or not. Taps run row, column,
    channel; the weight of tap ``t`` of channel ``oc`` is element ``widx`` of the
    chunk, which starts ``skew`` bits into its first word."""
    c0, c1 = channels
    head = lay["is_head"]
    ci_n = d["in_c"]
    n = lay["win_h"] * lay["win_w"] * ci_n
    t = np.arange(n, dtype=np.int64)
    valid = np.repeat(np.outer(ws["rows_valid"], ws["cols_valid"]).reshape(-1), ci_n)
    skew = ((chunk * lay["chunk_bytes"]) % core.bpw) * 8 if lay["stream"] else 0
    wbits = d["weight_bytes"] * 8 if (head or lay["int_w"]) else 1
    word_bits = core.bpw * 8
    if head:
        tap_part = t % ci_n
    else:
        pe_r, simd_r = lay["pe_r"], lay["simd_r"]
        tap_part = (t // simd_r) * pe_r * simd_r + t % simd_r
    held = 0
    for ocl in range(c1 - c0):
        if head:
            row = ocl * ci_n
        else:
            row = (ocl // lay["pe_r"]) * lay["fs"] * lay["pe_r"] * lay["simd_r"] \
                + (ocl % lay["pe_r"]) * lay["simd_r"]
        words = (skew + (row + tap_part) * wbits) // word_bits
        held += int(valid[1:][words[1:] == words[:-1]].sum())
    return held


def _threshold_lanes(d, core, r0, r1, m0, m1):
    """The threshold lanes' cycles (``tvec``, ``ptv``) over the pixels of rows ``[r0,
    r1)`` and PE folds ``[m0, m1)``: per job and fold TV_T; TV_I where the fold is the
    job's first or its invert bits start a word (their section starts on one); TV_O
    where it is the job's first or its output bits start a word, and for the pixel's
    last fold (its bits otherwise merge into the kept word in the next fold's first
    cycle)."""
    pe, w, jobs = core.pe, core.bpw * 8, d["jobs"]
    inv = sum(1 for f in range(m0, m1) if f == m0 or f * pe % w == 0)
    pix = d["out_c"] // 8                 # a pixel's bytes: a bit a channel
    by_offset = {}
    total = 0
    for y in range(r1 - r0):
        for x in range(d["out_w"]):
            b = (y * d["out_pitch"] + x * pix) * 8 % w      # the regions start on words
            if b not in by_offset:
                out = sum(1 for f in range(m0, m1) if f == m0 or (b + f * pe) % w == 0)
                last_kept = m1 - m0 > 1 and (b + (m1 - 1) * pe) % w != 0
                by_offset[b] = jobs * (m1 - m0 + inv + out) + int(last_kept)
            total += by_offset[b]
    return total


def _compute(d, lay, rows, channels, folds, core, chunk=0):
    """START and the compute of one tile (one chunk of channels ``[c0, c1)`` and PE
    folds ``folds``): per pixel and job the gather and the array's folds (``vec``), or
    per channel and job the scalar window; the epilogue, mixer and output merges per
    channel (module docstring). Returns ``{phase: cycles}``."""
    r0, r1 = rows[0], rows[1]
    c0, c1 = channels
    jobs = d["jobs"]
    ws = _window_sums(d, lay, r0, r1)
    px = ws["pixels"]
    valid_c, pad_c = _tap_costs(d, lay)
    taps = valid_c * ws["valid"] + pad_c * (ws["taps"] - ws["valid"])
    per_oc_epi = sum(_epilogue(d, lay, oc) for oc in range(c0, c1)) \
        if lay["op"] not in _MULTI else 0            # a MIXER's epilogue: in its outputs
    out = dict(gather=0, folds=0, scalar=0, pool=0, epilogue=0, outputs=0)
    if lay["ptv"]:
        # per pixel CORE, POOL_TAP (the gather's), TV_A; per job and PE fold PT_X (the
        # gather's: its inputs) and the threshold lanes
        folds = d["out_c"] // core.pe
        out["gather"] = px * (2 + jobs * folds)
        out["epilogue"] = px + _threshold_lanes(d, core, r0, r1, 0, folds) + 1   # and START
        return out
    if lay["vec"] or lay["svec"] or lay["pvec"]:
        # per pixel and job: CORE, POOL_TAP, the window, EPI (a PIXEL on the lanes: the
        # gather with a one-level prologue's reads); the folds of [o0, o1)
        if not _has(d, "prologue_threshold") or d["in_levels"] == 1:
            taps = _wide_gather(d, lay, core, r0, r1)
        else:
            taps += px                            # TAP: the window's first tap
        # EPI only on the threshold lanes and after a lane-by-lane window: the array's
        # window goes from its last group's write straight to the folds
        epi = 1 if lay["pvec"] or _has(d, "prologue_threshold") and d["in_levels"] != 1 else 0
        out["gather"] = jobs * ((2 + epi) * px + taps)
        if lay["pvec"]:
            # PW per SIMD channels (their bits merged), no folds
            out["outputs"] = jobs * px * (d["out_c"] // core.simd)
            out["epilogue"] = 1               # START
            return out
        # MVU: one fold a cycle (the popcounts of a fold are added while the next one
        # is addressed, a PE fold's sums stored with its last SIMD fold); MVU_END
        # (SMVU: stem_channels output channels' SIMD fold a cycle, pe of them per PE
        # fold)
        stem_steps = core.pe // core.stem_channels
        out["folds"] = jobs * px * (folds * lay["fs"] * (stem_steps if lay["svec"] else 1) + 1)
        if lay["tvec"]:
            # per pixel TV_A, per job and PE fold the threshold lanes
            m0 = c0 // core.pe                  # the chunk's first PE fold
            out["epilogue"] = px + _threshold_lanes(d, core, r0, r1, m0, m0 + folds) + 1
            return out
        if lay["swr"]:
            # per pixel SW_A, per PE fold its pe sums a word a cycle (SW_W)
            out["epilogue"] = px * (1 + folds * core.pe * 32 // (core.bpw * 8)) + 1
            return out
        # per pixel CORE (it addresses the first accumulator; the state before each
        # other channel and job does), per channel and job ACC_D and the epilogue; with
        # a post-op only a pixel's first ACC_D: the others' accumulators come with
        # their pair A, B (PA_D), except at the descriptor's first channel
        # (:func:`_post_first`)
        acc_d = px if _has(d, "postop") else jobs * px * (c1 - c0)
        # the pair table holds a channel's pairs after the descriptor's first pixel
        first = 1 if r0 == 0 else 0
        ahead = sum(first * _read_ahead(d, lay, oc)
                    + (px - first) * _read_ahead(d, lay, oc, core)
                    for oc in range(c0, c1))
        if _chained(d, lay, core):
            ahead += (px - first) * (c1 - c0 - 1)
        out["epilogue"] = px + acc_d + jobs * px * per_oc_epi - ahead
    else:
        n_c = c1 - c0
        if lay["op"] not in ("CONV", "HEAD"):
            # an element-wise core narrower than its output (option A): the channels
            # past in_c read no input (every tap padded)
            narrow = max(0, c1 - max(c0, d["in_c"]))
            pad_taps = pad_c * ws["taps"]
            taps = (n_c - narrow) * taps + narrow * pad_taps
        else:
            taps *= n_c
            if not _has(d, "prologue_threshold"):
                # product taps whose weight word is held take 1 cycle, not 2
                taps -= _held_weight_taps(d, lay, core, channels, chunk, ws)
        if lay["mvec"]:
            # per word of channels POOL_TAP, then a cycle a tap (MP_TAP for a padded
            # one, MP_D for one inside the map, MP_TAP before it when it is the
            # window's first: the state before each other tap addresses it); the
            # last tap's cycle starts the epilogue
            words = n_c // (core.bpw * 8 // 32)
            first_inside = ws["rows_valid"][0] * ws["cols_valid"][0]
            out["pool"] = jobs * words * (px * (1 + lay["win_h"] * lay["win_w"]) + first_inside)
            window = 0
        elif lay["pooling"]:
            # per pooling tap: POOL_TAP, POOL_NEXT; inside the map the convolution
            # (TAP, the taps) and EPI
            window = n_c * (2 * ws["pool_taps"] + 2 * ws["pool_in"]) + taps
        else:
            window = n_c * 3 * px + taps            # POOL_TAP, TAP, the taps, EPI
        out["scalar"] = jobs * (n_c * px + window)      # CORE
        out["epilogue"] = jobs * px * per_oc_epi
    per_oc = [_mixer(d, lay) + _outputs(d, lay, oc) for oc in range(c0, c1)]
    if _writes_behind(d, lay):
        # the output writer takes each channel's gates and writes beside the next
        # channel (AGG stays); DRAIN waits for the chunk's last channel's (as many cycles
        # as GATE and OUT_WD took)
        beside = 1 if _mixing(d, lay) else 0
        out["outputs"] = px * (c1 - c0) * beside + per_oc[-1] - beside
    else:
        out["outputs"] = px * sum(per_oc)
    out["epilogue"] += 1                  # START
    if lay["is_head"] and chunk == 0:
        out["scalar"] += _head_sums(d)
    return out


def _head_sums(d):
    """A head's channel sums, once per descriptor (its first chunk of classes): from
    START, HSUM (the first read's address), per channel an HSUM_D per input pixel (the
    state reading one addresses the next) and HSUM_WR (its sum merged into its word),
    then START again."""
    return 1 + d["in_c"] * (d["in_h"] * d["in_w"] + 1) + 1


def _burst_sizes(addr, nbytes, core):
    """Words of each burst of a DMA descriptor: at most ``max_burst``, none across
    4 KiB."""
    sizes, left = [], nbytes // core.bpw
    while left:
        n = min(left, core.max_burst, (_BOUNDARY - addr % _BOUNDARY) // core.bpw)
        sizes.append(n)
        addr += n * core.bpw
        left -= n
    return sizes


class _Bucket:
    """The DRAM model's token bucket (``sim/dram_model.h``) as one port's transfers see
    it: ``bytes_per_cycle`` tokens a cycle, capped at ``bucket_cap``, a word's bytes
    spent on each word moved; full at the first word. A run of words each due the cycle
    after the one before drains it in closed form (:meth:`span`): with a rate of whole
    bytes below the word, what is left of a word plus a cycle's bytes never reaches the
    cap, so word ``k`` of the run moves once ``k`` words' bytes have come in."""

    def __init__(self, core):
        rate = core.bytes_per_cycle
        whole = float(rate).is_integer()
        self.word = core.bpw
        self.rate = int(rate) if whole else rate
        self.cap = int(core.bucket_cap) if whole else core.bucket_cap
        self.last = None         # cycle the last word moved
        self.left = self.cap     # tokens after it

    def take(self, due):
        """The first cycle from ``due`` on (and after the last word's) whose tokens
        hold a word; spends them."""
        if self.last is None:
            t, tokens = due, self.cap
        else:
            t = max(due, self.last + self.span(self.left, 1))
            tokens = min(self.cap, self.left + self.rate * (t - self.last))
        self.last, self.left = t, tokens - self.word
        return t

    def span(self, left, k):
        """Cycles from a word that left ``left`` tokens to the ``k``-th word after it,
        each due the cycle after the one before."""
        if k <= 0:
            return 0
        if self.rate >= self.word:
            return k
        return max(k, self._cycles(self.word * k - left))

    def spans(self, left, n):
        """``[span(left, j) for j in range(n)]``, computed as one list."""
        if n <= 0:
            return []
        w, r = self.word, self.rate
        if r >= w:
            return list(range(n))
        # from a word's leftover (0 <= left < word) the k-th next word needs at least
        # k cycles' income anyway, so the ceiling alone is the span
        if isinstance(r, int) and isinstance(left, int):
            return [0] + [-((left - w * j) // r) for j in range(1, n)]
        return [0] + [math.ceil((w * j - left) / r) for j in range(1, n)]

    def follow(self, k):
        """Moves the ``k`` words after the last, each due the cycle after the one
        before; returns the cycle of the last word."""
        if k <= 0:
            return self.last
        d = self.span(self.left, k)
        if self.rate >= self.word:
            self.left = min(self.cap - self.word, self.left + k * (self.rate - self.word))
        else:
            self.left += self.rate * d - self.word * k
        self.last += d
        return self.last

    def _cycles(self, short):
        """Cycles of income that cover ``short`` tokens."""
        if isinstance(self.rate, int) and isinstance(short, int):
            return -(-short // self.rate)
        return math.ceil(short / self.rate)


class _WriteDMA:
    """The write DMA and its FIFO as a tile's stores see them, on the sequencer's time
    line (cycle 0: the tile's first STORE_ADDR)."""

    def __init__(self, core):
        self.core = core
        self.leave = []          # cycle each word left the FIFO (its beat was loaded)
        self.last_beat = None    # cycle the last beat was accepted
        self.idle = 0            # first cycle the DMA takes a descriptor
        self.bucket = _Bucket(core)

    def store(self, t, addr, nbytes, pieces=None):
        """STORE_CMD at cycle ``t`` (held until the DMA is idle: the previous store's
        last burst started), then STORE_RD and STORE_SEND per word: a push every two
        cycles, later when the FIFO is full. A burst starts once its words are counted
        in the FIFO and the previous burst's last beat is accepted; a beat as the DRAM's
        bucket lets it (:class:`_Bucket`). ``pieces``: a strided store's ``(addr,
        nbytes)`` descriptors, each after the first offered from STORE_RD on and taken
        when the DMA is idle; the sequencer moves on once the last is taken
        (STORE_PIECES). Returns the cycle of the sequencer's next state."""
        t = max(t, self.idle)            # STORE_CMD
        push = t + 2                     # STORE_RD, then the first STORE_SEND
        last_push = taken = t
        for i, (a, n) in enumerate(pieces or [(addr, nbytes)]):
            if i:
                taken = max(t + 1, self.idle)
            last_push = self._piece(taken, a, n, push)
            push = last_push + 2
        return max(last_push, taken) + 1

    def _piece(self, t, addr, nbytes, push):
        """One descriptor taken at ``t``, its first word pushed at ``push``; returns
        the cycle of its last push."""
        core = self.core
        for size in _burst_sizes(addr, nbytes, core):
            w = len(self.leave)
            for j in range(w, w + size):
                if j >= core.wr_depth:
                    # a full FIFO: the push waits until a word leaves
                    push = max(push, self.leave[j - core.wr_depth] + 1)
                last_push = push
                push += 2
            # SUM and CHECK: the DMA runs from STORE_CMD + 3; the start sees the FIFO's
            # level a cycle after the push
            start = max(last_push + 1, t + 3)
            if self.last_beat is not None:
                start = max(start, self.last_beat)
            # the next word is loaded as a beat is taken
            first = self.bucket.take(start + 1)
            self.leave.append(start)
            self.leave.extend(first + d for d in self.bucket.spans(self.bucket.left, size - 1))
            self.last_beat = self.bucket.follow(size - 1)
            self.idle = start + 1
        return last_push

    def done(self):
        """The cycle the write DMA's ``done`` pulse is high (after the last beat)."""
        return self.last_beat + 1


def _stores(d, lay, table, core, rows, chunk=0):
    """STORE_ADDR (two cycles), STORE_CMD and the pushes of every output of a tile
    (:class:`_WriteDMA`), or of a chunk's slices; returns (cycles, cycles after them
    until the last write's ``done``). A tile's stores start from an idle write DMA and
    a full bucket, so tiles whose stores have the same sizes and offsets in 4 KiB
    time alike: each such sequence is followed once."""
    r0, r1 = rows[0], rows[1]
    stores = []                          # per output: None, or (address, bytes, pieces)
    for k in range(_n_out(d, lay)):
        fld = table[k]["out_addr"]
        if fld == 0:
            stores.append(None)
        elif lay["sliced"]:
            at = fld + chunk * lay["chunk_in"] * d["out_elem"] // 8
            stores.append((at, lay["out_tile"],
                           _slices(d, lay, at, d["out_elem"], d["out_c"])))
        else:
            stores.append((fld + r0 * d["out_pitch"], (r1 - r0) * d["out_pitch"], None))
    key = tuple(None if s is None else _in_pages(*s) for s in stores)
    if key not in core.stores_seen:
        core.stores_seen[key] = _follow_stores(stores, core)
    return core.stores_seen[key]


def _follow_stores(stores, core):
    """:func:`_stores` on the write DMA's time line."""
    dma = _WriteDMA(core)
    t = 0
    for store in stores:
        t += 2                           # STORE_ADDR
        if store is None:
            t += 1                       # STORE_CMD: no output
            continue
        t = dma.store(t, *store)
    drain = dma.done() - t if dma.last_beat is not None else 0
    return t, max(0, drain)


def descriptor_core_cycles(d, table, core, label=""):
    """The model of one decoded descriptor on ``EngineCore`` (module docstring).

    Parameters
    ----------
    d : dict
        The decoded descriptor.
    table : list of dict
        Its job table's decoded entries.
    core : _Core

    Returns
    -------
    CoreDescriptorCycles
    """
    op = _OPCODES.get(d["opcode"], "")
    phases = dict(fetch=_fetch(core))
    if op == "INPUT":
        phases["fence"] = 1                  # NEXT
        return _result(d, op, phases, label)
    lay = _layout(d, core)
    phases["setup"] = _setup(d, lay, core)
    for name in ("loads", "clear", "gather", "folds", "scalar", "pool", "epilogue",
                 "outputs", "stores"):
        phases[name] = 0
    drain = 0
    for t in range(d["n_tiles"]):
        rows = _tile_rows(d, lay, t)
        phases["loads"] += 4                 # TILE0-3
        chunks = _ceil(d["out_c"], lay["chunk_c"]) if lay["stream"] else 1
        for q in range(chunks):
            c0 = q * lay["chunk_c"]
            c1 = min(c0 + lay["chunk_c"], d["out_c"])
            o0 = q * lay["fpc"] if lay["stream"] else 0
            o1 = min(o0 + lay["fpc"], lay["fo"]) if lay["stream"] else lay["fo"]
            # the previous tile's (chunk's) writes drain while this one loads (a tile:
            # TILE0-3 first)
            writing = drain - 4 if q == 0 and t else drain if q and lay["sliced"] else 0
            phases["loads"] += _loads(d, lay, table, core, t, rows, q, writing)
            if q == 0:
                phases["clear"] += _clear(d, lay, core)
            for name, c in _compute(d, lay, rows, (c0, c1), o1 - o0, core, q).items():
                phases[name] += c
            if lay["sliced"] or q == chunks - 1:      # slices: every chunk's
                seq, drain = _stores(d, lay, table, core, rows, q)
                phases["stores"] += seq
    phases["epilogue"] += _post_first(d, lay)
    phases["outputs"] += _mix_first(d, lay)
    # FENCE until the last write's done, then NEXT
    phases["fence"] = 1 + max(drain, 0) + 1
    return _result(d, op, phases, label)


def _result(d, op, phases, label):
    cycles = sum(phases.values())
    dominant = max(phases, key=phases.get)
    return CoreDescriptorCycles(int(d["index"]), op, int(d["jobs"]), int(cycles),
                                {k: int(v) for k, v in phases.items()}, dominant, label)


def predict_core(program, core_params=None, latency=48, bytes_per_cycle=10.0):
    """Predicted cycles of a compiled program on ``EngineCore`` as built.

    Parameters
    ----------
    program : EngineProgram
        From :func:`~.layout.compile_engine`.
    core_params : dict, optional
        ``EngineCore``'s keyword arguments (missing ones: :data:`CORE_DEFAULTS`).
    latency : int
        The DRAM's read latency in cycles (``sim.engine_rtl.run_engine_rtl``'s).
    bytes_per_cycle : float
        The DRAM's bandwidth (likewise).

    Returns
    -------
    CoreFrameCycles
    """
    core = _Core(core_params, latency, bytes_per_cycle)
    per = []
    for d, grp in zip(program.descriptors, program.groups):
        nodes = grp.nodes
        label = nodes[0].name if len(nodes) == 1 else f"{nodes[0].name} .. {nodes[-1].name}"
        table = job_table(program.image, program.base, d, d["jobs"])
        per.append(descriptor_core_cycles(d, table, core, label))
    end = _fetch(core) + RUN_OVERHEAD
    phases = {}
    for p in per:
        for k, v in p.phases.items():
            phases[k] = phases.get(k, 0) + v
    return CoreFrameCycles(per, int(end), int(sum(p.cycles for p in per) + end),
                           program.config.clock_mhz, phases)
