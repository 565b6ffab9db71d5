"""How a descriptor's work is cut to fit the on-chip buffers (docs/architecture.md
section 12).

Row tiles: a descriptor's output rows go in tiles of ``rows_per_tile``, as many as the
halves of the (shared) input and output buffers hold, the window's halo rows included
(a fused pooling counts its window's convolution rows). The jobs of one round share
the buffers. The input buffer is a ring of rows: the halo rows a tile shares with the
one before are kept, so every input row is read once per pass.

Weights: read once per job when they fit half an array's weight buffer. When they do
not, the descriptor *streams* them (``weight_stream``): an outer loop over chunks of
``chunk_c`` output channels (whole PE folds whose weights fit half the buffer), the row
tiles inside, each weight read once; the input is then read once if the whole of it
fits half the input buffer and the gatherer's ring holds its rows (resident), else once
per chunk. The engine of the units holds a job's weights whole or streams them (it has
no re-read of the weights per row tile), so they stream even where re-reading them
would move fewer bytes; the values are the same either way, so the reference model
runs the row tiles alone.

On the core's scratchpad (``hw/engine/core.py``) the chunks run inside each row tile,
so a descriptor whose weights stream in several tiles reads them all once per tile.
Where the whole map fits in one tile with one chunk's channels of its outputs and side
inputs (*channel slices*, ``sliced``), it takes that instead: every weight is read
once, and the chunk's outputs are stored (side inputs loaded) a pixel's slice at a
time.
"""

from __future__ import annotations

from dataclasses import dataclass

from .formats import round_up
from .params import binary_in_folds
from .program import FLAG_BITS, OPCODE_CODES, STAGE_BITS

__all__ = ["conv_rows", "core_row_range", "input_rows_read", "tile_rows", "choose_tiling",
           "written_row_bytes",
           "buffered_in_row", "input_resident", "n_chunks", "round_tensors", "slices_fit",
           "ScratchpadNeed", "scratchpad_need", "core_layout", "core_tilings"]


def conv_rows(d, rows):
    """Rows of the core's result that ``rows`` output rows need (a pooling stage needs
    its window's rows)."""
    if d["stages"] & STAGE_BITS["maxpool"]:
        return min((rows - 1) * d["pool_stride"] + d["pool_kernel"], d["mid_h"])
    return rows


