"""The engine's compute path: a sequencer that runs the compiler's layer descriptors.

:class:`EngineCore` has the ports of :class:`~.sequencer.EngineShell` (``rd``, ``wr``,
``csr``, ``irq``), so the fast Verilator path (``sim/engine_rtl.py``) runs it unchanged;
:class:`ComputeSequencer` takes :class:`~.sequencer.Sequencer`'s place. It fetches the
program's descriptors (docs/architecture.md section 12: 128 bytes, the fields of
``groupnet_hw.engine_format``), runs COPY and END as the sequencer does, and executes the
compute opcodes on the tensors, parameter blocks and job tables in DRAM, bit-exact with
the reference model (``sim/engine_model.py``).

Microarchitecture (first version: correctness first, no overlap)
    One *scratchpad* (block RAM, ``buffer_bytes``, one bus word wide, one read and one
    write port) holds what a descriptor needs for one row tile (``rows_per_tile``
    output rows), in regions placed at run time:

    ====== ============================================================================
    region contents
    ====== ============================================================================
    table  the descriptor's job table (``jobs`` x 16 bytes)
    params every job's parameter block (``param_bytes`` each; a MIXER's is entry 0's)
    input  every job's input rows of the tile, halo included (one copy when shared)
    side   every job's side rows of the tile (add stage; one copy when shared)
    output every job's output rows of the tile, zeroed first (row padding is zeros)
    ====== ============================================================================

    Per descriptor the work is sequential (but for the output writer, below): fetch (the
    read DMA), load the job table and the blocks, then per row tile the input rows (the
    reference model's row range: the window's halo, a pooling stage's convolution rows)
    and side rows (one read-DMA descriptor each, the words written in order), clear the
    output regions
    (unless their rows are whole words of elements and nothing else: every bit is then
    written by a merge), compute, one write-DMA descriptor per job's tile rows; after
    the last tile the fence (every write's ``done``) before the next fetch. A
    convolution whose whole blocks do not fit streams its weights: the blocks are loaded
    without them, and per tile one chunk of output channels' weights at a time (the
    compiler's ``chunk_c``, else one PE fold) is loaded and its channels computed,
    before the tile is written. With *channel slices* (the ``sliced`` flag: the
    compiler's choice where row tiles would load every chunk again) the map is one
    tile and the output and side regions hold one chunk's channels of every pixel: per
    chunk its side slices and weights are loaded, its channels computed and its output
    slices stored, so every weight is read once. A slice is a piece a pixel (the
    chunk's channels of it, a pixel's channels apart in DRAM), one DMA descriptor
    each, offered while the words move (the DMAs take the next descriptor as the one
    before issues its last command). A head whose block does not fit (a 1000-class
    classifier) streams ``W[classes][C]`` the same way, ``pe`` classes' rows a chunk
    (the bias stays). A descriptor whose regions do not fit the scratchpad, or whose
    opcode or stages this path does not implement (REPEAT, a fused max-pooling stage,
    channel groups, more than ``max_jobs`` jobs, slices other than a streamed
    convolution's in one tile with chunks dividing its channels, whole-word slices of
    outputs of 8 bits or more and a side input as wide as the output), stops the run
    with the sequencer's error ``unsupported`` before any of its reads: never a silent
    wrong result.

    Binary convolutions run on an XNOR-popcount array of ``pe x simd`` lanes (one,
    time-shared by the jobs): per output pixel and job the window is *gathered* once,
    tap-major and channel-minor (the weight packing's order), into a window buffer of
    ``simd``-lane words holding ``planes`` bit planes: the input element, the prologue
    threshold (``in_levels`` comparisons and the invert bit), padding (bit 1 for binary
    inputs, level 0 for n-bit ones). With 4 planes the array takes binary, 2- and 4-bit
    activations; with one (a network of binary activations alone) only binary ones, at
    one popcount a PE row instead of four, so twice the lanes cost about the same logic
    (n-bit convolutions then run on the scalar path). A tap's channels are consecutive
    elements of one pixel (NHWC), so the gather reads a scratchpad word once for a group
    of lanes: as many as remain of the tap, of the word, of the window word being built
    and, with a one-level prologue threshold, whose thresholds and invert bits lie in
    one word each (the invert-bit word is kept while it serves; a prologue of more
    levels is gathered lane by lane). With *window pairs* (one bit plane, a window-buffer
    word of at least ``2 * simd`` bits: the build's binary engine, whose words are the
    stem's 16 bytes) a binary descriptor's window words lie two a buffer word, and a
    group that starts a buffer word takes ``2 * simd`` lanes where the tap and the
    input word have them: a whole 128-bit word of binary channels a cycle. A group's
    read addresses the next group's input word of the tap. Then each fold ``(o, s)`` reads its ``pe x simd`` weight bits as
    one piece of a scratchpad word and the window word ``s``, one fold a cycle (the next
    fold is addressed while this one's popcounts are added), and the ``pe`` lanes add
    ``popcount(~(x ^ w) & valid)`` (binary inputs; ``2 * sum - N`` at the end) or, per
    bit plane ``b``, ``(popcount(x_b & w) - popcount(x_b & ~w)) << b`` (n-bit levels:
    the executor's ``p @ w - p @ (1 - w)``). A PE fold's ``pe`` sums are one entry of
    the accumulator buffer, written as its last SIMD fold ends; the epilogue reads them
    channel by channel. A *pair table* (``max_jobs x max_out_c`` entries of the
    post-op's A and B, 32 bits each) keeps the pairs the descriptor's first pixel reads,
    so that at every later pixel a job's pair comes from it while the scratchpad's read
    port fetches the job's side input: a channel's post-ops then take a cycle a job.

    A fold wider than a bus word reads ``banks = pe * simd / data_width`` consecutive
    words: the scratchpad is ``banks`` block RAMs, word ``a`` in bank ``a % banks``, so
    any ``banks`` consecutive words are one read (:func:`_banked_scratchpad`).

    Seven paths take the common cases off the scalar datapath below:

    - the stem's multiplier array (``svec``: an integer convolution of 8-bit inputs and
      weights without pooling, ``stem_pe == pe``): the window gathered once per pixel
      and job as bytes of ``stem_simd`` lanes, then SMVU takes ``stem_channels`` output
      channels' ``stem_simd`` products a cycle (four on the build's engine: their
      weights one wide read; the second channel's products in DSP blocks, the others'
      in logic), its sums in the accumulator buffer;
    - a head's channel sums (HSUM, HSUM_WR): the map summed per channel first, one
      element a cycle, into 64-bit sums after the output region; every class then
      takes ``C`` products over a 1x1 window of the sums;
    - a PIXEL that only thresholds to one bit a channel (``pvec``): the gather's
      one-level prologue path on its threshold section (a word of channels a read),
      then PW merges ``simd`` bits of the window buffer's plane 0 a cycle;
    - such a PIXEL of 8-, 16- or 32-bit inputs whose pixels are whole words (``ptv``,
      where ``pixel_thresholds``: ``pe`` 32-bit elements fit one wide read): per job
      and PE fold PT_X (its ``pe`` inputs, one wide read), then the threshold lanes
      below;
    - a binary convolution whose only stage is a one-bit threshold (``tvec``): per job
      and PE fold (a job's folds one after another) TV_T (its sums and ``pe``
      thresholds, one wide read); TV_I (invert bits) only where the fold is the job's
      first or its invert bits start a word, else they come from the word TV_I kept;
      TV_O (``pe`` bits merged into the output word, read) only where the fold is the
      job's first or its bits start a word, and at the pixel's last fold, else the
      bits are merged into the word TV_O kept and written in the next fold's first
      cycle;
    - an array's convolution of one job and no stage, its outputs its 32-bit sums
      (``swr``, where ``sums_writer``; ResNet's stem before its pool): per PE fold SW_W
      writes the accumulator entry as ``pe * 32 / data_width`` whole words, a word a
      cycle, instead of an element a cycle through the output writer;
    - a MAXPOOL of 32-bit elements whose pixels fill whole words (``mvec``; the
      stem's sums ResNet pools): per pixel and word of channels, MP_TAP then MP_D per
      tap, each read a word whose ``data_width / 32`` elements are compared lane by
      lane, so a window costs a cycle a tap for the word's channels; each channel then
      takes its maximum from its lane (CORE) into the scalar epilogue.

    Everything else is a scalar datapath under the same state machine, for every output
    row, pixel, channel and job: it walks the window's taps and reads each operand from
    the scratchpad by bit address (an element of 1 to 64 bits never straddles a word:
    formats and sections are aligned to their element size), so every tensor format,
    element width and parameter section of the contract is read exactly as
    ``compiler/engine/formats.py`` and ``params.py`` pack it: a 64-bit product per tap
    for the stem (integer weights, pad 0; a fused max pooling evaluates the convolution
    per pooling tap, padded taps ignored) and the head, a maximum for MAXPOOL, PIXEL and
    SUBSAMPLE (a 1x1 window), and binary convolutions that the array cannot take
    (windows over ``max_window`` lanes, more than ``max_out_c`` channels, a packing
    whose ``pe x simd`` does not divide the bus word). The epilogue follows the
    contract's order: head bias, post-op (``round_shift(A*relu?(x) + B, shift)``,
    relu?), add with the side input (channels beyond ``side_c`` add zero: option A),
    ReLU, threshold (``sum_l (x >= T_l) ^ invert``); a fused mixer then aggregates the
    jobs' values (``round_shift(sum lambda_k x_k, lambda_frac)``) and gates them
    (``round_shift(g x_k + (2^f - g) agg, gate_frac)``); a MIXER descriptor mixes
    first and applies its epilogue after, with entry 0's block and side input. A GATE
    descriptor runs as a gated MIXER whose aggregate is its last input (no lambdas):
    its ``jobs - 1`` outputs are the others gated with it (the authors' in-place
    defect). A
    result of 8 bits or more (not a MIXER's or GATE's) goes to the *output writer*: the
    scratchpad's write port takes byte enables, so the writer writes the element's bytes
    alone without reading its word, one output a cycle (gated first, each gate the cycle
    before its write), while the sequencer goes on to the next channel; before a tile's
    stores (or the next chunk's loads) DRAIN waits for it. A narrower result is merged
    into its output word (read, merge, write: OUT_WD). Every scratchpad read's
    address is driven by the state that decides the read follows, so a read costs only
    its data state, and a stage that does not apply costs no state. The arithmetic is the
    executor's (``compiler/ops``) on 64-bit values: exact wherever the compiler's range
    analysis proves int64 suffices, which it checks for every node. Its multipliers take
    signed ``MUL_BITS``-bit operands (``groupnet_hw.engine_format``; 64-bit products):
    a 64 x 64 multiplier is a chain of partial products that set the clock, and the
    operands of the paper's networks need at most 27 bits (ResNet-34's channel sums at
    224x224; post-op inputs 21, lambdas 10). The compiler refuses a
    program with a wider operand (:func:`~groupnet_hw.compiler.engine.target.check_program`)
    and the core stops a run on one with ``unsupported``, never a silent wrong value.

    The dataflow back end's arithmetic units (``hw/mvu.py``, ``hw/elementwise.py``)
    bake their weights and constants in as elaboration-time constants; the engine reads
    them from DRAM at run time, so the same formulas are written here on run-time
    operands rather than reused.

Cycles
    Per descriptor: the fetch (read latency + 128 bytes), the loads (each a read-DMA
    descriptor: latency + its words at up to one per cycle; a slice's pieces follow
    each other), ``out_bytes / bytes per
    word`` cycles of clearing per job (none for dense rows: pixels of a power of two
    bytes up to ``DENSE_PIXEL_BYTES``, rows of whole words of pixels), then the compute,
    then two cycles per output word written (plus the write latency) and the fence. A
    binary convolution on the array takes per output pixel and job 2 cycles (CORE,
    POOL_TAP), the gather (1 for the window's first tap, whose input word no tap
    before addressed; per group of lanes 1 for its input word, 2 more with a one-level
    prologue threshold (its thresholds, and its invert bits unless their word was the
    last read), 1 per group of a padded tap: about ``k*k*ceil(C_in/simd)`` groups when
    a tap's channels share a word; a prologue of more levels ``3 + in_levels`` cycles
    a lane and EPI), then ``ceil(C_out/pe) * ceil(N/simd) + 1`` cycles of folds (``N =
    k*k*C_in``): the window's last group starts them. Every output element then takes
    1 cycle to read its accumulator (with a post-op only a pixel's first element: the
    others' come with the post-op's pair A, B), 1 per read of its epilogue (post-op 1 and 1 of
    arithmetic: a block's shift and flags are read at its first element of the
    descriptor and kept; add 1, none after a post-op: its side input is read with the
    pair's data; on the arrays without a threshold, a channel's jobs after the first
    take 1 for both: the next job's pair and sum are read ahead during this job's data
    state, from the pair table (every job's pairs, kept from the descriptor's first
    pixel; constants of at most 32 bits, at most ``max_out_c`` channels) while the read
    port fetches its side input, or, at the first pixel, through the read port when that
    job reads no side input (none, or a shared one kept from job 0), and job 0 of a
    pixel's later channels too when a fused mixer's outputs go to the writer and its
    pairs come from the table (the last job's PCALC reads it ahead for AGG); threshold
    ``out_levels + 1``; a fused mixer per channel 1, 2 gated, a GATE's 1: each job's
    lambda product is added while the next job starts, the last job's by the aggregate's
    own cycle, and each gate after the first computed while the output before is
    written, from the fractions, lambdas and gates read at the descriptor's first mix
    and kept: ``2 + jobs`` reads, ``+ jobs`` gated, a GATE's ``jobs``, and that mix's
    ``jobs`` lambda products) and 1 per output merged into its word; with the output
    writer the gates and writes cost nothing but at a chunk's last channel (DRAIN, as
    many cycles as they took before). A scalar tap costs
    2 cycles (input, then weight or maximum; 1 for a padded tap of a maximum), 1 for a
    product tap without a prologue whose weight lies in the weight word read last (held
    from W_D, cleared as each convolution starts: consecutive weights of the stem's fold
    rows and the head's class rows), ``in_levels + 1`` more with a prologue threshold,
    and each window 1 more. The stem's array: per pixel and job the gather, then ``fo *
    fs * pe / stem_channels + 1`` cycles (SMVU, MVU_END); the max-pool
    lanes per pixel a cycle a channel (CORE) and per word of channels ``k*k + 1`` (one
    more when the window's first tap is inside the map); a head's sums ``C * (H * W + 1)
    + 2`` cycles once; a PIXEL on the lanes per pixel and job 3 cycles, its gather and
    ``C / simd`` merges (``ptv``: per pixel 3, per PE fold and job 2 and the threshold
    lanes' reads of words); the threshold lanes 1 cycle a pixel, 1 per PE fold and job,
    and per job and pixel 1 per invert-bit word and 1 per output word its folds touch
    (1 more at a pixel's last fold unless it starts its word); the sums writer 1 a pixel and a
    word a cycle.
    ``compiler/engine/core_cycles.py`` mirrors these phases and predicts this RTL's
    cycles; against the cycle model of the intended engine
    (``compiler/engine/cycles.py``: ``arrays`` arrays side by side, overlapped
    transfers) ``benchmarks/engine_core_cycles.py`` measures the ratio on digits.
    ``stem_pe`` and ``stem_simd`` fix only the integer weight packing it reads.

Parameters
----------
data_width : int
    Bits per word of both DRAM ports: 64 or 128 (the job table is read in whole words).
max_burst, max_outstanding, buffer_depth
    The DMAs' (see :class:`~.sequencer.EngineShell`).
pe, simd : int
    The binary weight packing of the programs it runs (the header's ``pe``, ``simd``).
stem_pe, stem_simd : int
    The integer weight packing (the header's ``stem_pe``, ``stem_simd``).
buffer_bytes : int
    The scratchpad's size (a multiple of the bus word).
max_jobs : int
    Most job-table entries a descriptor may have (one result register each).
max_window : int
    Most window lanes (``k*k*C_in``) the array's window buffer holds.
max_out_c : int
    Most output channels the accumulator buffer holds per job.
planes : int
    The array's bit planes (``groupnet_hw.engine_format.ARRAY_PLANES``): 4 takes binary,
    2- and 4-bit activations; 1 binary activations alone.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...engine_format import (DESCRIPTOR_FIELDS, FLAG_BITS, MUL_BITS, OPCODE_CODES,
                              STAGE_BITS, DENSE_PIXEL_BYTES, accumulator_channels,
                              core_paths, field_offsets, pair_table_bits, window_words)
from ...engine_opcodes import (COPY, COPY_FIELDS, DESCRIPTOR_BYTES, DESCRIPTOR_MAGIC, END)
from ...engine_registers import ERROR_CAUSES
from .dma import descriptor_layout
from .sequencer import engine_members, wire_engine

__all__ = ["EngineCore", "ComputeSequencer", "CORE_ERRORS"]

#: ``error_code`` values of the compute sequencer.
CORE_ERRORS = {name: ERROR_CAUSES[name]
               for name in ("unknown_opcode", "bad_magic", "bad_index", "unsupported")}

_FIELDS = field_offsets(DESCRIPTOR_FIELDS)
_OP = OPCODE_CODES
_ST = STAGE_BITS
_FL = FLAG_BITS
#: the element widths of the contract's formats (bits): powers of two
_WIDTHS = (1, 2, 4, 8, 16, 32, 64)
#: a parameter block's constant sizes (``const_bytes``: the compiler writes 4 or 8; the
#: core refuses others, so that the threshold lanes' pieces start at 32-bit multiples)
_CONST_BYTES = (4, 8)


def _is_pow2(value, most):
    """Whether ``value`` is a power of two from 1 to ``most``."""
    ok = Const(0)
    for c in range(exact_log2(most) + 1):
        ok = ok | (value == (1 << c))
    return ok


def _any_of(choices):
    """The value of the one true condition of ``choices`` (``(condition, value)``
    pairs, at most one true; 0 when none is): an AND-OR select whose depth does not
    grow with the number of choices, unlike a chain of ``Mux``."""
    out = Const(0)
    for cond, value in choices:
        out = out | Mux(cond, value, 0)
    return out


def _low_bit(value):
    """Bit 0 of ``value``, 0 when it has no bits (the word address of a one-word
    buffer)."""
    return Cat(value, Const(0, 1))[0]


def _aligned_piece(value, shift, granularity, width):
    """``(value >> shift)[:width]`` for a ``shift`` the layout keeps a multiple of
    ``granularity`` (a power of two): one mux over the ``2**len(shift) / granularity``
    places a piece can start, not a barrel shifter whose stages below the granularity
    would only ever shift by zero. A granularity of the whole shift range is no mux."""
    g = exact_log2(granularity)
    places = 1 << max(len(shift) - g, 0)
    if places == 1:
        return value[:width]
    padded = Cat(value, Const(0, width))
    return Array(padded[j * granularity:j * granularity + width]
                 for j in range(places))[shift[g:]]


def _pow2_part(n):
    """The largest power of two dividing ``n`` (``n`` > 0)."""
    return n & -n


def _element(word, shift, width, is_signed, sign_at=None):
    """The element of ``width`` bits (1 to 64, a power of two) at bit ``shift`` of
    ``word``, sign-extended when ``is_signed``: the scratchpad's element reader.
    ``sign_at`` is the element's top bit, ``shift + width - 1`` (a register set with the
    read's address, so that no adder precedes it). The mask of ``width`` and the sign
    bit are picked side by side with the shift, so a value costs the shifter and one
    level of logic: it starts most of the core's paths."""
    if sign_at is None:
        sign_at = (shift + width - 1)[:len(shift)]
    shifted = word >> shift
    mask = _any_of((width == w, Const((1 << w) - 1, 64)) for w in _WIDTHS)
    sign = is_signed & word.bit_select(sign_at, 1)
    return ((shifted[:64] & mask) | Mux(sign, ~mask, 0)).as_signed()


def _operand(value):
    """``value``'s low :data:`MUL_BITS` bits, signed: a multiplier's operand."""
    return value[:MUL_BITS].as_signed()


