"""Fixed-point conventions shared by the quantized eval mode and the compiler.

Every real-valued tensor of the quantized network is an integer ``q`` standing for
``q * 2**-frac`` (signed two's complement, power-of-two scales). There is one
rounding rule, round half up by add-then-arithmetic-shift::

    round_shift(v, s) = (v + 2**(s-1)) >> s      (s > 0),   v   (s == 0)

A per-channel affine map ``y = a*v + b`` of an integer ``v`` (alpha, ReLU and BN
folded, or a classifier) is realised as ``round_shift(A*v + B, shift)`` with integer
``A`` and ``B``; :func:`quantize_affine` is the one place that chooses ``A``, ``B`` and
``shift``, used by the model's quantized eval and by the compiler's folding pass.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

__all__ = ["QuantConfig", "round_shift", "quantize_affine", "quantize_scalar",
           "quantize_weights_pow2"]


@dataclass(frozen=True)
class QuantConfig:
    """Fixed-point format of the quantized network.

    Attributes
    ----------
    act_frac : int
        Fractional bits of every real-valued activation (stem, residuals, gates, aggregate).
    input_frac : int
        Input pixels are uint8 ``p`` standing for ``p * 2**-input_frac``.
    scale_bits : int
        Magnitude bits of post-op multipliers ``A`` (the largest |A| of a layer is
        below ``2**scale_bits``).
    lambda_frac : int
        Fractional bits of the aggregation coefficients lambda.
    gate_frac : int
        Fractional bits of the soft gates C = sigmoid(theta), stored in [0, 2**gate_frac].
    weight_bits : int
        Bits (with sign) of the full-precision first-layer and classifier weights.
    """

    act_frac: int = 6
    input_frac: int = 8
    scale_bits: int = 11
    lambda_frac: int = 8
    gate_frac: int = 8
    weight_bits: int = 8

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        return cls(**{k: int(v) for k, v in d.items()})


def round_shift(v: torch.Tensor, shift: int) -> torch.Tensor:
    """Round half up of ``v / 2**shift`` on integer tensors (floor division = arithmetic shift)."""
    if shift == 0:
        return v
    return torch.div(v + (1 << (shift - 1)), 1 << shift, rounding_mode="floor")


def quantize_affine(a: torch.Tensor, b: torch.Tensor, in_frac: int, out_frac: int,
                    scale_bits: int):
    """Integer form of ``y = a*x + b`` per channel.

    ``x`` is an integer with ``in_frac`` fractional bits, ``y`` is wanted with
    ``out_frac`` fractional bits: ``y_q = round_shift(A*x_q + B, shift)``.

    Returns
    -------
    A, B : torch.Tensor (int64, per channel)
    shift : int
    """
    a = a.double()
    b = b.double()
    amax = float(a.abs().max()) if a.numel() else 0.0
    # Pick the shift that gives A about scale_bits of magnitude: precision is relative
    # to the layer's largest multiplier, whatever the BN statistics are.
    if amax > 0:
        exp = math.floor(math.log2(amax)) + 1 + out_frac - in_frac  # bits of a in y-units
        shift = max(0, scale_bits - exp)
    else:
        shift = 0
    shift = min(shift, 40)
    A = torch.round(a * 2.0 ** (out_frac - in_frac + shift)).to(torch.int64)
    B = torch.round(b * 2.0 ** (out_frac + shift)).to(torch.int64)
    return A, B, shift


def quantize_scalar(values: torch.Tensor, frac: int) -> torch.Tensor:
    """round(values * 2**frac) as int64."""
    return torch.round(values.double() * 2.0 ** frac).to(torch.int64)


def quantize_weights_pow2(w: torch.Tensor, bits: int):
    """Signed ``bits``-bit integers with the largest power-of-two scale that fits.

    Returns ``(w_q, frac)`` with ``w ~= w_q * 2**-frac``.
    """
    wmax = float(w.abs().max())
    limit = 2 ** (bits - 1) - 1
    if wmax == 0:
        return torch.zeros_like(w, dtype=torch.int64), 0
    frac = math.floor(math.log2(limit / wmax))
    w_q = torch.clamp(torch.round(w.double() * 2.0 ** frac), -limit, limit).to(torch.int64)
    return w_q, frac
