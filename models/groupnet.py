"""Group-Net in PyTorch: float training graph and bit-exact quantized eval.

Architecture (paper section 3, layer order Sign -> Conv -> ReLU -> BN):

- stem: full-precision 3x3 conv (zero padding) -> BN, on uint8 pixels read as
  ``p * 2**-8``. No ReLU: the first block binarizes the stem output, and after a
  ReLU every sign would be +1 (conv1 of block 0 would see a constant input);
- blocks: each block has K parallel bases; a base is a basic residual block
  ``G(x) = BN2(ReLU(BConv2(sign(BN1(ReLU(BConv1(sign(x)))))))) + shortcut(x)``
  (real-valued residual per base); ``shortcut`` is ResNet option A (spatial
  subsample for stride 2, zero channel padding for wider outputs);
- aggregation ``sum_k lambda_k * G_k`` per block, and between blocks the soft
  fusion gate of eq. 7: ``x_k = C_k * G_k + (1 - C_k) * sum_j lambda_j G_j``,
  ``C_k = sigmoid(theta_k)``;
- global average pooling and a full-precision classifier.

Each base has its own dilation (BPAC); by default every base uses dilation 1.

:meth:`GroupNet.forward_quantized` evaluates the same network with every
real-valued path in fixed point (:mod:`.quantize`), on integer tensors; the
compiler's integer graph must equal it bit for bit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .binary import BinaryConv2d, sign, weight_alpha
from .quantize import (ConfigError, QuantConfig, check_fields, check_int, quantize_affine,
                       quantize_scalar, quantize_weights_pow2, round_shift, show_value)

__all__ = ["GroupNetConfig", "GroupNet", "bn_affine", "QuantizedOutput", "MIN_IMAGE_SIZE",
           "MAX_IMAGE_SIZE", "MAX_IN_CHANNELS", "MAX_CLASSES", "MAX_CHANNELS", "MAX_BLOCKS",
           "MAX_BASES", "MAX_DILATION"]

# Limits of an architecture. Checkpoints are untrusted and the model, compiler and
# hardware all grow with these numbers, so a configuration beyond them is refused
# before anything is allocated. They are far above what fits the target FPGA.
MIN_IMAGE_SIZE = 3      # the 3x3 window must fit the image
MAX_IMAGE_SIZE = 512
MAX_IN_CHANNELS = 4     # grey, RGB, RGBA
MAX_CLASSES = 1000
MAX_CHANNELS = 1024     # stem and every block
MAX_BLOCKS = 32
MAX_BASES = 16          # K
MAX_DILATION = 16


@dataclass
class GroupNetConfig:
    """Architecture of a Group-Net.

    Attributes
    ----------
    image_size : int
        Input height = width (8 for scikit-learn digits).
    in_channels : int
        Input channels (1: grey pixels).
    num_classes : int
    stem_channels : int
        Output channels of the full-precision first conv.
    blocks : list of [channels, stride]
        One entry per residual block, in order; stride 2 downsamples.
    bases : int
        K, parallel binary bases per block.
    dilations : list of int
        BPAC dilation of each base (length K); all 1 by default.
    """

    image_size: int = 8
    in_channels: int = 1
    num_classes: int = 10
    stem_channels: int = 16
    blocks: list = field(default_factory=lambda: [[16, 1], [16, 2]])
    bases: int = 5
    dilations: list = None

    def __post_init__(self):
        # validate before normalizing: a default ``[1] * bases`` or a list copy of
        # an unchecked value could itself be the expensive part
        self.validate()
        if self.dilations is None:
            self.dilations = [1] * self.bases
        self.blocks = [[c, s] for c, s in self.blocks]
        self.dilations = list(self.dilations)

    def validate(self):
        """Check every field's type and range.

        Ints must be plain ints (not bool, float or str: nothing is converted), within
        the module limits (``MAX_IMAGE_SIZE`` and friends).

        Raises
        ------
        ConfigError
            a ValueError whose one-line message starts with the field, e.g.
            ``bases = 2000000 is out of range; allowed 1..16``.
        """
        check_int("image_size", self.image_size, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE)
        check_int("in_channels", self.in_channels, 1, MAX_IN_CHANNELS)
        check_int("num_classes", self.num_classes, 1, MAX_CLASSES)
        check_int("stem_channels", self.stem_channels, 1, MAX_CHANNELS)
        check_int("bases", self.bases, 1, MAX_BASES)
        blocks = self.blocks
        pairs = f"a list of 1..{MAX_BLOCKS} [channels, stride] pairs"
        if not isinstance(blocks, (list, tuple)):
            raise ConfigError("blocks", f"= {show_value(blocks)} has type "
                                        f"{type(blocks).__name__}; allowed {pairs}")
        if not 1 <= len(blocks) <= MAX_BLOCKS:
            raise ConfigError("blocks", f"has {len(blocks)} entries; allowed {pairs}")
        prev = self.stem_channels
        for n, entry in enumerate(blocks):
            if not isinstance(entry, (list, tuple)) or len(entry) != 2:
                raise ConfigError(f"blocks[{n}]", f"= {show_value(entry)} is not a "
                                                  "[channels, stride] pair of integers")
            channels, stride = entry
            check_int(f"blocks[{n}].channels", channels, 1, MAX_CHANNELS)
            check_int(f"blocks[{n}].stride", stride, 1, 2)
            if channels < prev:
                raise ConfigError(f"blocks[{n}].channels",
                                  f"= {channels} is below the previous {prev}; channels may "
                                  "not shrink (the option-A shortcut only zero-pads)")
            prev = channels
        dilations = self.dilations
        if dilations is None:
            dilations = [1] * self.bases
        if not isinstance(dilations, (list, tuple)):
            raise ConfigError("dilations", f"= {show_value(dilations)} has type "
                                           f"{type(dilations).__name__}; allowed a list of one "
                                           f"integer 1..{MAX_DILATION} per base")
        if len(dilations) != self.bases:
            raise ConfigError("dilations", f"has {len(dilations)} entries for {self.bases} "
                                           "bases; allowed one per base")
        # padding = dilation keeps any dilation computable, but once the dilated
        # window (2d+1 pixels) is wider than the image its outer taps only ever see padding
        widest = (self.image_size - 1) // 2
        for i, d in enumerate(dilations):
            check_int(f"dilations[{i}]", d, 1, MAX_DILATION)
            if d > widest:
                raise ConfigError(f"dilations[{i}]",
                                  f"= {d}: its 3x3 window spans {2 * d + 1} pixels, wider than "
                                  f"the {self.image_size}-pixel image; allowed 1..{widest}")

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        """Strictly parse an untrusted dict: every field present, no unknown keys,
        types and ranges as :meth:`validate` (nothing is converted).

        Raises
        ------
        ConfigError
        """
        return cls(**check_fields(d, cls.__dataclass_fields__))


def bn_affine(bn: nn.BatchNorm2d):
    """Eval-mode BN as ``y = scale*x + shift`` per channel, in float64."""
    inv = 1.0 / torch.sqrt(bn.running_var.detach().double() + bn.eps)
    scale = bn.weight.detach().double() * inv
    shift = bn.bias.detach().double() - bn.running_mean.detach().double() * scale
    return scale, shift


def option_a_shortcut(x, out_channels, stride):
    """ResNet option A: keep every ``stride``-th pixel, zero-pad the channels."""
    if stride > 1:
        x = x[:, :, ::stride, ::stride]
    extra = out_channels - x.shape[1]
    if extra:
        x = F.pad(x, (0, 0, 0, 0, 0, extra))
    return x


class Stem(nn.Module):
    def __init__(self, in_channels, channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return self.bn(self.conv(x))


class Base(nn.Module):
    """One binary base: a basic residual block in Group-Net's layer order."""

    def __init__(self, in_channels, out_channels, stride, dilation):
        super().__init__()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride
        self.conv1 = BinaryConv2d(in_channels, out_channels, stride, dilation)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = BinaryConv2d(out_channels, out_channels, 1, dilation)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        h = self.bn1(F.relu(self.conv1(x)))
        y = self.bn2(F.relu(self.conv2(h)))
        return y + option_a_shortcut(x, self.out_channels, self.stride)


