"""The layer library: every building block of the Group-Net family, written once.

Each layer is an ``nn.Module`` with

- ``forward``: the float training forward (paper sections 3-4 and the appendix);
- ``forward_fixed``: the exact fixed-point forward on :class:`~.fixed.Fixed` values,
  integer arithmetic throughout (float64 convolutions of small integers are exact
  below 2**53 and are cast back).

Networks (:mod:`.groupnet`) are compositions of these layers; the compiler traces them
with these layers as leaves (:data:`LIBRARY_LAYERS`) and lowers each type through one
registered rule. Numeric conventions (docs/architecture.md section 3): sign(0) = +1,
binary convolutions pad with +1, n-bit and full-precision ones with 0, one rounding rule
(:func:`~.quantize.round_shift`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..numerics import conv_out_size  # one definition, shared with the compiler and hardware
from .binary import BinarizeWeight, SignActivation, sign
from .fixed import Fixed
from .quantize import quantize_affine, quantize_scalar, quantize_weights_pow2, round_shift

__all__ = ["InputQuant", "BinaryActivation", "NBitActivation", "BinaryConv2d", "FPConv2d",
           "BatchNorm", "ReLU", "MaxPool", "OptionAShortcut", "Add", "Aggregation", "SoftGate",
           "GlobalPool", "Classifier", "LogitBatchNorm", "LIBRARY_LAYERS", "bn_affine",
           "conv_out_size"]




def _conv_int(x, w, stride, dilation, padding, pad_value):
    """Exact integer convolution (float64 of small integers, cast back)."""
    x = F.pad(x.double(), (padding,) * 4, value=float(pad_value))
    return F.conv2d(x, w.double(), stride=stride, dilation=dilation).round().to(torch.int64)


class InputQuant(nn.Module):
    """uint8 pixels ``p`` -> ``p * 2**-frac`` (the accelerator's input stream format).

    Parameters
    ----------
    frac : int
        Fractional bits of a pixel (8: a pixel is a fraction of 1).
    """

    def __init__(self, frac):
        super().__init__()
        self.frac = frac

    def forward(self, pixels):
        if pixels.dim() == 3:
            pixels = pixels.unsqueeze(1)
        return pixels.float() / float(2 ** self.frac)

    def forward_fixed(self, pixels):
        if pixels.dim() == 3:
            pixels = pixels.unsqueeze(1)
        return Fixed(pixels.to(torch.int64), "uint", frac=self.frac, bits=8)


class BinaryActivation(nn.Module):
    """sign(x) with the piecewise-polynomial backward of eq. 2; bit 1 <-> +1."""

    def forward(self, x):
        return SignActivation.apply(x)

    def forward_fixed(self, x: Fixed):
        if x.offset is not None or (x.scale is not None and (x.scale < 0).any()):
            x.require_realized("binary activation")
        return Fixed((x.value >= 0).to(torch.int64), "bits", bits=1)


class _RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.floor(x + 0.5)  # round half up, as the fixed-point thresholds

    @staticmethod
    def backward(ctx, grad):
        return grad


class NBitActivation(nn.Module):
    """Uniform n-bit activation of the appendix: ``round(clip(y, 0, beta) * L/beta) * beta/L``,
    ``L = 2**bits - 1``, straight-through gradient inside the clip range.

    The fixed-point forward emits the level ``0..L`` (a ``uint`` of ``bits`` bits) with
    the step ``beta/L`` pending; the level is the number of integer thresholds
    (:meth:`thresholds`) the input reaches, which is what the multi-threshold unit does.

    Parameters
    ----------
    bits : int
        2 or 4 (any 2..8 works).
    beta : float
        Clip value, fixed during training (not learned).
    """

    def __init__(self, bits, beta):
        super().__init__()
        self.bits = bits
        self.beta = float(beta)

    @property
    def levels(self):
        return (1 << self.bits) - 1

    @property
    def step(self):
        return self.beta / self.levels

    def forward(self, x):
        # The clip's gradient is 1 on the closed range [0, beta] and 0 outside it, written
        # out: torch's own clamp gradient at the bounds changed between releases (2.15
        # gives 0 there).
        inside = (x >= 0.0) & (x <= self.beta)
        y = torch.where(inside, x, torch.clamp(x, 0.0, self.beta).detach())
        return _RoundSTE.apply(y / self.step) * self.step

    def thresholds(self, frac):
        """Integer thresholds ``T_j`` (j = 1..L) on an input with ``frac`` fractional bits:
        level >= j  <=>  v >= T_j  (round half up of ``v*2**-frac / step``)."""
        return [math.ceil((j - 0.5) * self.step * 2.0 ** frac) for j in range(1, self.levels + 1)]

    def forward_fixed(self, x: Fixed):
        x.require_realized("n-bit activation")
        t = torch.tensor(self.thresholds(x.frac), dtype=torch.int64)
        level = (x.value.unsqueeze(-1) >= t).sum(dim=-1)
        return Fixed(level, "uint", bits=self.bits,
                     scale=torch.tensor([self.step], dtype=torch.float64))

    def extra_repr(self):
        return f"bits={self.bits}, beta={self.beta}"


class BinaryConv2d(nn.Module):
    """Binary convolution: binary or n-bit activations convolved with ``alpha * sign(w)``.

    Parameters
    ----------
    in_channels, out_channels, kernel_size : int
        Any kernel, 1x1 included.
    stride, dilation : int
    padding : int or None
        ``dilation * (kernel_size - 1) // 2`` by default (keeps the size at stride 1).
    alpha : str
        ``"channel"``: alpha = mean|w| per output channel; ``"tensor"``: one mean over
        the whole tensor (the authors' code).
    pad_value : float
        +1 for binary inputs (a padded position is bit 1), 0 for n-bit inputs.
    """

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, dilation=1,
                 padding=None, alpha="channel", pad_value=1.0):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.dilation = kernel_size, stride, dilation
        self.padding = dilation * (kernel_size - 1) // 2 if padding is None else padding
        self.alpha_mode = alpha
        self.pad_value = float(pad_value)
        self.weight = nn.Parameter(
            # in place: a checkpoint's meta-device skeleton would otherwise run the
            # out-of-place product's Python meta kernel, which imports torch._dynamo (1.4 s)
            torch.randn(out_channels, in_channels, kernel_size, kernel_size).mul_(0.1))

    def alpha(self):
        """alpha per output channel (float64, [C_out]), from the current weights."""
        w = self.weight.detach().double().abs()
        if self.alpha_mode == "tensor":
            return w.mean().expand(self.out_channels).clone()
        return w.mean(dim=(1, 2, 3))

    def weight_bits(self):
        """Weights as {0, 1} bits (1 <-> +1), int64 [C_out, C_in, k, k]."""
        return (self.weight.detach() >= 0).to(torch.int64)

    def forward(self, x):
        p = self.padding
        x = F.pad(x, (p, p, p, p), value=self.pad_value)
        w = self.weight
        if self.alpha_mode == "tensor":
            wb = BinarizeWeightTensor.apply(w)
        else:
            wb = BinarizeWeight.apply(w)
        return F.conv2d(x, wb, stride=self.stride, dilation=self.dilation)

    def forward_fixed(self, x: Fixed):
        w = sign(self.weight_bits().double() - 0.5)
        if x.kind == "bits":
            if self.pad_value != 1.0:
                raise ValueError("binary convolution of binary inputs must pad with +1")
            v, pad = 2.0 * x.value.double() - 1.0, 1.0    # bits -> +-1 (popcount is the executor's)
        elif x.kind == "uint" and x.offset is None:
            if self.pad_value != 0.0:
                raise ValueError("binary convolution of n-bit inputs must pad with 0")
            v, pad = x.value, 0.0
        else:
            raise ValueError("a binary convolution takes binary or n-bit activations")
        dot = _conv_int(v, w, self.stride, self.dilation, self.padding, pad)
        scale = self.alpha() * (x.scale if x.scale is not None else 1.0)
        return Fixed(dot, "fixed", frac=x.frac, scale=scale)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, k={self.kernel_size}, "
                f"stride={self.stride}, dilation={self.dilation}, alpha={self.alpha_mode}")


class BinarizeWeightTensor(torch.autograd.Function):
    """alpha * sign(w) with one alpha for the whole tensor; straight-through backward."""

    @staticmethod
    def forward(ctx, weight):
        return weight.abs().mean() * sign(weight)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class FPConv2d(nn.Conv2d):
    """Full-precision convolution (the first layer): any kernel and stride, grey or RGB,
    zero padding. The fixed-point forward quantizes the weights to ``weight_bits``
    signed integers with a power-of-two scale; a bias stays pending for the next
    batch norm."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=None,
                 bias=False, weight_bits=8):
        padding = (kernel_size - 1) // 2 if padding is None else padding
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         bias=bias)
        self.weight_bits = weight_bits

    def quantized_weight(self):
        """``(w_q, w_frac)``: int64 weights and their fractional bits."""
        return quantize_weights_pow2(self.weight.detach(), self.weight_bits)

    def forward_fixed(self, x: Fixed):
        x.require_realized("full-precision convolution")
        w_q, w_frac = self.quantized_weight()
        v = _conv_int(x.value, w_q, self.stride[0], self.dilation[0], self.padding[0], 0)
        offset = self.bias.detach().double() if self.bias is not None else None
        return Fixed(v, "fixed", frac=x.frac + w_frac, offset=offset)


