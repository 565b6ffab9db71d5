"""The engine's program: a header and fixed-size descriptors, little-endian.

Both records are numpy structured dtypes (:data:`HEADER`, :data:`DESCRIPTOR`), so the
host runtime, the reference model and the tests decode them with numpy alone, and the
field tables of docs/architecture.md section 12 are these lists. Addresses are absolute
DRAM byte addresses (the image's base plus an offset); the engine refuses any that
leaves the window the host configured.

A descriptor's operands are per job: its *job table* (``jobs`` entries of
:data:`JOB`, 16 bytes each) gives every job's main input, side input, output and
parameter addresses. A job reading several inputs (a mixer) has one entry per input:
entry ``k`` holds input ``k`` and output ``k``.
"""

from __future__ import annotations

import numpy as np

from ...engine_opcodes import END as END_OPCODE

__all__ = ["HEADER", "DESCRIPTOR", "JOB", "OPCODE_CODES", "END_OPCODE", "STAGE_BITS", "FLAG_BITS",
           "MAGIC", "DESCRIPTOR_MAGIC", "VERSION", "encode", "decode", "field_table",
           "ProgramError"]

MAGIC = b"GNEP"
VERSION = 1
DESCRIPTOR_MAGIC = 0x4E44  # "DN" little-endian: a descriptor that is not one stops the engine

#: compute opcodes; the sequencer's control opcodes (``END``, ``COPY``, 0x10 and up)
#: are ``groupnet_hw.engine_opcodes``'s. A program ends with one ``END`` descriptor.
OPCODE_CODES = {"INPUT": 1, "CONV": 2, "MAXPOOL": 3, "PIXEL": 4, "MIXER": 5, "GATE": 6,
                "SUBSAMPLE": 7, "REPEAT": 8, "HEAD": 9}

#: the ``stages`` byte: which fused stages a descriptor applies (docs section 12)
STAGE_BITS = {"prologue_threshold": 1, "postop": 2, "add": 4, "relu": 8, "threshold": 16,
              "gated": 32, "mixer": 64, "maxpool": 128}

#: the ``flags`` byte
FLAG_BITS = {"side_first": 1, "shared_input": 2, "int_weights": 4, "weight_stream": 8,
             "shared_side": 16}


class ProgramError(ValueError):
    """A program or image the engine would refuse (bad magic, address outside the
    image, inconsistent sizes): the engine stops with an error status."""


#: (name, numpy type, meaning): the 128-byte program header at the image's base
_HEADER_FIELDS = [
    ("magic", "S4", "b'GNEP'"),
    ("version", "<u2", "format version (1)"),
    ("n_desc", "<u2", "number of descriptors, the final END included"),
    ("base", "<u4", "DRAM address of the image (this header)"),
    ("image_bytes", "<u4", "size of the image: the DMA window is [base, base + image_bytes)"),
    ("desc_addr", "<u4", "address of descriptor 0 (descriptors are contiguous)"),
    ("desc_bytes", "<u2", "bytes per descriptor (128)"),
    ("port_bytes", "<u2", "memory port width the rows are padded to"),
    ("in_addr", "<u4", "input frame (the host writes it before each run)"),
    ("in_fmt", "u1", "input frame's format code"),
    ("in_elem", "u1", "input frame's element bits"),
    ("in_c", "<u2", "input channels"),
    ("in_h", "<u2", "input height"),
    ("in_w", "<u2", "input width"),
    ("out_addr", "<u4", "logits (the host reads them after each run)"),
    ("out_fmt", "u1", "logits' format code"),
    ("out_elem", "u1", "logits' element bits"),
    ("classes", "<u2", "number of logits"),
    ("arrays", "u1", "K_hw arrays the program was tiled for"),
    ("pad0", "u1", ""),
    ("pe", "<u2", "PE of an array (binary weight packing)"),
    ("simd", "<u2", "SIMD of an array (binary weight packing)"),
    ("stem_pe", "<u2", "PE of the stem's multiplier array (integer weight packing)"),
    ("stem_simd", "<u2", "SIMD of the stem's multiplier array"),
    ("pad1", "<u2", ""),
    ("arena_addr", "<u4", "feature-map arena"),
    ("arena_bytes", "<u4", "its size"),
    ("param_addr", "<u4", "parameter region"),
    ("param_bytes", "<u4", "its size"),
    ("table_addr", "<u4", "job-table region"),
    ("table_bytes", "<u4", "its size"),
]

#: (name, numpy type, meaning): one 128-byte descriptor
_DESCRIPTOR_FIELDS = [
    ("opcode", "u1", "operation (OPCODE_CODES)"),
    ("stages", "u1", "fused stages (STAGE_BITS)"),
    ("flags", "u1", "FLAG_BITS: side operand first; all jobs read one input; integer "
                    "weights; weight streaming (weight chunks outside the row tiles); "
                    "all jobs read one side input"),
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
    ("pad0", "u1", ""),
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
    ("reserved", "V43", "zero"),
    ("index", "<u2", "the descriptor's own index (checked by the sequencer)"),
    ("magic", "<u2", "DESCRIPTOR_MAGIC"),
]

#: (name, numpy type, meaning): one job-table entry
_JOB_FIELDS = [
    ("in_addr", "<u4", "main input tensor"),
    ("side_addr", "<u4", "side input tensor (0: none)"),
    ("out_addr", "<u4", "output tensor (0: none)"),
    ("param_addr", "<u4", "parameter block (0: none)"),
]

HEADER = np.dtype([(n, t) for n, t, _ in _HEADER_FIELDS])
DESCRIPTOR = np.dtype([(n, t) for n, t, _ in _DESCRIPTOR_FIELDS])
JOB = np.dtype([(n, t) for n, t, _ in _JOB_FIELDS])
HEADER = np.dtype({"names": HEADER.names, "formats": [HEADER.fields[n][0] for n in HEADER.names],
                   "offsets": [HEADER.fields[n][1] for n in HEADER.names], "itemsize": 128})
assert DESCRIPTOR.itemsize == 128, DESCRIPTOR.itemsize
assert JOB.itemsize == 16


def field_table(which):
    """``[(offset, type, name, meaning)]`` of ``"header"``, ``"descriptor"`` or
    ``"job"`` (the documentation's tables)."""
    fields, dtype = {"header": (_HEADER_FIELDS, HEADER), "descriptor": (_DESCRIPTOR_FIELDS, DESCRIPTOR),
                     "job": (_JOB_FIELDS, JOB)}[which]
    return [(dtype.fields[n][1], t, n, m) for n, t, m in fields]


def encode(record, dtype):
    """A dict of field values -> the record's bytes (missing fields are zero)."""
    a = np.zeros(1, dtype=dtype)
    for k, v in record.items():
        if k not in dtype.names:
            raise KeyError(f"no field {k!r} in the record")
        info = np.iinfo(a.dtype[k]) if a.dtype[k].kind in "ui" else None
        if info is not None and not info.min <= int(v) <= info.max:
            raise ProgramError(f"field {k} = {v} does not fit {a.dtype[k]}")
        a[k] = v
    return a.tobytes()


def decode(buf, dtype):
    """The record's bytes -> a dict of Python values."""
    if len(buf) != dtype.itemsize:
        raise ProgramError(f"{len(buf)} bytes for a record of {dtype.itemsize}")
    a = np.frombuffer(bytes(buf), dtype=dtype)[0]
    return {n: a[n].item() for n in dtype.names if not _filler(n)}


def _filler(name):
    return name == "reserved" or (name.startswith("pad") and name[3:].isdigit())
