"""The engine's cycle model: per descriptor, then per frame.

For one descriptor (docs/architecture.md section 12):

- compute: a binary convolution job takes
  ``out_h*out_w * groups * ceil(C_out/groups/PE) * k*k * ceil(C_in/groups/SIMD)``
  cycles (a tap's channels are words of their own, as the window gatherer reads them;
  times the input bits for n-bit activations, which the XNOR lanes take bit-serially),
  or where more, the epilogue's ``jobs * ceil(PE/lanes)`` beats an output fold, a
  beat of a residual add as many cycles as bus words of side elements it takes, one
  at least (:func:`binary_fold_cycles`); the K jobs of a descriptor run on the ``arrays``
  arrays in ``ceil(K/arrays)`` rounds, and a weight-streaming descriptor's chunks one
  after another. The input rows a chunk reads go into the gatherer's ring a job and
  row at a time, beside the arrays: the row loader takes a ring word a cycle, a
  prologue threshold (of a fixed-point input, fusion rule 3) 8 channels a cycle (4 of
  32-bit elements), and where the rows take longer than the chunk's folds they bound
  it (a stride-2 convolution's last chunk of one output fold). A chunk after the
  first waits :data:`CHUNK_SWITCH` for the one before and, where the ring does not
  hold the whole map, for its first output row's rows (:func:`binary_conv_compute`).
  The stem uses the same formula on its multiplier array, or where more its window's
  taps (gathered a cycle each) or its channels (a cycle each through the stem
  runner's pooling and post-op lane), per pixel; max pooling takes
  ``k*k*ceil(C/lanes)`` cycles per output pixel and element-wise ops ``ceil(C/lanes)``
  per pixel and input (``lanes`` = :attr:`EngineConfig.vector_lanes`), job after job;
  the head pools an element a cycle (``C`` per input pixel: the classifier head's
  pooling, an element a cycle, costs less logic than a vector's gearbox and is under
  1 % of ResNet-18's frame) and multiplies ``classes*ceil(C/lanes)``. The stem
  runner, which pools on chip, computes its convolution's whole map once, a row after
  another, and its pooling keeps pace (its ring holds twice the rows a window and its
  stride span, so that the next rows come in while a row computes).
- memory: DRAM bytes read (the input rows the tiles use, each once: the input buffer
  is a ring that keeps a tile's halo rows for the next, :mod:`.tiling`; the
  convolution runner's row loop reads every input row, a strided 1x1 convolution's
  unused ones too, and the stem runner every frame row once; an input shared by the
  jobs of a round is read once per round (a binary convolution's: where the runner's
  row replay holds its rows, ``EngineConfig.replay_row_bytes``, and no residual add's
  side rows come between them; else once a job), a side input shared so once per
  round too; weights once per job if they fit half the weight buffer (the stem's
  whole), else once per tile; other parameters once per job; side inputs; the
  descriptor and its job table) and written (outputs), at
  ``DramModel.bytes_per_cycle``, plus one read latency. A weight-streaming descriptor
  reads its weights once and its input once per weight chunk, or once if it is
  resident (:mod:`.tiling`).
- setup: the parameters a unit reads before its rows, one read and its latency after
  another, not overlapped (section 15's units): a binary convolution's round table,
  each job's constant sections (prologue thresholds, post-op constants, thresholds,
  level outputs' thresholds, mixer coefficients) and every job's weights or their
  first chunk; the stem runner's weights and constants; the head's biases; the
  subsampler's next job-table entry, a latency a job. A binary convolution reads its
  input rows one at a time, the next while the loader takes this one: where rows are
  short a read latency each bounds its row traffic.
- the descriptor takes ``fetch + setup + max(compute, memory) + fill_drain`` cycles:
  the rows' transfers overlap compute (a weight-streaming descriptor whose input is
  resident reads it while its first chunk computes, and only then: that chunk takes
  the longer of its compute and the input's reads, the other chunks the longer of
  theirs and the remaining traffic); ``fetch`` is the descriptor and job-table read
  (latency + beats), ``fill_drain`` the first row's wait for data (latency), the
  pipeline depth and the last output row's write (the units write each row as it is
  computed), or a weight-streaming descriptor's whole maps where the map buffer
  assembles them (written at its end).

A frame takes the sum over descriptors (one descriptor at a time). Where the program
holds frames in flight (:mod:`.frames`), a stream of frames runs the next frame's stem
beside each frame's other descriptors: a frame then takes the longer of the stem and the
rest, the rest slowed by the stem's DRAM traffic (all of it counted against the rest's
bandwidth: the rest is memory-bound in places) and by one more descriptor fetch (the
stem's, in the rest's program). That *interval* gives the frames/s at the engine's
clock; a frame's latency is still the sum.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import DramModel
from .frames import stem_index
from .program import DESCRIPTOR, FLAG_BITS, JOB, OPCODE_CODES, STAGE_BITS, table_entries
from .tiling import (input_resident, input_rows_read, map_buffer_assembles,
                     map_region, n_chunks, written_row_bytes)

__all__ = ["DescriptorCycles", "FrameCycles", "descriptor_cycles", "predict"]

_OPCODES = {v: k for k, v in OPCODE_CODES.items()}
#: Cycles a weight chunk after the first waits for the one before: a chunk begins once
#: the chunk before has all its slices in the map buffer (the arrays, the epilogue and
#: the packers drained), and its first window is gathered only then. Measured on the
#: DE10-Nano's units (``benchmarks/unit_engine.py``, ResNet-18 K=5 at 224x224, the
#: 14x14 and 7x7 stages' 16 and 32 chunks a descriptor): 330-350 cycles a chunk where
#: the descriptor thresholds, 410-630 where it mixes.
CHUNK_SWITCH = 400


def _ceil(a, b):
    return -(-a // b)


@dataclass(frozen=True)
class DescriptorCycles:
    """The cycle model's figures of one descriptor."""

    index: int
    opcode: str
    jobs: int
    compute: int
    memory: int
    overhead: int
    cycles: int
    bound: str
    bytes_read: int
    bytes_written: int
    macs: int
    lane_utilisation: float | None
    label: str = ""

    def as_dict(self):
        return asdict(self)


