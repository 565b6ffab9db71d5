"""The engine program's descriptor and job-table fields and codes, numpy-free.

The compiler (``compiler/engine/program.py``, numpy structured dtypes built from these
lists) and the engine's hardware (``hw/engine/core.py``, which reads descriptors from
DRAM at run time and must find the same bytes) both take them from here, because
``hw/`` never imports the compiler. docs/architecture.md section 12 has the tables.
Types are numpy type strings (``u1``, ``<u2``, ``<u4``, ``V43``), all little-endian.
"""

from __future__ import annotations

__all__ = ["OPCODE_CODES", "STAGE_BITS", "FLAG_BITS", "DESCRIPTOR_FIELDS", "JOB_FIELDS",
           "field_offsets", "pair_table_bits", "accumulator_channels", "array_banks",
           "core_paths", "ARRAY_PLANES", "DENSE_PIXEL_BYTES", "MUL_BITS"]

#: compute opcodes; the sequencer's control opcodes (``END``, ``COPY``, 0x10 and up)
#: are ``groupnet_hw.engine_opcodes``'s. A program ends with one ``END`` descriptor.
OPCODE_CODES = {"INPUT": 1, "CONV": 2, "MAXPOOL": 3, "PIXEL": 4, "MIXER": 5, "GATE": 6,
                "SUBSAMPLE": 7, "REPEAT": 8, "HEAD": 9}

#: the ``stages`` byte: which fused stages a descriptor applies (docs section 12)
STAGE_BITS = {"prologue_threshold": 1, "postop": 2, "add": 4, "relu": 8, "threshold": 16,
              "gated": 32, "mixer": 64, "maxpool": 128}

#: Operand width of the engine core's scalar multipliers (post-op scale, lambdas, gates,
#: integer weights and their inputs): signed ``MUL_BITS`` x ``MUL_BITS`` -> 64-bit
#: products. The contract's values are int64; the compiler's range analysis bounds
#: every operand, ``compiler/engine/target.py`` refuses a program with one wider, and the
#: core stops a run on one (error ``unsupported``). ResNet-18/34 K=5 need at most 27
#: (the classifier's channel sums at 224x224; post-op inputs 21, lambdas 10, gates 9).
MUL_BITS = 32

#: the ``flags`` byte
FLAG_BITS = {"side_first": 1, "shared_input": 2, "int_weights": 4, "weight_stream": 8,
             "shared_side": 16, "sliced": 32, "levels_out": 64, "levels_only": 128}