def _fits(*values):
    """Whether every signed ``value`` is a :data:`MUL_BITS`-bit number (its bits from
    ``MUL_BITS - 1`` up all equal), so that :func:`_operand` keeps it whole."""
    ok = Const(1)
    for v in values:
        top = v.as_unsigned()[MUL_BITS - 1:]
        ok = ok & ((top == 0) | (top == (1 << len(top)) - 1))
    return ok


def _log2(width, choices):
    """log2 of ``width``, one of the powers of two ``choices`` (else the largest's):
    products by element widths and constant sizes become shifts, not multipliers."""
    out = Const(exact_log2(choices[-1]), 3)
    for c in reversed(choices[:-1]):
        out = Mux(width == c, exact_log2(c), out)
    return out


def _banked_scratchpad(m, width, depth, banks, raddr):
    """The scratchpad: ``depth`` words of ``width`` bits in ``banks`` banks, word ``a`` in
    bank ``a % banks``, so that any ``banks`` consecutive words are read in one cycle (a
    fold's weights for an array wider than a word). Returns ``(rp, wp)``: ``rp.data`` is
    word ``raddr`` and ``rp.wide`` words ``raddr .. raddr + banks - 1``, both the cycle
    after the address; ``wp.addr``, ``wp.data`` and ``wp.en`` write one word, of it the
    bytes ``wp.bytes`` selects (all unless driven): an element of 8 bits or more is
    written without reading its word first.

    A bank is ``width / 8`` block RAMs of one byte lane each, every one with its own write
    enable: Yosys maps a memory with byte enables only to the aspect ratios whose data
    bits divide a byte (4096 x 2 on an M10K: 64 blocks for a 2048-word bank of 16-byte
    words), while a byte lane of its own takes the best one (2048 x 5: 32 blocks)."""
    rp = type("ScratchpadRead", (), {})()
    wp = type("ScratchpadWrite", (), {})()
    wp.addr, wp.data, wp.en = Signal(range(depth), name="sp_waddr"), Signal(width), Signal()
    wp.bytes = Signal(width // 8, init=(1 << width // 8) - 1, name="sp_wbytes")
    rp.data, rp.wide = Signal(width, name="sp_rdata"), Signal(width * banks, name="sp_wide")
    nb = exact_log2(banks)
    data = []
    for b in range(banks):
        lanes = []
        for lane in range(width // 8):
            name = f"buf{b}_{lane}" if banks > 1 else f"buf_{lane}"
            m.submodules[name] = mem = Memory(shape=unsigned(8), depth=depth // banks, init=[])
            r, w = mem.read_port(), mem.write_port()
            hit = wp.en & wp.bytes[lane]
            if banks > 1:
                # of the words raddr .. raddr + banks - 1, the one bank b holds
                m.d.comb += r.addr.eq((raddr + (Const(b, nb) - raddr[:nb])[:nb]) >> nb)
                hit = hit & (wp.addr[:nb] == b)
            else:
                m.d.comb += r.addr.eq(raddr)
            m.d.comb += [w.addr.eq(wp.addr >> nb), w.data.eq(wp.data[8 * lane:8 * lane + 8]),
                         w.en.eq(hit)]
            lanes.append(r.data)
        data.append(Cat(*lanes))
    if banks == 1:
        m.d.comb += [rp.data.eq(data[0]), rp.wide.eq(data[0])]
        return rp, wp
    first = Signal(nb)            # the bank of word raddr, as its data arrive
    m.d.sync += first.eq(raddr[:nb])
    data = Array(data)
    m.d.comb += [rp.wide.eq(Cat(*(data[(first + o)[:nb]] for o in range(banks)))),
                 rp.data.eq(data[first])]
    return rp, wp


class ComputeSequencer(wiring.Component):
    """Fetches descriptors and executes COPY, END and the compute opcodes.

    Parameters
    ----------
    See :mod:`the module <.core>` (``data_width``, ``pe``, ``simd``, ``stem_pe``,
    ``stem_simd``, ``buffer_bytes``, ``max_jobs``).

    Attributes
    ----------
    start, soft_reset, program_address, rd_cmd, wr_cmd, rd_error, wr_error, wr_done,
    abort, busy, done, error, error_code
        As :class:`~.sequencer.Sequencer`'s.
    words : ``In(stream.Signature(data_width))``
        The read DMA's words (descriptors, loads, a COPY's data).
    wdata : ``Out(stream.Signature(data_width))``
        To the write DMA: a COPY's words, or output words from the scratchpad.

    Latency and throughput: see the module docstring (one descriptor at a time, every
    phase after the previous one).
    """

    def __init__(self, *, data_width=128, addr_width=32, pe=4, simd=8, stem_pe=16,
                 stem_simd=12, buffer_bytes=32768, max_jobs=8, max_window=4608, max_out_c=512,
                 planes=4):
        if data_width not in (64, 128):
            raise ValueError(f"data_width must be 64 or 128, not {data_width!r}")
        if buffer_bytes % (data_width // 8) or buffer_bytes < 1024:
            raise ValueError(f"buffer_bytes {buffer_bytes} is not whole words of at least 1 KiB")
        for name, v in (("pe", pe), ("simd", simd), ("stem_pe", stem_pe),
                        ("stem_simd", stem_simd), ("max_jobs", max_jobs)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, not {v!r}")
        self.data_width, self.addr_width = data_width, addr_width
        self.bytes_per_word = data_width // 8
        self.descriptor_words = DESCRIPTOR_BYTES // self.bytes_per_word
        self.pe, self.simd, self.stem_pe, self.stem_simd = pe, simd, stem_pe, stem_simd
        self.buffer_bytes, self.max_jobs = buffer_bytes, max_jobs
        # the array reads a fold's pe x simd weight bits as one piece of a scratchpad
        # word, or as `banks` consecutive words (one from each bank of the scratchpad);
        # other packings run binary convolutions on the scalar path
        paths = core_paths(data_width, pe, simd, stem_pe, stem_simd, planes)
        self.banks, self.vector = paths["banks"], paths["vector"]
        self.stem_vector, self.stem_channels = paths["stem_vector"], paths["stem_channels"]
        self.pixel_vector = paths["pixel_vector"]
        self.threshold_vector = paths["threshold_vector"]
        self.pixel_thresholds = paths["pixel_thresholds"]
        self.sums_writer = paths["sums_writer"]
        self.planes, self.max_act_bits = planes, paths["max_act_bits"]
        self.window_bits, self.window_pairs = paths["window_bits"], paths["window_pairs"]
        if buffer_bytes % (self.bytes_per_word * self.banks):
            raise ValueError(f"buffer_bytes {buffer_bytes} is not whole rows of "
                             f"{self.banks} banks")
        self.window_words = window_words(max_window, simd)
        self.max_out_c = accumulator_channels(max_out_c, pe)
        self.pair_bits = pair_table_bits(max_out_c)
        cmd = stream.Signature(descriptor_layout(addr_width))
        super().__init__({
            "start": In(1),
            "soft_reset": In(1),
            "program_address": In(unsigned(addr_width)),
            "rd_cmd": Out(cmd),
            "wr_cmd": Out(cmd),
            "words": In(stream.Signature(unsigned(data_width))),
            "wdata": Out(stream.Signature(unsigned(data_width))),
            "rd_error": In(1),
            "wr_error": In(1),
            "wr_done": In(1),
            "abort": Out(1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(1),
            "error_code": Out(unsigned(4)),
        })

    # ---- helpers that generate states --------------------------------------------------

    def _read(self, m, name, bitaddr, width, is_signed, then, address_state=True):
        """Two states reading one element of ``width`` bits at scratchpad bit address
        ``bitaddr``: ``name`` drives the read port, ``name + "_D"`` calls ``then(m, ev)``
        with the value (64-bit signed) in the cycle it is valid. Without
        ``address_state`` only ``name + "_D"``: the state before it calls :meth:`_issue`."""
        if address_state:
            with m.State(name):
                self._issue(m, name, bitaddr, width, is_signed)
                self._exits(m)
        with m.State(name + "_D"):
            then(m, self._s.ev)
            self._exits(m)

    def _issue(self, m, name, bitaddr, width, is_signed):
        """Drive the read port for read ``name`` from the current state, so that its data
        state ``name + "_D"`` follows directly (a chained read costs one cycle)."""
        s = self._s
        m.d.comb += s.raddr.eq(bitaddr >> self._wbits)
        m.d.sync += [s.ea_shift.eq(bitaddr[:self._wbits]), s.ea_width.eq(width),
                     s.ea_signed.eq(is_signed),
                     s.ea_sign_at.eq(bitaddr[:self._wbits] + width - 1)]
        m.next = name + "_D"

    def _exits(self, m):
        s = self._s
        with m.If(s.dma_error):
            m.next = "ABORT"
        with m.If(self.soft_reset):
            m.next = "IDLE"

    def _fail(self, m, cause):
        m.d.sync += [self.error.eq(1), self.error_code.eq(CORE_ERRORS[cause])]
        m.next = "ABORT"

    def elaborate(self, platform):
        m = Module()
        W, BPW, aw = self.data_width, self.bytes_per_word, self.addr_width
        wbits = exact_log2(W)
        self._wbits = wbits
        depth = self.buffer_bytes // BPW
        s = self._s = type("S", (), {})()

        s.raddr = Signal(range(depth))
        rp, wp = _banked_scratchpad(m, W, depth, self.banks, s.raddr)
        PE, SIMD, PS = self.pe, self.simd, self.pe * self.simd
        NP, WB = self.planes, self.window_bits
        # the window of one output pixel and job, bit-plane b of lane j at b*SIMD + j
        # (the stem's array: byte i of its lanes at 8*i)
        # with window pairs a binary window's SIMD folds lie two a buffer word (fold w
        # in word w / 2, its low half when w is even), written a half or a word at once:
        # each half a memory of its own (Yosys maps a memory with partial write enables
        # to flip-flops on Cyclone V, 9,216 of them here)
        PAIRS = self.window_pairs
        if PAIRS:
            halves = []
            for name in ("window_lo", "window_hi"):
                m.submodules[name] = mem = Memory(shape=unsigned(WB // 2),
                                                  depth=self.window_words, init=[])
                halves.append((mem.read_port(), mem.write_port()))
        else:
            m.submodules.window = wbuf = Memory(shape=unsigned(WB), depth=self.window_words,
                                                init=[])
            rp_w, wp_w = wbuf.read_port(), wbuf.write_port()
        # the window word a state reads (its data the next cycle, win_x) or writes
        rw_word = Signal(range(self.window_words), name="win_rword")
        ww_word = Signal(range(self.window_words), name="win_wword")
        ww_data, ww_en = Signal(WB, name="win_wdata"), Signal(name="win_wen")
        ww_pair = Signal(name="win_wpair")      # a whole buffer word: folds sg, sg + 1
        win_x = Signal(WB, name="win_x")
        # every job's accumulators of one output pixel, a PE fold's pe channels per entry
        # (k * MAXC / PE + fold) so that a fold's sums are stored in the cycle they end
        MAXC = self.max_out_c
        PSH = exact_log2(PE) if self.vector else 0
        AFOLDS = max(MAXC >> PSH, 1)
        m.submodules.accs = abuf = Memory(shape=unsigned(32 * PE), depth=self.max_jobs * AFOLDS,
                                          init=[])
        rp_a, wp_a = abuf.read_port(), abuf.write_port()
        # every job's post-op pairs A, B (32 bits each) of a descriptor's channels, kept
        # from the reads of its first pixel, so that a later pixel's next job takes its
        # pair here while the read port fetches its side input
        TB = self.pair_bits
        m.submodules.pairs = ptab = Memory(shape=unsigned(64), depth=self.max_jobs << TB,
                                           init=[])
        rp_t, wp_t = ptab.read_port(), ptab.write_port()

        # ---- the descriptor: a shift register of its words --------------------------
        desc = Signal(8 * DESCRIPTOR_BYTES)

        def field(name):
            off, size = _FIELDS[name]
            return desc[8 * off:8 * (off + size)]

        copy_f = {n: desc[8 * o:8 * (o + z)] for n, (o, z) in COPY_FIELDS.items()}
        f = {n: field(n) for n in (
            "opcode", "stages", "flags", "jobs", "kernel", "stride", "dilation", "padding",
            "in_h", "in_w", "in_c", "out_h", "out_w", "out_c", "side_c", "groups", "in_fmt",
            "in_elem", "side_fmt", "side_elem", "out_fmt", "out_elem", "act_bits",
            "in_levels", "out_levels", "const_bytes", "weight_bytes", "in_pitch",
            "side_pitch", "out_pitch", "in_bytes", "out_bytes", "table_addr", "param_bytes",
            "mid_h", "mid_w", "pool_kernel", "pool_stride", "pool_padding", "rows_per_tile",
            "n_tiles", "chunk_c",
            "index", "magic")}
        st, fl, op = f["stages"], f["flags"], f["opcode"]

        def stage(name):
            return (st & _ST[name]) != 0

        def flag(name):
            return (fl & _FL[name]) != 0

        is_conv = op == _OP["CONV"]
        is_head = op == _OP["HEAD"]
        is_mixop = op == _OP["MIXER"]
        # GATE: a MIXER whose aggregate is its last input (no lambdas), K outputs gated
        is_gateop = op == _OP["GATE"]
        multi = is_mixop | is_gateop      # every job one input of the same outputs
        int_w = flag("int_weights")
        # ops whose "window" reads the output channel itself (no channel loop, no weights)
        per_channel = ~(is_conv | is_head)
        mixing = (is_conv & stage("mixer")) | is_mixop
        streamable = is_conv | is_head    # the ops with a weights section
        gated = stage("gated")
        gating = is_gateop | (mixing & gated)    # outputs gated with the aggregate
        pooling = is_conv & stage("maxpool")
        # a binary convolution's prologue threshold, or a PIXEL on the threshold lanes
        # (pvec: its one-level thresholds gathered as a prologue's, a word of lanes a read)
        pvec = Signal()
        # such a PIXEL of 8- to 32-bit inputs on the threshold lanes instead: PE channels'
        # inputs one wide read a fold (PT_X), then the threshold lanes as a convolution's
        ptv = Signal()
        gpro_conv = stage("prologue_threshold")
        gpro = gpro_conv | pvec

        pc = Signal(aw)
        index = Signal(16)
        count = Signal(range(self.descriptor_words + 1))
        rd_sent, wr_sent, copying = Signal(), Signal(), Signal()
        s.dma_error = Signal()
        m.d.comb += s.dma_error.eq(self.rd_error | self.wr_error)

        # ---- the element reader's output --------------------------------------------
        s.ea_shift = Signal(wbits)
        s.ea_width = Signal(7)
        s.ea_signed = Signal()
        s.ea_sign_at = Signal(wbits)
        s.ev = Signal(signed(64))
        m.d.comb += s.ev.eq(_element(rp.data, s.ea_shift, s.ea_width, s.ea_signed,
                                     s.ea_sign_at))
        # a pair read (the post-op's A[c] and B[c], side by side and aligned to the
        # pair's size, so never across a word): the element after ``ev``, of its width
        shifted = rp.data >> s.ea_shift
        after = _any_of((s.ea_width == w, shifted[w:]) for w in (8, 16, 32, 64))
        s.ev_next = Signal(signed(64))
        m.d.comb += s.ev_next.eq(_element(after, Const(0, wbits), s.ea_width, s.ea_signed,
                                          (s.ea_width - 1)[:wbits]))

        # ---- run-time layout ----------------------------------------------------------
        A = 32      # byte addresses and sizes inside the scratchpad and DRAM
        pe_r, simd_r, pesimd = Signal(16), Signal(16), Signal(32)
        fs, fo, rem_n, rem_o = Signal(A), Signal(A), Signal(signed(A + 1)), Signal(signed(A + 1))
        off_w, off_post, off_thr, off_mix, off_head = (Signal(A, name=n) for n in (
            "off_w", "off_post", "off_thr", "off_mix", "off_head"))
        thr_inv = Signal(A)
        wbytes = Signal(A)
        jt_bytes, par_base, in_base, side_base, out_base, end = (Signal(A, name=n) for n in (
            "jt_bytes", "par_base", "in_base", "side_base", "out_base", "end"))
        side_bytes = Signal(A)
        # a head sums its map per channel first (64-bit sums after the outputs), then
        # each class takes C products of the sums: a 1x1 window
        sum_base = Signal(A)
        summed = Signal()
        hc, hx, hy = Signal(16), Signal(16), Signal(16)
        hpix, hrow = Signal(A), Signal(A)
        hch = Signal(A)           # hc * in_elem, kept (no multiplier)
        in_pix, side_pix, out_pix = Signal(A), Signal(A), Signal(A)
        # channel slices (``sliced``): one chunk's channels of every pixel in the output
        # and side regions, stored and loaded per chunk as a piece a pixel
        sliced = Signal()
        rem_s = Signal(signed(18))    # out_c less whole chunks: 0 when they divide it
        npix = Signal(24)             # the map's pixels (a slice's pieces)
        npc = Signal(A + 3)           # npix x chunk: a slice's elements
        o_slice, s_slice = Signal(A), Signal(A)     # a pixel's slice: bytes
        sl_out, sl_side = Signal(A), Signal(A)      # the pixel's slice: offsets
        # pieces: a strided load or store's DMA descriptors after its first, issued
        # while its words move
        pcs_left = Signal(24)
        pcs_addr, pcs_len, pcs_stride = Signal(A), Signal(A), Signal(A)
        dense_out = Signal()      # the output rows are whole words of elements
        kh_n, kw_n, ci_n = Signal(16), Signal(16), Signal(16)
        st_r, pad_r, dil_r = Signal(16), Signal(16), Signal(16)
        n_out = Signal(8)         # outputs written per element (1 for a plain mixer)
        # log2 of the element widths, the constants' and the integer weights' bytes:
        # the per-element addresses shift rather than multiply
        in_sh, side_sh, out_sh, cb_sh, wb_sh = (Signal(3, name=n) for n in (
            "in_sh", "side_sh", "out_sh", "cb_sh", "wb_sh"))

        def ru(x):                # up to whole bus words
            return (x + (BPW - 1)) & ~Const(BPW - 1, A)

        # ---- loop counters --------------------------------------------------------------
        k = Signal(8)             # job
        kind = Signal(3)          # load: 0 params (or the part before the weights), 1 input,
        #                           2 side, 3 the part after the weights, 4 a weight chunk
        fld = Signal(A)           # a job-table field just read
        wptr = Signal(range(depth + 1))
        left = Signal(A)
        oy, ox, oc = Signal(16), Signal(16), Signal(16)
        oc_next = Signal(16)      # the channel after oc (next_c, the fused mixer's chain)
        m.d.comb += oc_next.eq(oc + 1)
        ky, kx, ci = Signal(16), Signal(16), Signal(16)
        j, woff = Signal(16), Signal(A)         # SIMD lane and offset in the fold
        p, wrow, fold = Signal(16), Signal(A), Signal(A)  # PE, its row, the fold's start
        lvl, cnt, inv = Signal(8), Signal(8), Signal()
        acc = Signal(signed(64))
        xraw, xv = Signal(signed(64)), Signal(signed(64))
        seen = Signal()
        valid = Signal()
        pa, pb = Signal(signed(64), name="pa"), Signal(signed(64), name="pb")
        psh, pzero, pfl = Signal(7), Signal(), Signal(2)   # the post-op's shift and flags
        # PA_D takes the accumulator from the array's buffer too (its read was addressed
        # with the pair's: no ACC_D)
        acc_pend = Signal()
        # every block's post-op shift and flags, read at its first output of a descriptor
        pc_valid = Signal(self.max_jobs)
        pc_sh = Array(Signal(7, name=f"pc_sh{i}") for i in range(self.max_jobs))
        pc_zero = Array(Signal(name=f"pc_zero{i}") for i in range(self.max_jobs))
        pc_fl = Array(Signal(2, name=f"pc_fl{i}") for i in range(self.max_jobs))
        lf, gf = Signal(signed(64)), Signal(signed(64))
        # the mixer's lambdas, gates and 2^f - gate, read at a descriptor's first mix
        mix_ok = Signal()
        # AGG adds the last job's lambda product itself (no LAM after the first mix)
        agg_add = Signal()
        lam_r, gate_r, rest_r = (Array(Signal(signed(MUL_BITS), name=f"{n}{i}")
                                       for i in range(self.max_jobs))
                                 for n in ("lam_r", "gate_r", "rest_r"))
        # the aggregate the gates take (msum), and the lambda products' running sum
        # (lsum): apart, so that the output writer gates a channel's outputs with its
        # aggregate while the next channel's products are summed
        msum, lsum = Signal(signed(64)), Signal(signed(64))
        # job lam_i's lambda product, added to lsum in the cycle after its result (while
        # the next job's epilogue starts), so that a mix waits for the last job's only
        lam_pend, lam_i, lam_bad = Signal(), Signal(range(self.max_jobs)), Signal()
        # the output whose gate is computed next: the first in GATE, each next one while
        # OUT_WD writes the one before
        gk = Signal(range(self.max_jobs + 1))
        vec = Signal()            # this descriptor's binary convolution runs on the array
        svec = Signal()           # this integer convolution runs on the stem's array
        tvec = Signal()           # its one-bit thresholds: PE channels at a time (TV_*)
        swr = Signal()            # its 32-bit sums are its outputs: a word at a time (SW_*)
        mvec = Signal()           # a MAXPOOL on the lanes: a word of channels a tap (MP_*)
        # the window buffer's ports: with window pairs a binary descriptor's (not the
        # stem's) fold w is half w % 2 of word w / 2
        paired, w_half = Signal(), Signal()
        m.d.comb += paired.eq(Const(PAIRS) & ~svec)
        m.d.sync += w_half.eq(paired & _low_bit(rw_word))
        if PAIRS:
            H = WB // 2
            (rp_lo, wp_lo), (rp_hi, wp_hi) = halves
            half_write = paired & ~ww_pair       # one window word: the half of its parity
            raddr = Mux(paired, rw_word >> 1, rw_word)
            waddr = Mux(paired, ww_word >> 1, ww_word)
            m.d.comb += [rp_lo.addr.eq(raddr), rp_hi.addr.eq(raddr),
                         win_x.eq(Cat(Mux(w_half, rp_hi.data[:SIMD], rp_lo.data[:SIMD]),
                                      rp_lo.data[SIMD:], rp_hi.data)),
                         wp_lo.addr.eq(waddr), wp_hi.addr.eq(waddr),
                         wp_lo.data.eq(ww_data[:H]),
                         wp_hi.data.eq(Mux(half_write, ww_data[:H], ww_data[H:])),
                         wp_lo.en.eq(ww_en & ~(half_write & _low_bit(ww_word))),
                         wp_hi.en.eq(ww_en & ~(half_write & ~_low_bit(ww_word)))]
        else:
            m.d.comb += [rp_w.addr.eq(rw_word), win_x.eq(rp_w.data), wp_w.addr.eq(ww_word),
                         wp_w.data.eq(ww_data), wp_w.en.eq(ww_en)]
        ML = W // 32              # its lanes: a word's 32-bit elements
        mlane = Array(Signal(signed(33), name=f"mlane{i}") for i in range(ML))
        mseen = Signal()          # a tap of the window was inside the map
        mready = Signal()         # mlane holds the maxima of the current word's channels
        arr = vec | svec          # either array: the window gathered, sums in accs
        SL = self.stem_simd
        sp = Signal(8)            # the stem array's output channel in its PE fold
        # the window gathered a word at a time (no prologue, or a one-level prologue)
        wide_g = vec & (~gpro | (f["in_levels"] == 1)) | svec | pvec
        gathered = Signal()       # this pixel's windows are convolved (accs holds them)
        nwin = Signal(A)          # k*k*C_in: the window's lanes
        gword = Signal(WB)
        # the gather's last invert-bit word read (a job's are the same for every tap and
        # pixel), valid from its read until the next tile's or chunk's loads
        ginv_word, ginv_wa, ginv_ok = Signal(W), Signal(A), Signal()
        sg = Signal(16)
        mo, ms = Signal(16), Signal(16)
        nrem = Signal(signed(A + 1))
        wfold = Signal(A)
        pacc = [Signal(signed(32), name=f"pacc{i}") for i in range(PE)]
        # the array's pipeline: a fold's data arrive the cycle after its addresses
        d_valid, d_first, d_last = Signal(), Signal(), Signal()
        d_wsh = Signal(wbits)
        d_nrem = Signal(signed(A + 1))
        d_mo = Signal(16)
        d_sp = Signal(8)
        # row tiles: output rows [r0, r1), input rows [ly0, ly1) in the scratchpad
        tile = Signal(16)
        r0, r1 = Signal(16), Signal(16)
        c0, c1 = Signal(signed(20)), Signal(signed(20))
        y0, y1 = Signal(signed(24)), Signal(signed(24))
        ly0, ly1 = Signal(signed(24)), Signal(signed(24))
        crows, irows = Signal(signed(24)), Signal(signed(24))
        in_tile, out_tile = Signal(A), Signal(A)
        # weight streaming: a chunk of output channels' weights in the scratchpad at a time
        stream = Signal()
        rem_c = Signal(signed(18))
        fpc = Signal(16)          # PE folds per chunk
        pstride = Signal(A)       # a job's parameter region in the scratchpad
        pstride_s = Signal(A)
        chunk_bytes, chunk_space, post_bytes, off_post_d = (Signal(A, name=n) for n in (
            "chunk_bytes", "chunk_space", "post_bytes", "off_post_d"))
        q = Signal(16)
        # the compiler's chunk when it streams the weights, else one PE fold: any whole
        # number of folds computes the same values, so the engine may stream any conv
        chunk_r = Signal(16)
        chunk_in = Mux(flag("weight_stream") & (f["chunk_c"] != 0), f["chunk_c"],
                       Mux(int_w, self.stem_pe, self.pe))
        cc0, o0, cstart = Signal(16), Signal(16), Signal(A)
        late = Signal()           # the epilogue runs after a MIXER's mix
        pky, pkx = Signal(8), Signal(8)
        pmax = Signal(signed(64))
        pseen = Signal()
        vals = Array(Signal(signed(64), name=f"val{i}") for i in range(self.max_jobs))
        # one lambda multiplier: the pending job's product, or in LAM job k's (never in
        # the same cycle: LAM follows the last job's result, the pending product the
        # result before)
        lam_use_k, lam_j = Signal(), Signal(range(self.max_jobs))
        lam_v, lam_sum = Signal(signed(64)), Signal(signed(64))
        m.d.comb += [lam_j.eq(Mux(lam_use_k, k, lam_i)), lam_v.eq(vals[lam_j]),
                     lam_sum.eq(Mux(lam_j == 0, 0, lsum) + lam_r[lam_j] * _operand(lam_v))]
        with m.If(lam_pend):
            m.d.sync += [lsum.eq(lam_sum), lam_pend.eq(0),
                         lam_bad.eq(lam_bad | ~_fits(lam_v))]
        wr_out = Signal(8)        # write-DMA descriptors not yet done
        wword = Signal(range(depth))
        wshift = Signal(wbits)
        # The output writer: outputs of 8 bits or more (not a MIXER's or GATE's) are
        # written with byte enables, without reading their word, so a channel's outputs
        # are handed to it and written (gated first, when the mixer gates) while the
        # sequencer goes on to the next channel; DRAIN waits for it before a tile's stores
        ow_on = Signal()          # this descriptor's outputs go through the writer
        ow_busy = Signal()        # writing a channel's outputs (or computing the first gate)
        ow_wr = Signal()          # ... and writes output ow_k this cycle
        ow_k = Signal(range(self.max_jobs))
        ow_gate = Signal()        # gated: output ow_k's value is ow_val (computed a cycle before)
        ow_val = Signal(signed(64))
        # output gk gated (round_shift(g x + (2^f - g) agg, gate_frac)), and whether
        # an operand did not fit the multiplier: for GATE, OUT_WD and the writer
        gated_v, gate_bad = Signal(signed(64)), Signal()
        ow_off = Signal(A + 3)    # the channel's bit offset in every job's output region
        ow_start = Signal()       # a channel handed over this cycle
        ow_bad = Signal()         # a gate's operand did not fit the multiplier
        ow_last = Signal()        # writes the channel's last output this cycle
        drain_load = Signal()     # after DRAIN: the next chunk's loads, else the stores
        m.d.comb += ow_on.eq(~multi & (f["out_elem"] >= 8))
        # an output element merged into its word (OUT_WD: the word read the cycle before;
        # the writer: its bytes alone written, the rest of the word disabled)
        out_mask, out_bytes = Signal(64), Signal(W // 8)
        with m.Switch(f["out_elem"]):
            for w in (1, 2, 4, 8, 16, 32, 64):
                with m.Case(w):
                    m.d.comb += out_mask.eq((1 << w) - 1)
                    if w >= 8:
                        m.d.comb += out_bytes.eq(((1 << w // 8) - 1) << (wshift >> 3))
        out_value = Mux(ow_busy, Mux(ow_gate, ow_val, vals[ow_k]), vals[k]).as_unsigned()
        out_word = Signal(W)
        m.d.comb += out_word.eq((rp.data & ~(out_mask << wshift))
                                | ((out_value & out_mask) << wshift))
        # the scalar path's last weight word read (W_D): a tap whose weight lies in it
        # takes its product in IN_D, one cycle; cleared as each convolution starts
        wc_data, wc_word, wc_pend, wc_ok = (Signal(W, name="wc_data"),
                                            Signal(range(depth), name="wc_word"),
                                            Signal(range(depth), name="wc_pend"),
                                            Signal(name="wc_ok"))
        # one multiply-accumulate for both ways a scalar tap's product is taken
        mac_w, mac_x = Signal(signed(64)), Signal(signed(64))

        # each job's regions: base + job * size, set as the regions are placed, so that
        # no address multiplies by the job at run time
        job_par, job_in, job_side, job_out = (
            Array(Signal(A, name=f"{n}{i}") for i in range(self.max_jobs))
            for n in ("job_par", "job_in", "job_side", "job_out"))
        # the window's origin and the tap's offsets (stepped, not multiplied): rows
        # cys + kyd and columns cxs + kxd of the input; in bytes from the job's input
        # region crow + kyo and ccol + kxo
        cys, cxs = Signal(signed(24)), Signal(signed(24))
        crow, ccol = Signal(signed(A + 2)), Signal(signed(A + 2))
        kyd, kxd = Signal(16), Signal(16)
        kyo, kxo = Signal(A), Signal(A)
        # the descriptor's steps: stride and dilation in rows (bytes) and pixels
        # (bytes), the padding's pixels; per tile the padding and first row's bytes
        st_pitch, st_pix, dil_pitch, dil_pix, pad_pix = (Signal(A, name=n) for n in (
            "st_pitch", "st_pix", "dil_pitch", "dil_pix", "pad_pix"))
        padly = Signal(A)
        tb = Signal(A)            # a threshold's first level: its channel * levels
        ocw = Signal(A)           # (oc - cc0) * C_in: a head's class row, stepped with oc
        pro_inv = Signal(A)
        cb = f["const_bytes"]
        kin = Mux(flag("shared_input"), 0, k)
        # a MIXER's epilogue reads entry 0's side input and block for every output
        kside = Mux(flag("shared_side") | multi, 0, k)
        kblock = Mux(multi, 0, k)         # the parameter block of job k's epilogue
        par_k = job_par[kblock]

        def const_addr(block, section, idx):
            return ((block + section + (idx << cb_sh)) << 3)

        # ---- the write port: loads, clearing, output merges ----------------------------
        m.d.comb += [self.wdata.payload.eq(Mux(copying, self.words.payload, rp.data))]
        words_ready = Signal()
        m.d.comb += self.words.ready.eq(words_ready)

        fetch_word = self.words.valid & words_ready & ~copying
        m.d.sync += [self.done.eq(0), self.error.eq(0), self.abort.eq(0), d_valid.eq(0)]
        with m.If(self.wr_cmd.valid & self.wr_cmd.ready & ~copying):
            m.d.sync += wr_out.eq(wr_out + 1 - self.wr_done)
        with m.Elif(self.wr_done & (wr_out != 0)):
            m.d.sync += wr_out.eq(wr_out - 1)

        cc1 = Signal(16)
        o1 = Signal(16)
        wskew = Signal(A)
        chunk_end = Signal(A)
        m.d.comb += [
            cc1.eq(Mux(stream & (cc0 + chunk_r < f["out_c"]), cc0 + chunk_r, f["out_c"])),
            o1.eq(Mux(stream & (o0 + fpc < fo), o0 + fpc, fo)),
            wskew.eq(Mux(stream, (cstart & (BPW - 1)) << 3, 0)),
            chunk_end.eq(Mux(cstart + chunk_bytes < wbytes, cstart + chunk_bytes, wbytes)),
        ]

        def issue_pieces(m, cmd):
            """A strided load's or store's pieces after its first: one DMA descriptor
            each, ``pcs_stride`` bytes apart, offered while the words move (the DMAs
            take a descriptor as soon as the one before has issued its last command)."""
            with m.If(pcs_left != 0):
                m.d.comb += [cmd.valid.eq(1), cmd.payload.address.eq(pcs_addr),
                             cmd.payload.length.eq(pcs_len)]
                with m.If(cmd.ready):
                    m.d.sync += [pcs_left.eq(pcs_left - 1), pcs_addr.eq(pcs_addr + pcs_stride)]

        def next_c(m):
            """Advance the output channel (and its weight row), then pixel, then row."""
            last_p = p == pe_r - 1
            m.d.sync += [
                p.eq(Mux(last_p, 0, p + 1)), ocw.eq(ocw + f["in_c"]),
                fold.eq(Mux(last_p, fold + fs * pesimd, fold)),
                wrow.eq(Mux(last_p, fold + fs * pesimd, wrow + simd_r)),
                oc.eq(oc_next), k.eq(0)]
            with m.If(oc == cc1 - 1):
                next_pixel(m)
            with m.Else():
                next_core(m, 0, oc_next)

        def next_pixel(m):
            """The next pixel (gather its windows), row, or the tile's stores."""
            m.next = "CORE"
            m.d.sync += [oc.eq(cc0), ocw.eq(0), p.eq(0), fold.eq(0), wrow.eq(0), ox.eq(ox + 1),
                         gathered.eq(0), sl_out.eq(sl_out + o_slice),
                         sl_side.eq(sl_side + s_slice)]
            with m.If(ox == f["out_w"] - 1):
                m.d.sync += [ox.eq(0), oy.eq(oy + 1)]
                with m.If(oy == r1 - 1):
                    # (channel slices: every chunk's slices are stored before the next)
                    m.next = "STORE_ADDR"
                    with m.If((cc1 != f["out_c"]) & ~sliced):
                        # the tile's next chunk of channels: its weights, then again
                        m.d.sync += [q.eq(q + 1), cc0.eq(cc1), o0.eq(o1),
                                     cstart.eq(cstart + chunk_bytes), kind.eq(4), k.eq(0)]
                        m.next = "LOAD_ENTRY"
                    with m.If(ow_start):
                        # the writer has the tile's last outputs: they go first
                        m.d.sync += drain_load.eq((cc1 != f["out_c"]) & ~sliced)
                        m.next = "DRAIN"

        with m.FSM(name="state") as fsm:
            with m.State("IDLE"):
                with m.If(self.start & ~self.soft_reset):
                    m.d.sync += [pc.eq(self.program_address), index.eq(0)]
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += [self.rd_cmd.valid.eq(1), self.rd_cmd.payload.address.eq(pc),
                             self.rd_cmd.payload.length.eq(DESCRIPTOR_BYTES)]
                with m.If(self.rd_cmd.ready):
                    m.d.sync += count.eq(0)
                    m.next = "RECEIVE"
                self._exits(m)
            with m.State("RECEIVE"):
                m.d.comb += words_ready.eq(1)
                with m.If(fetch_word):
                    m.d.sync += [count.eq(count + 1), desc.eq(Cat(desc[W:], self.words.payload))]
                    with m.If(count == self.descriptor_words - 1):
                        m.next = "DECODE"
                self._exits(m)
            with m.State("DECODE"):
                with m.If(f["magic"] != DESCRIPTOR_MAGIC):
                    self._fail(m, "bad_magic")
                with m.Elif(f["index"] != index):
                    self._fail(m, "bad_index")
                with m.Elif(op == END):
                    m.d.sync += self.done.eq(1)
                    m.next = "IDLE"
                with m.Elif(op == COPY):
                    m.d.sync += [rd_sent.eq(0), wr_sent.eq(0)]
                    m.next = "ISSUE"
                with m.Elif(op == _OP["INPUT"]):
                    m.next = "NEXT"        # the host wrote the frame: nothing to move
                with m.Elif(is_conv | is_head | multi | (op == _OP["PIXEL"])
                            | (op == _OP["SUBSAMPLE"]) | (op == _OP["MAXPOOL"])):
                    m.next = "CHECK"
                with m.Elif((op >= 1) & (op <= 9)):
                    self._fail(m, "unsupported")     # REPEAT
                with m.Else():
                    self._fail(m, "unknown_opcode")
                self._exits(m)

            # ---- COPY: as the Sequencer ------------------------------------------------
            with m.State("ISSUE"):
                m.d.comb += [
                    copying.eq(1),
                    self.rd_cmd.valid.eq(~rd_sent),
                    self.rd_cmd.payload.address.eq(copy_f["source"][:aw]),
                    self.rd_cmd.payload.length.eq(copy_f["length"][:aw]),
                    self.wr_cmd.valid.eq(~wr_sent),
                    self.wr_cmd.payload.address.eq(copy_f["destination"][:aw]),
                    self.wr_cmd.payload.length.eq(copy_f["length"][:aw]),
                ]
                rd_now = rd_sent | self.rd_cmd.ready
                wr_now = wr_sent | self.wr_cmd.ready
                m.d.sync += [rd_sent.eq(rd_now), wr_sent.eq(wr_now)]
                with m.If(rd_now & wr_now):
                    m.next = "COPY_FENCE"
                self._exits(m)
            with m.State("COPY_FENCE"):
                m.d.comb += copying.eq(1)
                with m.If(self.wr_done):
                    m.next = "NEXT"
                self._exits(m)

            # ---- what this path runs ----------------------------------------------------
            with m.State("CHECK"):
                m.d.sync += [pc_valid.eq(0), summed.eq(0), mix_ok.eq(0), lam_bad.eq(0),
                             agg_add.eq(0), acc_pend.eq(0)]
                bad = ((st & _ST["maxpool"]) != 0) & ~is_conv | (f["groups"] != 1) \
                    | (f["jobs"] == 0) | (f["jobs"] > self.max_jobs) \
                    | (op == _OP["CONV"]) & ~int_w & (f["in_levels"] == 0) & (f["act_bits"] == 0) \
                    & (f["in_fmt"] != 0) \
                    | (f["in_fmt"] > 2) | (f["out_fmt"] > 2) \
                    | stage("gated") & ~mixing \
                    | (stage("mixer") & ~is_conv) \
                    | (stage("prologue_threshold") & ~is_conv) \
                    | is_gateop & (f["jobs"] < 2) \
                    | ~_is_pow2(f["in_elem"], 64) | ~_is_pow2(f["out_elem"], 64) \
                    | stage("add") & ~_is_pow2(f["side_elem"], 64) \
                    | (int_w | is_head) & ~_is_pow2(f["weight_bytes"], 8) \
                    | (cb != 4) & (cb != 8)
                m.d.sync += [in_sh.eq(_log2(f["in_elem"], _WIDTHS)),
                             side_sh.eq(_log2(f["side_elem"], _WIDTHS)),
                             out_sh.eq(_log2(f["out_elem"], _WIDTHS)),
                             cb_sh.eq(_log2(cb, _CONST_BYTES)),
                             wb_sh.eq(_log2(f["weight_bytes"], (1, 2, 4, 8)))]
                with m.If(bad):
                    self._fail(m, "unsupported")
                with m.Else():
                    m.d.sync += [
                        pe_r.eq(Mux(int_w, self.stem_pe, self.pe)),
                        simd_r.eq(Mux(int_w, self.stem_simd, self.simd)),
                        pesimd.eq(Mux(int_w, self.stem_pe * self.stem_simd, self.pe * self.simd)),
                        rem_n.eq(Mux(is_conv, f["kernel"] * f["kernel"] * f["in_c"], 0)),
                        nwin.eq(f["kernel"] * f["kernel"] * f["in_c"]),
                        rem_c.eq(chunk_in), chunk_r.eq(chunk_in), fpc.eq(0), stream.eq(0),
                        rem_o.eq(Mux(is_conv, f["out_c"], 0)),
                        fs.eq(0), fo.eq(0), sliced.eq(flag("sliced")),
                        rem_s.eq(Mux(flag("sliced"), f["out_c"], 0)),
                        kh_n.eq(Mux(is_head, f["in_h"], f["kernel"])),
                        kw_n.eq(Mux(is_head, f["in_w"], f["kernel"])),
                        ci_n.eq(Mux(per_channel, 1, f["in_c"])),
                        st_r.eq(Mux(is_head, 1, f["stride"])),
                        pad_r.eq(Mux(is_head, 0, f["padding"])),
                        dil_r.eq(Mux(is_head, 1, f["dilation"])),
                        n_out.eq(Mux(is_gateop, f["jobs"] - 1, Mux(mixing & ~gated, 1, f["jobs"]))),
                        in_pix.eq((f["in_c"] * f["in_elem"] + 7) >> 3),
                        side_pix.eq((f["side_c"] * f["side_elem"] + 7) >> 3),
                        out_pix.eq((f["out_c"] * f["out_elem"] + 7) >> 3),
                    ]
                    m.next = "FOLDS"
                self._exits(m)
            with m.State("FOLDS"):
                # an output tile whose rows are whole words of elements and nothing else
                # (no padding bit, no head's sums) is written whole by its merges: no
                # CLEAR (the merges keep the bits outside their element). Pixels of a
                # power of two bytes up to DENSE_PIXEL_BYTES: out_w * out_pix is a shift
                rows_of = _any_of((out_pix == (1 << c), f["out_w"] << c)
                                  for c in range(exact_log2(DENSE_PIXEL_BYTES) + 1))
                m.d.sync += dense_out.eq(~is_head & ((out_pix << 3) == f["out_c"] * f["out_elem"])
                                         & _is_pow2(out_pix, DENSE_PIXEL_BYTES)
                                         & (f["out_pitch"] == rows_of)
                                         & (f["out_pitch"][:exact_log2(BPW)] == 0))
                # ceil(N / simd) and ceil(C_out / pe) by subtraction (no divider)
                with m.If(rem_n > 0):
                    m.d.sync += [rem_n.eq(rem_n - simd_r), fs.eq(fs + 1)]
                with m.If(rem_o > 0):
                    m.d.sync += [rem_o.eq(rem_o - pe_r), fo.eq(fo + 1)]
                with m.If(rem_c > 0):
                    m.d.sync += [rem_c.eq(rem_c - pe_r), fpc.eq(fpc + 1)]
                with m.If(rem_s > 0):
                    m.d.sync += rem_s.eq(rem_s - chunk_r)
                m.d.sync += [o_slice.eq((chunk_r << out_sh) >> 3),
                             s_slice.eq((chunk_r << side_sh) >> 3)]
                with m.If((rem_n <= 0) & (rem_o <= 0) & (rem_c <= 0) & (rem_s <= 0)):
                    m.next = "SECTIONS0"
                self._exits(m)
            # the parameter sections' offsets, as params.sections computes them
            with m.State("SECTIONS0"):
                vec_now = (Const(self.vector) & is_conv & ~int_w & ~pooling
                           & (f["act_bits"] <= self.max_act_bits)
                           & (fs <= self.window_words) & (fo * self.pe <= MAXC))
                m.d.sync += vec.eq(vec_now)
                # a PE fold's one-bit thresholds: pe of them in one wide read, pe
                # channels a fold (the threshold lanes, TV_*: the array's sums, tvec,
                # or a PIXEL's inputs, ptv)
                fold_thresholds = ((f["out_levels"] == 1) & (f["out_elem"] == 1)
                                   & ((f["out_c"] & (PE - 1)) == 0)
                                   & (PE * 8 * cb <= self.banks * W))
                m.d.sync += tvec.eq(Const(self.threshold_vector) & vec_now & fold_thresholds
                                    & ((st & ~_ST["prologue_threshold"]) == _ST["threshold"]))
                m.d.sync += svec.eq(Const(self.stem_vector) & is_conv & int_w & ~pooling & ~gpro_conv
                                    & (f["in_elem"] <= 8) & (f["weight_bytes"] == 1)
                                    & (fs <= self.window_words) & (fo * self.pe <= MAXC))
                # a MAXPOOL of 32-bit elements, a pixel's channels whole words (the
                # regions and pitches start on words: every tap's word is aligned)
                m.d.sync += mvec.eq((op == _OP["MAXPOOL"]) & (st & _ST["prologue_threshold"] == 0)
                                    & (f["jobs"] == 1) & (f["in_c"] == f["out_c"])
                                    & (f["in_elem"] == 32) & ((f["in_c"] & (ML - 1)) == 0)
                                    & ((f["in_pitch"] & (BPW - 1)) == 0))
                # a PIXEL that only thresholds to one bit a channel, SIMD channels a word
                pixel_lanes = (Const(self.pixel_vector) & (op == _OP["PIXEL"])
                               & (st == _ST["threshold"]) & (f["out_levels"] == 1)
                               & (f["out_elem"] == 1) & (f["kernel"] == 1)
                               & (f["in_c"] == f["out_c"]) & ((f["out_c"] & (SIMD - 1)) == 0))
                m.d.sync += pvec.eq(pixel_lanes)
                # a fold's PE inputs start on a word (whole-word pixels, PE elements at
                # least a word) and lie in one wide read, as do its PE thresholds
                m.d.sync += ptv.eq(Const(self.pixel_thresholds) & pixel_lanes
                                   & _any_of((f["in_elem"] == w, 1) for w in (8, 16, 32)
                                             if PE * w >= W)
                                   & ((in_pix & (BPW - 1)) == 0) & fold_thresholds)
                with m.If(pixel_lanes):
                    m.d.sync += ci_n.eq(f["in_c"])      # the gather walks the channels
                # the prologue's invert bits follow its C_in x levels thresholds
                m.d.sync += pro_inv.eq(f["in_c"] * f["in_levels"] * cb)
                m.d.sync += off_w.eq(Mux(stage("prologue_threshold"),
                                         ru(f["in_c"] * f["in_levels"] * cb + ((f["in_c"] + 7) >> 3)), 0))
                m.d.sync += wbytes.eq(Mux(is_conv, Mux(int_w, fo * fs * pesimd * f["weight_bytes"],
                                                       (fo * fs * pesimd + 7) >> 3),
                                          Mux(is_head, f["out_c"] * f["in_c"] * f["weight_bytes"], 0)))
                m.next = "SECTIONS1"
                # channel slices: a streamed convolution in one row tile, its chunks
                # dividing its channels, a pixel's slices whole words, outputs of whole
                # bytes (the writer's), a side input as wide as the output
                word_bits = Const(8 * BPW - 1, 16)
                slice_bad = (~is_conv | pooling | ~flag("weight_stream") | (f["chunk_c"] == 0)
                             | (f["n_tiles"] != 1) | (rem_s != 0) | (f["out_elem"] < 8)
                             | (((chunk_r << out_sh) & word_bits) != 0)
                             | stage("add") & ((f["side_c"] != f["out_c"])
                                               | (((chunk_r << side_sh) & word_bits) != 0)))
                with m.If(sliced & slice_bad):
                    self._fail(m, "unsupported")
                self._exits(m)
            with m.State("SECTIONS1"):
                m.d.sync += off_post.eq(off_w + ru(wbytes))
                # an array's sums without a stage, written as they are: a PE fold's a
                # few whole words (pixels of whole words, PE sums at least a word)
                m.d.sync += swr.eq(Const(self.sums_writer) & (vec | svec) & (st == 0)
                                   & (f["jobs"] == 1)
                                   & ~is_head & ~flag("sliced") & (f["out_elem"] == 32)
                                   & ((out_pix & (BPW - 1)) == 0)
                                   & ((f["out_c"] & (PE - 1)) == 0))
                m.d.sync += [st_pitch.eq(st_r * f["in_pitch"]), st_pix.eq(st_r * in_pix),
                             dil_pitch.eq(dil_r * f["in_pitch"]), dil_pix.eq(dil_r * in_pix),
                             pad_pix.eq(pad_r * in_pix)]
                m.next = "SECTIONS2"
                self._exits(m)
            with m.State("SECTIONS2"):
                m.d.sync += off_thr.eq(off_post + Mux(stage("postop"), ru((2 + 2 * f["out_c"]) * cb), 0))
                m.next = "SECTIONS3"
                self._exits(m)
            with m.State("SECTIONS3"):
                m.d.sync += off_mix.eq(off_thr + Mux(stage("threshold"), ru(
                    f["out_c"] * f["out_levels"] * cb + ((f["out_c"] + 7) >> 3)), 0))
                # the thresholds' invert bits (the threshold lanes keep no multiplier)
                m.d.sync += thr_inv.eq(off_thr + f["out_c"] * f["out_levels"] * cb)
                m.next = "SECTIONS4"
                self._exits(m)
            with m.State("SECTIONS4"):
                mix_bytes = Mux(is_conv & stage("mixer"), 4 * cb,
                                Mux(is_mixop, (2 + f["jobs"] * Mux(gated, 2, 1)) * cb,
                                    Mux(is_gateop, (1 + f["jobs"]) * cb, 0)))
                m.d.sync += [off_head.eq(off_mix + ru(mix_bytes)),
                             jt_bytes.eq(ru(f["jobs"] * 16)),
                             side_bytes.eq(Mux(stage("add"), f["rows_per_tile"] * f["side_pitch"], 0)),
                             out_tile.eq(f["rows_per_tile"] * f["out_pitch"]),
                             crows.eq(Mux(pooling, (f["rows_per_tile"] - 1) * f["pool_stride"]
                                          + f["pool_kernel"], f["rows_per_tile"])),
                             pstride.eq(f["param_bytes"]),
                             # a head's chunk: chunk_r classes' rows of W[classes][C]
                             chunk_bytes.eq(Mux(is_head, chunk_r * f["in_c"] * f["weight_bytes"],
                                                (fpc * fs * pesimd
                                                 * Mux(int_w, f["weight_bytes"] << 3, 1)) >> 3)),
                             off_post_d.eq(off_post),
                             post_bytes.eq(f["param_bytes"] - off_post)]
                m.next = "STREAM0"
                self._exits(m)
            # the layout with one weight chunk in place of the weights, if they stream
            with m.State("STREAM0"):
                m.d.sync += chunk_space.eq(ru(chunk_bytes) + BPW)   # a word of misalignment
                m.next = "STREAM1"
                self._exits(m)
            with m.State("STREAM1"):
                m.d.sync += pstride_s.eq(off_w + chunk_space + post_bytes)
                m.next = "TILESZ0"
                self._exits(m)
            # a tile's regions hold its rows only: the most input rows a tile reads
            with m.State("TILESZ0"):
                raw = (crows - 1) * st_r + dil_r * (kh_n - 1) + 1
                m.d.sync += [irows.eq(Mux(raw > f["in_h"], f["in_h"], raw)),
                             npix.eq(f["out_h"] * f["out_w"])]
                m.next = "TILESZ1"
                self._exits(m)
            with m.State("TILESZ1"):
                m.d.sync += [in_tile.eq(irows.as_unsigned()[:16] * f["in_pitch"]),
                             npc.eq(npix * chunk_r)]
                m.next = "REGIONS0"
                self._exits(m)
            with m.State("REGIONS0"):
                m.d.sync += [par_base.eq(jt_bytes),
                             in_base.eq(jt_bytes + f["jobs"] * pstride)]
                with m.If(sliced):
                    m.d.sync += [out_tile.eq((npc << out_sh) >> 3),
                                 side_bytes.eq(Mux(stage("add"), (npc << side_sh) >> 3, 0))]
                m.next = "REGIONS1"
                self._exits(m)
            with m.State("REGIONS1"):
                m.d.sync += side_base.eq(in_base + Mux(flag("shared_input"), 1, f["jobs"]) * in_tile)
                m.d.sync += [job_par[i].eq(par_base + i * pstride) for i in range(self.max_jobs)]
                m.d.sync += [job_in[i].eq(in_base + i * in_tile) for i in range(self.max_jobs)]
                m.next = "REGIONS2"
                self._exits(m)
            with m.State("REGIONS2"):
                m.d.sync += out_base.eq(side_base + Mux(flag("shared_side"), 1, f["jobs"]) * side_bytes)
                m.d.sync += [job_side[i].eq(side_base + i * side_bytes)
                             for i in range(self.max_jobs)]
                m.next = "REGIONS3"
                self._exits(m)
            with m.State("REGIONS3"):
                m.d.sync += [job_out[i].eq(out_base + i * out_tile) for i in range(self.max_jobs)]
                m.d.sync += [sum_base.eq(out_base + f["jobs"] * out_tile),
                             end.eq(out_base + f["jobs"] * out_tile
                                    + Mux(is_head, ru(f["in_c"] << 3), 0))]
                m.next = "REGIONS4"
                self._exits(m)
            with m.State("REGIONS4"):
                # (channel slices stream their weights whatever the size)
                with m.If((end > self.buffer_bytes) | sliced & ~stream):
                    with m.If(~stream & streamable):
                        # whole blocks do not fit: a chunk of weights at a time
                        delta = off_w + chunk_space - off_post
                        m.d.sync += [stream.eq(1), pstride.eq(pstride_s),
                                     off_post.eq(off_post + delta), off_thr.eq(off_thr + delta),
                                     off_mix.eq(off_mix + delta), off_head.eq(off_head + delta),
                                     thr_inv.eq(thr_inv + delta)]
                        m.next = "REGIONS0"
                    with m.Else():
                        self._fail(m, "unsupported")
                with m.Else():
                    m.d.sync += [wptr.eq(0), left.eq(jt_bytes), tile.eq(0), r0.eq(0),
                                 q.eq(0), cc0.eq(0), o0.eq(0), cstart.eq(0)]
                    m.next = "TABLE_CMD"
                self._exits(m)

            # ---- loads ------------------------------------------------------------------
            with m.State("TABLE_CMD"):
                m.d.comb += [self.rd_cmd.valid.eq(1),
                             self.rd_cmd.payload.address.eq(f["table_addr"]),
                             self.rd_cmd.payload.length.eq(jt_bytes)]
                with m.If(self.rd_cmd.ready):
                    m.d.sync += [kind.eq(0), k.eq(0)]
                    m.next = "TABLE_RECV"
                self._exits(m)
            with m.State("TABLE_RECV"):
                m.d.comb += [words_ready.eq(1), wp.addr.eq(wptr), wp.data.eq(self.words.payload),
                             wp.en.eq(self.words.valid)]
                with m.If(self.words.valid):
                    m.d.sync += [wptr.eq(wptr + 1), left.eq(left - BPW)]
                    with m.If(left == BPW):
                        m.next = "TILE0"
                self._exits(m)

            # ---- a row tile: its output, convolution and input rows (the model's) --------
            with m.State("TILE0"):
                m.d.sync += r1.eq(Mux(r0 + f["rows_per_tile"] > f["out_h"], f["out_h"],
                                      r0 + f["rows_per_tile"]))
                m.next = "TILE1"
                self._exits(m)
            with m.State("TILE1"):
                pc0 = r0 * f["pool_stride"] - f["pool_padding"]
                pc1 = (r1 - 1) * f["pool_stride"] - f["pool_padding"] + f["pool_kernel"]
                m.d.sync += [c0.eq(Mux(pooling, Mux(pc0 < 0, 0, pc0), r0)),
                             c1.eq(Mux(pooling, Mux(pc1 > f["mid_h"], f["mid_h"], pc1), r1))]
                m.next = "TILE2"
                self._exits(m)
            with m.State("TILE2"):
                m.d.sync += [y0.eq(c0 * st_r - pad_r),
                             y1.eq((c1 - 1) * st_r - pad_r + dil_r * (kh_n - 1) + 1)]
                m.next = "TILE3"
                self._exits(m)
            with m.State("TILE3"):
                m.d.sync += [ly0.eq(Mux(y0 < 0, 0, y0)), ly1.eq(Mux(y1 > f["in_h"], f["in_h"], y1)),
                             kind.eq(Mux(tile == 0, 0, 1)), k.eq(0)]
                m.next = "LOAD_ENTRY"       # the parameter blocks only for the first tile
                self._exits(m)

            entry_field = Mux(kind == 1, 0, Mux(kind == 2, 1, 3))   # in, side, param address
            aligned = cstart & ~Const(BPW - 1, A)
            def by_kind(*v):       # kinds 0 to 4
                return Mux(kind == 0, v[0], Mux(kind == 1, v[1], Mux(kind == 2, v[2],
                                                                   Mux(kind == 3, v[3], v[4]))))
            load_len = by_kind(Mux(stream, off_w, f["param_bytes"]),
                               (ly1 - ly0).as_unsigned()[:16] * f["in_pitch"],
                               Mux(sliced, side_bytes, (r1 - r0) * f["side_pitch"]), post_bytes,
                               ru(chunk_end) - aligned)
            # a side input in slices: the chunk's channels of each pixel, a piece each
            side_pieces = sliced & (kind == 2)
            load_from = fld + by_kind(0, ly0.as_unsigned()[:16] * f["in_pitch"],
                                      Mux(sliced, (cc0 << side_sh) >> 3, r0 * f["side_pitch"]),
                                      off_post_d, off_w + aligned)
            load_dest = by_kind(job_par[k], job_in[k], job_side[k],
                                job_par[k] + off_w + chunk_space, job_par[k] + off_w)
            load_skip = by_kind((f["param_bytes"] == 0) | (multi & (k != 0))
                                | (stream & (off_w == 0)),
                                flag("shared_input") & (k != 0),
                                ~stage("add") | (flag("shared_side") | multi) & (k != 0),
                                ~stream | (post_bytes == 0), ~stream)

            def got_field(m, ev):
                m.d.sync += fld.eq(ev)
                m.next = "LOAD_CMD"
            self._read(m, "LOAD_ENTRY", ((k << 4) + (entry_field << 2)) << 3, 32, 0, got_field)

            def load_next(m):
                # order: 0 (3) 1 2 (4), then clear; a later chunk of a tile: 4 only
                with m.If(k == f["jobs"] - 1):
                    m.d.sync += k.eq(0)
                    m.next = "LOAD_ENTRY"
                    with m.Switch(kind):
                        with m.Case(0):
                            m.d.sync += kind.eq(Mux(stream, 3, 1))
                        with m.Case(3):
                            m.d.sync += kind.eq(1)
                        with m.Case(1):
                            m.d.sync += kind.eq(2)
                        with m.Default():
                            with m.If((kind == 2) & stream):
                                m.d.sync += kind.eq(4)
                            with m.Elif((q == 0) & ~dense_out):
                                m.d.sync += wptr.eq(out_base >> exact_log2(BPW))
                                m.next = "CLEAR"
                            with m.Else():
                                m.next = "START"
                with m.Else():
                    m.d.sync += k.eq(k + 1)
                    m.next = "LOAD_ENTRY"

            with m.State("LOAD_CMD"):
                with m.If(load_skip | (fld == 0)):
                    load_next(m)
                with m.Else():
                    m.d.comb += [self.rd_cmd.valid.eq(1), self.rd_cmd.payload.address.eq(load_from),
                                 self.rd_cmd.payload.length.eq(Mux(side_pieces, s_slice, load_len))]
                    with m.If(self.rd_cmd.ready):
                        m.d.sync += [wptr.eq(load_dest >> exact_log2(BPW)), left.eq(load_len),
                                     pcs_left.eq(Mux(side_pieces, npix - 1, 0)),
                                     pcs_addr.eq(load_from + side_pix), pcs_len.eq(s_slice),
                                     pcs_stride.eq(side_pix)]
                        m.next = "LOAD_RECV"
                self._exits(m)
            with m.State("LOAD_RECV"):
                m.d.comb += [words_ready.eq(1), wp.addr.eq(wptr), wp.data.eq(self.words.payload),
                             wp.en.eq(self.words.valid)]
                issue_pieces(m, self.rd_cmd)
                with m.If(self.words.valid):
                    m.d.sync += [wptr.eq(wptr + 1), left.eq(left - BPW)]
                    with m.If(left == BPW):
                        load_next(m)
                self._exits(m)
            with m.State("CLEAR"):
                m.d.comb += [wp.addr.eq(wptr), wp.data.eq(0), wp.en.eq(1)]
                m.d.sync += wptr.eq(wptr + 1)
                with m.If(wptr == (end >> exact_log2(BPW)) - 1):
                    m.next = "START"
                self._exits(m)
            with m.State("START"):
                m.d.sync += [oy.eq(r0), ox.eq(0), oc.eq(cc0), ocw.eq(0), k.eq(0), p.eq(0), fold.eq(0),
                             wrow.eq(0), gathered.eq(0), ginv_ok.eq(0), mready.eq(0),
                             sl_out.eq(0), sl_side.eq(0),
                             padly.eq((pad_r + ly0.as_unsigned()[:16]) * f["in_pitch"])]
                m.next = "CORE"
                with m.If(is_head & ~summed):
                    # once per descriptor (the first chunk of classes): the channel sums
                    m.d.sync += [hc.eq(0), hch.eq(0), hx.eq(0), hy.eq(0), hpix.eq(0),
                                 hrow.eq(0), acc.eq(0)]
                    m.next = "HSUM"
                self._exits(m)

            # ---- a head's channel sums: one input element a cycle -------------------------
            # (the head's one tile holds the whole map; sum[c] is 64-bit at sum_base + 8c)
            def hsum_addr(pix, chan_bits):
                return ((in_base + pix) << 3) + chan_bits
            sum_addr = (sum_base << 3) + (hc << 6)

            def got_hsum(m, ev):
                last_x, last_y = hx == f["in_w"] - 1, hy == f["in_h"] - 1
                nrow = hrow + f["in_pitch"]
                npix = Mux(last_x, nrow, hpix + in_pix)
                m.d.sync += acc.eq(acc + ev)
                with m.If(last_x & last_y):
                    m.d.comb += s.raddr.eq(sum_addr >> wbits)   # its word, to merge into
                    m.next = "HSUM_WR"
                with m.Else():
                    m.d.sync += [hx.eq(Mux(last_x, 0, hx + 1)), hy.eq(hy + last_x),
                                 hpix.eq(npix), hrow.eq(Mux(last_x, nrow, hrow))]
                    self._issue(m, "HSUM", hsum_addr(npix, hch), f["in_elem"], f["in_fmt"] == 2)
            self._read(m, "HSUM", hsum_addr(hpix, hch), f["in_elem"], f["in_fmt"] == 2, got_hsum)
            with m.State("HSUM_WR"):
                sh = sum_addr[:wbits]
                m.d.comb += [wp.addr.eq(sum_addr >> wbits), wp.en.eq(1),
                             wp.data.eq((rp.data & ~(Const((1 << 64) - 1, W) << sh))
                                        | (acc.as_unsigned() << sh))]
                m.d.sync += [hc.eq(hc + 1), hch.eq(hch + f["in_elem"]), hx.eq(0), hy.eq(0),
                             hpix.eq(0), hrow.eq(0), acc.eq(0)]
                with m.If(hc == f["in_c"] - 1):
                    m.d.sync += summed.eq(1)
                    m.next = "START"
                with m.Else():
                    self._issue(m, "HSUM", hsum_addr(0, hch + f["in_elem"]), f["in_elem"],
                                f["in_fmt"] == 2)
                self._exits(m)

            # ---- the epilogue's stages, in the contract's order -------------------------
            # Each stage's first read is addressed by the state that decides it applies,
            # and a stage that does not apply costs no state.
            # with channel slices a pixel's slice follows the one before, its channels
            # counted from the chunk's first
            side_pixel = Mux(sliced, sl_side, (oy - r0) * f["side_pitch"] + ox * side_pix)
            oc_rel = Signal(16)
            m.d.comb += oc_rel.eq(Mux(sliced, oc - cc0, oc))

            def side_addr_of(kk):
                return ((job_side[kk] + side_pixel) << 3) + (oc_rel << side_sh)
            side_addr = side_addr_of(kside)

            out_row = Mux(sliced, sl_out, (oy - r0) * f["out_pitch"] + ox * out_pix)

            # a PIXEL's bits on the threshold lanes: SIMD channels' bits a piece
            pw_bit0 = (job_out[k] + out_row) << 3
            LS = exact_log2(SIMD) if self.pixel_vector else 0
            pw_bit = pw_bit0 + (ms << LS)
            pw_fwd, pw_last = Signal(), Signal(W)

            out_off = Signal(A + 3)       # the channel's bit offset in an output region
            m.d.comb += out_off.eq((out_row << 3) + (oc_rel << out_sh))

            def out_addr(kk, offset=out_off):
                return (job_out[kk] << 3) + offset

            def aim_out(m, bitaddr):
                """The next output write (OUT_WD's or the writer's) goes to ``bitaddr``."""
                m.d.sync += [wword.eq(bitaddr >> wbits), wshift.eq(bitaddr[:wbits])]

            def issue_out(m, kk):
                """Read output kk's word for OUT_WD to merge into (outputs of different
                jobs lie in different regions, so never the word OUT_WD writes now)."""
                a = out_addr(kk)
                m.d.comb += s.raddr.eq(a >> wbits)
                aim_out(m, a)
                m.next = "OUT_WD"

            def out_first(m, gate):
                """The channel's outputs: to the writer (``gate``: it computes each one's
                gate first), and on to the next channel; else OUT_WD merges them."""
                with m.If(ow_on):
                    m.d.comb += ow_start.eq(1)
                    aim_out(m, out_addr(0))
                    m.d.sync += [ow_off.eq(out_off), ow_k.eq(0),
                                 ow_gate.eq(gate), ow_busy.eq(1), ow_wr.eq(not gate)]
                    next_c(m)
                    with m.If(ow_bad):
                        self._fail(m, "unsupported")
                with m.Else():
                    if gate:
                        m.next = "GATE"
                    else:
                        issue_out(m, 0)

            def issue_pair(m, kb, occ, pending):
                """Read the pair A[occ], B[occ] of job block kb's post-op, whose shift and
                flags are kept (``pending``: PA_D takes the accumulator too)."""
                m.d.sync += [acc_pend.eq(pending), psh.eq(pc_sh[kb]), pzero.eq(pc_zero[kb]),
                             pfl.eq(pc_fl[kb])]
                self._issue(m, "PA", const_addr(job_par[kb], off_post, 2 + (occ << 1)),
                            cb << 3, 1)

            def next_core(m, kk, occ):
                """On to job kk's channel occ: straight to its accumulator when the array
                has computed the pixel, and with a post-op whose shift and flags are kept
                straight to its pair A, B (PA_D takes the accumulator: no ACC_D)."""
                with m.If(arr & gathered):
                    m.d.comb += rp_a.addr.eq(kk * AFOLDS + (occ >> PSH))
                    kb = Mux(multi, 0, kk)
                    with m.If(stage("postop") & pc_valid.bit_select(kb, 1)):
                        issue_pair(m, kb, occ, 1)
                    with m.Else():
                        m.next = "ACC_D"
                with m.Else():
                    m.next = "CORE"

            def mix_block(kk):
                return job_par[Mux(multi, 0, kk)]

            def lam_addr(kk):
                return const_addr(mix_block(kk), off_mix, Mux(is_mixop, 2 + kk, 2))

            def gate_addr(kk):
                # MIXER: after its lambdas; GATE: right after the fractions; fused: 3
                return const_addr(mix_block(kk), off_mix,
                                  Mux(is_mixop, 2 + f["jobs"] + kk, Mux(is_gateop, 2 + kk, 3)))

            # OUT itself when a MIXER's epilogue has no stage to read for (late is set
            # from the next cycle on)
            late_now = Signal()

            def to_result(m, value):
                """Job k's value: the next job, the mixer, or the outputs."""
                m.d.sync += vals[k].eq(value)
                with m.If(late | late_now):
                    m.d.sync += late.eq(0)
                    issue_out(m, k)
                with m.Elif(k == f["jobs"] - 1):
                    m.d.sync += k.eq(0)
                    with m.If(is_gateop):
                        # the last input is the aggregate the others are gated with
                        m.d.sync += [msum.eq(value), gk.eq(0)]
                        with m.If(mix_ok):
                            m.next = "GATE"
                        with m.Else():
                            self._issue(m, "GF", const_addr(par_base, off_mix, 1), cb << 3, 1)
                    with m.Elif(mixing):
                        with m.If(mix_ok):
                            # the jobs before added their products already: AGG adds
                            # this one's (k stays the last job)
                            m.d.sync += [k.eq(k), agg_add.eq(1)]
                            m.next = "AGG"
                        with m.Else():
                            # the first mix: the constants, then LAM for every job
                            self._issue(m, "LF", const_addr(par_base, off_mix, 0), cb << 3, 1)
                    with m.Else():
                        out_first(m, 0)
                with m.Else():
                    m.d.sync += k.eq(k + 1)
                    with m.If(mixing & mix_ok):
                        m.d.sync += [lam_pend.eq(1), lam_i.eq(k)]
                    next_core(m, k + 1, oc)

            def to_post(m, value):
                """The core's value: post-op, else on to the add."""
                v = Signal(signed(64))
                m.d.comb += v.eq(value)
                with m.If(stage("postop")):
                    m.d.sync += acc.eq(v)
                    with m.If(pc_valid.bit_select(kblock, 1)):
                        issue_pair(m, kblock, oc, 0)
                    with m.Else():
                        self._issue(m, "PS", const_addr(par_k, off_post, 0), cb << 3, 1)
                with m.Else():
                    to_add(m, v)

            def to_add(m, value):
                """After the post-op: add the side input (channels below side_c)."""
                v = Signal(signed(64))
                m.d.comb += v.eq(value)
                with m.If(stage("add") & (oc < f["side_c"])):
                    m.d.sync += acc.eq(v)
                    self._issue(m, "SIDE", side_addr, f["side_elem"], f["side_fmt"] == 2)
                with m.Else():
                    to_relu(m, v)

            def to_relu(m, value):
                """After the add: ReLU, then the threshold's invert bit, or the result."""
                v = Signal(signed(64))
                m.d.comb += v.eq(Mux(stage("relu") & (value < 0), 0, value))
                with m.If(stage("threshold")):
                    m.d.sync += acc.eq(v)
                    self._issue(m, "EINV", ((par_k + thr_inv) << 3) + oc, 1, 0)
                    m.d.sync += tb.eq(oc * f["out_levels"])
                with m.Else():
                    to_result(m, v)

            def weight_address(woff_, ci_):
                """The bit address of the weight of the tap at lane offset ``woff_`` and
                channel ``ci_`` of the current output channel and job."""
                widx = wrow + woff_
                w_bin_addr = ((par_k + off_w) << 3) + wskew + widx
                w_int_addr = ((par_k + off_w) << 3) + wskew + (widx << (wb_sh + 3))
                # streamed: the chunk of classes [cc0, cc1) from its skew in the first word
                w_head_addr = ((par_k + off_w) << 3) + wskew \
                    + ((ocw + ci_) << (wb_sh + 3))
                return Mux(is_head, w_head_addr, Mux(int_w, w_int_addr, w_bin_addr))

            # the tap's weight address, set with the tap (POOL_TAP, tap_next): its read,
            # the held weight word's test and the element's shift then start at a register
            # rather than after the address arithmetic
            wsel = Signal(A)
            wwid = Signal(7)
            m.d.comb += wwid.eq(Mux(is_head | int_w, f["weight_bytes"] << 3, 1))

            # ---- compute: one output element of one job ----------------------------------
            # the channel's lane in its word of the max pool's lanes
            m_lane = oc[:exact_log2(ML)]
            with m.State("CORE"):
                m.d.sync += [pky.eq(0), pkx.eq(0), pseen.eq(0)]
                with m.If(arr & gathered):
                    # the array computed this pixel's channels
                    m.d.comb += rp_a.addr.eq(k * AFOLDS + (oc >> PSH))
                    m.next = "ACC_D"
                with m.Elif(mvec & mready & (m_lane != 0)):
                    # the max pool's lanes hold this channel's maximum
                    to_post(m, mlane[m_lane])
                with m.Else():
                    m.next = "POOL_TAP"
                self._exits(m)
            with m.State("ACC_D"):
                acc_lanes = Array(rp_a.data[32 * i:32 * (i + 1)].as_signed() for i in range(PE))
                to_post(m, acc_lanes[oc[:PSH] if PSH else 0])
                self._exits(m)
            my = Signal(signed(20))
            mx = Signal(signed(20))
            m.d.comb += [my.eq(oy * f["pool_stride"] - f["pool_padding"] + pky),
                         mx.eq(ox * f["pool_stride"] - f["pool_padding"] + pkx)]
            with m.State("POOL_TAP"):
                # without a pooling stage the convolution's position is the output's
                cy_c, cx_c = Mux(pooling, my, oy), Mux(pooling, mx, ox)
                m.d.sync += [cys.eq(cy_c * st_r - pad_r), cxs.eq(cx_c * st_r - pad_r),
                             crow.eq(cy_c * st_pitch - padly), ccol.eq(cx_c * st_pix - pad_pix),
                             kyd.eq(0), kxd.eq(0), kyo.eq(0), kxo.eq(0),
                             acc.eq(0), seen.eq(0), ky.eq(0), kx.eq(0), ci.eq(0), j.eq(0),
                             woff.eq(0), gword.eq(0), sg.eq(0), wc_ok.eq(0), mseen.eq(0),
                             wsel.eq(weight_address(0, 0)),
                             *(mlane[i].eq(0) for i in range(ML))]
                with m.If(ptv):
                    # every job's PE folds from the first (TV_A reads its inputs)
                    m.d.sync += mo.eq(0)
                    m.next = "TV_A"
                with m.Elif(~pooling | ((my >= 0) & (my < f["mid_h"]) & (mx >= 0)
                                        & (mx < f["mid_w"]))):
                    with m.If(wide_g):
                        m.next = "G_TAP"
                    with m.Elif(mvec):
                        m.next = "MP_TAP"
                    with m.Else():
                        m.next = "TAP"
                with m.Else():
                    m.next = "POOL_NEXT"     # a padded tap: never the maximum
                self._exits(m)
            def tap_geometry(kyd_, kxd_, kyo_, kxo_, ci_, suffix=""):
                """The tap at (kyd_, kxd_) from the window's origin (offsets kyo_, kxo_
                bytes), channel ci_: its input position and channel, whether it lies
                inside the input, and its bit address in the scratchpad."""
                iy_ = Signal(signed(24), name="iy" + suffix)
                ix_ = Signal(signed(24), name="ix" + suffix)
                ch_ = Signal(16, name="ch" + suffix)
                m.d.comb += [iy_.eq(cys + kyd_), ix_.eq(cxs + kxd_),
                             ch_.eq(Mux(per_channel & ~pvec, oc, ci_))]
                # an element-wise core narrower than its output (a subsampled option-A
                # shortcut with the add's side first): the missing channels are zeros
                valid_ = (iy_ >= 0) & (iy_ < f["in_h"]) & (ix_ >= 0) & (ix_ < f["in_w"]) \
                    & (~per_channel | pvec | (oc < f["in_c"]))
                addr_ = Mux(summed, (sum_base << 3) + (ci_ << 6),
                            (((job_in[kin] + crow + kyo_ + ccol + kxo_)[:A]) << 3)
                            + (ch_ << in_sh))
                return iy_, ix_, ch_, valid_, addr_

            iy, ix, ch, in_valid, in_addr = tap_geometry(kyd, kxd, kyo, kxo, ci)
            in_width = Mux(summed, 64, f["in_elem"])           # a tap's input element
            in_signed = summed | (f["in_fmt"] == 2)
            # the scalar path's next tap, so that the state finishing a tap starts it
            # a summed head's window is the sums' 1x1
            # the array's gather ends a tap a group at a time (tap_end, in its states):
            # the next tap is then the one after the tap, whatever ci is
            tap_end = Signal()
            last_ci, last_kx = (ci == ci_n - 1) | tap_end, summed | (kx == kw_n - 1)
            last_tap = last_ci & last_kx & (summed | (ky == kh_n - 1))
            ky_nx, kx_nx, ci_nx = Signal(16), Signal(16), Signal(16)
            kyd_nx, kxd_nx, kyo_nx, kxo_nx = (Signal(16), Signal(16), Signal(A), Signal(A))
            m.d.comb += [ci_nx.eq(Mux(last_ci, 0, ci + 1)),
                         kx_nx.eq(Mux(last_ci, Mux(last_kx, 0, kx + 1), kx)),
                         ky_nx.eq(Mux(last_ci & last_kx, ky + 1, ky)),
                         kxd_nx.eq(Mux(last_ci, Mux(last_kx, 0, kxd + dil_r), kxd)),
                         kxo_nx.eq(Mux(last_ci, Mux(last_kx, 0, kxo + dil_pix), kxo)),
                         kyd_nx.eq(Mux(last_ci & last_kx, kyd + dil_r, kyd)),
                         kyo_nx.eq(Mux(last_ci & last_kx, kyo + dil_pitch, kyo))]
            _, _, _, in_valid_nx, in_addr_nx = tap_geometry(kyd_nx, kxd_nx, kyo_nx, kxo_nx,
                                                            ci_nx, "_nx")
            pad_value = Mux(is_conv & ~int_w & (f["act_bits"] == 0), 1, 0)


            def issue_weight(m):
                self._issue(m, "W", wsel, wwid, is_head | int_w)
                m.d.sync += wc_pend.eq(wsel >> wbits)

            wc_elem = Signal(signed(64))
            m.d.comb += wc_elem.eq(_element(wc_data, wsel[:wbits], wwid, is_head | int_w))
            # a product tap (not a maximum, not the array's gather, no prologue) whose
            # weight word is the one last read
            wc_hit = (~per_channel & ~arr & ~stage("prologue_threshold") & wc_ok
                      & (wc_word == (wsel >> wbits)))
            mac_binary = is_conv & ~int_w
            mac = Mux(mac_binary,
                      Mux(f["act_bits"] == 0, Mux(mac_x[0] == mac_w[0], 1, -1),
                          Mux(mac_w[0], mac_x, -mac_x)),
                      _operand(mac_w) * _operand(mac_x))
            mac_ok = mac_binary | _fits(mac_w, mac_x)

            def to_weight(m):
                """A tap's value is known: its product (a weight read), or WEIGHT."""
                with m.If(per_channel | vec):
                    m.next = "WEIGHT"
                with m.Else():
                    issue_weight(m)

            def start_tap(m, tap_valid, tap_addr):
                """Read a tap's input, or take the pad value."""
                m.d.sync += valid.eq(tap_valid)
                with m.If(tap_valid):
                    self._issue(m, "IN", tap_addr, in_width, in_signed)
                with m.Else():
                    m.d.sync += xv.eq(pad_value)
                    m.next = "WEIGHT"

            with m.State("TAP"):
                start_tap(m, in_valid, in_addr)
                self._exits(m)

            # ---- the max pool's lanes: a word of channels a tap --------------------------
            # each tap's word, read by the state before MP_D; its lanes' maxima over the
            # taps inside the map (padded ones never count), then the channel's into the
            # epilogue; the word's other channels take theirs in CORE
            m_new = []
            for i in range(ML):
                e32 = rp.data[32 * i:32 * (i + 1)]
                v = Mux(f["in_fmt"] == 2, e32.as_signed(), e32)
                lane = Signal(signed(33), name=f"mlane_new{i}")
                m.d.comb += lane.eq(Mux(mseen & (mlane[i] > v), mlane[i], v))
                m_new.append(lane)
            m_new = Array(m_new)

            def step_tap(m):
                """The window's tap counters to the next tap, or back to the first after
                the last."""
                m.d.sync += [ci.eq(ci_nx), kx.eq(kx_nx), ky.eq(ky_nx), kxd.eq(kxd_nx),
                             kyd.eq(kyd_nx), kxo.eq(kxo_nx), kyo.eq(kyo_nx)]
                with m.If(last_tap):
                    m.d.sync += [kx.eq(0), ky.eq(0), kxd.eq(0), kyd.eq(0), kxo.eq(0),
                                 kyo.eq(0)]

            def mp_next(m, value):
                """After a tap: the next one (its word read now when it is inside the map),
                or the channel's maximum ``value`` into the epilogue."""
                step_tap(m)
                with m.If(last_tap):
                    m.d.sync += mready.eq(1)
                    to_post(m, value)
                with m.Elif(in_valid_nx):
                    m.d.comb += s.raddr.eq(in_addr_nx >> wbits)
                    m.next = "MP_D"
                with m.Else():
                    m.next = "MP_TAP"

            with m.State("MP_TAP"):
                with m.If(in_valid):
                    m.d.comb += s.raddr.eq(in_addr >> wbits)
                    m.next = "MP_D"
                with m.Else():
                    mp_next(m, mlane[m_lane])
                self._exits(m)
            with m.State("MP_D"):
                m.d.sync += [mlane[i].eq(m_new[i]) for i in range(ML)]
                m.d.sync += mseen.eq(1)
                mp_next(m, m_new[m_lane])
                self._exits(m)

            def got_input(m, ev):
                m.d.sync += [xraw.eq(ev), xv.eq(ev)]
                with m.If(stage("prologue_threshold")):
                    self._issue(m, "PINV", p_inv_addr, 1, 0)
                    m.d.sync += tb.eq(ch * f["in_levels"])
                with m.Elif(wc_hit):
                    m.d.comb += [mac_w.eq(wc_elem), mac_x.eq(ev)]
                    m.d.sync += acc.eq(acc + mac)
                    tap_next(m)
                    with m.If(~mac_ok):
                        self._fail(m, "unsupported")
                with m.Else():
                    to_weight(m)
            p_inv_addr = ((par_k + pro_inv) << 3) + ch

            # prologue threshold of the input element: the invert bit, then the levels
            # (the state before INV_D addresses the invert bit; each level's read is
            # addressed by the previous read's data state)
            def threshold_states(prefix, value, levels, section, done):
                def t_addr(level):
                    # tb: channel * levels, set by the state that reads the invert bit
                    return const_addr(par_k, section, tb + level)

                def got_inv(m, ev):
                    m.d.sync += [inv.eq(ev[0]), lvl.eq(0), cnt.eq(0)]
                    self._issue(m, prefix + "T", t_addr(0), cb << 3, 1)
                self._read(m, prefix + "INV", 0, 1, 0, got_inv, address_state=False)

                def got_t(m, ev):
                    hit = Signal(name=prefix.lower() + "hit")
                    m.d.comb += hit.eq(value >= ev)
                    m.d.sync += [cnt.eq(cnt + hit), lvl.eq(lvl + 1)]
                    with m.If(lvl == levels - 1):
                        done(m, Mux(inv, levels - (cnt + hit), cnt + hit))
                    with m.Else():
                        self._issue(m, prefix + "T", t_addr(lvl + 1), cb << 3, 1)
                self._read(m, prefix + "T", 0, cb << 3, 1, got_t, address_state=False)

            def prologue_done(m, level):
                m.d.sync += xv.eq(level)
                to_weight(m)
            threshold_states("P", xraw, f["in_levels"], 0, prologue_done)

            # ---- the array's window, a word at a time -----------------------------------
            # A tap's channels are consecutive elements of one pixel (NHWC), so one
            # scratchpad word gives up to SIMD of its lanes: as many as remain of the tap,
            # of the word and of the window word being built, and (prologue threshold of
            # one level) whose thresholds and invert bits lie in one word each. Padded taps
            # write their pad value; the values are the scalar gather's, lane for lane.
            # the prologue's section, or (pvec) the PIXEL's threshold section: with one
            # level the two are laid out alike
            thr_sec = par_k + Mux(pvec, off_thr, 0)
            thr_addr = (thr_sec + (ci << cb_sh)) << 3
            inv_addr = ((thr_sec + (f["in_c"] << cb_sh)) << 3) + ci

            def left_in_word(bitaddr, width, choices):
                # elements of `width` bits from bitaddr to the end of its word
                room = W - bitaddr[:wbits]
                return Mux(_any_of((width == w, 1) for w in choices), _any_of(
                    (width == w, room >> exact_log2(w)) for w in choices), room)

            def smaller(a, b):
                return Mux(a < b, a, b)

            lim_c = ci_n - ci
            lim_j = Mux(svec, SL, SIMD) - j[:SIMD.bit_length()]
            # the input word being read: its bit address, kept from the state that read
            # it (G_TAP, or the group before of the same tap), so that no address
            # arithmetic precedes the shifter
            ga = Signal(A + 3)
            lim_in = left_in_word(ga, f["in_elem"], (2, 4, 8, 16, 32, 64))
            # a prologue's threshold and invert-bit offsets in their words, kept by G_IN
            # for G_THR (ci does not change between them), so that the group's size and
            # its thresholds' shifts start at registers, not after the address arithmetic
            thr_sh, inv_sh = Signal(wbits), Signal(wbits)
            lim_t = left_in_word(thr_sh, cb << 3, (8, 16, 32, 64))
            lim_v = W - inv_sh
            gl_pad = Signal(range(SIMD + 1))
            gl_in = Signal(range(SIMD + 1))     # without a prologue (G_IN)
            gl = Signal(range(SIMD + 1))        # with one (G_THR)
            m.d.comb += [gl_pad.eq(smaller(lim_c, lim_j)),
                         gl_in.eq(smaller(gl_pad, lim_in)),
                         gl.eq(smaller(gl_in, smaller(lim_t, lim_v)))]
            gin = Signal(W)           # the input word, shifted to the group's first element
            ginv = Signal(SIMD)       # the group's invert bits
            m.d.comb += ginv.eq(ginv_word >> inv_sh)

            # the group's lane values (NP bit planes each) from the input word shifted to
            # its first element and, with a prologue, the threshold word
            binary_act = Signal()
            m.d.comb += binary_act.eq(f["act_bits"] == 0)

            def lane_planes(value):
                """A window lane's NP bit planes. With 4: an n-bit level as it is; a
                binary input x (+1 as 1) as x in plane 0 and ~x in plane 1, so that the
                array adds the same signed plane sums for both (binary: plane 0's
                minus plane 1's). With 1 (binary inputs alone): x."""
                if NP == 1:
                    return value[0]
                return Mux(binary_act, Cat(value[0], ~value[0], Const(0, 2)), value)

            # the input's element width and the constants' size, decoded once
            in_is = {w: Signal(name=f"in_is{w}") for w in _WIDTHS}
            cb_is = {c: Signal(name=f"cb_is{c}") for c in _CONST_BYTES}
            in_signed_fmt = Signal()
            m.d.comb += [*(in_is[w].eq(f["in_elem"] == w) for w in _WIDTHS),
                         *(cb_is[c].eq(cb == c) for c in cb_is),
                         in_signed_fmt.eq(f["in_fmt"] == 2)]
            # G_IN takes the read word's elements as they are (their low bits: levels, or
            # the stem's bytes), G_THR compares the kept word's elements (gin) with the
            # thresholds: apart, so that G_IN's path from the read to the window word
            # does not pass a comparison only G_THR makes
            g_word = Signal(W)
            m.d.comb += g_word.eq(rp.data >> ga[:wbits])
            gth = Signal(W)
            m.d.comb += gth.eq(rp.data >> thr_sh)

            def lane_element(word, i):
                """Lane ``i``'s element of ``word``, of the input's width and signedness
                (a signal narrower than 64 bits takes its low bits)."""
                return _any_of(
                    (in_is[w], Mux(in_signed_fmt, word[i * w:(i + 1) * w].as_signed(),
                                   word[i * w:(i + 1) * w]))
                    for w in _WIDTHS if (i + 1) * w <= W)

            gvals, gbytes = [], []      # the array's bit planes, the stem's bytes
            for i in range(SIMD):
                e_in = Signal(8, name=f"gin_elem{i}")
                e = Signal(signed(64), name=f"gelem{i}")
                t = Signal(signed(64), name=f"gthr{i}")
                tv_i = _any_of((cb_is[c], gth[i * c * 8:(i + 1) * c * 8].as_signed())
                               for c in _CONST_BYTES if (i + 1) * c * 8 <= W)
                m.d.comb += [e_in.eq(lane_element(g_word, i)), e.eq(lane_element(gin, i)),
                             t.eq(tv_i)]
                g_in, g = Signal(NP, name=f"glane_in{i}"), Signal(NP, name=f"glane{i}")
                m.d.comb += [g_in.eq(lane_planes(e_in[:4])),
                             g.eq(lane_planes((e >= t) ^ ginv[i]))]
                # one lane value for both states (gpro is the descriptor's), so that
                # they share the placement into the window word
                gv = Signal(NP, name=f"gval{i}")
                m.d.comb += gv.eq(Mux(gpro, g, g_in))
                gvals.append(gv)
                if i < SL:
                    gbytes.append(e_in)
            gn_lanes = Signal(range(SIMD + 1))
            m.d.comb += gn_lanes.eq(Mux(gpro, gl, gl_in))
            # a group of two window words (window pairs): a binary input word's 2 * SIMD
            # lanes from the start of a buffer word, all of them the tap's
            g_pair = None
            if PAIRS:
                g_pair = Signal()
                m.d.comb += g_pair.eq(paired & vec & (f["in_elem"] == 1) & (j == 0) & ~sg[0]
                                      & (lim_c >= 2 * SIMD) & (lim_in >= 2 * SIMD))

            def gather_write(m, values, n, chain, stem_values=None, pair=None):
                """Lanes [j, j + n) of window word sg get values[:n] (NP bit planes of
                SIMD lanes; the stem's array: stem_values[:n], bytes of SL lanes, zeros
                when None); then the next group (with ``chain``, one of the same tap has
                its input word read now). Where ``pair`` holds instead, window words sg
                and sg + 1 (one buffer word) get the input word's 2 * SIMD binary lanes
                (window pairs: j is 0, sg even, the tap and the input word have them)."""
                if pair is None:
                    pair = Const(0)
                else:
                    n = Mux(pair, 2 * SIMD, n)
                placed = []
                jb = j[:SIMD.bit_length()]
                for b in range(NP):
                    plane = Cat(*(values[i][b] & (i < n) for i in range(SIMD)))
                    placed.append((plane << jb)[:SIMD])
                stem_bytes = Const(0, 8 * SL)
                if stem_values is not None:
                    stem_bytes = (Cat(*(Mux(i < n, stem_values[i], 0) for i in range(SL)))
                                  << Cat(Const(0, 3), jb))[:8 * SL]
                gn = Signal(WB)
                # a window word filled, or a pair's two (a buffer word)
                done = Mux(pair, 2, (j + n) == Mux(svec, SL, SIMD))
                m.d.comb += gn.eq(gword | Mux(svec, stem_bytes, Cat(*placed)))
                if PAIRS:
                    two = Cat(g_word[:SIMD], Const(0, WB // 2 - SIMD), g_word[SIMD:2 * SIMD])
                    m.d.comb += [ww_pair.eq(pair), ww_data.eq(Mux(pair, two, gn))]
                else:
                    m.d.comb += ww_data.eq(gn)
                m.d.comb += [ww_word.eq(sg), ww_en.eq(1)]
                m.d.sync += [gword.eq(Mux(done != 0, 0, gn)), sg.eq(sg + done),
                             j.eq(Mux(done != 0, 0, j + n)), ci.eq(ci + n)]
                m.next = "G_TAP"
                if chain:
                    nxt = ga + (n << in_sh)
                    m.d.comb += s.raddr.eq(nxt >> wbits)
                    m.d.sync += ga.eq(nxt)
                    m.next = "G_IN"
                m.d.comb += tap_end.eq(1)
                with m.If(ci + n == ci_n):
                    # the tap's last group: the next tap's input word is read now (a
                    # padded tap's groups take G_TAP), and after the window's last tap
                    # the array's folds start
                    step_tap(m)
                    with m.If(last_tap):
                        window_gathered(m)
                    with m.Elif(in_valid_nx):
                        m.d.comb += s.raddr.eq(in_addr_nx >> wbits)
                        m.d.sync += ga.eq(in_addr_nx)
                        m.next = "G_IN"
                    with m.Else():
                        m.next = "G_TAP"

            def window_gathered(m):
                """The window is in the window buffer: the array's folds start (its first
                read of the buffer follows this cycle's write), or EPI (the pixel's
                threshold lanes read window word 0 at once)."""
                with m.If(vec):
                    m.d.sync += [mo.eq(o0), ms.eq(0), nrem.eq(nwin), wfold.eq(wskew)]
                    m.next = "MVU"
                with m.Elif(svec):
                    m.d.sync += [mo.eq(o0), ms.eq(0), sp.eq(0), wfold.eq(wskew)]
                    m.next = "SMVU"
                with m.Else():
                    m.next = "EPI"

            with m.State("G_TAP"):
                with m.If(in_valid):
                    m.d.comb += s.raddr.eq(in_addr >> wbits)
                    m.d.sync += ga.eq(in_addr)
                    m.next = "G_IN"
                with m.Else():
                    pad = Signal(NP)
                    m.d.comb += pad.eq(pad_value)
                    gather_write(m, [pad] * SIMD, gl_pad, chain=False)
                self._exits(m)
            with m.State("G_IN"):
                with m.If(gpro):
                    m.d.sync += [gin.eq(g_word), thr_sh.eq(thr_addr[:wbits]),
                                 inv_sh.eq(inv_addr[:wbits])]
                    with m.If(ginv_ok & (ginv_wa == (inv_addr >> wbits))):
                        m.d.comb += s.raddr.eq(thr_addr >> wbits)
                        m.next = "G_THR"
                    with m.Else():
                        m.d.comb += s.raddr.eq(inv_addr >> wbits)
                        m.next = "G_INV"
                with m.Else():
                    gather_write(m, gvals, gn_lanes, chain=True, pair=g_pair,
                                 stem_values=gbytes if self.stem_vector else None)
                self._exits(m)
            with m.State("G_INV"):
                m.d.comb += s.raddr.eq(thr_addr >> wbits)
                m.d.sync += [ginv_word.eq(rp.data), ginv_wa.eq(inv_addr >> wbits),
                             ginv_ok.eq(1)]
                m.next = "G_THR"
                self._exits(m)
            with m.State("G_THR"):
                gather_write(m, gvals, gn_lanes, chain=True)
                self._exits(m)

            def tap_next(m):
                last_j = j == simd_r - 1
                woff_nx = Mux(last_j, woff + pesimd - (simd_r - 1), woff + 1)
                m.d.sync += [j.eq(Mux(last_j, 0, j + 1)), woff.eq(woff_nx),
                             wsel.eq(weight_address(woff_nx, ci_nx))]
                step_tap(m)
                with m.If(last_tap):
                    m.next = "EPI"
                with m.Else():
                    start_tap(m, in_valid_nx, in_addr_nx)

            spread = Signal(WB)
            xv_planes = lane_planes(xv[:4])
            for b in range(NP):
                m.d.comb += spread[b * SIMD].eq(xv_planes[b])
            gnext = Signal(WB)
            m.d.comb += gnext.eq(gword | (spread << j[:SIMD.bit_length()]))
            with m.State("WEIGHT"):
                with m.If(per_channel):
                    with m.If(valid):
                        m.d.sync += [seen.eq(1), acc.eq(Mux(seen & (acc > xv), acc, xv))]
                    tap_next(m)
                with m.Elif(vec):
                    # gather: the tap's value (its bit planes) into lane j of fold sg
                    last_j = j == SIMD - 1
                    m.d.comb += [ww_word.eq(sg), ww_data.eq(gnext), ww_en.eq(1)]
                    m.d.sync += [gword.eq(Mux(last_j, 0, gnext)), sg.eq(sg + last_j)]
                    tap_next(m)
                with m.Else():
                    issue_weight(m)
                self._exits(m)

            def got_weight(m, ev):
                m.d.comb += [mac_w.eq(ev), mac_x.eq(xv)]
                m.d.sync += [acc.eq(acc + mac), wc_data.eq(rp.data), wc_word.eq(wc_pend),
                             wc_ok.eq(1)]
                tap_next(m)
                with m.If(~mac_ok):
                    self._fail(m, "unsupported")
            self._read(m, "W", wsel, wwid, is_head | int_w, got_weight, address_state=False)
            # after tap_next: a tap whose weight word is held ends in IN_D
            self._read(m, "IN", in_addr, in_width, in_signed, got_input,
                       address_state=False)

            # ---- epilogue ---------------------------------------------------------------
            with m.State("EPI"):
                with m.If(vec | svec):
                    window_gathered(m)   # a window gathered lane by lane (WEIGHT)
                with m.Elif(pvec):
                    # the pixel's bits to its output: window word 0 and its output word
                    m.d.comb += [s.raddr.eq(pw_bit0 >> wbits), rw_word.eq(0)]
                    m.d.sync += [ms.eq(0), pw_fwd.eq(0)]
                    m.next = "PW"
                with m.Elif(pooling):
                    # the pooling window's max over its taps inside the convolution's map
                    m.d.sync += [pseen.eq(1), pmax.eq(Mux(pseen & (pmax > acc), pmax, acc))]
                    m.next = "POOL_NEXT"
                with m.Elif(is_head):
                    self._issue(m, "BIAS", const_addr(par_k, off_head, oc), cb << 3, 1)
                with m.Elif(multi):
                    to_result(m, acc)      # a MIXER's (GATE's) epilogue follows the mix (OUT)
                with m.Else():
                    to_post(m, acc)
                self._exits(m)
            with m.State("POOL_NEXT"):
                m.d.sync += pkx.eq(pkx + 1)
                m.next = "POOL_TAP"
                with m.If(pkx == f["pool_kernel"] - 1):
                    m.d.sync += [pkx.eq(0), pky.eq(pky + 1)]
                    with m.If(pky == f["pool_kernel"] - 1):
                        to_post(m, pmax)
                self._exits(m)

            # ---- the XNOR-popcount array: PE channels x SIMD lanes a fold ------------------
            with m.State("MVU"):
                # one fold's addresses a cycle; its data are added by the pipeline below
                wbase = ((par_k + off_w) << 3) + wfold
                m.d.comb += [rw_word.eq(ms), s.raddr.eq(wbase >> wbits)]
                m.d.sync += [d_valid.eq(1), d_wsh.eq(wbase[:wbits]), d_first.eq(ms == 0),
                             d_last.eq(ms == fs - 1), d_nrem.eq(nrem), d_mo.eq(mo),
                             ms.eq(ms + 1), nrem.eq(nrem - SIMD), wfold.eq(wfold + PS)]
                with m.If(ms == fs - 1):
                    m.d.sync += [ms.eq(0), nrem.eq(nwin), mo.eq(mo + 1)]
                    with m.If(mo == o1 - 1):
                        m.next = "MVU_END"
                self._exits(m)
            with m.State("PW"):
                # plane 0 of window word ms: the SIMD one-bit outputs of channels
                # [ms * SIMD, (ms + 1) * SIMD), merged into their output word; the next
                # piece's words are read now (the word written now is forwarded: the
                # read port returns a word as it was before this cycle's write)
                sh = pw_bit[:wbits]
                cur = Mux(pw_fwd, pw_last, rp.data)
                new = Signal(W)
                m.d.comb += [new.eq((cur & ~(Const((1 << SIMD) - 1, W) << sh))
                                    | (win_x[:SIMD] << sh)),
                             wp.addr.eq(pw_bit >> wbits), wp.data.eq(new), wp.en.eq(1)]
                nxt = pw_bit + SIMD
                m.d.sync += [pw_last.eq(new), pw_fwd.eq((nxt >> wbits) == (pw_bit >> wbits)),
                             ms.eq(ms + 1)]
                with m.If(((ms + 1) << LS) == f["out_c"]):
                    with m.If(k == f["jobs"] - 1):
                        m.d.sync += k.eq(0)
                        next_pixel(m)
                    with m.Else():
                        m.d.sync += k.eq(k + 1)
                        m.next = "CORE"
                with m.Else():
                    m.d.comb += [s.raddr.eq(nxt >> wbits), rw_word.eq(ms + 1)]
                self._exits(m)
            SPC = self.stem_channels      # the stem's output channels a cycle
            with m.State("SMVU"):
                # the stem's array: SPC output channels' SL weights each (aligned pieces
                # of a word, consecutive in the packing's (fold, SIMD fold, PE, lane)
                # order, read in order) against window word ms a cycle, added by the
                # pipeline below
                wbase = ((par_k + off_w) << 3) + wfold
                m.d.comb += [rw_word.eq(ms), s.raddr.eq(wbase >> wbits)]
                m.d.sync += [d_valid.eq(1), d_wsh.eq(wbase[:wbits]), d_first.eq(ms == 0),
                             d_last.eq((ms == fs - 1) & (sp == PE - SPC)), d_mo.eq(mo),
                             d_sp.eq(sp), sp.eq(sp + SPC), wfold.eq(wfold + 8 * SL * SPC)]
                with m.If(sp == PE - SPC):
                    m.d.sync += [sp.eq(0), ms.eq(ms + 1)]
                    with m.If(ms == fs - 1):
                        m.d.sync += [ms.eq(0), mo.eq(mo + 1)]
                        with m.If(mo == o1 - 1):
                            m.next = "MVU_END"
                self._exits(m)
            with m.State("MVU_END"):
                # the last fold's data arrive now (k still names its job)
                m.next = "CORE"
                with m.If(k == f["jobs"] - 1):
                    m.d.sync += [k.eq(0), gathered.eq(1)]
                    with m.If(tvec):
                        m.d.sync += mo.eq(o0)
                        m.next = "TV_A"
                    if self.sums_writer:      # (a core without it has no SW_* states)
                        with m.Elif(swr):
                            m.d.sync += mo.eq(o0)
                            m.next = "SW_A"
                with m.Else():
                    m.d.sync += k.eq(k + 1)
                self._exits(m)

            # ---- one-bit thresholds of a PE fold's sums (tvec) ----------------------------
            # per job and PE fold (a job's folds one after another, so that they share its
            # invert-bit word and its output word): its sums and thresholds (one wide read,
            # TV_T); its invert bits (TV_I, only where they start a word, else from the
            # word TV_I kept); its PE bits merged into the output word: read in TV_O where
            # they start a word, else merged into the word TV_O kept and written in the
            # next fold's first cycle (the pixel's last fold goes through TV_O to write
            # it). Each read is addressed by the state before. A PIXEL on these lanes (ptv)
            # takes its PE inputs instead of sums: one wide read (PT_X) before the
            # thresholds'.
            # running addresses of the job and fold (no multipliers): the job's parameter
            # block, its output pixel, the fold's thresholds (mo * pe * cb bytes) and the
            # first fold's; a PIXEL's input piece (bits) and the job's first fold's
            tv_pk, tv_ob, tv_to, tv_to0 = Signal(A), Signal(A), Signal(A), Signal(A)
            tv_ib, tv_ibj = Signal(A + 3), Signal(A + 3)
            tv_m0 = Mux(ptv, 0, o0)       # the first fold (MVU and POOL_TAP leave mo there)
            tv_j1 = Signal()              # this is the job's first fold
            # the PIXEL's inputs of the fold, as 33-bit signed values (any 32-bit input)
            tp_x = [Signal(signed(33), name=f"tp_x{i}") for i in range(PE)]
            tv_thr = (tv_pk + off_thr + tv_to) << 3
            tv_inv = ((tv_pk + thr_inv) << 3) + (mo << PSH)
            tv_out = (tv_ob << 3) + (mo << PSH)
            tv_ge, tv_invp = Signal(PE), Signal(PE)
            tv_iw, tv_ow = Signal(W), Signal(W)     # the invert-bit word, the output word
            tv_owa = Signal(A)            # the output word's address
            tv_pend, tv_psh = Signal(), Signal(wbits)   # a fold's bits to merge at tv_psh
            tv_from_ow = Signal()         # TV_O merges into tv_ow (no read)
            last_fold = Mux(ptv, ((mo + 1) << PSH) == f["out_c"], mo == o1 - 1)
            pixel_last = (k == f["jobs"] - 1) & last_fold

            def times_cb(x):      # x * const_bytes (4 or 8): a shift, no multiplier
                return x << cb_sh

            def fold_start(m, ib, pk, to, abuf_addr):
                # a fold's first read: a PIXEL's inputs, a convolution's sums and
                # thresholds (a core without the PIXEL's lanes has no PT_X)
                def sums():
                    m.d.comb += [rp_a.addr.eq(abuf_addr),
                                 s.raddr.eq((pk + off_thr + to) >> (wbits - 3))]
                    m.next = "TV_T"
                if self.pixel_thresholds:
                    with m.If(ptv):
                        m.d.comb += s.raddr.eq(ib >> wbits)
                        m.next = "PT_X"
                    with m.Else():
                        sums()
                else:
                    sums()

            def next_fold(m):
                with m.If(last_fold):
                    # the next job's first fold (the next input region, unless shared)
                    ib_job = tv_ibj + Mux(flag("shared_input"), 0, in_tile << 3)
                    m.d.sync += [k.eq(k + 1), mo.eq(tv_m0), tv_to.eq(tv_to0), tv_j1.eq(1),
                                 tv_pk.eq(tv_pk + pstride), tv_ob.eq(tv_ob + out_tile),
                                 tv_ib.eq(ib_job), tv_ibj.eq(ib_job)]
                    fold_start(m, ib_job, tv_pk + pstride, tv_to0,
                               ((k + 1) << exact_log2(AFOLDS)) + tv_m0)
                with m.Else():
                    to_next = tv_to + times_cb(Const(PE, 8))
                    ib_next = tv_ib + (Const(PE, 8) << in_sh)
                    m.d.sync += [mo.eq(mo + 1), tv_to.eq(to_next), tv_ib.eq(ib_next),
                                 tv_j1.eq(0)]
                    fold_start(m, ib_next, tv_pk, to_next,
                               (k << exact_log2(AFOLDS)) + mo + 1)

            def bits_known(m):
                # the fold's bits are known at the end of this cycle: merged into the
                # kept output word next cycle, or in TV_O (a word's first fold reads it)
                out_kept = ~tv_j1 & (tv_out[:wbits] != 0)
                with m.If(out_kept & ~pixel_last):
                    m.d.sync += [tv_pend.eq(1), tv_psh.eq(tv_out[:wbits])]
                    next_fold(m)
                with m.Else():
                    m.d.sync += tv_from_ow.eq(out_kept)
                    m.d.comb += s.raddr.eq(tv_out >> wbits)
                    m.next = "TV_O"

            def merged(word, sh):
                return (word & ~(Const((1 << PE) - 1, W) << sh)) | ((tv_ge ^ tv_invp) << sh)

            def write_pending(m):
                # the last fold's bits, into the kept output word
                with m.If(tv_pend):
                    m.d.comb += [wp.addr.eq(tv_owa), wp.en.eq(1),
                                 wp.data.eq(merged(tv_ow, tv_psh))]
                    m.d.sync += [tv_ow.eq(merged(tv_ow, tv_psh)), tv_pend.eq(0)]

            with m.State("TV_A"):
                to0 = times_cb(mo << PSH)          # the first fold's
                m.d.sync += [tv_pk.eq(par_base), tv_ob.eq(out_base + out_row), tv_to.eq(to0),
                             tv_to0.eq(to0), tv_j1.eq(1), tv_pend.eq(0),
                             tv_ib.eq(in_addr), tv_ibj.eq(in_addr)]
                # (a PIXEL's: job 0's pixel, POOL_TAP set its position; channel 0)
                fold_start(m, in_addr, par_base, to0, mo)
                self._exits(m)
            if self.pixel_thresholds:
                with m.State("PT_X"):
                    # the fold's PE inputs start the wide read (ptv's conditions)
                    for i in range(PE):
                        lane = _any_of(
                            (in_is[w], Mux(in_signed_fmt, rp.wide[i * w:(i + 1) * w].as_signed(),
                                           rp.wide[i * w:(i + 1) * w]))
                            for w in (8, 16, 32) if PE * w >= W)
                        m.d.sync += tp_x[i].eq(lane)
                    write_pending(m)
                    m.d.comb += s.raddr.eq(tv_thr >> wbits)
                    m.next = "TV_T"
                    self._exits(m)
            with m.State("TV_T"):
                write_pending(m)
                # a PE fold's thresholds start at a multiple of pe constants of 4 or 8
                # bytes after their word-aligned section
                thr_bits = _aligned_piece(rp.wide, tv_thr[:wbits], min(PE * 32, W),
                                          self.banks * W)
                ge = []
                for i in range(PE):
                    t_i = _any_of((cb_is[c], thr_bits[i * c * 8:(i + 1) * c * 8].as_signed())
                                  for c in _CONST_BYTES if (i + 1) * c * 8 <= self.banks * W)
                    x_i = rp_a.data[32 * i:32 * (i + 1)].as_signed()
                    if self.pixel_thresholds:
                        x_i = Mux(ptv, tp_x[i], x_i)
                    ge.append(x_i >= t_i)
                m.d.sync += tv_ge.eq(Cat(*ge))
                # the invert bits start at a byte; a PE fold's, pe bits after
                with m.If(~tv_j1 & (tv_inv[:wbits] != 0)):
                    m.d.sync += tv_invp.eq(_aligned_piece(tv_iw, tv_inv[:wbits], min(PE, 8), PE))
                    bits_known(m)
                with m.Else():
                    m.d.comb += s.raddr.eq(tv_inv >> wbits)
                    m.next = "TV_I"
                self._exits(m)
            with m.State("TV_I"):
                m.d.sync += [tv_iw.eq(rp.data),
                             tv_invp.eq(_aligned_piece(rp.data, tv_inv[:wbits], min(PE, 8), PE))]
                bits_known(m)
                self._exits(m)
            with m.State("TV_O"):
                sh = tv_out[:wbits]
                word = merged(Mux(tv_from_ow, tv_ow, rp.data), sh)
                m.d.comb += [wp.addr.eq(tv_out >> wbits), wp.en.eq(1), wp.data.eq(word)]
                m.d.sync += [tv_ow.eq(word), tv_owa.eq(tv_out >> wbits)]
                with m.If(pixel_last):
                    m.d.sync += k.eq(0)
                    next_pixel(m)
                with m.Else():
                    next_fold(m)
                self._exits(m)

            # ---- an array's 32-bit sums as its outputs (swr: one job) ----------------------
            # per PE fold: its accumulator entry (addressed the cycle before and held, so
            # its data stay) written as SWN words of the output pixel, a word a cycle
            if self.sums_writer:
                SWN = PE * 32 // W
                sw_i = Signal(range(SWN))
                sw_word = Signal(A)           # the fold's first output word
                with m.State("SW_A"):
                    m.d.comb += rp_a.addr.eq(mo)
                    m.d.sync += [sw_word.eq((out_base + out_row + (mo << (PSH + 2)))
                                            >> exact_log2(BPW)), sw_i.eq(0)]
                    m.next = "SW_W"
                    self._exits(m)
                with m.State("SW_W"):
                    m.d.comb += [rp_a.addr.eq(mo), wp.addr.eq(sw_word + sw_i), wp.en.eq(1),
                                 wp.data.eq(Array(rp_a.data[W * i:W * (i + 1)]
                                                  for i in range(SWN))[sw_i])]
                    m.d.sync += sw_i.eq(sw_i + 1)
                    with m.If(sw_i == SWN - 1):
                        m.d.sync += [sw_i.eq(0), sw_word.eq(sw_word + SWN)]
                        with m.If(mo != o1 - 1):
                            # the next PE fold: its entry is read now
                            m.d.comb += rp_a.addr.eq(mo + 1)
                            m.d.sync += mo.eq(mo + 1)
                        with m.Else():
                            next_pixel(m)
                    self._exits(m)

            def got_bias(m, ev):
                to_post(m, acc + ev)
            self._read(m, "BIAS", 0, cb << 3, 1, got_bias, address_state=False)

            # the post-op's shift and flags (the block's first output only: then kept),
            # then the pair A[oc], B[oc]: each read addressed by the previous one's data
            # state (PS or PA by the state that starts the post-op)
            def got_ps(m, ev):
                m.d.sync += [psh.eq(ev[:7]), pzero.eq(ev == 0),
                             pc_sh[kblock].eq(ev[:7]), pc_zero[kblock].eq(ev == 0)]
                self._issue(m, "PF", const_addr(par_k, off_post, 1), cb << 3, 1)
            self._read(m, "PS", 0, cb << 3, 1, got_ps, address_state=False)

            def got_pf(m, ev):
                m.d.sync += [pfl.eq(ev[:2]), pc_fl[kblock].eq(ev[:2]),
                             pc_valid.eq(pc_valid | (1 << kblock))]
                self._issue(m, "PA", const_addr(par_k, off_post, 2 + (oc << 1)), cb << 3, 1)
            self._read(m, "PF", 0, cb << 3, 1, got_pf, address_state=False)

            post_add = stage("add") & (oc < f["side_c"])

            def shares_side(kk):
                """A shared side input is the same element for every job of a channel:
                job 0 reads it, job kk (not 0) takes it from side_keep."""
                return flag("shared_side") & ~multi & (kk != 0)

            side_kept = shares_side(k)
            side_keep = Signal(signed(64))
            # the next channel's job 0 chained behind the last job (AGG, below): its
            # pair and sum were read ahead in the last job's PCALC
            chain = Signal()
            m.d.sync += chain.eq(0)
            # the channel's sum in the array's accumulator word read (the next one's in
            # AGG when chained)
            acc_c = Mux(chain, oc_next, oc)
            acc_word = rp_a.data.word_select(acc_c[:PSH] if PSH else 0, 32).as_signed()

            def side_read(kk):
                """Job kk's add reads its side input (job 0's, when they share one)."""
                return post_add & ~shares_side(kk)

            # The post-op pipelined over a channel's jobs: job k+1's pair A, B and sum are
            # read during job k's data state, so job k+1 goes from PCALC straight to
            # PCALC. The pair comes from the pair table once the descriptor's first pixel
            # has filled it (the read port then fetches job k+1's side input), else
            # through the read port when job k+1 reads no side input.
            pipe = Signal()           # in PCALC: job k+1's pair and sum arrive
            pipe_t = Signal()         # ... its pair from the pair table
            tab_ok = ((f["const_bytes"] <= 4) & (f["out_c"] <= (1 << TB))
                      & ~((oy == 0) & (ox == 0)))

            def ahead_ok(kk):
                """Job kk's post-op can run from a pair read ahead: its shift and flags
                kept, its sum in the array's buffer, no stage after the add that reads."""
                return ((kk < f["jobs"]) & arr & gathered & ~multi & ~stage("threshold")
                        & pc_valid.bit_select(kk, 1))

            def read_ahead(m, kk, port_free, ch=oc):
                """Address job kk's pair and sum of channel ch for the next PCALC, if it
                can be."""
                m.d.sync += pipe.eq(0)
                with m.If(ahead_ok(kk) & tab_ok):
                    m.d.comb += [rp_t.addr.eq(Cat(ch[:TB], kk)),
                                 rp_a.addr.eq(kk * AFOLDS + (ch >> PSH))]
                    m.d.sync += [pipe.eq(1), pipe_t.eq(1)]
                    m.next = "PCALC"
                with m.Elif(ahead_ok(kk) & port_free & ~side_read(kk)):
                    m.d.comb += rp_a.addr.eq(kk * AFOLDS + (oc >> PSH))
                    self._issue(m, "PA", const_addr(job_par[kk], off_post, 2 + (oc << 1)),
                                cb << 3, 1)
                    m.d.sync += [pipe.eq(1), pipe_t.eq(0)]
                    m.next = "PCALC"

            def keep_pair(m, kk):
                """The pair the read port brings now into the table (job kk's)."""
                m.d.comb += [wp_t.addr.eq(Cat(oc[:TB], kk)), wp_t.en.eq(1),
                             wp_t.data.eq(Cat(self._s.ev[:32], self._s.ev_next[:32]))]

            def got_pa(m, ev):
                # A[oc] and B[oc] in one read (a pair: the post-op block interleaves them);
                # the side input the add takes after the post-op is read now, for PCALC
                m.d.sync += [pa.eq(ev), pb.eq(self._s.ev_next), acc_pend.eq(0)]
                keep_pair(m, k)
                with m.If(acc_pend):
                    m.d.sync += acc.eq(acc_word)
                with m.If(side_read(k)):
                    self._issue(m, "SIDE", side_addr, f["side_elem"], f["side_fmt"] == 2)
                read_ahead(m, k + 1, ~side_read(k))
                m.next = "PCALC"
            self._read(m, "PA", 0, cb << 3, 1, got_pa, address_state=False)

            # A fused mixer's channel whose outputs go to the writer hands them over in
            # AGG and goes on to the next channel there: when that channel's job 0 can
            # run from the pair table, the last job's PCALC reads its pair and sum, and
            # AGG goes straight to its PCALC (no PA_D): a channel then takes a cycle a
            # job and AGG, as many as the writer takes for its gates and writes.
            chain_ok = ((k == f["jobs"] - 1) & mixing & mix_ok & ow_on & (oc_next != cc1)
                        & ahead_ok(0) & tab_ok)

            def chain_next(m):
                """In AGG: job 0 of the next channel from the pair and sum read ahead, on
                to its PCALC; its side input is read now, job 1's pair ahead."""
                nc = oc_next
                side0 = stage("add") & (nc < f["side_c"])
                m.d.sync += [pa.eq(rp_t.data[:32].as_signed()), pb.eq(rp_t.data[32:].as_signed()),
                             acc.eq(acc_word), psh.eq(pc_sh[0]), pzero.eq(pc_zero[0]),
                             pfl.eq(pc_fl[0]), acc_pend.eq(0)]
                with m.If(side0):
                    self._issue(m, "SIDE", ((job_side[0] + side_pixel) << 3)
                                + ((oc_rel + 1)[:16] << side_sh), f["side_elem"], f["side_fmt"] == 2)
                m.next = "PCALC"
                read_ahead(m, 1, ~side0, nc)

            with m.State("PCALC"):
                v = Signal(signed(64))
                m.d.comb += v.eq(Mux(pfl[0] & (acc < 0), 0, acc))
                # a 64-bit product and the offset: 65 bits; shifts up to 62 (the compiler's)
                t = Signal(signed(72))
                m.d.comb += t.eq(_operand(pa) * _operand(v) + pb)
                half = Signal(signed(72))
                m.d.comb += half.eq(Mux(pzero, 0, (Const(1, signed(72)) << psh) >> 1))
                r = Signal(signed(72))
                m.d.comb += r.eq((t + half) >> psh)
                post = Signal(signed(64))
                m.d.comb += post.eq(Mux(pfl[1] & (r < 0), 0, r[:64].as_signed()))
                side_v = Mux(side_kept, side_keep, self._s.ev)   # else PA_D read it
                with m.If(post_add):
                    to_relu(m, post + side_v)
                    m.d.sync += side_keep.eq(side_v)
                with m.Else():
                    to_relu(m, post)
                with m.If(pipe):
                    # job k+1's pair and sum arrive now (read ahead): its PCALC is next;
                    # its side input is read now, and job k+2's pair ahead when it can be
                    kn = k + 1
                    m.d.sync += [pa.eq(Mux(pipe_t, rp_t.data[:32].as_signed(), self._s.ev)),
                                 pb.eq(Mux(pipe_t, rp_t.data[32:].as_signed(),
                                           self._s.ev_next)),
                                 acc.eq(acc_word),
                                 psh.eq(pc_sh[kn]), pzero.eq(pc_zero[kn]), pfl.eq(pc_fl[kn]),
                                 acc_pend.eq(0)]
                    with m.If(~pipe_t):
                        keep_pair(m, kn)
                    with m.If(side_read(kn)):
                        self._issue(m, "SIDE", side_addr_of(kn), f["side_elem"],
                                    f["side_fmt"] == 2)
                    m.next = "PCALC"
                    read_ahead(m, k + 2, ~side_read(kn))
                with m.If(chain_ok):
                    # the last job: the next channel's job 0 pair and sum, for AGG
                    m.d.comb += [rp_t.addr.eq(oc_next[:TB]), rp_a.addr.eq(oc_next >> PSH)]
                    m.d.sync += chain.eq(1)
                with m.If(~_fits(pa, v)):
                    self._fail(m, "unsupported")
                self._exits(m)

            def got_side(m, ev):
                to_relu(m, acc + ev)
            self._read(m, "SIDE", 0, f["side_elem"], f["side_fmt"] == 2, got_side,
                       address_state=False)

            def epilogue_done(m, level):
                to_result(m, level)
            threshold_states("E", acc, f["out_levels"], off_thr, epilogue_done)

            # ---- mixer: lambdas and gates of job k's block (fused) or block 0 (MIXER) ----
            # The fractions, lambdas and gates are the descriptor's constants: read once,
            # at its first mix (LF, GF, LAML per job, GATEL per gated output), and kept,
            # so that every mix after computes from registers and no read's value feeds a
            # multiplier. Each job's lambda product is added in the cycle after its result
            # (lam_pend), so LAM takes the last job's only; GATE the first output's gate,
            # OUT_WD each next one's.
            def got_lf(m, ev):
                m.d.sync += lf.eq(ev)
                self._issue(m, "GF", const_addr(par_base, off_mix, 1), cb << 3, 1)
            self._read(m, "LF", 0, cb << 3, 1, got_lf, address_state=False)

            def got_gf(m, ev):
                m.d.sync += gf.eq(ev)
                with m.If(is_gateop):
                    self._issue(m, "GATEL", gate_addr(k), cb << 3, 1)    # no lambdas
                with m.Else():
                    self._issue(m, "LAML", lam_addr(k), cb << 3, 1)
            self._read(m, "GF", 0, cb << 3, 1, got_gf, address_state=False)

            def mix_loaded(m):
                m.d.sync += [k.eq(0), mix_ok.eq(1), gk.eq(0)]
                with m.If(mixing):
                    m.next = "LAM"
                with m.Else():
                    m.next = "GATE"

            def got_laml(m, ev):
                m.d.sync += lam_r[k].eq(_operand(ev))
                with m.If(k == f["jobs"] - 1):
                    with m.If(gated):
                        m.d.sync += k.eq(0)
                        self._issue(m, "GATEL", gate_addr(0), cb << 3, 1)
                    with m.Else():
                        mix_loaded(m)
                with m.Else():
                    m.d.sync += k.eq(k + 1)
                    self._issue(m, "LAML", lam_addr(k + 1), cb << 3, 1)
                with m.If(~_fits(ev)):
                    self._fail(m, "unsupported")
            self._read(m, "LAML", 0, cb << 3, 1, got_laml, address_state=False)

            def got_gatel(m, ev):
                rest = Signal(signed(64))          # the aggregate's weight 2^f - g
                m.d.comb += rest.eq((Const(1, signed(64)) << gf[:6]) - ev)
                m.d.sync += [gate_r[k].eq(_operand(ev)), rest_r[k].eq(_operand(rest))]
                with m.If(k == n_out - 1):
                    mix_loaded(m)
                with m.Else():
                    m.d.sync += k.eq(k + 1)
                    self._issue(m, "GATEL", gate_addr(k + 1), cb << 3, 1)
                with m.If(~_fits(ev, rest)):
                    self._fail(m, "unsupported")
            self._read(m, "GATEL", 0, cb << 3, 1, got_gatel, address_state=False)

            def to_outputs(m):
                """After the mixer: a MIXER's (GATE's) epilogue per output (OUT), else the
                merges."""
                with m.If(multi):
                    m.next = "OUT"
                with m.Else():
                    out_first(m, 0)

            def round_shift(x, sh):
                return (x + Mux(sh == 0, 0, (Const(1, signed(64)) << sh[:6]) >> 1)) >> sh[:6]

            with m.State("LAM"):
                # job k's product (from job 0 at a descriptor's first mix, else the last
                # job's only: the others were added while the next job started)
                m.d.comb += lam_use_k.eq(1)
                m.d.sync += lsum.eq(lam_sum)
                with m.If(k == f["jobs"] - 1):
                    m.d.sync += k.eq(0)
                    m.next = "AGG"
                with m.Else():
                    m.d.sync += k.eq(k + 1)
                with m.If(~_fits(lam_v) | lam_bad):
                    self._fail(m, "unsupported")
                self._exits(m)
            with m.State("AGG"):
                # the sum with the last job's product (agg_add: the jobs' results came
                # straight from their epilogues), else LAM's
                m.d.comb += lam_use_k.eq(agg_add)
                agg = Signal(signed(64))
                m.d.comb += agg.eq(round_shift(Mux(agg_add, lam_sum, lsum), lf))
                m.d.sync += [msum.eq(agg), gk.eq(0), k.eq(0), agg_add.eq(0)]
                with m.If(gated & ~multi):
                    out_first(m, 1)
                with m.Elif(gated):
                    m.next = "GATE"
                with m.Else():
                    m.d.sync += vals[0].eq(agg)
                    to_outputs(m)
                with m.If(chain & ~ow_bad):
                    # (out_first handed the outputs over and stepped to the next channel)
                    chain_next(m)
                with m.If(agg_add & (~_fits(lam_v) | lam_bad)):
                    self._fail(m, "unsupported")
                self._exits(m)
            # output gk's gate: in GATE the first output's, then each next one's while
            # OUT_WD writes the one before (gk is a register: the states share it)
            # (GATE and OUT_WD keep it in vals[gk], the output writer in ow_val)
            mixed_s = Signal(signed(64))
            m.d.comb += [mixed_s.eq(gate_r[gk] * _operand(vals[gk]) + rest_r[gk] * _operand(msum)),
                         gated_v.eq(round_shift(mixed_s, gf)),
                         gate_bad.eq(~_fits(vals[gk], msum))]

            def gate_next(m):
                m.d.sync += [vals[gk].eq(gated_v), gk.eq(gk + 1)]
                with m.If(gate_bad):
                    self._fail(m, "unsupported")

            with m.State("GATE"):
                m.d.sync += k.eq(0)
                to_outputs(m)
                gate_next(m)
                self._exits(m)

            # ---- output: merge vals[k] into its word (read by the state before) ------------
            with m.State("OUT"):
                # a MIXER's epilogue (entry 0's block and side input) on each output
                m.d.sync += late.eq(1)
                m.d.comb += late_now.eq(1)
                to_post(m, vals[k])
                self._exits(m)
            with m.State("OUT_WD"):
                m.d.comb += [wp.addr.eq(wword), wp.en.eq(1), wp.data.eq(out_word)]
                with m.If(k == n_out - 1):
                    next_c(m)
                with m.Else():
                    m.d.sync += k.eq(k + 1)
                    with m.If(multi):
                        m.next = "OUT"
                    with m.Else():
                        issue_out(m, k + 1)
                    with m.If(gating):
                        gate_next(m)
                self._exits(m)

            with m.State("DRAIN"):
                # the writer's last outputs of the tile, before its stores or the next
                # chunk's loads (its last write is this cycle's, or it is done)
                with m.If(~ow_busy | ow_last):
                    with m.If(drain_load):
                        m.next = "LOAD_ENTRY"
                    with m.Else():
                        m.next = "STORE_ADDR"
                with m.If(ow_bad):
                    self._fail(m, "unsupported")
                self._exits(m)

            # ---- stores: one write-DMA descriptor per job output -------------------------
            def got_out_addr(m, ev):
                m.d.sync += [fld.eq(ev),
                             wptr.eq(job_out[k] >> exact_log2(BPW)),
                             left.eq(Mux(sliced, out_tile, (r1 - r0) * f["out_pitch"]))]
                m.next = "STORE_CMD"
            self._read(m, "STORE_ADDR", ((k << 4) + 8) << 3, 32, 0, got_out_addr)

            # a store's last piece is issued (or this cycle)
            pieces_issued = (pcs_left == 0) | (pcs_left == 1) & self.wr_cmd.ready

            def store_next(m):
                with m.If(k == n_out - 1):
                    with m.If(sliced & (cc1 != f["out_c"])):
                        # the next chunk: its side slices, its weights, then again
                        m.d.sync += [q.eq(q + 1), cc0.eq(cc1), o0.eq(o1),
                                     cstart.eq(cstart + chunk_bytes),
                                     kind.eq(Mux(stage("add"), 2, 4)), k.eq(0)]
                        m.next = "LOAD_ENTRY"
                    with m.Elif(tile == f["n_tiles"] - 1):
                        m.next = "FENCE"
                    with m.Else():
                        m.d.sync += [tile.eq(tile + 1), r0.eq(r0 + f["rows_per_tile"]),
                                     q.eq(0), cc0.eq(0), o0.eq(0), cstart.eq(0)]
                        m.next = "TILE0"
                with m.Else():
                    m.d.sync += k.eq(k + 1)
                    m.next = "STORE_ADDR"

            with m.State("STORE_CMD"):
                with m.If(fld == 0):
                    store_next(m)
                with m.Else():
                    # in slices: the chunk's channels of each pixel, a piece each
                    store_from = fld + Mux(sliced, (cc0 << out_sh) >> 3, r0 * f["out_pitch"])
                    m.d.comb += [self.wr_cmd.valid.eq(1),
                                 self.wr_cmd.payload.address.eq(store_from),
                                 self.wr_cmd.payload.length.eq(
                                     Mux(sliced, o_slice, (r1 - r0) * f["out_pitch"]))]
                    with m.If(self.wr_cmd.ready):
                        m.d.sync += [pcs_left.eq(Mux(sliced, npix - 1, 0)),
                                     pcs_addr.eq(store_from + out_pix), pcs_len.eq(o_slice),
                                     pcs_stride.eq(out_pix)]
                        m.next = "STORE_RD"
                self._exits(m)
            with m.State("STORE_RD"):
                m.d.comb += s.raddr.eq(wptr)
                issue_pieces(m, self.wr_cmd)
                m.next = "STORE_SEND"
                self._exits(m)
            with m.State("STORE_SEND"):
                # the read port keeps reading the same word while the DMA holds it
                m.d.comb += [s.raddr.eq(wptr), self.wdata.valid.eq(1)]
                issue_pieces(m, self.wr_cmd)
                with m.If(self.wdata.ready):
                    m.d.sync += [wptr.eq(wptr + 1), left.eq(left - BPW)]
                    with m.If(left == BPW):
                        with m.If(pieces_issued):
                            store_next(m)
                        with m.Else():
                            m.next = "STORE_PIECES"
                    with m.Else():
                        m.next = "STORE_RD"
                self._exits(m)
            with m.State("STORE_PIECES"):
                # the words are in the write DMA's buffer: its last pieces' descriptors
                issue_pieces(m, self.wr_cmd)
                with m.If(pieces_issued):
                    store_next(m)
                self._exits(m)
            with m.State("FENCE"):
                # every output is on the bus before the next fetch (see Sequencer)
                with m.If((wr_out == 0) | ((wr_out == 1) & self.wr_done)):
                    m.next = "NEXT"
                self._exits(m)
            with m.State("NEXT"):
                m.d.sync += [pc.eq(pc + DESCRIPTOR_BYTES), index.eq(index + 1)]
                m.next = "FETCH"
                self._exits(m)
            with m.State("ABORT"):
                m.d.sync += self.abort.eq(1)
                m.next = "IDLE"
                self._exits(m)

        # ---- the XNOR-popcount array: PE channels x SIMD lanes of a fold a cycle ----------
        # The fold issued last cycle: its pe x simd weight bits (one piece of the word
        # read) against window word ms. A PE fold's last SIMD fold stores its pe sums.
        wfold_bits = Signal(PS)
        lanes = Signal(SIMD)
        # a fold starts at a multiple of pe x simd bits, or of a word when it is wider:
        # sections and regions are whole words and folds follow each other
        m.d.comb += [wfold_bits.eq(_aligned_piece(rp.wide, d_wsh, min(_pow2_part(PS), W), PS)),
                     lanes.eq(Mux(d_nrem >= SIMD, (1 << SIMD) - 1,
                                  (Const(1, SIMD + 1) << d_nrem[:SIMD.bit_length()]) - 1))]
        x = win_x
        # per bit plane b and PE row i: d_b = popcount(x_b & w_i) - popcount(x_b & ~w_i)
        # = 2 popcount(x_b & w_i) - popcount(x_b), the second shared by the PE rows;
        # n-bit levels add sum_b d_b << b (the executor's p @ w - p @ (1 - w)); binary
        # inputs (plane 1 = ~plane 0) d_0 - d_1 = sum of +-1 products: four popcounts
        # a PE row for every input format. One plane (binary inputs alone): the sum of
        # +-1 products is 2 popcount(~(x ^ w_i)) - n, one popcount a PE row
        planes_x = [x[b * SIMD:(b + 1) * SIMD] & lanes for b in range(NP)]
        if NP == 1:
            n_lanes = sum(lanes[t] for t in range(SIMD))
        else:
            ones = [sum(px[t] for t in range(SIMD)) for px in planes_x]
        sums = []
        for i in range(PE):
            wp_i = wfold_bits[i * SIMD:(i + 1) * SIMD]
            tot = Signal(signed(32), name=f"fold_sum{i}")
            if NP == 1:
                agree = ~(planes_x[0] ^ wp_i) & lanes
                fold = (2 * sum(agree[t] for t in range(SIMD)) - n_lanes).as_signed()
            else:
                d = [(2 * sum((px & wp_i)[t] for t in range(SIMD)) - ones[b]).as_signed()
                     for b, px in enumerate(planes_x)]
                levels = d[0] + (d[1] << 1) + (d[2] << 2) + (d[3] << 3)
                fold = Mux(f["act_bits"] == 0, d[0] - d[1], levels)
            m.d.comb += tot.eq(Mux(d_first, 0, pacc[i]) + fold)
            with m.If(d_valid & ~svec):
                m.d.sync += pacc[i].eq(tot)
            sums.append(tot)
        # the stem's array: channels d_sp .. d_sp + SPC - 1, SL products each of 8-bit
        # inputs (signed or not) and 8-bit weights; the PE fold's sums are stored with
        # its last channels' last fold
        acc_data = Cat(*sums)
        if self.stem_vector:
            SPC = self.stem_channels
            sw = Signal(8 * SL * SPC)
            # a channel's weights are an aligned piece of a word (stem_vector)
            m.d.comb += sw.eq(_aligned_piece(rp.wide if SPC > 1 else rp.data, d_wsh,
                                             min(8 * SL, W), 8 * SL * SPC))
            xs = []
            for i in range(SL):
                xi = x[8 * i:8 * (i + 1)]
                xs.append(Signal(signed(9), name=f"stem_x{i}"))
                m.d.comb += xs[i].eq(Mux(f["in_fmt"] == 2, xi.as_signed(), xi))

            def stem_product(xi, wi, dsp):
                if dsp:
                    return xi * wi.as_signed()
                # x * w as shifted adds (w's bit 7 weighs -128): logic for every channel
                # but the second, which takes DSP blocks (what the DE10-Nano has left)
                return sum(Mux(wi[b], xi << b, 0) for b in range(7)) - Mux(wi[7], xi << 7, 0)

            stem_tots = []
            for c in range(SPC):
                products = [stem_product(xs[i], sw[8 * (c * SL + i):8 * (c * SL + i + 1)], c == 1)
                            for i in range(SL)]
                while len(products) > 1:      # an adder tree: log2(SL) levels
                    products = [a + b for a, b in zip(products[::2], products[1::2])] \
                        + products[len(products) & ~1:]
                tot = Signal(signed(32), name=f"stem_tot{c}")
                # channel d_sp + c's sum (d_sp is a multiple of SPC)
                mine = Array(pacc[c::SPC])[d_sp[exact_log2(SPC):]]
                m.d.comb += tot.eq(Mux(d_first, 0, mine) + products[0])
                stem_tots.append(tot)
            # d_sp is a multiple of SPC: channel i is the tot of lane i % SPC
            stem_hit = [d_sp == (i - i % SPC) for i in range(PE)]
            for i in range(PE):
                with m.If(d_valid & svec & stem_hit[i]):
                    m.d.sync += pacc[i].eq(stem_tots[i % SPC])
            stem_sums = [Mux(stem_hit[i], stem_tots[i % SPC], pacc[i]) for i in range(PE)]
            acc_data = Mux(svec, Cat(*stem_sums), acc_data)
        m.d.comb += [wp_a.addr.eq(k * AFOLDS + d_mo),
                     wp_a.data.eq(acc_data),
                     wp_a.en.eq(d_valid & d_last)]

        # ---- the output writer: one output a cycle, beside the sequencer ----------------
        # Output ow_k is written in the cycle after the one that addressed it (the hand-
        # over for the first); gated, each output's gate is computed (gk) the cycle before
        # its write, from its job's value, which the next channel's job replaces no
        # earlier than at the end of that cycle, and from msum, which only the next
        # hand-over replaces.
        m.d.comb += ow_last.eq(ow_busy & ow_wr & (ow_k == n_out - 1))
        with m.If(ow_busy & ow_wr):
            m.d.comb += [wp.addr.eq(wword), wp.en.eq(1), wp.data.eq(out_word),
                         wp.bytes.eq(out_bytes)]
        with m.If(ow_busy & ~ow_start):
            with m.If(ow_gate & ~ow_last):
                m.d.sync += [ow_val.eq(gated_v), gk.eq(gk + 1)]
                with m.If(gate_bad):
                    m.d.sync += ow_bad.eq(1)
            with m.If(ow_last):
                m.d.sync += [ow_busy.eq(0), ow_wr.eq(0)]
            with m.Else():
                m.d.sync += ow_wr.eq(1)
                with m.If(ow_wr):
                    m.d.sync += ow_k.eq(ow_k + 1)
                    aim_out(m, out_addr(ow_k + 1, ow_off))
        with m.If(fsm.ongoing("IDLE")):
            m.d.sync += [ow_busy.eq(0), ow_wr.eq(0), ow_bad.eq(0)]

        m.d.comb += [
            self.wdata.valid.eq(Mux(copying, self.words.valid, fsm.ongoing("STORE_SEND"))),
            self.busy.eq(~fsm.ongoing("IDLE")),
        ]
        with m.If(copying):
            m.d.comb += words_ready.eq(self.wdata.ready)
        return m


class EngineCore(wiring.Component):
    """The engine with its compute path: ports, register file, DMAs and
    :class:`ComputeSequencer` (the top that ``sim/engine_rtl.py`` runs).

    Wiring and error priority as :class:`~.sequencer.EngineShell`'s (read DMA, write
    DMA, sequencer). Parameters: ``data_width`` (64 or 128), ``max_burst``,
    ``max_outstanding``, ``buffer_depth`` as ``EngineShell``'s; ``pe``, ``simd``,
    ``stem_pe``, ``stem_simd``, ``buffer_bytes``, ``max_jobs``, ``max_window``,
    ``max_out_c``, ``planes`` as :class:`ComputeSequencer`'s.

    Attributes
    ----------
    rd, wr, csr, irq
        As :class:`~.sequencer.EngineShell`'s.
    """

    def __init__(self, *, data_width=128, max_burst=16, max_outstanding=4, buffer_depth=None,
                 pe=4, simd=8, stem_pe=16, stem_simd=12, buffer_bytes=32768, max_jobs=8,
                 max_window=4608, max_out_c=512, planes=4):
        self.sequencer = ComputeSequencer(data_width=data_width, pe=pe, simd=simd,
                                          stem_pe=stem_pe, stem_simd=stem_simd,
                                          buffer_bytes=buffer_bytes, max_jobs=max_jobs,
                                          max_window=max_window, max_out_c=max_out_c,
                                          planes=planes)
        super().__init__(engine_members(self, data_width=data_width, max_burst=max_burst,
                                        max_outstanding=max_outstanding,
                                        buffer_depth=buffer_depth))

    def elaborate(self, platform):
        m = Module()
        wire_engine(m, self, self.sequencer.wdata)
        return m