def bn_affine(bn: nn.BatchNorm2d):
    """Eval-mode BN as ``y = scale*x + shift`` per channel, in float64."""
    inv = 1.0 / torch.sqrt(bn.running_var.detach().double() + bn.eps)
    scale = bn.weight.detach().double() * inv
    shift = bn.bias.detach().double() - bn.running_mean.detach().double() * scale
    return scale, shift


class BatchNorm(nn.BatchNorm2d):
    """Batch norm that realizes its output in fixed point.

    It folds any pending scale and offset of its input with its own affine map into
    one per-channel multiplier, offset and shift (:func:`~.quantize.quantize_affine`),
    which gives ``out_frac`` fractional bits.

    Parameters
    ----------
    channels : int
    out_frac : int
        Default fractional bits of the output; calibration (``compiler.calibrate``)
        sets the buffer ``out_frac`` per layer and the checkpoint keeps it.
    scale_bits : int
        Magnitude bits of the multipliers.
    """

    def __init__(self, channels, out_frac=6, scale_bits=11):
        super().__init__(channels)
        self.register_buffer("out_frac", torch.tensor(out_frac, dtype=torch.int64))
        self.scale_bits = scale_bits

    def fold(self, x: Fixed):
        """``(A, B, shift)`` realizing this BN on ``x`` (int64 per channel, int)."""
        scale, shift = bn_affine(self)
        a = scale * (x.scale if x.scale is not None else 1.0)
        b = shift + scale * (x.offset if x.offset is not None else 0.0)
        return quantize_affine(a, b, x.frac, int(self.out_frac), self.scale_bits)

    def forward_fixed(self, x: Fixed):
        if x.kind == "bits":
            raise ValueError("batch norm of binary values: put it after a convolution")
        A, B, s = self.fold(x)
        y = round_shift(A.view(1, -1, 1, 1) * x.value + B.view(1, -1, 1, 1), s)
        return Fixed(y, "fixed", frac=int(self.out_frac))


