"""The Group-Net family, built only from the layer library (:mod:`.layers`).

One configuration (:class:`GroupNetConfig`) describes every network of the paper:

- a full-precision stem: conv (any kernel and stride, grey or RGB) -> optional max
  pooling -> BN (no ReLU: the first block binarizes the stem output, and after a
  ReLU every sign would be +1);
- stages of residual blocks; in every variant but ``lbd`` a block holds K binary bases
  ``G_k`` (basic residual blocks in the order Sign -> Conv -> ReLU -> BN), combined
  according to the variant (:data:`VARIANTS`);
- global average pooling and a full-precision classifier.

Variants (paper sections 3.2-3.3 and 5):

=================  =====================================================================
``lbd``            eq. 1: every binary conv is ``sum_k lambda_k B_k(x)``, one residual path
``gbd-v1``         eq. 2: every block ``sum_k lambda_k G_k(x)``, blocks independent
``gbd-v2``         eq. 3: groups of two blocks, bases chained inside a group
``gbd-v3``         K whole binary networks, ensembled before the classifier
``groupnet``       eq. 7: soft gates between blocks
``groupnet-star``  Group-Net**: as groupnet, with a shortcut around every binary conv
=================  =====================================================================

The architecture is written once, in the ``forward`` methods below; the exact
fixed-point forward (:meth:`GroupNet.forward_quantized`) and the compiler both trace
it with the library layers as leaves (:mod:`.tracing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .layers import (Add, Aggregation, BatchNorm, BinaryActivation, BinaryConv2d, Classifier,
                     FPConv2d, GlobalPool, InputQuant, MaxPool, NBitActivation, OptionAShortcut,
                     ReLU, SoftGate, bn_affine, conv_out_size)
from .quantize import ConfigError, QuantConfig, StrictConfig, check_int, show_value

__all__ = ["GroupNetConfig", "GroupNet", "QuantizedOutput", "VARIANTS", "bn_affine",
           "MIN_IMAGE_SIZE", "MAX_IMAGE_SIZE", "MAX_IN_CHANNELS", "MAX_CLASSES", "MAX_CHANNELS",
           "MAX_STAGES", "MAX_BLOCKS", "MAX_BASES", "MAX_DILATION", "bpac_rates",
           "randomize_eval_state", "FixedPointForward"]

#: Variant name -> one-line description (``groupnet-hw zoo`` prints it).
VARIANTS = {
    "lbd": "layer-wise binary decomposition (eq. 1): K binary convs per layer",
    "gbd-v1": "group-wise decomposition (eq. 2): every block approximated independently",
    "gbd-v2": "group-wise decomposition (eq. 3): groups of two blocks",
    "gbd-v3": "K whole binary networks, ensembled",
    "groupnet": "Group-Net (eq. 7): soft gates between blocks",
    "groupnet-star": "Group-Net**: Group-Net with a shortcut around every binary conv",
}

# Limits of an architecture. Checkpoints are untrusted and the model, compiler and
# hardware all grow with these numbers, so a configuration beyond them is refused
# before anything is allocated.
MIN_IMAGE_SIZE = 3
MAX_IMAGE_SIZE = 512
MAX_IN_CHANNELS = 4     # grey, RGB, RGBA
MAX_CLASSES = 1000
MAX_CHANNELS = 1024
MAX_STAGES = 8
MAX_BLOCKS = 32         # in all stages together
MAX_BASES = 8           # K
MAX_DILATION = 16
MAX_BETA = 64.0
_ACT_BITS = (1, 2, 4)


def bpac_rates(bases, stages):
    """The paper's BPAC defaults: ``{2..K+1}`` and ``{6..K+5}`` for the last two stages,
    1 elsewhere."""
    rates = [[1] * bases for _ in range(stages)]
    if stages >= 2:
        rates[-2] = list(range(2, bases + 2))
    rates[-1] = list(range(6, bases + 6))
    return rates


def _choice(name, value, allowed):
    if type(value) is not str or value not in allowed:
        raise ConfigError(name, f"= {show_value(value)} is not one of: {', '.join(allowed)}")


@dataclass
class GroupNetConfig(StrictConfig):
    """Architecture of a Group-Net family member.

    Attributes
    ----------
    variant : str
        One of :data:`VARIANTS`.
    image_size, in_channels, num_classes : int
        Square input (8 for scikit-learn digits, 32 for CIFAR size, 224 for ImageNet).
    stem_channels, stem_kernel, stem_stride : int
        Full-precision first convolution.
    stem_pool : bool
        3x3 stride-2 max pooling after the stem conv (ResNet-18/34).
    stem_bias : bool
        The stem conv has a bias (some checkpoints of the authors' code).
    stages : list of [channels, blocks, stride]
        The first block of a stage has the stride, the others stride 1.
    bases : int
        K, binary bases per group (1..8).
    dilations : list of list of int
        BPAC: one rate per base, per stage (all 1 by default).
    act_bits : int
        1 (binary activations), 2 or 4 (uniform n-bit activations, appendix).
    act_beta : float
        Clip value beta of n-bit activations.
    alpha : str
        ``"channel"`` or ``"tensor"``: weight scale per output channel or per tensor.
    gate : str
        ``"base"`` (a theta per base, eq. 7) or ``"block"`` (one theta per block).
    shortcut : str
        ``"A"``: option A (subsample, zero channels); ``"conv"``: binary 1x1 conv + BN
        downsample where the shape changes.
    emulate_inplace_sum : bool
        Reproduce a defect of the authors' code (variant without learned scales): base
        0 of every gated block is gated with the SUM of the previous block's bases
        instead of its own output. Only for imported checkpoints trained that way.
    """

    variant: str = "groupnet"
    image_size: int = 8
    in_channels: int = 1
    num_classes: int = 10
    stem_channels: int = 16
    stem_kernel: int = 3
    stem_stride: int = 1
    stem_pool: bool = False
    stem_bias: bool = False
    stages: list = field(default_factory=lambda: [[16, 1, 1], [16, 1, 2]])
    bases: int = 5
    dilations: list = None
    act_bits: int = 1
    act_beta: float = 2.0
    alpha: str = "channel"
    gate: str = "base"
    shortcut: str = "A"
    emulate_inplace_sum: bool = False

    def __post_init__(self):
        # validate before normalizing: a default list or a copy of an unchecked value
        # could itself be the expensive part
        self.validate()
        if self.dilations is None:
            self.dilations = [[1] * self.bases for _ in self.stages]
        self.stages = [list(s) for s in self.stages]
        self.dilations = [list(d) for d in self.dilations]

    # -- derived sizes --------------------------------------------------------
    def stem_size(self):
        size = conv_out_size(self.image_size, self.stem_kernel, self.stem_stride, 1,
                             (self.stem_kernel - 1) // 2)
        if self.stem_pool:
            size = conv_out_size(size, 3, 2, 1, 1)
        return size

    def stage_sizes(self):
        size, out = self.stem_size(), []
        for _, _, stride in self.stages:
            size = conv_out_size(size, 3, stride, 1, 1)
            out.append(size)
        return out

    def blocks(self):
        """``[(c_in, c_out, stride, dilations)]`` per block, in order."""
        out, prev = [], self.stem_channels
        for (channels, blocks, stride), rates in zip(self.stages, self.dilations):
            for b in range(blocks):
                out.append((prev, channels, stride if b == 0 else 1, list(rates)))
                prev = channels
        return out

    def validate(self):
        """Check every field's type and range (nothing is converted).

        Raises
        ------
        ConfigError
            a ValueError whose one-line message starts with the field, e.g.
            ``bases = 20 is out of range; allowed 1..8``.
        """
        _choice("variant", self.variant, list(VARIANTS))
        check_int("image_size", self.image_size, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE)
        check_int("in_channels", self.in_channels, 1, MAX_IN_CHANNELS)
        check_int("num_classes", self.num_classes, 1, MAX_CLASSES)
        check_int("stem_channels", self.stem_channels, 1, MAX_CHANNELS)
        check_int("stem_kernel", self.stem_kernel, 1, 11)
        check_int("stem_stride", self.stem_stride, 1, 4)
        for flag in ("stem_pool", "stem_bias", "emulate_inplace_sum"):
            if type(getattr(self, flag)) is not bool:
                raise ConfigError(flag, f"= {show_value(getattr(self, flag))}; allowed true or false")
        check_int("bases", self.bases, 1, MAX_BASES)
        if type(self.act_bits) is not int or self.act_bits not in _ACT_BITS:
            raise ConfigError("act_bits", f"= {show_value(self.act_bits)}; allowed 1, 2 or 4")
        beta = self.act_beta
        if type(beta) is not float or not (0 < beta <= MAX_BETA):
            raise ConfigError("act_beta", f"= {show_value(beta)}; allowed a float in "
                                          f"(0, {MAX_BETA}]")
        _choice("alpha", self.alpha, ["channel", "tensor"])
        _choice("gate", self.gate, ["base", "block"])
        _choice("shortcut", self.shortcut, ["A", "conv"])
        stages = self.stages
        triples = f"a list of 1..{MAX_STAGES} [channels, blocks, stride] triples"
        if not isinstance(stages, (list, tuple)):
            raise ConfigError("stages", f"= {show_value(stages)} has type "
                                        f"{type(stages).__name__}; allowed {triples}")
        if not 1 <= len(stages) <= MAX_STAGES:
            raise ConfigError("stages", f"has {len(stages)} entries; allowed {triples}")
        prev, total = self.stem_channels, 0
        for n, entry in enumerate(stages):
            if not isinstance(entry, (list, tuple)) or len(entry) != 3:
                raise ConfigError(f"stages[{n}]", f"= {show_value(entry)} is not a "
                                                  "[channels, blocks, stride] triple of integers")
            channels, blocks, stride = entry
            check_int(f"stages[{n}].channels", channels, 1, MAX_CHANNELS)
            check_int(f"stages[{n}].blocks", blocks, 1, MAX_BLOCKS)
            check_int(f"stages[{n}].stride", stride, 1, 2)
            if channels < prev and self.shortcut == "A":
                raise ConfigError(f"stages[{n}].channels",
                                  f"= {channels} is below the previous {prev}; with the option-A "
                                  "shortcut (zero padding) channels may not shrink")
            prev, total = channels, total + blocks
        if total > MAX_BLOCKS:
            raise ConfigError("stages", f"hold {total} blocks; allowed at most {MAX_BLOCKS}")
        size = self.image_size
        stem = conv_out_size(size, self.stem_kernel, self.stem_stride, 1, (self.stem_kernel - 1) // 2)
        if stem < 1 or (self.stem_pool and conv_out_size(stem, 3, 2, 1, 1) < 1):
            raise ConfigError("image_size", f"= {size} is too small for the stem")
        dilations = self.dilations
        if dilations is None:
            return
        per_stage = f"one list of {self.bases} rates (1..{MAX_DILATION}) per stage"
        if not isinstance(dilations, (list, tuple)) or len(dilations) != len(stages):
            raise ConfigError("dilations", f"= {show_value(dilations)}; allowed {per_stage}")
        size = self.stem_size()
        for n, (rates, (_, _, stride)) in enumerate(zip(dilations, stages)):
            size = conv_out_size(size, 3, stride, 1, 1)
            if not isinstance(rates, (list, tuple)) or len(rates) != self.bases:
                raise ConfigError(f"dilations[{n}]", f"= {show_value(rates)}; allowed {per_stage}")
            for i, d in enumerate(rates):
                check_int(f"dilations[{n}][{i}]", d, 1, MAX_DILATION)
                # with padding = dilation every rate is computable, but once no off-centre
                # tap can reach the image the base degenerates into a 1x1 convolution
                if d > 1 and d > size - 1:
                    raise ConfigError(f"dilations[{n}][{i}]",
                                      f"= {d}: stage {n} works on {size}x{size} maps, where a "
                                      f"3x3 window dilated by {d} sees only padding off its "
                                      f"centre; allowed 1..{max(1, size - 1)}")



# ------------------------------------------------------------------ building blocks
def _activation(cfg: GroupNetConfig):
    if cfg.act_bits == 1:
        return BinaryActivation()
    return NBitActivation(cfg.act_bits, cfg.act_beta)


def _binary_conv(cfg, c_in, c_out, kernel, stride, dilation):
    return BinaryConv2d(c_in, c_out, kernel, stride, dilation, alpha=cfg.alpha,
                        pad_value=1.0 if cfg.act_bits == 1 else 0.0)


def _batchnorm(cfg, q, channels):
    return BatchNorm(channels, out_frac=q.act_frac, scale_bits=q.scale_bits)


def _residual(cfg, q, c_in, c_out, stride):
    """The block's shortcut path: option A, or a binary 1x1 conv + BN downsample."""
    if cfg.shortcut == "conv" and (stride > 1 or c_in != c_out):
        return nn.Sequential(_activation(cfg), _binary_conv(cfg, c_in, c_out, 1, stride, 1),
                             _batchnorm(cfg, q, c_out))
    return OptionAShortcut(c_in, c_out, stride)


class BinaryConvUnit(nn.Module):
    """Activation -> binary conv -> ReLU -> BN: one binary layer in Group-Net order."""

    def __init__(self, cfg, q, c_in, c_out, stride, dilation):
        super().__init__()
        self.act = _activation(cfg)
        self.conv = _binary_conv(cfg, c_in, c_out, 3, stride, dilation)
        self.relu = ReLU()
        self.bn = _batchnorm(cfg, q, c_out)

    def forward(self, x):
        return self.bn(self.relu(self.conv(self.act(x))))


class BinaryBase(nn.Module):
    """One base ``G``: a basic residual block of two binary layers.

    ``per_conv_shortcut`` (Group-Net**) adds a shortcut around each binary layer:
    ``o1 = L1(x) + r``, ``o2 = L2(o1) + o1``; otherwise ``L2(L1(x)) + r``.
    """

    def __init__(self, cfg, q, c_in, c_out, stride, dilation, per_conv_shortcut):
        super().__init__()
        self.layer1 = BinaryConvUnit(cfg, q, c_in, c_out, stride, dilation)
        self.layer2 = BinaryConvUnit(cfg, q, c_out, c_out, 1, dilation)
        self.per_conv_shortcut = per_conv_shortcut
        self.add1 = Add() if per_conv_shortcut else None
        self.add2 = Add()

    def forward(self, x, residual):
        h = self.layer1(x)
        if self.add1 is not None:
            h = self.add1(h, residual)
            return self.add2(self.layer2(h), h)
        return self.add2(self.layer2(h), residual)


class GroupBlock(nn.Module):
    """K bases of one block, their inputs (``own``, ``agg`` or ``gate``) and, when the
    network needs it, their aggregation."""

    def __init__(self, cfg, q, c_in, c_out, stride, dilations, input_mode, aggregates):
        super().__init__()
        k = cfg.bases
        self.input_mode = input_mode
        self.residual = _residual(cfg, q, c_in, c_out, stride)
        self.bases = nn.ModuleList(
            BinaryBase(cfg, q, c_in, c_out, stride, d, cfg.variant == "groupnet-star")
            for d in dilations)
        self.gate = (SoftGate(k, per_base=cfg.gate == "base", gate_frac=q.gate_frac)
                     if input_mode == "gate" else None)
        self.aggregate = Aggregation(k, q.lambda_frac) if aggregates else None
        # the authors' in-place defect: a fixed all-ones aggregation feeds base 0's gate
        self.defect_sum = None
        if cfg.emulate_inplace_sum and input_mode == "gate":
            self.defect_sum = Aggregation(k, q.lambda_frac)
            self.defect_sum.lambdas.data.fill_(1.0)
            self.defect_sum.lambdas.requires_grad_(False)

    def forward(self, xs, agg):
        k = len(self.bases)
        if self.input_mode == "agg":
            xs = [agg] * k
        elif self.input_mode == "gate":
            if self.defect_sum is not None:
                xs = [self.defect_sum(xs)] + [xs[i] for i in range(1, k)]
            gated = self.gate(xs, agg)
            xs = [gated[i] for i in range(k)]
        outs = [base(x, self.residual(x)) for base, x in zip(self.bases, xs)]
        return outs, (self.aggregate(outs) if self.aggregate is not None else None)


class LayerwiseConv(nn.Module):
    """Eq. 1: ``sum_k lambda_k BN_k(ReLU(B_k(sign x)))``, K binary convs on one input."""

    def __init__(self, cfg, q, c_in, c_out, stride, dilations):
        super().__init__()
        self.act = _activation(cfg)
        self.convs = nn.ModuleList(_binary_conv(cfg, c_in, c_out, 3, stride, d) for d in dilations)
        self.relus = nn.ModuleList(ReLU() for _ in dilations)
        self.bns = nn.ModuleList(_batchnorm(cfg, q, c_out) for _ in dilations)
        self.aggregate = Aggregation(len(dilations), q.lambda_frac)

    def forward(self, x):
        b = self.act(x)
        return self.aggregate([bn(relu(conv(b)))
                               for conv, relu, bn in zip(self.convs, self.relus, self.bns)])


class LayerwiseBlock(nn.Module):
    """A residual block whose two binary layers are layer-wise decomposed (``lbd``)."""

    def __init__(self, cfg, q, c_in, c_out, stride, dilations):
        super().__init__()
        self.residual = _residual(cfg, q, c_in, c_out, stride)
        self.conv1 = LayerwiseConv(cfg, q, c_in, c_out, stride, dilations)
        self.conv2 = LayerwiseConv(cfg, q, c_out, c_out, 1, dilations)
        self.add = Add()

    def forward(self, xs, agg):
        x = xs[0]
        out = self.add(self.conv2(self.conv1(x)), self.residual(x))
        return [out], out


def _input_modes(variant, blocks):
    """How each block's bases get their inputs, and whether it aggregates its outputs."""
    modes = []
    for n in range(blocks):
        if n == 0:
            modes.append("own")
        elif variant in ("groupnet", "groupnet-star"):
            modes.append("gate")
        elif variant == "gbd-v1":
            modes.append("agg")
        elif variant == "gbd-v2":
            modes.append("agg" if n % 2 == 0 else "own")
        else:  # gbd-v3: K whole networks
            modes.append("own")
    aggregates = [n == blocks - 1 or modes[n + 1] in ("agg", "gate") for n in range(blocks)]
    return modes, aggregates


@dataclass
class QuantizedOutput:
    """Result of :meth:`GroupNet.forward_quantized`.

    Attributes
    ----------
    logits : torch.Tensor
        int64 [N, num_classes], scale ``2**-logit_frac``.
    classes : torch.Tensor
        int64 [N], first index of the largest logit.
    logit_frac : int
    trace : dict
        fx node name -> :class:`~.fixed.Fixed` (or list of them) when requested, for
        locating the first diverging node in a mismatch.
    """

    logits: torch.Tensor
    classes: torch.Tensor
    logit_frac: int
    trace: dict


class FixedPointForward:
    """Mixin of the networks built from library layers: their exact fixed-point
    forward is the traced composition of ``forward``, each layer's ``forward_fixed``."""

    @torch.no_grad()
    def forward_quantized(self, pixels, keep_trace=False):
        """Exact fixed-point forward on uint8 pixels ([N, H, W] or [N, C, H, W]): the
        traced composition of :meth:`forward`, each layer's ``forward_fixed``."""
        from .tracing import run_fixed
        out, trace = run_fixed(self, pixels, keep_trace)
        return QuantizedOutput(logits=out.value, classes=out.value.argmax(dim=1),
                               logit_frac=out.frac, trace=trace)


class GroupNet(FixedPointForward, nn.Module):
    """A member of the Group-Net family (see the module docstring).

    Parameters
    ----------
    config : GroupNetConfig
    quant : QuantConfig
        Fixed-point defaults used by the layers' fixed-point forward.
    """

    def __init__(self, config: GroupNetConfig, quant: QuantConfig | None = None):
        super().__init__()
        self.config = cfg = config
        self.quant = q = quant or QuantConfig()
        self.input = InputQuant(q.input_frac)
        stem = [FPConv2d(cfg.in_channels, cfg.stem_channels, cfg.stem_kernel, cfg.stem_stride,
                         bias=cfg.stem_bias, weight_bits=q.weight_bits)]
        if cfg.stem_pool:
            stem.append(MaxPool(3, 2, 1))
        stem.append(_batchnorm(cfg, q, cfg.stem_channels))
        self.stem = nn.Sequential(*stem)
        layout = cfg.blocks()
        modes, aggregates = _input_modes(cfg.variant, len(layout))
        if cfg.variant == "lbd":
            self.streams = 1
            blocks = [LayerwiseBlock(cfg, q, *spec) for spec in layout]
        else:
            self.streams = cfg.bases
            blocks = [GroupBlock(cfg, q, *spec, mode, agg)
                      for spec, mode, agg in zip(layout, modes, aggregates)]
        self.blocks = nn.ModuleList(blocks)
        self.pool = GlobalPool()
        self.fc = Classifier(layout[-1][1], cfg.num_classes, q.weight_bits)

    def input_scale(self, pixels):
        """uint8 pixels -> float input ``p * 2**-input_frac``."""
        return self.input(pixels)

    def forward(self, pixels):
        x = self.stem(self.input(pixels))
        xs, agg = [x] * self.streams, x
        for block in self.blocks:
            xs, agg = block(xs, agg)
        return self.fc(self.pool(agg))

    def final_size(self):
        return self.config.stage_sizes()[-1]


def randomize_eval_state(model, gen, zero_gamma=False):
    """Give an untrained ``model`` non-trivial eval statistics (BN running mean/var,
    gammas of both signs, optionally a zero gamma), lambdas and gate thetas, drawn from
    the torch generator ``gen``: for tests and resource calibration without training."""
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            c = mod.num_features
            mod.running_mean.copy_(torch.rand(c, generator=gen) * 4 - 2)
            mod.running_var.copy_(torch.rand(c, generator=gen) * 2 + 0.25)
            mod.weight.data.copy_(torch.rand(c, generator=gen) * 3 - 1.5)
            mod.bias.data.copy_(torch.rand(c, generator=gen) * 2 - 1)
            if zero_gamma:
                mod.weight.data[0] = 0.0
    for mod in model.modules():
        if isinstance(mod, Aggregation) and mod.lambdas.requires_grad:
            mod.lambdas.data.copy_(torch.rand(len(mod.lambdas), generator=gen) * 2 - 0.5)
        elif isinstance(mod, SoftGate):
            mod.theta.data.copy_(torch.randn(len(mod.theta), generator=gen) * 2)
    return model
