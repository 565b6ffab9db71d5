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

from ...engine_format import DESCRIPTOR_FIELDS as _DESCRIPTOR_FIELDS
from ...engine_format import FLAG_BITS, OPCODE_CODES, STAGE_BITS
from ...engine_format import JOB_FIELDS as _JOB_FIELDS
from ...engine_opcodes import END as END_OPCODE

__all__ = ["HEADER", "DESCRIPTOR", "JOB", "OPCODE_CODES", "END_OPCODE", "STAGE_BITS", "FLAG_BITS",
           "HEADER_FLAG_BITS", "MAGIC", "DESCRIPTOR_MAGIC", "VERSION", "encode", "decode",
           "field_table", "table_entries", "ProgramError"]

MAGIC = b"GNEP"
VERSION = 2
DESCRIPTOR_MAGIC = 0x4E44  # "DN" little-endian: a descriptor that is not one stops the engine

#: the header's ``flags`` byte: choices that hold for the whole program. A bit clear is
#: the core as built's choice, so the core's programs leave the byte 0.
HEADER_FLAG_BITS = {"tap_aligned_weights": 1}


class ProgramError(ValueError):
    """A program or image the engine would refuse (bad magic, address outside the
    image, inconsistent sizes): the engine stops with an error status."""


#: (name, numpy type, meaning): the 128-byte program header at the image's base
_HEADER_FIELDS = [
    ("magic", "S4", "b'GNEP'"),
    ("version", "<u2", "format version (2: a post-op's A and B paired per channel)"),
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
    ("flags", "u1", "HEADER_FLAG_BITS: binary weights tap-aligned (params.py)"),
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
    ("in_addr_b", "<u4", "frames in flight: the input frame's second slot (0: none)"),
    ("first_addr", "<u4", "frames in flight: the program of the first frame's stem"),
    ("next_addr_a", "<u4", "frames in flight: the program of the rest of the frame in "
                           "slot A and the stem of the frame in slot B"),
    ("next_addr_b", "<u4", "frames in flight: the same with the slots swapped"),
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


def table_entries(d):
    """Job-table entries of a descriptor: its jobs', then with level outputs
    ``aux_outputs`` for each of its outputs (a gated mixer's K, an aggregate's one)."""
    n = d["jobs"]
    if d["flags"] & FLAG_BITS["levels_out"]:
        mixes = d["opcode"] == OPCODE_CODES["MIXER"] or d["stages"] & STAGE_BITS["mixer"]
        outputs = d["jobs"] if d["stages"] & STAGE_BITS["gated"] or not mixes else 1
        n += outputs * d["aux_outputs"]
    return n


def job_table(image, base, d, entries=None):
    """Descriptor ``d``'s job-table entries (the first ``entries``, default all:
    :func:`table_entries`) decoded from ``image``, whose first byte is at ``base``."""
    at = d["table_addr"] - base
    n = table_entries(d) if entries is None else entries
    return [decode(bytes(image[at + k * JOB.itemsize:at + (k + 1) * JOB.itemsize]), JOB)
            for k in range(n)]


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
