"""IR op definitions, one class per op (see :mod:`.base`)."""

from .base import OPS, TIMING_FRAMES, Op, op_of, register
from . import io, join, pixel, window  # noqa: F401  (registers the ops)

__all__ = ["OPS", "Op", "op_of", "register", "TIMING_FRAMES"]
