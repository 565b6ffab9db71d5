"""Binary operators of Group-Net (paper section 3.1).

- :func:`sign` is the project's sign: +1 for x >= 0, -1 otherwise (docs/architecture.md section 3;
  ``torch.sign`` maps 0 to 0 and is never used).
- :class:`SignActivation` binarizes activations with the piecewise-polynomial
  backward of the paper's eq. 2 (from Bi-Real Net).
- :class:`BinarizeWeight` gives alpha * sign(w) with the straight-through estimator.
- :class:`BinaryConv2d` is a 3x3 binary convolution whose input is binarized inside
  and padded with +1, as the official Group-Net code does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["sign", "SignActivation", "BinarizeWeight", "BinaryConv2d", "weight_alpha"]


def sign(x: torch.Tensor) -> torch.Tensor:
    """+1 where ``x >= 0``, -1 elsewhere, in ``x``'s dtype."""
    return torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))


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


class BinaryConv2d(nn.Module):
    """Binary 3x3 convolution: sign(x) (+1 padded) convolved with alpha*sign(w).

    Parameters
    ----------
    in_channels, out_channels : int
    stride : int
        1 or 2.
    dilation : int
        BPAC dilation rate of this base; the padding equals it so that a stride-1
        convolution keeps the spatial size.
    kernel_size : int
        3 (1 is accepted for experiments).
    """

    def __init__(self, in_channels, out_channels, stride=1, dilation=1, kernel_size=3):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.stride = stride
        self.dilation = dilation
        self.kernel_size = kernel_size
        self.padding = dilation * (kernel_size - 1) // 2
        self.weight = nn.Parameter(
            torch.randn(out_channels, in_channels, kernel_size, kernel_size) * 0.1)

    def forward(self, x):
        bits = SignActivation.apply(x)
        p = self.padding
        # +1 padding: the padded positions are binary +1, never a third value 0.
        bits = F.pad(bits, (p, p, p, p), value=1.0)
        return F.conv2d(bits, BinarizeWeight.apply(self.weight), stride=self.stride,
                        dilation=self.dilation)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, stride={self.stride}, "
                f"dilation={self.dilation}")
