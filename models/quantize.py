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

__all__ = ["QuantConfig", "StrictConfig", "ConfigError", "check_int", "round_shift", "quantize_affine",
           "quantize_scalar", "quantize_weights_pow2", "QUANT_LIMITS", "INT64_SAFE_BITS"]

#: Allowed range of every :class:`QuantConfig` field. Beyond these the format stops
#: being meaningful (negative fractional bits, more fraction than an 8-bit pixel or
#: a 16-bit weight can use) and widths, shifts and compile time grow without bound.
QUANT_LIMITS = {
    "act_frac": (0, 16),
    "input_frac": (0, 16),
    "scale_bits": (1, 24),
    "lambda_frac": (0, 16),
    "gate_frac": (0, 16),
    "weight_bits": (2, 16),
}

#: Fixed-point results must stay below ``2**INT64_SAFE_BITS`` in magnitude: int64
#: with headroom for the additions of rounding and bias that follow.
INT64_SAFE_BITS = 62

#: Largest |fractional bits| :func:`quantize_affine` accepts; far beyond any real
#: format, it only keeps ``2.0 ** exponent`` finite.
_MAX_FRAC_MAGNITUDE = 1000


class ConfigError(ValueError):
    """One invalid configuration field.

    ``str(exc)`` is one line starting with the field (``"bases = 0 is out of range;
    allowed 1..16"``); a checkpoint loader prefixes :attr:`field` with its section.

    Attributes
    ----------
    field : str
        Field name, with an index for list items (``"blocks[2].stride"``); empty when
        the whole value is wrong.
    problem : str
        The rest of the message.
    """

    def __init__(self, field, problem):
        self.field = field
        self.problem = problem
        super().__init__(f"{field} {problem}" if field else problem)