class GroupBlock(nn.Module):
    """K parallel bases, their lambdas, and the gates that feed this block (eq. 7)."""

    def __init__(self, in_channels, out_channels, stride, dilations, gated):
        super().__init__()
        k = len(dilations)
        self.bases = nn.ModuleList(Base(in_channels, out_channels, stride, d) for d in dilations)
        self.lambdas = nn.Parameter(torch.full((k,), 1.0 / k))
        # theta of the soft gates mixing the previous block's outputs into this
        # block's base inputs; the first block takes the stem output directly.
        self.gate_theta = nn.Parameter(torch.zeros(k)) if gated else None


@dataclass
class QuantizedOutput:
    """Result of :meth:`GroupNet.forward_quantized`.

    Attributes
    ----------
    logits : torch.Tensor
        int64 [N, num_classes], scale ``2**-logit_frac``.
    classes : torch.Tensor
        int64 [N], first index of the largest logit.
    trace : dict
        Named integer intermediates (NCHW) when requested, for locating the first
        diverging node in a mismatch.
    """

    logits: torch.Tensor
    classes: torch.Tensor
    trace: dict


class GroupNet(nn.Module):
    """Group-Net with learned soft gates (paper sections 3.2-3.3).

    Parameters
    ----------
    config : GroupNetConfig
    quant : QuantConfig
        Fixed-point format used by :meth:`forward_quantized`.
    """

    def __init__(self, config: GroupNetConfig, quant: QuantConfig | None = None):
        super().__init__()
        self.config = config
        self.quant = quant or QuantConfig()
        self.stem = Stem(config.in_channels, config.stem_channels)
        blocks = []
        prev = config.stem_channels
        for n, (channels, stride) in enumerate(config.blocks):
            blocks.append(GroupBlock(prev, channels, stride, config.dilations, gated=n > 0))
            prev = channels
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(prev, config.num_classes)

    # -- float training graph -------------------------------------------------
    def input_scale(self, pixels):
        """uint8 pixels -> float input ``p * 2**-input_frac``."""
        if pixels.dim() == 3:
            pixels = pixels.unsqueeze(1)
        return pixels.float() / float(2 ** self.quant.input_frac)

    def forward(self, pixels):
        x = self.stem(self.input_scale(pixels))
        xs = [x] * self.config.bases
        agg = None
        for block in self.blocks:
            if block.gate_theta is not None:
                gates = torch.sigmoid(block.gate_theta)
                xs = [gates[i] * g + (1 - gates[i]) * agg for i, g in enumerate(xs)]
            outs = [base(xi) for base, xi in zip(block.bases, xs)]
            agg = sum(block.lambdas[j] * g for j, g in enumerate(outs))
            xs = outs
        return self.fc(agg.mean(dim=(2, 3)))

    # -- fixed-point eval -----------------------------------------------------
    def integer_params(self):
        """Every integer constant of the quantized network, by layer name.

        This is the fold of alpha, ReLU and BN into fixed-point post-ops that the
        compiler repeats node by node (and checks against this table).

        Raises
        ------
        ValueError
            a constant cannot be formed (non-finite value, int64 overflow); the
            message starts with the layer, e.g. ``fc: value = 3e+20 * 2**70 overflows int64``.
        """
        q = self.quant
        p = {}
        layer = "stem"  # named in the error: which layer's statistics are unusable
        try:
            w_q, w_frac = quantize_weights_pow2(self.stem.conv.weight.detach(), q.weight_bits)
            scale, shift = bn_affine(self.stem.bn)
            A, B, s = quantize_affine(scale, shift, q.input_frac + w_frac, q.act_frac,
                                      q.scale_bits)
            p["stem"] = dict(weight=w_q, A=A, B=B, shift=s)
            for n, block in enumerate(self.blocks):
                for i, base in enumerate(block.bases):
                    pairs = ((base.conv1, base.bn1), (base.conv2, base.bn2))
                    for c, (conv, bn) in enumerate(pairs, 1):
                        layer = f"block{n}.base{i}.conv{c}"
                        alpha = weight_alpha(conv.weight.detach()).flatten().double()
                        scale, shift = bn_affine(bn)
                        A, B, s = quantize_affine(alpha * scale, shift, 0, q.act_frac, q.scale_bits)
                        bits = (conv.weight.detach() >= 0).to(torch.int64)
                        p[layer] = dict(bits=bits, A=A, B=B, shift=s)
                layer = f"block{n}.lambda"
                p[layer] = quantize_scalar(block.lambdas.detach(), q.lambda_frac)
                if block.gate_theta is not None:
                    layer = f"block{n}.gate"
                    p[layer] = quantize_scalar(torch.sigmoid(block.gate_theta.detach()),
                                               q.gate_frac)
            layer = "fc"
            pool = self.final_size() ** 2
            w_q, w_frac = quantize_weights_pow2(self.fc.weight.detach().double() / pool,
                                                q.weight_bits)
            b_q = quantize_scalar(self.fc.bias.detach(), w_frac + q.act_frac)
            p["fc"] = dict(weight=w_q, bias=b_q, frac=w_frac + q.act_frac)
        except (ValueError, OverflowError) as exc:
            raise ValueError(f"{layer}: {exc}") from None
        return p

    def final_size(self):
        size = self.config.image_size
        for _, stride in self.config.blocks:
            size = (size - 1) // stride + 1
        return size

    @torch.no_grad()
    def forward_quantized(self, pixels, keep_trace=False, params=None):
        """Fixed-point forward on uint8 pixels ([N, H, W] or [N, 1, H, W]).

        Integer arithmetic throughout (convolutions of small integers run in
        float64, which is exact below 2**53, and are cast back to int64).
        """
        q = self.quant
        p = params or self.integer_params()
        trace = {}

        def keep(name, value):
            if keep_trace:
                trace[name] = value
            return value

        def conv(x, w, stride=1, dilation=1, padding=0, pad_value=0.0):
            x = F.pad(x.double(), (padding,) * 4, value=pad_value)
            return F.conv2d(x, w.double(), stride=stride, dilation=dilation).round().to(torch.int64)

        def postop(acc, prm, pre_relu, post_relu):
            v = acc.clamp(min=0) if pre_relu else acc
            y = round_shift(prm["A"].view(1, -1, 1, 1) * v + prm["B"].view(1, -1, 1, 1), prm["shift"])
            return y.clamp(min=0) if post_relu else y

        if pixels.dim() == 3:
            pixels = pixels.unsqueeze(1)
        pixels = pixels.to(torch.int64)
        acc = keep("stem.conv", conv(pixels, p["stem"]["weight"], padding=1))
        x = keep("stem", postop(acc, p["stem"], pre_relu=False, post_relu=False))
        xs = [x] * self.config.bases
        agg = None
        for n, block in enumerate(self.blocks):
            if block.gate_theta is not None:
                gate = p[f"block{n}.gate"]
                one = 1 << q.gate_frac
                xs = [keep(f"block{n}.in{i}",
                           round_shift(gate[i] * g + (one - gate[i]) * agg, q.gate_frac))
                      for i, g in enumerate(xs)]
            outs = []
            for i, base in enumerate(block.bases):
                name = f"block{n}.base{i}"
                x_i = xs[i]
                c1, c2 = p[f"{name}.conv1"], p[f"{name}.conv2"]
                pm1 = sign(x_i.double())
                dot1 = keep(f"{name}.conv1", conv(pm1, sign(c1["bits"].double() - 0.5),
                                                  base.conv1.stride, base.conv1.dilation,
                                                  base.conv1.padding, 1.0))
                h = keep(f"{name}.act1", postop(dot1, c1, pre_relu=True, post_relu=False))
                dot2 = keep(f"{name}.conv2", conv(sign(h.double()), sign(c2["bits"].double() - 0.5),
                                                  1, base.conv2.dilation, base.conv2.padding, 1.0))
                y = keep(f"{name}.post2", postop(dot2, c2, pre_relu=True, post_relu=False))
                outs.append(keep(f"{name}.out",
                                 y + option_a_shortcut(x_i, base.out_channels, base.stride)))
            lam = p[f"block{n}.lambda"]
            agg = keep(f"block{n}.agg",
                       round_shift(sum(lam[j] * g for j, g in enumerate(outs)), q.lambda_frac))
            xs = outs
        pooled = keep("pool", agg.sum(dim=(2, 3)))
        logits = pooled @ p["fc"]["weight"].t() + p["fc"]["bias"]
        return QuantizedOutput(logits=logits, classes=logits.argmax(dim=1), trace=trace)
