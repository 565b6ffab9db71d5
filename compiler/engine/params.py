"""Parameter blocks: the constants of one job, in the order the units read them.

A job's block is a sequence of *sections*, each starting at a multiple of the port
width (a burst), in this fixed order, present when the descriptor says so:

============  ==========================================================================
section       contents
============  ==========================================================================
in_thr        prologue threshold: ``T[in_c][in_levels]`` constants, then ``invert`` bits
weights       binary: per channel group, per PE fold ``o``, per SIMD fold ``s``, ``pe``
              words of ``simd`` bits (lane ``j`` of PE ``p`` = weight
              ``[o*pe + p][s*simd + j]`` of the window matrix below, bit 1 <-> +1,
              padding 0); integer (stem): the flat window order with ``stem_pe x
              stem_simd`` elements of ``weight_bytes``; head: ``W[classes][C]``
postop        ``shift``, ``flags`` (bit 0 pre-ReLU, bit 1 post-ReLU), ``A[C]``, ``B[C]``
thr           epilogue threshold: ``T[out_c][out_levels]`` constants, then ``invert`` bits
mixer         ``lambda_frac``, ``gate_frac``, ``lambdas[K]``, then ``gates[K]`` if gated;
              a convolution group mixing on chip: ``lambda_frac``, ``gate_frac``, and
              its own base's ``lambda`` and ``gate`` (0 when not gated)
head          ``bias[classes]``
============  ==========================================================================

A binary convolution's *window matrix* has a row per output channel of the group: its
window's taps in order (``ky``, then ``kx``), each tap's ``C = C_in/groups`` channels
followed by zeros up to ``L`` lanes. The header's ``flags`` say which ``L``
(:func:`tap_aligned_weights`):

- tap-aligned (the intended engine, whose window gatherer reads a pixel's channels as
  ``words = ceil(C/simd)`` words of their own): ``L = words * simd``, so SIMD fold
  ``t * words + j`` holds tap ``t``'s channels ``j*simd .. j*simd + simd - 1``;
- flat (the core as built): ``L = C``, the taps' channels against each other, so fold
  ``s`` holds window lanes ``s*simd .. s*simd + simd - 1``, across taps.

A window is ``in_folds`` SIMD folds either way (:func:`binary_in_folds`), and fold
``(o, s)`` is the group's ``o * in_folds + s``-th ``pe * simd``-bit word
(:func:`binary_weight_words`): the fold issuer's weight address.

A level output (fusion rule 7, the job table's entries after the jobs') has a block of
its own: its threshold's ``T[out_c][aux_levels]`` constants, then its ``invert`` bits
(:func:`level_block_bytes`).

Constants are little-endian two's complement of ``const_bytes`` (4, or 8 where a value
needs it); bit vectors are LSB first. :func:`sections` computes the offsets from the
descriptor and the program header alone, so the engine, the host and the reference
model agree on them.
"""

from __future__ import annotations

import numpy as np

from .formats import pack_lanes, round_up, unpack_lanes
from .program import FLAG_BITS, HEADER_FLAG_BITS, OPCODE_CODES, STAGE_BITS

__all__ = ["sections", "level_block_bytes", "tap_aligned_weights", "binary_in_folds",
           "binary_weight_bytes", "pack_binary_weights", "unpack_binary_weights",
           "binary_weight_words", "pack_int_weights", "unpack_int_weights", "pack_consts",
           "unpack_consts", "pack_bitvec", "unpack_bitvec", "int_bytes"]


def int_bytes(values, choices=(1, 2, 4, 8)):
    """The smallest of ``choices`` bytes holding every signed value of ``values``."""
    v = np.asarray(values, dtype=np.int64)
    lo, hi = (int(v.min()), int(v.max())) if v.size else (0, 0)
    for b in choices:
        if -(1 << (8 * b - 1)) <= lo and hi < (1 << (8 * b - 1)):
            return b
    raise ValueError(f"constants [{lo}, {hi}] exceed {choices[-1]} bytes")


def pack_consts(values, nbytes):
    v = np.asarray(values, dtype=np.int64).reshape(-1)
    if int_bytes(v) > nbytes:
        raise ValueError(f"constants [{v.min()}, {v.max()}] do not fit {nbytes} bytes")
    return v.astype({1: "<i1", 2: "<i2", 4: "<i4", 8: "<i8"}[nbytes]).view(np.uint8)


def unpack_consts(buf, count, nbytes):
    b = np.asarray(buf, dtype=np.uint8)[:count * nbytes]
    return b.view({1: "<i1", 2: "<i2", 4: "<i4", 8: "<i8"}[nbytes]).astype(np.int64)


