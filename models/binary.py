"""Binary operators of Group-Net (paper section 3.1).

- :func:`sign` is the project's sign: +1 for x >= 0, -1 otherwise (docs/architecture.md section 3;
  ``torch.sign`` maps 0 to 0 and is never used).
- :class:`SignActivation` binarizes activations with the piecewise-polynomial
  backward of the paper's eq. 2 (from Bi-Real Net).
- :class:`BinarizeWeight` gives alpha * sign(w) with the straight-through estimator.
"""

from __future__ import annotations

import torch

__all__ = ["sign", "SignActivation", "BinarizeWeight", "weight_alpha"]


def sign(x: torch.Tensor) -> torch.Tensor:
    """+1 where ``x >= 0``, -1 elsewhere, in ``x``'s dtype."""
    # 0-d operands broadcast: no full-size tensors of ones (a 224x224 ResNet's
    # activations are hundreds of MB a layer)
    one = torch.ones((), dtype=x.dtype, device=x.device)
    return torch.where(x >= 0, one, -one)


class SignActivation(torch.autograd.Function):
    """sign(x) forward; backward multiplies by 2+2x on [-1, 0), 2-2x on [0, 1), 0 elsewhere."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return sign(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        slope = torch.zeros_like(x)
        slope = torch.where((x >= -1) & (x < 0), 2 + 2 * x, slope)
        slope = torch.where((x >= 0) & (x < 1), 2 - 2 * x, slope)
        return grad_output * slope


def weight_alpha(weight: torch.Tensor) -> torch.Tensor:
    """Per-output-channel scale alpha = mean(|w|), shaped to broadcast over ``weight``."""
    return weight.abs().mean(dim=tuple(range(1, weight.dim())), keepdim=True)


class BinarizeWeight(torch.autograd.Function):
    """alpha * sign(w) forward; straight-through (identity) backward."""

    @staticmethod
    def forward(ctx, weight):
        return weight_alpha(weight) * sign(weight)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output