@dataclass(frozen=True)
class FrameCycles:
    """The whole program: per-descriptor figures and per-frame totals."""

    descriptors: list
    cycles: int
    clock_mhz: float
    dram_bytes: int
    bandwidth_share: float
    binary_macs: int
    lane_utilisation: float
    interval: int | None = None

    @property
    def frame_interval(self):
        """Cycles from one frame to the next in a stream: ``interval`` with frames in
        flight, else a frame's ``cycles``."""
        return self.interval or self.cycles

    @property
    def fps(self):
        return self.clock_mhz * 1e6 / self.frame_interval


def _core_pixels(d):
    """Pixels a convolution computes per job: with a fused max pooling (the stem
    runner's) its convolution's whole map, once (one tile: the pooling takes its rows as
    they come)."""
    if not d["stages"] & STAGE_BITS["maxpool"]:
        return d["out_h"] * d["out_w"]
    return d["mid_h"] * d["mid_w"]


def _input_passes(d, config):
    """Times a descriptor reads its input: a streamed one once per weight chunk unless
    resident."""
    return 1 if input_resident(d, config) else n_chunks(d)


def _rows_read(d):
    """Input rows a descriptor reads in one pass: the convolution runner's row loop steps
    through every input row (a strided 1x1 convolution's unused ones too), the stem
    runner's through every frame row once; other units read the rows their windows
    use."""
    if d["opcode"] == OPCODE_CODES["CONV"]:
        return d["in_h"]
    return input_rows_read(d)


def _replayed(d, config):
    """Whether the runner's row replay gives a shared input's rows to every job of a
    round (``hw/engine/replay.py``): rows it holds, no residual add's side rows between
    them."""
    return not d["stages"] & STAGE_BITS["add"] and d["in_pitch"] <= config.replay_row_bytes