def show_value(value, limit=40):
    """Short one-line description of an untrusted value, for error messages."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    try:
        text = repr(value)
    except Exception:  # a hostile object must not break the error message itself
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_int(field, value, low, high):
    """Raise :class:`ConfigError` unless ``value`` is a plain int in ``low..high``.

    ``bool`` is refused although it subclasses int, and floats and strings are never
    converted: ``int(2.9)`` or ``int("5")`` would silently change the meaning.
    """
    if type(value) is not int:
        raise ConfigError(field, f"= {show_value(value)} has type {type(value).__name__}; "
                                 f"allowed an integer {low}..{high}")
    if not low <= value <= high:
        raise ConfigError(field, f"= {show_value(value)} is out of range; allowed {low}..{high}")


class StrictConfig:
    """Mixin of the checkpoint's config dataclasses: a plain dict out, and a strict
    parse of an untrusted dict in."""

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        """Strictly parse an untrusted dict: every field present, no unknown keys,
        types and ranges as the class's ``validate`` (nothing is converted).

        Raises
        ------
        ConfigError
        """
        return cls(**check_fields(d, cls.__dataclass_fields__))


@dataclass(frozen=True)
class QuantConfig(StrictConfig):
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

    def __post_init__(self):
        self.validate()

    def validate(self):
        """Raise :class:`ConfigError` (a ValueError) naming the first field outside
        :data:`QUANT_LIMITS`."""
        for name, (low, high) in QUANT_LIMITS.items():
            check_int(name, getattr(self, name), low, high)



def check_fields(d, fields):
    """``d`` as a plain dict after checking it has exactly the keys ``fields``."""
    if not isinstance(d, dict):
        raise ConfigError("", f"= {show_value(d)} has type {type(d).__name__}; allowed a dict")
    allowed = ", ".join(fields)
    for key in d:
        if not isinstance(key, str) or key not in fields:
            name = key if isinstance(key, str) and key.isidentifier() and len(key) <= 30 \
                else show_value(key, 30)
            raise ConfigError(name, f"is not a known field; allowed: {allowed}")
    for key in fields:
        if key not in d:
            raise ConfigError(key, f"is missing; required: {allowed}")
    return dict(d)


def round_shift(v: torch.Tensor, shift: int) -> torch.Tensor:
    """Round half up of ``v / 2**shift`` on integer tensors (floor division = arithmetic shift)."""
    if shift == 0:
        return v
    return torch.div(v + (1 << (shift - 1)), 1 << shift, rounding_mode="floor")


def _check_frac(name, value):
    if type(value) is not int or abs(value) > _MAX_FRAC_MAGNITUDE:
        raise ValueError(f"{name} = {show_value(value)}: expected an integer within "
                         f"+-{_MAX_FRAC_MAGNITUDE}")


def _round_scaled(x: torch.Tensor, exp: int, what: str) -> torch.Tensor:
    """``round(x * 2**exp)`` as int64, refusing non-finite inputs and results that
    do not fit :data:`INT64_SAFE_BITS` (a float -> int64 cast out of range is
    undefined and silently yields garbage)."""
    x = x.double()
    if not torch.isfinite(x).all():
        raise ValueError(f"{what} contains NaN or infinite values")
    xmax = float(x.abs().max()) if x.numel() else 0.0
    # |x| < 2**1024, so below 2**-1100 every product rounds to 0; also keeps 2.0**exp finite
    if xmax == 0.0 or exp < -2100:
        return torch.zeros(x.shape, dtype=torch.int64)
    if math.log2(xmax) + exp >= INT64_SAFE_BITS:
        raise ValueError(f"{what} = {xmax:.3g} * 2**{exp} overflows int64 "
                         f"(limit 2**{INT64_SAFE_BITS})")
    # two exact power-of-two steps: 2.0**exp alone overflows for exp > 1023 (tiny x)
    half = exp // 2
    return torch.round(x * 2.0 ** half * 2.0 ** (exp - half)).to(torch.int64)


def quantize_affine(a: torch.Tensor, b: torch.Tensor, in_frac: int, out_frac: int,
                    scale_bits: int):
    """Integer form of ``y = a*x + b`` per channel.

    ``x`` is an integer with ``in_frac`` fractional bits, ``y`` is wanted with
    ``out_frac`` fractional bits: ``y_q = round_shift(A*x_q + B, shift)``.

    Returns
    -------
    A, B : torch.Tensor (int64, per channel)
    shift : int

    Raises
    ------
    ValueError
        non-finite ``a`` or ``b``, fractional bits that are not integers within
        +-1000, or an ``A`` or ``B`` that would overflow int64.
    """
    _check_frac("in_frac", in_frac)
    _check_frac("out_frac", out_frac)
    _check_frac("scale_bits", scale_bits)
    a = a.double()
    b = b.double()
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("affine coefficients contain NaN or infinite values")
    amax = float(a.abs().max()) if a.numel() else 0.0
    # Pick the shift that gives A about scale_bits of magnitude: precision is relative
    # to the layer's largest multiplier, whatever the BN statistics are.
    if amax > 0:
        exp = math.floor(math.log2(amax)) + 1 + out_frac - in_frac  # bits of a in y-units
        shift = max(0, scale_bits - exp)
    else:
        shift = 0
    shift = min(shift, 40)
    A = _round_scaled(a, out_frac - in_frac + shift, "multiplier A")
    B = _round_scaled(b, out_frac + shift, "offset B")
    return A, B, shift


def quantize_scalar(values: torch.Tensor, frac: int) -> torch.Tensor:
    """round(values * 2**frac) as int64.

    Raises
    ------
    ValueError
        non-finite values or a result that would overflow int64.
    """
    _check_frac("frac", frac)
    return _round_scaled(values, frac, "value")


def quantize_weights_pow2(w: torch.Tensor, bits: int):
    """Signed ``bits``-bit integers with the largest power-of-two scale that fits.

    Returns ``(w_q, frac)`` with ``w ~= w_q * 2**-frac``.

    Raises
    ------
    ValueError
        ``bits`` not an integer in 2..62, or non-finite weights.
    """
    if type(bits) is not int or not 2 <= bits <= INT64_SAFE_BITS:
        raise ValueError(f"weight bits = {show_value(bits)}: expected an integer "
                         f"2..{INT64_SAFE_BITS}")
    if not torch.isfinite(w).all():
        raise ValueError("weights contain NaN or infinite values")
    wmax = float(w.abs().max()) if w.numel() else 0.0
    limit = 2 ** (bits - 1) - 1
    if wmax == 0:
        return torch.zeros_like(w, dtype=torch.int64), 0
    ratio = limit / wmax
    # limit/wmax overflows for subnormal wmax; the log difference is then exact enough
    # (the ratio form is kept otherwise: it decides ties exactly as before)
    frac = math.floor(math.log2(ratio) if math.isfinite(ratio)
                      else math.log2(limit) - math.log2(wmax))
    w_q = torch.clamp(_round_scaled(w, frac, "weights"), -limit, limit)
    return w_q, frac
