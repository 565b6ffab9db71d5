"""Tensor formats in DRAM and their packing helpers (numpy only).

One frame of a tensor is stored NHWC (N = 1: the engine runs a frame at a time):
row after row, pixel after pixel, a pixel's channels together.

- ``bits`` (binary activations, bit 1 <-> +1): one bit per channel, channel ``c`` at bit
  ``c % 8`` of the pixel's byte ``c // 8``.
- ``uint`` (pixels, n-bit activations): ``elem_bits`` = the smallest of 1, 2, 4, 8, 16
  holding the levels; sub-byte elements are packed LSB first like bits.
- ``fixed`` (signed fixed point): two's complement, little-endian, in the smallest
  container of the engine's (``EngineConfig.fixed_containers``: 8, 16, 24, 32, 64 bits
  for the intended engine, 8, 16, 32, 64 for the core as built) that holds the tensor's
  proven range (``Node.bit_width``; 64 only for logits).

A pixel takes ``ceil(C * elem_bits / 8)`` bytes; a row is padded to a multiple of the
port width, so every row starts a burst and is whole bursts; the tensor is ``H`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TensorFormat", "format_of", "KIND_CODES", "container_bits", "round_up",
           "POWER_OF_TWO_FIXED"]

#: kind -> the code of the descriptor's format byte
KIND_CODES = {"bits": 0, "uint": 1, "fixed": 2}
_KINDS = {v: k for k, v in KIND_CODES.items()}
_UINT_ELEMS = (1, 2, 4, 8, 16)
_FIXED_ELEMS = (8, 16, 24, 32, 64)
#: the containers of the core as built (its element reader takes powers of two)
POWER_OF_TWO_FIXED = (8, 16, 32, 64)
#: numpy types of whole-byte elements (24 bits are three bytes of an int32)
_WHOLE = {("fixed", 8): "<i1", ("fixed", 16): "<i2", ("fixed", 32): "<i4",
          ("fixed", 64): "<i8", ("uint", 8): "<u1", ("uint", 16): "<u2"}


def round_up(n, m):
    """``n`` rounded up to a multiple of ``m``."""
    return -(-n // m) * m


def container_bits(kind, bit_width, fixed_elems=POWER_OF_TWO_FIXED):
    """Element bits in DRAM of a ``kind`` value of ``bit_width`` bits (a ``fixed`` one
    in the smallest of ``fixed_elems``)."""
    if kind == "bits":
        return 1
    choices = _UINT_ELEMS if kind == "uint" else tuple(sorted(fixed_elems))
    for c in choices:
        if bit_width <= c:
            return c
    raise ValueError(f"a {kind} value of {bit_width} bits has no DRAM container "
                     f"(at most {choices[-1]})")


@dataclass(frozen=True)
class TensorFormat:
    """Layout of one frame of a tensor in DRAM.

    Parameters
    ----------
    kind : str
        ``"bits"``, ``"uint"`` or ``"fixed"``.
    elem_bits : int
        Bits of one channel's element (see the module docstring).
    channels, height, width : int
        The tensor's shape.
    port_bytes : int
        Row alignment (the memory port's width).
    """

    kind: str
    elem_bits: int
    channels: int
    height: int
    width: int
    port_bytes: int

    def __post_init__(self):
        if self.kind not in KIND_CODES:
            raise ValueError(f"unknown tensor kind {self.kind!r}")
        allowed = {"bits": (1,), "uint": _UINT_ELEMS, "fixed": _FIXED_ELEMS}[self.kind]
        if self.elem_bits not in allowed:
            raise ValueError(f"{self.kind} elements are {allowed} bits, not {self.elem_bits}")
        if min(self.channels, self.height, self.width, self.port_bytes) < 1:
            raise ValueError(f"empty tensor format {self}")

    @property
    def code(self):
        """The kind's code in a descriptor's format byte."""
        return KIND_CODES[self.kind]

    @classmethod
    def from_code(cls, code, elem_bits, channels, height, width, port_bytes):
        if code not in _KINDS:
            raise ValueError(f"unknown tensor format code {code}")
        return cls(_KINDS[code], elem_bits, channels, height, width, port_bytes)

    @property
    def pixel_bytes(self):
        return -(-self.channels * self.elem_bits // 8)

    @property
    def row_bytes(self):
        """A row's pitch: its pixels, padded to whole port words."""
        return round_up(self.width * self.pixel_bytes, self.port_bytes)

    @property
    def nbytes(self):
        return self.height * self.row_bytes

    def _limits(self):
        if self.kind == "fixed":
            half = 1 << (self.elem_bits - 1)
            return -half, half - 1
        return 0, (1 << self.elem_bits) - 1

    def pack(self, values):
        """[C, H, W] integers -> ``nbytes`` bytes (numpy uint8).

        Raises
        ------
        ValueError
            Wrong shape, or a value the format cannot hold (a packing bug would
            otherwise wrap silently).
        """
        v = np.asarray(values, dtype=np.int64)
        if v.shape != (self.channels, self.height, self.width):
            raise ValueError(f"tensor of shape {v.shape} for format {self}")
        lo, hi = self._limits()
        if v.size and (v.min() < lo or v.max() > hi):
            raise ValueError(f"values [{v.min()}, {v.max()}] outside the {self.kind} "
                             f"{self.elem_bits}-bit format [{lo}, {hi}]")
        hwc = np.ascontiguousarray(v.transpose(1, 2, 0))
        if self.elem_bits == 24:
            pix = hwc.astype("<i4").view(np.uint8).reshape(self.height, self.width, -1, 4)
            pix = pix[..., :3].reshape(self.height, self.width, -1)
        elif self.kind == "fixed" or self.elem_bits >= 8:
            pix = hwc.astype(_WHOLE[self.kind, self.elem_bits]).view(np.uint8) \
                .reshape(self.height, self.width, -1)
        else:
            pix = pack_lanes(hwc.reshape(-1, self.channels), self.elem_bits) \
                .reshape(self.height, self.width, self.pixel_bytes)
        out = np.zeros((self.height, self.row_bytes), dtype=np.uint8)
        out[:, :self.width * self.pixel_bytes] = pix.reshape(self.height, -1)
        return out.reshape(-1)

    def unpack(self, buf):
        """``nbytes`` bytes -> [C, H, W] int64 (the inverse of :meth:`pack`)."""
        b = np.frombuffer(bytes(buf), dtype=np.uint8) if not isinstance(buf, np.ndarray) \
            else buf.astype(np.uint8, copy=False)
        if b.size != self.nbytes:
            raise ValueError(f"{b.size} bytes for a tensor of {self.nbytes}")
        rows = b.reshape(self.height, self.row_bytes)[:, :self.width * self.pixel_bytes]
        pix = np.ascontiguousarray(rows).reshape(self.height * self.width, self.pixel_bytes)
        if self.elem_bits == 24:
            b3 = pix.reshape(-1, 3).astype(np.int64)
            hwc = b3[:, 0] | b3[:, 1] << 8 | b3[:, 2] << 16
            hwc = np.where(hwc >= 1 << 23, hwc - (1 << 24), hwc)
        elif self.kind == "fixed" or self.elem_bits >= 8:
            hwc = pix.view(_WHOLE[self.kind, self.elem_bits]).astype(np.int64)
        else:
            hwc = unpack_lanes(pix, self.elem_bits, self.channels)
        return hwc.reshape(self.height, self.width, self.channels).transpose(2, 0, 1).copy()


def pack_lanes(values, elem_bits):
    """[rows, n] unsigned ``elem_bits``-bit values (1, 2 or 4) -> [rows, ceil(n*b/8)]
    bytes, element ``j`` at bits ``(j*b) % 8`` of byte ``(j*b) // 8`` (LSB first)."""
    v = np.asarray(values, dtype=np.int64)
    rows, n = v.shape
    per = 8 // elem_bits
    padded = np.zeros((rows, -(-n // per) * per), dtype=np.int64)
    padded[:, :n] = v
    grouped = padded.reshape(rows, -1, per)
    shifts = np.arange(per, dtype=np.int64) * elem_bits
    return (grouped << shifts).sum(axis=2).astype(np.uint8)


def unpack_lanes(packed, elem_bits, n):
    """The inverse of :func:`pack_lanes`: [rows, bytes] -> [rows, n] int64."""
    p = np.asarray(packed, dtype=np.int64)
    per = 8 // elem_bits
    shifts = np.arange(per, dtype=np.int64) * elem_bits
    v = (p[:, :, None] >> shifts) & ((1 << elem_bits) - 1)
    return v.reshape(p.shape[0], -1)[:, :n]


def format_of(node, port_bytes):
    """The DRAM format of a graph node's output tensor (one of its outputs, for a
    multi-output node: they share the node's type)."""
    width = node.bit_width
    return TensorFormat(node.kind, container_bits(node.kind, width), node.channels,
                        node.height, node.width, port_bytes)
