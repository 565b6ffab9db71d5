"""FINN's CNV topology (BNN-PYNQ's ``CNV-W1A1``), built only from the layer library.

CNV is the binarized VGG-like network of FINN (Umuroglu et al., 2017) and BNN-PYNQ for
CIFAR-10 size images::

    32x32xC  -> conv 64 -> conv 64 -> maxpool 2x2
             -> conv 128 -> conv 128 -> maxpool 2x2
             -> conv 256 -> conv 256
             -> fc 512 -> fc 512 -> fc classes -> per-class scale and bias (logits)

Every convolution is 3x3 without padding ("valid"), binary weights, followed by batch
norm and sign; the spatial size goes 32 -> 30 -> 28 -> 14 -> 12 -> 10 -> 5 -> 3 -> 1, so
the fully connected layers act on a 1x1 map and are 1x1 binary convolutions. One binary
base (K = 1): no Group-Net structure. Max pooling acts on the signs (bit 1 <-> +1), where
it is an OR, as FINN's streaming max pool on binary activations.

How it maps onto the library (docs/architecture.md section 3):

- First layer: FINN multiplies 8-bit input pixels by binary weights. Here the input
  quantizer's 8-bit pixels (``p * 2**-8``) feed a :class:`~.layers.BinaryConv2d`, which
  takes unsigned n-bit inputs; it lowers to the ``bin_conv`` op with ``in_bits = 8``
  (the binary-weight MVU, no multipliers). FINN feeds ``2p - 1`` (signed) instead of
  ``p``; with valid padding that differs only by a per-channel constant and a factor 2,
  which the batch norm absorbs.
- Binary weights carry :class:`~.layers.BinaryConv2d`'s per-channel alpha (FINN has
  none); alpha > 0 is absorbed by the batch norm that follows every layer, so the
  binary network computes the same function class.
- Last layer: a binary 1x1 convolution with one output per class, then
  :class:`~.layers.LogitBatchNorm` (the per-class scale and bias); it lowers to the
  ``head`` op with a diagonal weight matrix.
- The first fully connected layer is a valid convolution whose kernel covers the whole
  final map (flatten + fully connected): 1x1 at 32x32 input, larger for larger images.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from .groupnet import MAX_CHANNELS, MAX_CLASSES, MAX_IN_CHANNELS, FixedPointForward
from .layers import (BatchNorm, BinaryActivation, BinaryConv2d, InputQuant, LogitBatchNorm,
                     MaxPool, conv_out_size)
from .quantize import ConfigError, QuantConfig, StrictConfig, check_int, show_value

__all__ = ["CNVConfig", "CNV", "DEFAULT_QUANT", "CONV_LAYERS", "POOL_AFTER", "MIN_IMAGE_SIZE",
           "MAX_IMAGE_SIZE", "MAX_FC_LAYERS", "MAX_FC_FEATURES"]

#: Convolutions of CNV: three pairs of 3x3 valid convolutions.
CONV_LAYERS = 6
#: Indices of the convolutions followed by 2x2 max pooling.
POOL_AFTER = (1, 3)
KERNEL = 3
# Limits (checkpoints are untrusted; see groupnet.py). The smallest image that leaves a
# 1x1 map after the six valid convolutions and two poolings is 32x32; at 64x64 the first
# fully connected layer already covers a 9x9 map.
MIN_IMAGE_SIZE = 32
MAX_IMAGE_SIZE = 64
MAX_FC_LAYERS = 4
MAX_FC_FEATURES = 4096

#: CNV's fixed-point defaults. Every batch norm but the logits' folds into integer
#: thresholds on an accumulator, where the multiplier's precision costs no hardware.
#: With Group-Net's 11 bits the thresholds of a trained cnv (15 epochs, 52 % test
#: accuracy) moved enough to flip up to 6 % of the last layers' signs, compounding
#: through eight binary layers: 79 % float/fixed agreement on the 450 test images;
#: 20 bits and 12-bit per-class multipliers give 99.8 % (16 and 8: 96 %).
DEFAULT_QUANT = QuantConfig(scale_bits=20, weight_bits=12)


def _int_list(name, value, low, high, min_len, max_len, what):
    allowed = f"a list of {what} integers {low}..{high}"
    if not isinstance(value, (list, tuple)):
        raise ConfigError(name, f"= {show_value(value)} has type {type(value).__name__}; "
                                f"allowed {allowed}")
    if not min_len <= len(value) <= max_len:
        raise ConfigError(name, f"has {len(value)} entries; allowed {allowed}")
    for i, v in enumerate(value):
        check_int(f"{name}[{i}]", v, low, high)


@dataclass
class CNVConfig(StrictConfig):
    """Architecture of a CNV network.

    Attributes
    ----------
    image_size, in_channels, num_classes : int
        Square input (32 for CIFAR size; 32..64), grey/RGB/RGBA, classes.
    conv_channels : list of int
        Output channels of the six 3x3 valid convolutions (FINN: 64, 64, 128, 128, 256,
        256); max pooling follows the second and the fourth.
    fc_features : list of int
        Outputs of the hidden fully connected layers, each followed by batch norm and
        sign (FINN: 512, 512; 0..4 layers). The last layer (binary, one output per
        class, then a per-class scale and bias) is always there.
    """

    image_size: int = 32
    in_channels: int = 3
    num_classes: int = 10
    conv_channels: list = field(default_factory=lambda: [64, 64, 128, 128, 256, 256])
    fc_features: list = field(default_factory=lambda: [512, 512])

    def __post_init__(self):
        self.validate()
        self.conv_channels = list(self.conv_channels)
        self.fc_features = list(self.fc_features)

    def map_sizes(self):
        """Spatial size after each convolution (and its pooling, if any)."""
        size, out = self.image_size, []
        for i in range(CONV_LAYERS):
            size = conv_out_size(size, KERNEL, 1, 1, 0)
            if i in POOL_AFTER:
                size = conv_out_size(size, 2, 2, 1, 0)
            out.append(size)
        return out

    def final_size(self):
        """Size of the last convolution's map: the first fully connected layer's kernel."""
        return self.map_sizes()[-1]

    def validate(self):
        """Check every field's type and range (nothing is converted).

        Raises
        ------
        ConfigError
            a ValueError whose one-line message starts with the field, e.g.
            ``conv_channels has 5 entries; allowed a list of 6 integers 1..1024``.
        """
        check_int("image_size", self.image_size, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE)
        check_int("in_channels", self.in_channels, 1, MAX_IN_CHANNELS)
        check_int("num_classes", self.num_classes, 1, MAX_CLASSES)
        _int_list("conv_channels", self.conv_channels, 1, MAX_CHANNELS, CONV_LAYERS,
                  CONV_LAYERS, str(CONV_LAYERS))
        _int_list("fc_features", self.fc_features, 1, MAX_FC_FEATURES, 0, MAX_FC_LAYERS,
                  f"0..{MAX_FC_LAYERS}")



class BinaryLayer(nn.Module):
    """Binary-weight valid convolution -> batch norm -> sign: one hidden layer of CNV
    (a fully connected layer is the convolution whose kernel covers its input map)."""

    def __init__(self, q, c_in, c_out, kernel, pixels_in=False):
        super().__init__()
        # binary inputs pad with +1, pixels with 0 (never used: no padding)
        self.conv = BinaryConv2d(c_in, c_out, kernel, padding=0,
                                 pad_value=0.0 if pixels_in else 1.0)
        self.bn = BatchNorm(c_out, out_frac=q.act_frac, scale_bits=q.scale_bits)
        self.act = BinaryActivation()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class CNV(FixedPointForward, nn.Module):
    """FINN's CNV (see the module docstring).

    Parameters
    ----------
    config : CNVConfig
    quant : QuantConfig
        Fixed-point format: ``input_frac`` of the pixels, ``scale_bits`` of the batch
        norms (folded into thresholds), ``weight_bits`` of the per-class multipliers
        (default :data:`DEFAULT_QUANT`).
    """

    def __init__(self, config: CNVConfig, quant: QuantConfig | None = None):
        super().__init__()
        self.config = cfg = config
        self.quant = q = quant or DEFAULT_QUANT
        self.input = InputQuant(q.input_frac)
        convs, prev = [], cfg.in_channels
        for i, channels in enumerate(cfg.conv_channels):
            convs.append(BinaryLayer(q, prev, channels, KERNEL, pixels_in=i == 0))
            prev = channels
        self.convs = nn.ModuleList(convs)
        self.pools = nn.ModuleList(MaxPool(2, 2, 0) for _ in POOL_AFTER)
        kernel, fcs = cfg.final_size(), []
        for features in cfg.fc_features:
            fcs.append(BinaryLayer(q, prev, features, kernel))
            prev, kernel = features, 1
        self.fcs = nn.ModuleList(fcs)
        self.out = BinaryConv2d(prev, cfg.num_classes, kernel, padding=0)
        self.logits = LogitBatchNorm(cfg.num_classes, q.weight_bits)

    def input_scale(self, pixels):
        """uint8 pixels -> float input ``p * 2**-input_frac``."""
        return self.input(pixels)

    def forward(self, pixels):
        x = self.input(pixels)
        for i, layer in enumerate(self.convs):
            x = layer(x)
            if i in POOL_AFTER:
                x = self.pools[POOL_AFTER.index(i)](x)
        for layer in self.fcs:
            x = layer(x)
        return self.logits(self.out(x))

    def final_size(self):
        return self.config.final_size()
