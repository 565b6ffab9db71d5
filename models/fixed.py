"""Typed integer tensors of the exact fixed-point forward.

Every library layer (:mod:`.layers`) has a float training ``forward`` and an exact
``forward_fixed`` on :class:`Fixed` values. A :class:`Fixed` is an int64 tensor with a
type: ``bits`` (0/1 standing for -1/+1), ``uint`` (unsigned n-bit levels; the 8-bit
input pixels too) or ``fixed`` (signed two's complement), plus ``frac`` fractional bits.

A value may also carry a *pending* per-channel affine map, ``real = scale * v * 2**-frac
+ offset``: the binary convolution's alpha, an n-bit activation's step and a global
pool's ``1/(H*W)`` are not applied to the integers but handed downstream until a
batch norm (or the classifier) folds them into one fixed-point multiplier. This is the
fold of docs/architecture.md section 3 (``ReLU(alpha*p) = alpha*ReLU(p)``) done layer by
layer, so each layer's fixed-point forward stays local.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

__all__ = ["Fixed", "KINDS"]

KINDS = ("bits", "uint", "fixed")


@dataclass(frozen=True)
class Fixed:
    """One integer tensor of the fixed-point forward.

    Attributes
    ----------
    value : torch.Tensor
        int64, NCHW (or [N, C] after the classifier).
    kind : str
        ``"bits"``, ``"uint"`` or ``"fixed"``.
    frac : int
        Fractional bits: the integer ``v`` stands for ``v * 2**-frac``.
    bits : int
        Width of a ``uint`` level (8 for pixels); 1 for ``bits``; 0 for ``fixed``
        (its width comes from range analysis).
    scale, offset : torch.Tensor or None
        Pending per-channel affine map (float64, shape [C] or [1]); ``None`` is the
        identity.
    """

    value: torch.Tensor
    kind: str
    frac: int = 0
    bits: int = 0
    scale: torch.Tensor | None = None
    offset: torch.Tensor | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown fixed-point kind {self.kind!r}")

    @property
    def pending(self):
        """Whether an affine map still waits to be folded."""
        return self.scale is not None or self.offset is not None

    def with_value(self, value, **changes):
        return replace(self, value=value, **changes)

    def require_realized(self, layer):
        """Raise unless no affine map is pending (joins and quantizers need real integers)."""
        if self.pending:
            raise ValueError(f"{layer}: its input still carries an unfolded scale or offset; "
                             "put a batch norm before it")
        return self