class ReLU(nn.Module):
    """max(x, 0). On a value whose pending scale is non-negative (alpha > 0) it clamps
    the integers: ``ReLU(alpha*p) = alpha*ReLU(p)``."""

    def forward(self, x):
        return F.relu(x)

    def forward_fixed(self, x: Fixed):
        if x.offset is not None or (x.scale is not None and (x.scale < 0).any()):
            x.require_realized("ReLU")
        return x.with_value(x.value.clamp(min=0))


class MaxPool(nn.Module):
    """Max pooling (padding never wins, as ``-inf`` padding). Commutes with a pending
    affine map whose scale is non-negative, so it may sit before the stem's batch norm."""

    def __init__(self, kernel_size=3, stride=2, padding=1):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def forward_fixed(self, x: Fixed):
        if x.scale is not None and (x.scale < 0).any():
            x.require_realized("max pooling")
        v = F.max_pool2d(x.value.double(), self.kernel_size, self.stride, self.padding)
        return x.with_value(v.round().to(torch.int64))


class OptionAShortcut(nn.Module):
    """ResNet option A: every ``stride``-th pixel, zero-padded channels."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride

    def _apply(self, x):
        if self.stride > 1:
            x = x[:, :, ::self.stride, ::self.stride]
        extra = self.out_channels - x.shape[1]
        return F.pad(x, (0, 0, 0, 0, 0, extra)) if extra else x

    def forward(self, x):
        return self._apply(x)

    def forward_fixed(self, x: Fixed):
        x.require_realized("shortcut")
        return x.with_value(self._apply(x.value))


class Add(nn.Module):
    """Residual join ``a + b``; both in the same fixed-point format."""

    def forward(self, a, b):
        return a + b

    def forward_fixed(self, a: Fixed, b: Fixed):
        a.require_realized("residual add")
        b.require_realized("residual add")
        if a.frac != b.frac:
            raise ValueError(f"residual add of {a.frac} and {b.frac} fractional bits; "
                             "the joined tensors must share a format")
        return a.with_value(a.value + b.value)


def _check_joined(values, what):
    fracs = {v.frac for v in values}
    for v in values:
        v.require_realized(what)
    if len(fracs) != 1:
        raise ValueError(f"{what} of tensors with {sorted(fracs)} fractional bits; "
                         "the joined tensors must share a format")


class Aggregation(nn.Module):
    """``sum_k lambda_k G_k`` of K bases (eqs. 1-3); lambdas are learned.

    Fixed point: lambdas with ``lambda_frac`` bits, result rounded back to the inputs'
    format.
    """

    def __init__(self, bases, lambda_frac=8):
        super().__init__()
        self.bases = bases
        self.lambda_frac = lambda_frac
        self.lambdas = nn.Parameter(torch.full((bases,), 1.0 / bases))

    def quantized_lambdas(self):
        return quantize_scalar(self.lambdas.detach(), self.lambda_frac)

    def forward(self, xs):
        return sum(self.lambdas[k] * x for k, x in enumerate(xs))

    def forward_fixed(self, xs):
        _check_joined(xs, "aggregation")
        lam = self.quantized_lambdas()
        total = sum(int(lam[k]) * x.value for k, x in enumerate(xs))
        return xs[0].with_value(round_shift(total, self.lambda_frac))


class SoftGate(nn.Module):
    """Soft fusion gate of eq. 7: ``x_k = C_k G_k + (1 - C_k) agg``, ``C_k = sigmoid(theta_k)``.

    Parameters
    ----------
    bases : int
    per_base : bool
        One theta per base (the paper), or one theta for the block (the authors' code).
    gate_frac : int
        Fractional bits of C in fixed point (C in [0, 2**gate_frac]).
    """

    def __init__(self, bases, per_base=True, gate_frac=8):
        super().__init__()
        self.bases = bases
        self.per_base = per_base
        self.gate_frac = gate_frac
        self.theta = nn.Parameter(torch.zeros(bases if per_base else 1))

    def gates(self):
        return torch.sigmoid(self.theta).expand(self.bases)

    def quantized_gates(self):
        return quantize_scalar(torch.sigmoid(self.theta.detach()).expand(self.bases),
                               self.gate_frac)

    def forward(self, xs, agg):
        c = self.gates()
        return [c[k] * x + (1 - c[k]) * agg for k, x in enumerate(xs)]

    def forward_fixed(self, xs, agg):
        _check_joined(list(xs) + [agg], "soft gate")
        c = self.quantized_gates()
        one = 1 << self.gate_frac
        return [x.with_value(round_shift(int(c[k]) * x.value + (one - int(c[k])) * agg.value,
                                         self.gate_frac))
                for k, x in enumerate(xs)]


class GlobalPool(nn.Module):
    """Global average pooling; the fixed-point forward sums and leaves ``1/(H*W)`` pending."""

    def forward(self, x):
        return x.mean(dim=(2, 3))

    def forward_fixed(self, x: Fixed):
        x.require_realized("global pooling")
        pixels = x.value.shape[2] * x.value.shape[3]
        return Fixed(x.value.sum(dim=(2, 3)), "fixed", frac=x.frac,
                     scale=torch.tensor([1.0 / pixels], dtype=torch.float64))


class Classifier(nn.Linear):
    """Full-precision classifier. Fixed point: weights (with the pooling's pending
    scale folded in) as ``weight_bits`` signed integers with a power-of-two scale; logits
    have ``frac`` = input frac + weight frac."""

    def __init__(self, in_features, classes, weight_bits=8):
        super().__init__(in_features, classes)
        self.weight_bits = weight_bits

    def quantized(self, x_frac, pending_scale):
        """``(w_q, bias_q, out_frac)`` for an input with ``x_frac`` bits and a pending scale."""
        s = float(pending_scale) if pending_scale is not None else 1.0
        w_q, w_frac = quantize_weights_pow2(self.weight.detach().double() * s, self.weight_bits)
        b_q = quantize_scalar(self.bias.detach(), w_frac + x_frac)
        return w_q, b_q, w_frac + x_frac

    def forward_fixed(self, x: Fixed):
        if x.offset is not None or (x.scale is not None and x.scale.numel() != 1):
            raise ValueError("the classifier takes a pooled tensor with one pending scale")
        w_q, b_q, frac = self.quantized(x.frac, x.scale)
        return Fixed(x.value @ w_q.t() + b_q, "fixed", frac=frac)


class LogitBatchNorm(nn.BatchNorm2d):
    """Logits of a map with one channel per class: global average pooling, then a batch
    norm over the classes (a learned scale and bias per class).

    FINN's CNV ends in a binary layer with one output per class followed by a per-class
    scale and bias (BNN-PYNQ: a batch norm without activation); this is that scale and
    bias. The float forward returns ``[N, classes]``.

    Fixed point: the batch norm's scale, the input's pending scale (a binary
    convolution's alpha) and the pooling's ``1/(H*W)`` fold into one multiplier per
    class, ``weight_bits`` signed integers sharing a power-of-two scale as the
    classifier's weights do, and the logits have ``frac`` = input frac + weight frac:
    ``logits[c] = m_c * sum_hw x[c] + b_c``, a classifier whose weight matrix is
    diagonal.

    Parameters
    ----------
    classes : int
    weight_bits : int
        Bits (with sign) of the per-class multipliers.
    """

    def __init__(self, classes, weight_bits=8):
        super().__init__(classes)
        self.weight_bits = weight_bits

    def forward(self, x):
        # pooling first: in training the statistics are those of the pooled logits
        return super().forward(x.mean(dim=(2, 3), keepdim=True)).flatten(1)

    def quantized(self, x_frac, pixels, pending_scale=None, pending_offset=None):
        """``(m_q, bias_q, out_frac)``: per-class multipliers of the spatial sums of an
        input with ``x_frac`` bits, ``pixels`` = H*W, and a pending affine map."""
        scale, shift = bn_affine(self)
        s = pending_scale if pending_scale is not None else 1.0
        bias = shift + scale * (pending_offset if pending_offset is not None else 0.0)
        m_q, m_frac = quantize_weights_pow2(scale * s / pixels, self.weight_bits)
        return m_q, quantize_scalar(bias, m_frac + x_frac), m_frac + x_frac

    def forward_fixed(self, x: Fixed):
        if x.kind != "fixed":
            raise ValueError("the logit batch norm takes signed values (a convolution's or "
                             "batch norm's output), not binary or n-bit activations")
        pixels = x.value.shape[2] * x.value.shape[3]
        m_q, b_q, frac = self.quantized(x.frac, pixels, x.scale, x.offset)
        return Fixed(x.value.sum(dim=(2, 3)) * m_q + b_q, "fixed", frac=frac)


#: Leaf modules of the compiler's trace: every op of the family is one of these.
LIBRARY_LAYERS = (InputQuant, BinaryActivation, NBitActivation, BinaryConv2d, FPConv2d,
                  BatchNorm, ReLU, MaxPool, OptionAShortcut, Add, Aggregation, SoftGate,
                  GlobalPool, Classifier, LogitBatchNorm)