#: (name, numpy type, meaning): one 128-byte descriptor
DESCRIPTOR_FIELDS = [
    ("opcode", "u1", "operation (OPCODE_CODES)"),
    ("stages", "u1", "fused stages (STAGE_BITS)"),
    ("flags", "u1", "FLAG_BITS: side operand first; all jobs read one input; integer "
                    "weights; weight streaming (weight chunks outside the row tiles); "
                    "all jobs read one side input; channel slices (the core: one row "
                    "tile, its weight chunks outermost, each chunk's outputs stored and "
                    "side inputs loaded as slices of every pixel); level outputs (each "
                    "output also thresholded into ``aux_outputs`` level tensors: the "
                    "job table's entries after its ``jobs``); level outputs only (the "
                    "outputs themselves are not written)"),
    ("jobs", "u1", "job-table entries (bases, or a mixer's inputs)"),
    ("kernel", "u1", "window size k (1 for element-wise ops)"),
    ("stride", "u1", "window stride (subsample: its stride)"),
    ("dilation", "u1", "window dilation"),
    ("padding", "u1", "window padding (binary convs pad with bit 1, others with 0; "
                      "max pooling ignores padded taps)"),
    ("in_h", "<u2", "main input height"),
    ("in_w", "<u2", "main input width"),
    ("in_c", "<u2", "main input channels"),
    ("out_h", "<u2", "output height"),
    ("out_w", "<u2", "output width"),
    ("out_c", "<u2", "output channels (head: classes)"),
    ("side_c", "<u2", "side input channels (add stage; fewer: option-A zero padding)"),
    ("groups", "<u2", "convolution channel groups; repeat: times"),
    ("in_fmt", "u1", "main input format code (0 bits, 1 uint, 2 fixed)"),
    ("in_elem", "u1", "main input element bits"),
    ("side_fmt", "u1", "side input format code"),
    ("side_elem", "u1", "side input element bits"),
    ("out_fmt", "u1", "output format code"),
    ("out_elem", "u1", "output element bits"),
    ("act_bits", "u1", "binary conv input levels' bits (0: binary input)"),
    ("in_levels", "u1", "prologue threshold levels per channel"),
    ("out_levels", "u1", "epilogue threshold levels per channel"),
    ("const_bytes", "u1", "bytes of a constant (4 or 8) in the parameter block"),
    ("weight_bytes", "u1", "bytes of an integer weight (stem, classifier)"),
    ("detach", "u1", "1: detached, the sequencer goes on while its unit runs, until a "
                     "WAIT (groupnet_hw.engine_opcodes)"),
    ("rows_per_tile", "<u2", "output rows per tile"),
    ("n_tiles", "<u2", "row tiles = ceil(out_h / rows_per_tile)"),
    ("in_pitch", "<u4", "main input row pitch in bytes"),
    ("side_pitch", "<u4", "side input row pitch in bytes"),
    ("out_pitch", "<u4", "output row pitch in bytes"),
    ("in_bytes", "<u4", "bytes of one main input tensor (in_h * in_pitch)"),
    ("out_bytes", "<u4", "bytes of one output tensor"),
    ("table_addr", "<u4", "address of the job table"),
    ("param_bytes", "<u4", "bytes of one job's parameter block"),
    ("weight_tile_bytes", "<u4", "bytes of one job's weights"),
    ("chunk_c", "<u2", "weight streaming: output channels per weight chunk (else 0)"),
    ("mid_h", "<u2", "maxpool stage: the convolution's output height"),
    ("mid_w", "<u2", "maxpool stage: the convolution's output width"),
    ("pool_kernel", "u1", "maxpool stage: window"),
    ("pool_stride", "u1", "maxpool stage: stride"),
    ("pool_padding", "u1", "maxpool stage: padding (padded taps are ignored)"),
    ("aux_outputs", "u1", "level outputs: level tensors an output is thresholded into"),
    ("aux_fmt", "u1", "level outputs' format code"),
    ("aux_elem", "u1", "level outputs' element bits"),
    ("aux_levels", "u1", "level outputs' threshold levels per channel"),
    ("aux_pitch", "<u4", "level outputs' row pitch in bytes"),
    ("aux_bytes", "<u4", "bytes of one level output tensor"),
    ("aux_param_bytes", "<u4", "bytes of one level output's parameter block"),
    # a binary convolution's unit geometry (docs section 15), written for tap-aligned
    # programs' CONV descriptors of binary weights and one group (zero elsewhere), so
    # that the intended engine's units read them instead of multiplying at run time
    ("words", "u1", "unit geometry: words a pixel of the main input, ceil(in_c / simd)"),
    ("tail", "u1", "unit geometry: lanes of a pixel's last word that hold channels, "
                   "in_c - (words - 1) * simd"),
    ("span", "u1", "unit geometry: (kernel - 1) * dilation, the rows a window spans "
                   "after its first"),
    ("in_folds", "<u2", "unit geometry: SIMD folds of a window, kernel * kernel * words"),
    ("out_folds", "<u2", "unit geometry: PE folds of the output, ceil(out_c / pe)"),
    ("pitch", "<u2", "unit geometry: words of a ring row slot, in_w * words"),
    ("x_step", "<u2", "unit geometry: words between neighbouring windows, stride * words"),
    ("dx_words", "<u2", "unit geometry: words between a row's taps, dilation * words"),
    ("pad_words", "<u2", "unit geometry: padding words before a row's first pixel, "
                         "padding * words"),
    ("pixel_bytes", "<u2", "unit geometry: bytes of a main input pixel in DRAM, "
                           "ceil(in_c * in_elem / 8)"),
    ("windows", "<u4", "unit geometry: windows the fold issuer issues, the convolution's "
                       "output pixels (mid_h * mid_w with a maxpool stage, else "
                       "out_h * out_w)"),
    ("reserved", "V6", "zero"),
    ("index", "<u2", "the descriptor's own index (checked by the sequencer)"),
    ("magic", "<u2", "DESCRIPTOR_MAGIC"),
]

#: (name, numpy type, meaning): one job-table entry
JOB_FIELDS = [
    ("in_addr", "<u4", "main input tensor"),
    ("side_addr", "<u4", "side input tensor (0: none)"),
    ("out_addr", "<u4", "output tensor (0: none)"),
    ("param_addr", "<u4", "parameter block (0: none)"),
]


def field_offsets(fields):
    """``{name: (byte offset, bytes)}`` of a field list (the records are packed)."""
    out, at = {}, 0
    for name, typ, _ in fields:
        size = int(typ.lstrip("<>|").lstrip("uiV"))
        out[name] = (at, size)
        at += size
    return out


def array_banks(data_width, pe, simd):
    """How the engine core's XNOR-popcount array reads a fold's ``pe x simd`` weight
    bits: ``(banks, fits)``. ``fits`` is False when the packing takes no whole piece of a
    word and no whole number of words (the core's binary convolutions then run on its
    scalar path); the fold is one piece of a scratchpad word (``banks`` 1), or
    ``banks`` consecutive words, one from each of the scratchpad's banks (a power of
    two)."""
    ps = pe * simd
    if data_width % ps == 0:
        return 1, True
    banks = ps // data_width
    if ps % data_width == 0 and banks & (banks - 1) == 0:
        return banks, True
    return 1, False