def binary_fold_cycles(d, config):
    """Cycles of one output fold (``pe`` channels of every job of a round) of a binary
    convolution on the intended engine's units (docs/architecture.md section 15): its
    window's folds, a tap's channels in ``ceil(C_in/groups/simd)`` words of their own
    (the gatherer's tap-aligned words), each bit plane in turn; or, where that is
    fewer, the epilogue's beats (``ceil(pe/vector_lanes)`` a job of the round). A
    residual add's beat also waits for its side elements, which the input unpacker
    gives a beat a cycle, or a bus word a cycle where a beat takes more
    (``hw/engine/unpacker.py``: a word taken and a beat given in one cycle): 16-bit
    sides at 8 lanes a cycle a beat, 24-bit ones 1.5 (measured on the unpacker alone:
    1.0 and 1.5)."""
    taps = d["kernel"] ** 2 * _ceil(d["in_c"] // d["groups"], config.simd)
    beats = min(d["jobs"], config.arrays) * _ceil(config.pe, config.vector_lanes)
    if d["stages"] & STAGE_BITS["add"]:
        side_beat_bytes = config.vector_lanes * d["side_elem"] / 8
        beats = beats * max(1, side_beat_bytes / config.port_bytes)
    return max(taps * max(1, d["act_bits"]), beats)


def _feed_cycles(d, config):
    """Cycles a job's input row takes into the gatherer's ring: the row loader writes
    a ring word a cycle (a pixel's channels in ``ceil(C_in/simd)`` words, as the
    gatherer reads them), behind a prologue threshold's groups of 8 channels, a group a
    cycle (two cycles of 32-bit elements: two bus words a group), whichever is slower
    (``hw/engine/loader.py``, ``hw/engine/prologue.py``)."""
    per_pixel = _ceil(d["in_c"] // d["groups"], config.simd)
    if d["stages"] & STAGE_BITS["prologue_threshold"]:
        per_pixel = max(per_pixel, _ceil(d["in_c"], 8) * (2 if d["in_elem"] == 32 else 1))
    return d["in_w"] * per_pixel


def binary_conv_compute(d, config):
    """``(cycles, first chunk's cycles)`` of a binary convolution's compute on the
    units: round after round, chunk after chunk (one chunk without weight streaming),
    each the longer of its arrays' folds (:func:`binary_fold_cycles` an output fold)
    and the rows fed into the ring where the chunk reads the input (the first chunk, or
    every chunk unless the ring holds the whole map: :func:`_feed_cycles` a row of each
    job), and before each chunk after the first the rows its first output row needs
    fed again where the chunk reads them (the ring starts empty) and
    :data:`CHUNK_SWITCH`."""
    g, pe = d["groups"], config.pe
    px = _core_pixels(d) * g * binary_fold_cycles(d, config)
    folds = _ceil(d["out_c"] // g, pe)
    if d["flags"] & FLAG_BITS["weight_stream"]:
        per = max(1, d["chunk_c"] // pe)
        chunks = [min(per, folds - c) for c in range(0, folds, per)]
    else:
        chunks = [folds]
    rereads = not input_resident(d, config)
    head_rows = max(1, d["dilation"] * (d["kernel"] - 1) + 1 - d["padding"])
    row = _feed_cycles(d, config)
    busy = []                       # each round's chunks in turn
    for r in range(0, d["jobs"], config.arrays):
        jobs = min(config.arrays, d["jobs"] - r)
        for c, n in enumerate(chunks):
            reads = c == 0 or rereads
            cycles = max(px * n, jobs * _rows_read(d) * row if reads else 0)
            if c:
                cycles += CHUNK_SWITCH + (jobs * head_rows * row if reads else 0)
            busy.append(cycles)
    return sum(busy), busy[0]


def _serial_setup(d, op, config, dram):
    """``(bytes, cycles)`` of the parameters a descriptor's unit reads before its rows,
    one read after another (section 15's units: the runner reads each job's prologue
    thresholds, post-op constants, thresholds, level outputs' thresholds and mixer
    coefficients a read each, a round's table first, then every job's weights or their
    first chunk; the stem runner its weights, then its constants; the head its biases;
    the subsampler each job's table entry once the job before is written)."""
    L, bw = dram.latency, dram.bytes_per_cycle
    jobs, rounds = d["jobs"], _ceil(d["jobs"], config.arrays)
    if op == "CONV" and not d["flags"] & FLAG_BITS["int_weights"]:
        st, fl = d["stages"], d["flags"]
        levels = (2 if d["aux_outputs"] == 2 else 1) if fl & FLAG_BITS["levels_out"] else 0
        sections = (bool(st & STAGE_BITS["prologue_threshold"]) + bool(st & STAGE_BITS["postop"])
                    + bool(st & STAGE_BITS["threshold"]) + levels
                    + bool(st & STAGE_BITS["mixer"]))
        w = d["weight_tile_bytes"]
        first = w * d["chunk_c"] // d["out_c"] if fl & FLAG_BITS["weight_stream"] else w
        consts = jobs * (d["param_bytes"] - w + levels * d.get("aux_param_bytes", 0))
        nbytes = consts + jobs * first
        return nbytes, (rounds + jobs * sections + 1) * L + _ceil(nbytes, bw)
    if op == "CONV" or op == "HEAD":
        nbytes = d["param_bytes"] - (d["weight_tile_bytes"] if op == "HEAD" else 0)
        return nbytes, 2 * L + _ceil(nbytes, bw)
    if op == "SUBSAMPLE":
        return 0, (jobs - 1) * L
    return 0, 0


def descriptor_cycles(d, header, config, dram, label=""):
    """The cycle model of one decoded descriptor (module docstring)."""
    op = _OPCODES[d["opcode"]]
    jobs, lanes = d["jobs"], config.vector_lanes
    out_px = d["out_h"] * d["out_w"]
    core_px = _core_pixels(d) if op == "CONV" else out_px
    rounds = _ceil(jobs, config.arrays)
    macs, compute = 0, 0
    if op == "CONV":
        g = d["groups"]
        n = d["kernel"] ** 2 * (d["in_c"] // g)
        if d["flags"] & FLAG_BITS["int_weights"]:
            # the stem runner: a pixel's folds, under which its taps are gathered a
            # cycle each, and its channels a cycle each through the pooling and the
            # post-op lane (hw/engine/stem_runner.py), whichever is more
            compute = jobs * core_px * max(
                _ceil(d["out_c"], config.stem_pe) * _ceil(n, config.stem_simd),
                d["kernel"] ** 2, d["out_c"])
        else:
            compute, first_chunk = binary_conv_compute(d, config)
            macs = jobs * core_px * d["out_c"] * n
    elif op == "MAXPOOL":
        compute = jobs * out_px * d["kernel"] ** 2 * _ceil(d["out_c"], lanes)
    elif op in ("PIXEL", "SUBSAMPLE", "REPEAT", "MIXER", "GATE"):
        compute = jobs * out_px * _ceil(d["out_c"], lanes)
    elif op == "HEAD":
        compute = d["in_h"] * d["in_w"] * d["in_c"] + d["out_c"] * _ceil(d["in_c"], lanes)
    # DRAM traffic
    fetch_bytes = DESCRIPTOR.itemsize + table_entries(d) * JOB.itemsize
    read = 0
    if op != "INPUT":
        if op == "HEAD":
            in_bytes = d["in_bytes"]
        else:
            in_bytes = _rows_read(d) * d["in_pitch"]
        shared = d["flags"] & FLAG_BITS["shared_input"] and op not in ("MIXER", "GATE") and (
            op != "CONV" or _replayed(d, config))
        read += in_bytes * (rounds if shared else jobs) * _input_passes(d, config)
        if d["stages"] & STAGE_BITS["add"]:
            side_reads = 1 if op in ("MIXER", "GATE") else (
                rounds if d["flags"] & FLAG_BITS["shared_side"] else jobs)
            read += d["out_h"] * d["side_pitch"] * side_reads
        w = d["weight_tile_bytes"]
        # (the stem runner holds its weights whole: read once)
        weight_passes = 1 if (w <= config.weight_buffer // 2 or d["flags"] & (
            FLAG_BITS["weight_stream"] | FLAG_BITS["int_weights"])) else d["n_tiles"]
        param_jobs = 1 if op in ("MIXER", "GATE") else jobs
        read += param_jobs * (w * weight_passes + d["param_bytes"] - w)
    # tensors written: one per job; a mixer's one (aggregate) or K (gated outputs); a
    # stand-alone gate's K (its last entry is the aggregate it reads)
    gated = d["stages"] & STAGE_BITS["gated"]
    if op == "INPUT":
        outputs = 0
    elif op == "GATE":
        outputs = jobs - 1
    elif op == "MIXER" or (op == "CONV" and d["stages"] & STAGE_BITS["mixer"]):
        outputs = jobs if gated else 1
    else:
        outputs = jobs
    # with level outputs (fusion rule 7) each output's level tensors too, or only they
    written = outputs * (d["out_h"] * written_row_bytes(d)
                         if d["flags"] & FLAG_BITS["levels_out"] else d["out_bytes"])
    total = read + written
    # parameters read before the rows, one read and its latency after another: not
    # overlapped with the compute
    setup_bytes, setup = _serial_setup(d, op, config, dram)
    memory = 0 if op == "INPUT" else \
        dram.latency + _ceil(max(0, total - setup_bytes), dram.bytes_per_cycle)
    if op == "CONV" and not d["flags"] & FLAG_BITS["int_weights"]:
        # a binary convolution's input rows are read one at a time (the next while the
        # loader takes this one): a read latency each where rows are short
        row_reads = (_rows_read(d) * (rounds if shared else jobs)
                     * _input_passes(d, config))
        memory = max(memory, row_reads * (dram.latency + _ceil(d["in_pitch"],
                                                                dram.bytes_per_cycle)))
    fetch = dram.latency + _ceil(fetch_bytes, config.port_bytes) + setup
    # after the compute: the last output row's write, or a weight-streaming
    # descriptor's maps where the map buffer assembles them (then written at its end)
    last_tile = (d["out_h"] if map_buffer_assembles(d, map_region(config)) else 1) * \
        written_row_bytes(d) * max(outputs, 1)
    overhead = fetch if op == "INPUT" else (
        fetch + dram.latency + config.pipeline_depth + _ceil(last_tile, dram.bytes_per_cycle))
    busy = max(compute, memory)
    if op == "CONV" and d["flags"] & FLAG_BITS["weight_stream"] and _input_passes(d, config) == 1:
        # a resident input is read while the first chunk computes, and only then: the
        # other chunks' compute cannot hide it (a prologue's wide rows, read a row and
        # job after another, make the first chunk memory-bound)
        first = first_chunk
        in_cycles = max(_ceil(in_bytes * (rounds if shared else jobs), dram.bytes_per_cycle),
                        row_reads * (dram.latency + _ceil(d["in_pitch"], dram.bytes_per_cycle)))
        rest = max(0, memory - in_cycles)
        busy = max(busy, max(first, in_cycles) + max(compute - first, rest))
    cycles = overhead + busy
    util = macs / (cycles * config.lanes) if macs else None
    return DescriptorCycles(d["index"], op, jobs, int(compute), int(memory), int(overhead),
                            int(cycles), "compute" if compute >= memory else "memory",
                            int(read + fetch_bytes), int(written), int(macs), util, label)


def predict(program, dram=None):
    """The cycle model of a compiled program (:class:`~.layout.EngineProgram`).

    Parameters
    ----------
    program : EngineProgram
    dram : DramModel, optional
        Default: the DE10-Nano model at the engine's clock
        (:meth:`DramModel.at_clock`).

    Returns
    -------
    FrameCycles
    """
    config = program.config
    dram = dram or DramModel.at_clock(config.clock_mhz)
    per = []
    for d, grp in zip(program.descriptors, program.groups):
        nodes = grp.nodes
        label = nodes[0].name if len(nodes) == 1 else f"{nodes[0].name} .. {nodes[-1].name}"
        per.append(descriptor_cycles(d, program.header, config, dram, label))
    cycles = sum(p.cycles for p in per)
    dram_bytes = sum(p.bytes_read + p.bytes_written for p in per)
    macs = sum(p.macs for p in per)
    interval = frames_in_flight_interval(program, per, dram)
    every = interval or cycles
    return FrameCycles(per, cycles, config.clock_mhz, dram_bytes,
                       dram_bytes / (every * dram.bytes_per_cycle), macs,
                       macs / (every * config.lanes), interval)


def frames_in_flight_interval(program, per, dram):
    """Cycles a frame of a stream takes with frames in flight (:mod:`.frames`; None
    without): the longer of the stem and the rest, the rest with the stem's DRAM bytes
    and one more descriptor fetch."""
    if not program.header["next_addr_a"]:
        return None
    s = stem_index(program.descriptors)
    stem, rest = per[s], per[s + 1:]
    traffic = _ceil(stem.bytes_read + stem.bytes_written, dram.bytes_per_cycle)
    fetch = dram.latency + _ceil(DESCRIPTOR.itemsize, dram.bytes_per_cycle)
    return int(max(stem.cycles, sum(p.cycles for p in rest) + traffic + fetch))