def pack_bitvec(bits):
    return pack_lanes(np.asarray(bits, dtype=np.int64).reshape(1, -1), 1).reshape(-1)


def unpack_bitvec(buf, n):
    return unpack_lanes(np.asarray(buf, dtype=np.uint8)[:-(-n // 8)].reshape(1, -1), 1, n)[0]


def tap_aligned_weights(header):
    """Whether a program's binary weights are tap-aligned (the header's ``flags``;
    module docstring)."""
    return bool(header["flags"] & HEADER_FLAG_BITS["tap_aligned_weights"])


def _tap_lanes(c_in, simd, tap_aligned):
    """Lanes a tap's channels take in the flat window: ``C_in``, or whole words of
    ``simd`` when each tap starts a SIMD fold of its own."""
    return round_up(c_in, simd) if tap_aligned else c_in


def binary_in_folds(c_in, k, simd, tap_aligned):
    """SIMD folds of one window of ``C_in`` channels a tap (one group's):
    ``k*k * ceil(C_in/simd)`` tap-aligned, else ``ceil(k*k*C_in/simd)``."""
    return -(-k * k * _tap_lanes(c_in, simd, tap_aligned) // simd)


def _folded(flat, pe, simd):
    """[C_out, N] -> [ceil(C_out/pe), ceil(N/simd), pe, simd], zero padded."""
    c_out, n = flat.shape
    fo, fs = -(-c_out // pe), -(-n // simd)
    padded = np.zeros((fo * pe, fs * simd), dtype=np.int64)
    padded[:c_out, :n] = flat
    return padded.reshape(fo, pe, fs, simd).transpose(0, 2, 1, 3)


def _unfolded(folded, c_out, n):
    fo, fs, pe, simd = folded.shape
    return folded.transpose(0, 2, 1, 3).reshape(fo * pe, fs * simd)[:c_out, :n]


def _flat(w, tap_lanes=None):
    """(C_out, C_in, k, k) -> (C_out, k*k*tap_lanes): the window's lanes in order
    (``ky``, ``kx``, channel), each tap's channels followed by zeros up to
    ``tap_lanes`` (default ``C_in``: none)."""
    w = np.asarray(w, dtype=np.int64)
    c_out, c_in, k, _ = w.shape
    taps = np.zeros((c_out, k, k, tap_lanes or c_in), dtype=np.int64)
    taps[..., :c_in] = w.transpose(0, 2, 3, 1)
    return taps.reshape(c_out, -1)


def _unflat(flat, c_in, k, tap_lanes=None):
    taps = flat.reshape(flat.shape[0], k, k, tap_lanes or c_in)
    return taps[..., :c_in].transpose(0, 3, 1, 2)


def binary_weight_bytes(c_out, c_in_g, k, pe, simd, groups=1, tap_aligned=False):
    """Bytes of a binary convolution's packed weights (``C_in/groups = c_in_g``
    channels a group; ``tap_aligned``, else the flat window's order)."""
    fold_bits = binary_in_folds(c_in_g, k, simd, tap_aligned) * pe * simd
    return -(-groups * -(-(c_out // groups) // pe) * fold_bits // 8)


def pack_binary_weights(bits, pe, simd, groups=1, tap_aligned=False):
    """Binary weights (C_out, C_in/groups, k, k) of 0/1 -> bytes in the arrays' read
    order (module docstring; tap-aligned or the flat window's), group after group."""
    bits = np.asarray(bits, dtype=np.int64)
    per, lanes = bits.shape[0] // groups, _tap_lanes(bits.shape[1], simd, tap_aligned)
    out = [_folded(_flat(bits[g * per:(g + 1) * per], lanes), pe, simd).reshape(-1)
           for g in range(groups)]
    return pack_lanes(np.concatenate(out).reshape(1, -1), 1).reshape(-1)


def unpack_binary_weights(buf, c_out, c_in_g, k, pe, simd, groups=1, tap_aligned=False):
    """The inverse of :func:`pack_binary_weights`: (C_out, C_in/groups, k, k) of 0/1."""
    per, lanes = c_out // groups, _tap_lanes(c_in_g, simd, tap_aligned)
    n = k * k * lanes
    fo, fs = -(-per // pe), -(-n // simd)
    total = groups * fo * fs * pe * simd
    folds = unpack_lanes(np.asarray(buf, dtype=np.uint8)[:-(-total // 8)].reshape(1, -1), 1,
                         total)[0].reshape(groups, fo, fs, pe, simd)
    return np.concatenate([_unflat(_unfolded(folds[g], per, n), c_in_g, k, lanes)
                           for g in range(groups)])


def binary_weight_words(buf, pe, simd, folds):
    """Packed binary weights -> the first ``folds`` weight-buffer words, one a fold in
    the packing's order (fold ``(o, s)`` of a group at ``o * in_folds + s``): an int of
    ``pe * simd`` bits, PE ``p``'s lane ``j`` at bit ``p * simd + j`` (the
    :class:`~groupnet_hw.hw.engine.folds.FoldIssuer`'s ``w``, one array's)."""
    width = pe * simd
    bits = np.unpackbits(np.asarray(buf, dtype=np.uint8), bitorder="little")[:folds * width]
    # whole bytes a word: Python ints from little-endian bytes hold any width
    per_word = np.zeros((folds, round_up(width, 8)), dtype=np.uint8)
    per_word[:, :width] = bits.reshape(folds, width)
    packed = np.packbits(per_word, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def pack_int_weights(w, pe, simd, nbytes):
    """Integer weights (C_out, C_in, k, k) -> ``nbytes`` elements in the stem array's
    read order (the binary arrays' order, element for bit)."""
    return pack_consts(_folded(_flat(w), pe, simd).reshape(-1), nbytes)


def unpack_int_weights(buf, c_out, c_in, k, pe, simd, nbytes):
    n = k * k * c_in
    fo, fs = -(-c_out // pe), -(-n // simd)
    v = unpack_consts(buf, fo * fs * pe * simd, nbytes).reshape(fo, fs, pe, simd)
    return _unflat(_unfolded(v, c_out, n), c_in, k)


def level_block_bytes(d, port_bytes):
    """Bytes of a level output's parameter block (fusion rule 7): ``T[out_c]
    [aux_levels]`` constants, then ``invert`` bits, whole port words."""
    return round_up(d["out_c"] * d["aux_levels"] * d["const_bytes"] + -(-d["out_c"] // 8),
                    port_bytes)


def sections(d, header):
    """Offsets of a job's parameter sections.

    Parameters
    ----------
    d : dict
        A decoded descriptor.
    header : dict
        The decoded program header (PE, SIMD, port width, the weights' order).

    Returns
    -------
    dict
        Section name -> ``(offset, nbytes)`` within the job's block; the block's size
        is the end of the last section rounded up to the port width.
    """
    port, cb, wb = header["port_bytes"], d["const_bytes"], d["weight_bytes"]
    st, op = d["stages"], d["opcode"]
    out, at = {}, 0

    def put(name, nbytes):
        nonlocal at
        out[name] = (at, nbytes)
        at = round_up(at + nbytes, port)

    if st & STAGE_BITS["prologue_threshold"]:
        put("in_thr", d["in_c"] * d["in_levels"] * cb + -(-d["in_c"] // 8))
    if op == OPCODE_CODES["CONV"]:
        n = d["kernel"] ** 2 * (d["in_c"] // d["groups"])
        if d["flags"] & FLAG_BITS["int_weights"]:
            folds = -(-d["out_c"] // header["stem_pe"]) * -(-n // header["stem_simd"])
            put("weights", folds * header["stem_pe"] * header["stem_simd"] * wb)
        else:
            put("weights", binary_weight_bytes(d["out_c"], d["in_c"] // d["groups"], d["kernel"],
                                               header["pe"], header["simd"], d["groups"],
                                               tap_aligned_weights(header)))
    if op == OPCODE_CODES["HEAD"]:
        put("weights", d["out_c"] * d["in_c"] * wb)
    if st & STAGE_BITS["postop"]:
        put("postop", (2 + 2 * d["out_c"]) * cb)
    if st & STAGE_BITS["threshold"]:
        put("thr", d["out_c"] * d["out_levels"] * cb + -(-d["out_c"] // 8))
    if op == OPCODE_CODES["CONV"] and st & STAGE_BITS["mixer"]:
        put("mixer", 4 * cb)        # lambda_frac, gate_frac, this base's lambda and gate
    if op == OPCODE_CODES["MIXER"]:
        k = d["jobs"]
        put("mixer", (2 + k * (2 if st & STAGE_BITS["gated"] else 1)) * cb)
    if op == OPCODE_CODES["GATE"]:
        put("mixer", (2 + (d["jobs"] - 1)) * cb)
    if op == OPCODE_CODES["HEAD"]:
        put("head", d["out_c"] * cb)
    return out