def pair_table_bits(max_out_c):
    """Address bits of one job's channels in the core's post-op pair table: ``max_out_c``
    rounded up to a power of two (a descriptor with more channels reads its pairs
    through the scratchpad's read port)."""
    return max(max_out_c - 1, 1).bit_length()


#: the widest output pixel (bytes, a power of two) whose tile rows, when they are whole
#: bus words of pixels and nothing else, the engine core writes without clearing them
#: first (wider or other pixels are cleared: ``out_w * pixel bytes`` is then a shift)
DENSE_PIXEL_BYTES = 4096

#: the XNOR-popcount array's bit planes a core may have: 4 takes binary and 2- and
#: 4-bit activations, 1 binary activations alone (one XNOR popcount per PE row)
ARRAY_PLANES = (1, 4)


def accumulator_channels(max_out_c, pe):
    """Output channels a job's entries of the core's accumulator buffer hold (the array
    takes a descriptor of at most this many): ``max(max_out_c, pe)`` rounded up to a
    power of two."""
    return 1 << (max(max_out_c, pe) - 1).bit_length()


def core_paths(data_width, pe, simd, stem_pe, stem_simd, planes=4):
    """Which of its vector paths an engine core of these parameters elaborates (the
    core, its cycle model and its resource estimate read them here):

    - ``banks``, ``vector``: :func:`array_banks`;
    - ``stem_vector``: the stem's multiplier array (a channel's ``stem_simd`` 8-bit
      weights one aligned piece of a word, its window lanes one window-buffer word,
      its sums in the accumulator buffer's words: ``stem_pe == pe``);
    - ``stem_channels``: the output channels the stem's array takes a cycle: 4 with
      at least four banks (their weights one read of the banked scratchpad), 2 with
      two, else 1 (``pe`` a multiple of them);
    - ``pixel_vector``: a PIXEL's one-bit outputs leave the window buffer ``simd``
      lanes at a time;
    - ``threshold_vector``: a convolution's one-bit thresholds, a PE fold at a time;
    - ``pixel_thresholds``: a PIXEL of 8-, 16- or 32-bit inputs on those threshold
      lanes, ``pe`` channels a fold (their inputs one read of the banked scratchpad:
      ``pe`` 32-bit elements fit ``banks`` words);
    - ``sums_writer``: an array convolution of one job without stages (its outputs
      are its 32-bit sums) writes a PE fold's sums as whole words (``pe * 32`` bits,
      a multiple of a word);
    - ``max_act_bits``: the widest activations the array takes (``act_bits``; 0 is
      binary): 4 with 4 bit planes, 0 with one;
    - ``window_pairs``: one bit plane on the array, and bus words of at least
      ``2 * simd`` bits: a binary window's SIMD folds lie two a buffer word, so that the
      gather takes a whole input word of ``2 * simd`` binary channels a cycle;
    - ``window_bits``: a window-buffer word: ``planes`` bits of ``simd`` lanes, two
      folds' with window pairs, or the stem's ``stem_simd`` bytes when wider.
    """
    if planes not in ARRAY_PLANES:
        raise ValueError(f"planes must be one of {ARRAY_PLANES}, not {planes!r}")
    banks, vector = array_banks(data_width, pe, simd)
    pow2 = lambda n: n & (n - 1) == 0        # noqa: E731
    stem_vector = (vector and stem_pe == pe and data_width % (stem_simd * 8) == 0
                   and stem_simd * 8 <= 4 * simd)
    pixel_vector = pow2(simd) and simd <= data_width
    threshold_vector = vector and pow2(pe) and pe <= data_width
    window_pairs = vector and planes == 1 and data_width >= 2 * simd
    window_bits = max(planes * simd * (2 if window_pairs else 1),
                      8 * stem_simd if stem_vector else 0)
    return dict(banks=banks, vector=vector, stem_vector=stem_vector,
                stem_channels=next((c for c in (4, 2) if stem_vector and banks >= c
                                    and pe % c == 0), 1),
                pixel_vector=pixel_vector, threshold_vector=threshold_vector,
                pixel_thresholds=(pixel_vector and threshold_vector
                                  and pe * 32 <= banks * data_width),
                sums_writer=vector and pow2(pe) and (pe * 32) % data_width == 0,
                max_act_bits=0 if planes == 1 else planes,
                window_bits=window_bits, window_pairs=window_pairs)


def window_words(max_window, simd):
    """The window buffer's words: a window of ``max_window`` lanes in folds of ``simd``
    (with window pairs two folds share a buffer word; the buffer keeps a word a fold)."""
    return -(-max_window // simd)