def buffered_in_row(d, port_bytes):
    """Bytes of one input row in the input buffer: a prologue threshold is applied as
    rows arrive, so the buffer holds its narrow levels."""
    if d["stages"] & STAGE_BITS["prologue_threshold"]:
        return round_up(d["in_w"] * -(-d["in_c"] * max(1, d["act_bits"]) // 8), port_bytes)
    return d["in_pitch"]


def written_row_bytes(d):
    """Bytes a descriptor writes of one output row of one output: the row itself
    (unless ``levels_only``) and its level outputs' rows (fusion rule 7)."""
    row = 0 if d["flags"] & FLAG_BITS["levels_only"] else d["out_pitch"]
    if d["flags"] & FLAG_BITS["levels_out"]:
        row += d["aux_outputs"] * d["aux_pitch"]
    return row


def round_tensors(d, arrays):
    """``(inputs, outputs, sides)``: tensors of one round that share the buffers."""
    round_jobs = min(d["jobs"], arrays)
    if d["opcode"] in (OPCODE_CODES["MIXER"], OPCODE_CODES["GATE"]):
        return d["jobs"], d["jobs"] if d["stages"] & STAGE_BITS["gated"] else 1, 1
    ins = 1 if d["flags"] & FLAG_BITS["shared_input"] else round_jobs
    sides = 1 if d["flags"] & FLAG_BITS["shared_side"] else round_jobs
    return ins, round_jobs, sides


def input_resident(d, config):
    """The whole input of a round stays on chip for every weight chunk: it fits half
    the input buffer, and the gatherer's ring holds all its rows."""
    ins = round_tensors(d, config.arrays)[0]
    return (d["in_h"] <= config.ring_rows
            and d["in_h"] * buffered_in_row(d, config.port_bytes) * ins
            <= config.input_buffer // 2)


def n_chunks(d):
    """Weight chunks of a weight-streaming descriptor (1 otherwise)."""
    return -(-d["out_c"] // d["chunk_c"]) if d["flags"] & FLAG_BITS["weight_stream"] else 1


def tile_rows(d, config, out_fraction=1.0):
    """Output rows per tile: as many as the buffer halves hold.

    Parameters
    ----------
    out_fraction : float
        The share of an output row a tile holds (a weight chunk's channels).

    Raises
    ------
    ValueError
        Not even one output row fits: the engine is too small for this layer.
    """
    k, s, dil = d["kernel"], d["stride"], d["dilation"]
    if d["opcode"] == OPCODE_CODES["HEAD"]:
        return 1        # global pooling streams its input through accumulators
    if config.scratchpad:
        return _scratchpad_rows(d, config)
    ins, outs, sides = round_tensors(d, config.arrays)
    in_row = buffered_in_row(d, config.port_bytes)
    out_row = -(-int(written_row_bytes(d) * out_fraction) // 1)
    side_row = -(-int(d["side_pitch"] * out_fraction) // 1)

    def needs(r):
        in_rows = min((conv_rows(d, r) - 1) * s + dil * (k - 1) + 1, d["in_h"] + 2 * d["padding"])
        return in_rows * in_row * ins + r * side_row * sides, r * out_row * outs

    def fits(r):
        need_in, need_out = needs(r)
        return need_in <= config.input_buffer // 2 and need_out <= config.output_buffer // 2
    if not fits(1):
        need_in, need_out = needs(1)
        raise ValueError(
            f"one output row needs {need_in} input and {need_out} "
            f"output bytes, more than half the engine's tile buffers (input "
            f"{config.input_buffer}, output {config.output_buffer} bytes, double buffered)")
    return _most_rows(fits, d["out_h"])


def _most_rows(fits, out_h):
    """The largest row count in [1, out_h] that ``fits`` (monotone; 1 fits)."""
    lo, hi = 1, out_h
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def core_row_range(d, r0, r1):
    """Rows of the core's result that output rows [r0, r1) need (a fused max pooling
    needs its window's rows)."""
    if not d["stages"] & STAGE_BITS["maxpool"]:
        return r0, r1
    st, pk, pp = d["pool_stride"], d["pool_kernel"], d["pool_padding"]
    return max(0, r0 * st - pp), min(d["mid_h"], (r1 - 1) * st - pp + pk)


def input_rows_read(d, rows_per_tile=None):
    """Input rows read from DRAM for one pass over the row tiles.

    A tile needs the rows some window of it uses (a strided 1x1 convolution skips
    rows; padding is not read). The input buffer is a ring of rows, so the rows a tile
    shares with the tile before it (the halo) are still there and not read again.
    """
    k, s, dil, pad = d["kernel"], d["stride"], d["dilation"], d["padding"]
    r = rows_per_tile or d["rows_per_tile"]
    total, before = 0, set()
    for t in range(-(-d["out_h"] // r)):
        c0, c1 = core_row_range(d, t * r, min(d["out_h"], (t + 1) * r))
        used = {y * s - pad + i * dil for y in range(c0, c1) for i in range(k)}
        used = {y for y in used if 0 <= y < d["in_h"]}
        total += len(used - before)
        before = used
    return total


def map_region(config):
    """Bytes of a map's region of the runner's output map buffer: each job's map and its
    level output one (``hw/engine/mapbuffer.py``)."""
    words = config.map_buffer // config.port_bytes
    return words // (2 * config.arrays) * config.port_bytes


def _main_map(d, region):
    """``(main map fits its regions, the slices go straight to DRAM)`` of a streaming
    descriptor ``d`` with map-buffer regions of ``region`` bytes."""
    two_levels = d["flags"] & FLAG_BITS["levels_out"] and d["aux_outputs"] == 2
    levels_out = bool(d["flags"] & FLAG_BITS["levels_out"])
    wide = not d["flags"] & FLAG_BITS["levels_only"]
    pitch = d["aux_pitch"] if two_levels else d["out_pitch"]
    levels_bytes = d["out_h"] * d["aux_pitch"]
    # the main map in the buffer: beside level outputs, each in a region; alone, in two
    main_fits = pitch <= region and (
        d["out_h"] * pitch <= region and levels_bytes <= region if levels_out
        else d["out_h"] * pitch <= 2 * region)
    elem = 1 if d["out_fmt"] == 0 else d["out_elem"]
    pixel, slice_ = -(-d["out_c"] * elem // 8), -(-d["chunk_c"] * elem // 8)
    direct = wide and not two_levels and not main_fits and pixel % 16 == 0 \
        and slice_ % 16 == 0 and pixel <= region
    return main_fits, direct


def map_buffer_assembles(d, region):
    """Whether a streaming descriptor's outputs are assembled in the map buffer (then
    written at its end) rather than written straight to DRAM as they are computed."""
    if not d["flags"] & FLAG_BITS["weight_stream"]:
        return False
    return not _main_map(d, region)[1]


def map_buffer_takes(d, region):
    """Whether a streaming descriptor's maps fit the map buffer (``region`` bytes a map)
    or, an output map, go straight to DRAM (slices and pixels of whole 16-byte bus words
    and a pixel within a region): the runner's rule (``hw/engine/runner.py``)."""
    if not d["flags"] & FLAG_BITS["weight_stream"]:
        return True
    two_levels = d["flags"] & FLAG_BITS["levels_out"] and d["aux_outputs"] == 2
    levels_out = bool(d["flags"] & FLAG_BITS["levels_out"])
    wide = not d["flags"] & FLAG_BITS["levels_only"]
    levels_bytes = d["out_h"] * d["aux_pitch"]
    main_fits, direct = _main_map(d, region)
    # the level outputs alone in the buffer (no main map there) take two regions a map
    alone = not ((wide or two_levels) and not direct)
    levels_fit = not levels_out or (
        d["aux_pitch"] <= region and levels_bytes <= (2 if alone else 1) * region)
    return bool((not (wide or two_levels) or main_fits or direct) and levels_fit)


def choose_tiling(d, config):
    """Set a descriptor's ``rows_per_tile``, ``n_tiles``, ``chunk_c`` and the
    weight-streaming flag (module docstring)."""
    d["rows_per_tile"] = tile_rows(d, config)
    d["n_tiles"] = -(-d["out_h"] // d["rows_per_tile"])
    if config.scratchpad:
        _core_chunks(d, config)
        return
    half_w = config.weight_buffer // 2
    w = d["weight_tile_bytes"]
    if (d["opcode"] != OPCODE_CODES["CONV"] or d["flags"] & FLAG_BITS["int_weights"]
            or d["stages"] & STAGE_BITS["maxpool"] or d["groups"] != 1 or w <= half_w):
        return
    # whole PE folds, as many as half the buffer holds by the packing's own count (one
    # weight bit a lane whatever the activations' bit planes)
    fold_bits = binary_in_folds(d["in_c"], d["kernel"], config.simd,
                                config.tap_aligned_weights) * config.pe * config.simd
    chunk = min(d["out_c"], max(1, half_w * 8 // fold_bits) * config.pe)
    try:
        rows = tile_rows(d, config, chunk / d["out_c"])
    except ValueError:
        return
    d.update(flags=d["flags"] | FLAG_BITS["weight_stream"], chunk_c=chunk, rows_per_tile=rows,
             n_tiles=-(-d["out_h"] // rows))


# ------------------------------------------------------------- the core's scratchpad
@dataclass(frozen=True)
class ScratchpadNeed:
    """What one descriptor takes of the core's scratchpad (bytes), and whether the core
    streams its weights (a PE fold's, or the compiler's chunk, at a time)."""

    bytes: int
    streams_weights: bool


def core_layout(d, *, bpw, pe, simd, stem_pe, stem_simd, buffer_bytes):
    """Descriptor ``d``'s layout in the scratchpad of the core of ``hw/engine/core.py``
    (``bpw`` bytes a bus word, ``buffer_bytes`` of scratchpad), as its states CHECK,
    FOLDS, SECTIONS0-4, STREAM0-1, TILESZ0-1 and REGIONS0-4 compute it: the folds, the
    parameter sections, the chunk of weights that streams when the whole blocks do not
    fit (a convolution's output channels, a head's classes), the tile's input rows, and
    the bytes taken with and without streaming. The tiler (:func:`scratchpad_need`) and
    the core's cycle model (:mod:`.core_cycles`) both read it.

    Returns
    -------
    dict
    """
    def ru(x):
        return round_up(x, bpw)

    op, st, fl = d["opcode"], d["stages"], d["flags"]

    def stage(name):
        return bool(st & STAGE_BITS[name])

    is_conv, is_head = op == OPCODE_CODES["CONV"], op == OPCODE_CODES["HEAD"]
    int_w = bool(fl & FLAG_BITS["int_weights"])
    pooling = is_conv and stage("maxpool")
    pe_r, simd_r = (stem_pe, stem_simd) if int_w else (pe, simd)
    n = d["kernel"] * d["kernel"] * d["in_c"]
    fs = -(-n // simd_r) if is_conv else 0
    fo = -(-d["out_c"] // pe_r) if is_conv else 0
    chunk_in = d["chunk_c"] if fl & FLAG_BITS["weight_stream"] and d["chunk_c"] else pe_r
    fpc = -(-chunk_in // pe_r)
    cb, jobs = d["const_bytes"], d["jobs"]
    off_w = ru(d["in_c"] * d["in_levels"] * cb + -(-d["in_c"] // 8)) \
        if stage("prologue_threshold") else 0
    pesimd = pe_r * simd_r
    if is_conv:
        wbytes = fo * fs * pesimd * d["weight_bytes"] if int_w else -(-fo * fs * pesimd // 8)
    else:
        wbytes = d["out_c"] * d["in_c"] * d["weight_bytes"] if is_head else 0
    off_post = off_w + ru(wbytes)
    post_bytes = d["param_bytes"] - off_post
    if is_head:     # chunk_in classes' rows of W[classes][C]
        chunk_bytes = chunk_in * d["in_c"] * d["weight_bytes"]
    else:
        chunk_bytes = (fpc * fs * pesimd * (d["weight_bytes"] * 8 if int_w else 1)) >> 3
    rpt = d["rows_per_tile"]
    side = rpt * d["side_pitch"] if stage("add") else 0
    out_tile = rpt * d["out_pitch"]
    sliced = bool(fl & FLAG_BITS["sliced"])
    if sliced:      # one chunk's channels of every pixel
        npix = d["out_h"] * d["out_w"]
        side = npix * (chunk_in * d["side_elem"] // 8) if stage("add") else 0
        out_tile = npix * (chunk_in * d["out_elem"] // 8)
    crows = ((rpt - 1) * d["pool_stride"] + d["pool_kernel"]) if pooling else rpt
    kh, stride, dil = (d["in_h"], 1, 1) if is_head else (d["kernel"], d["stride"], d["dilation"])
    irows = min((crows - 1) * stride + dil * (kh - 1) + 1, d["in_h"])

    def end(pstride):
        at = ru(jobs * 16) + jobs * pstride
        at += (1 if fl & FLAG_BITS["shared_input"] else jobs) * irows * d["in_pitch"]
        at += (1 if fl & FLAG_BITS["shared_side"] else jobs) * side
        # a head's 64-bit channel sums (it sums its map first)
        return at + jobs * out_tile + (ru(8 * d["in_c"]) if is_head else 0)

    whole = end(d["param_bytes"])
    # one chunk in place of the weights, and a word for a misaligned chunk
    streamed = end(off_w + ru(chunk_bytes) + bpw + post_bytes)
    stream = (is_conv or is_head) and (whole > buffer_bytes or sliced)
    return dict(is_conv=is_conv, is_head=is_head, int_w=int_w, pooling=pooling, pe_r=pe_r,
                simd_r=simd_r, n=n, fs=fs, fo=fo, fpc=fpc, chunk_in=chunk_in, off_w=off_w,
                wbytes=wbytes, post_bytes=post_bytes, chunk_bytes=chunk_bytes, kh=kh,
                st=stride, dil=dil, irows=irows, jt_bytes=ru(jobs * 16), out_tile=out_tile,
                side=side, sliced=sliced, whole=whole, streamed=streamed, stream=stream)


def scratchpad_need(d, config):
    """The scratchpad bytes descriptor ``d`` takes on the core of ``hw/engine/core.py``
    (``config.scratchpad`` bytes, :attr:`EngineConfig.scratchpad`; :func:`core_layout`):
    the job table, one parameter block per job (with one weight chunk in place of the
    weights when the whole blocks do not fit), and every job's input, side and output
    rows of one tile."""
    lay = core_layout(d, bpw=config.port_bytes, pe=config.pe, simd=config.simd,
                      stem_pe=config.stem_pe, stem_simd=config.stem_simd,
                      buffer_bytes=config.scratchpad)
    return ScratchpadNeed(lay["streamed"] if lay["stream"] else lay["whole"], lay["stream"])


def _core_chunks(d, config):
    """On the core: when whole parameter blocks do not fit the scratchpad even for one
    output row, its weights stream in chunks of output channels (of classes, for a
    head), each chunk loaded per row tile, the tile's windows gathered again per chunk.
    Takes the fewest chunks (the largest that fits next to one row tile's rows), then
    the most rows per tile that keep that many; without it the core streams one PE
    fold at a time. :func:`tile_rows` has checked that one row fits beside one PE
    fold."""
    lay = core_layout(d, bpw=config.port_bytes, pe=config.pe, simd=config.simd,
                      stem_pe=config.stem_pe, stem_simd=config.stem_simd,
                      buffer_bytes=config.scratchpad)
    if not lay["stream"]:
        return
    step = lay["pe_r"]
    streamed = dict(d, flags=d["flags"] | FLAG_BITS["weight_stream"])

    def fits(rows, chunk):
        return _fits(streamed, config, rows_per_tile=rows, chunk_c=chunk)

    def largest_chunk(rows):
        """Whole PE folds beside ``rows`` rows, as many as fit (0: not even one)."""
        if not fits(rows, step):
            return 0
        folds = _most_rows(lambda f: fits(rows, f * step), -(-d["out_c"] // step))
        return min(folds * step, d["out_c"])

    def keeps_fewest(rows):
        chunk = largest_chunk(rows)
        return chunk > 0 and -(-d["out_c"] // chunk) <= fewest
    fewest = -(-d["out_c"] // largest_chunk(1))
    rows = _most_rows(keeps_fewest, d["out_h"])
    chunk = largest_chunk(rows)
    d.update(flags=streamed["flags"], chunk_c=chunk, rows_per_tile=rows,
             n_tiles=-(-d["out_h"] // rows))
    # every row tile loads all the weights again; in slices they load once
    sliced = _sliced_chunk(d, config, lay) if d["n_tiles"] > 1 else 0
    if sliced:
        d.update(flags=d["flags"] | FLAG_BITS["sliced"], chunk_c=sliced,
                 rows_per_tile=d["out_h"], n_tiles=1)


def core_tilings(d, config):
    """The other tilings the core takes for a descriptor whose weights stream
    (``weight_stream``, :func:`_core_chunks` chose one): for each count of row tiles,
    the largest chunk of whole PE folds (or all channels) whose rows fit that count,
    and the whole map in channel slices of the largest chunk that :func:`slices_fit`
    and the scratchpad allow. A cost model picks (:func:`.target.compile_for_core`):
    fewer chunks gather every window fewer times, fewer row tiles load every weight
    fewer times.

    Yields
    ------
    dict
        ``d`` with ``rows_per_tile``, ``n_tiles``, ``chunk_c`` and the flags set.
    """
    if not d["flags"] & FLAG_BITS["weight_stream"]:
        return
    lay = core_layout(d, bpw=config.port_bytes, pe=config.pe, simd=config.simd,
                      stem_pe=config.stem_pe, stem_simd=config.stem_simd,
                      buffer_bytes=config.scratchpad)
    rowwise = d["flags"] & ~FLAG_BITS["sliced"]
    tiles = None
    for chunk in [d["out_c"]] + list(range(d["out_c"] // lay["pe_r"] * lay["pe_r"], 0,
                                           -lay["pe_r"])):
        def fits(rows, chunk=chunk):
            return _fits(d, config, flags=rowwise, rows_per_tile=rows, chunk_c=chunk)
        if fits(1):
            rows = _most_rows(fits, d["out_h"])
            n = -(-d["out_h"] // rows)
            if tiles is None or n < tiles:
                tiles = n
                yield dict(d, flags=rowwise, rows_per_tile=rows, chunk_c=chunk, n_tiles=n)
    sliced = _sliced_chunk(d, config, lay)
    if sliced:
        yield dict(d, flags=rowwise | FLAG_BITS["sliced"], rows_per_tile=d["out_h"],
                   chunk_c=sliced, n_tiles=1)


def _fits(d, config, **fields):
    """Whether ``d`` with ``fields`` set takes no more than the core's scratchpad."""
    return scratchpad_need(dict(d, **fields), config).bytes <= config.scratchpad


def slices_fit(d, chunk, word_bits):
    """Whether the core takes channel slices of ``chunk`` output channels for ``d`` (its
    CHECK, the map in one tile aside): a convolution without pooling whose chunks
    divide its channels, outputs of 8 bits or more (the writer's), each chunk's slice
    of a pixel (output, side input) whole bus words of ``word_bits``, a side input as
    wide as the output (no option-A zeros)."""
    add = d["stages"] & STAGE_BITS["add"]
    return (d["opcode"] == OPCODE_CODES["CONV"] and not d["stages"] & STAGE_BITS["maxpool"]
            and d["out_elem"] >= 8 and chunk != 0 and d["out_c"] % chunk == 0
            and (chunk * d["out_elem"]) % word_bits == 0
            and (not add or (d["side_c"] == d["out_c"]
                             and (chunk * d["side_elem"]) % word_bits == 0)))


def _sliced_chunk(d, config, lay):
    """The largest chunk of whole PE folds that the core takes in slices
    (:func:`slices_fit`) and whose slices fit the scratchpad with the whole map in one
    tile (``sliced``), or 0."""
    sliced = dict(d, flags=d["flags"] | FLAG_BITS["weight_stream"] | FLAG_BITS["sliced"],
                  rows_per_tile=d["out_h"], n_tiles=1)
    best = 0
    for c in range(lay["pe_r"], d["out_c"] + 1, lay["pe_r"]):
        if slices_fit(d, c, config.port_bytes * 8):
            if not _fits(sliced, config, chunk_c=c):
                break
            best = c
    return best


def _scratchpad_rows(d, config):
    """The most output rows whose tile fits the core's scratchpad with whole parameter
    blocks, else (the blocks alone nearly fill it) the most with streamed weights: the
    core gathers every window again for each chunk of weights, while another row tile
    costs only its halo rows' loads."""
    def need(r):
        return scratchpad_need(dict(d, rows_per_tile=r), config)

    def fits(r):
        return need(r).bytes <= config.scratchpad

    def fits_whole(r):
        n = need(r)
        return n.bytes <= config.scratchpad and not n.streams_weights
    if fits_whole(1):
        return _most_rows(fits_whole, d["out_h"])
    if not fits(1):
        raise ValueError(f"one output row needs {need(1).bytes} "
                         f"bytes of the engine's {config.scratchpad}-byte scratchpad")
    return _most_rows(fits, d["out_h"])
