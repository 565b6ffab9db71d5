"""Named topologies of the Group-Net family (``groupnet-hw zoo``, ``train --arch``).

Each entry is a partial :class:`~.groupnet.GroupNetConfig`; the variant, K, activation
bits and BPAC rates are chosen separately (``train --variant --bases --act-bits --bpac``).
"""

from __future__ import annotations

from .groupnet import GroupNetConfig, bpac_rates
from .quantize import ConfigError

__all__ = ["ARCHS", "arch_config"]

#: name -> (description, dataset, config fields)
ARCHS = {
    "digits": ("8x8 grey digits, stem 16, two blocks of 16 channels (the default)",
               "digits",
               dict(image_size=8, in_channels=1, num_classes=10, stem_channels=16,
                    stem_kernel=3, stem_stride=1, stem_pool=False,
                    stages=[[16, 1, 1], [16, 1, 2]])),
    "digits4": ("8x8 grey digits, stem 16, two stages of two 16-channel blocks (the ablation: "
                "enough blocks for gbd-v2's groups of two to differ from gbd-v3)",
                "digits",
                dict(image_size=8, in_channels=1, num_classes=10, stem_channels=16,
                     stem_kernel=3, stem_stride=1, stem_pool=False,
                     stages=[[16, 2, 1], [16, 2, 2]])),
    "cifar": ("32x32 RGB, ResNet-20 style: stem 16, three stages of 16/32/64 channels, "
              "3 blocks each",
              "digits-on-photos",
              dict(image_size=32, in_channels=3, num_classes=10, stem_channels=16,
                   stem_kernel=3, stem_stride=1, stem_pool=False,
                   stages=[[16, 3, 1], [32, 3, 2], [64, 3, 2]])),
    "cifar-small": ("32x32 RGB, one block per stage of 16/32/64 channels (fast RTL checks)",
                    "digits-on-photos",
                    dict(image_size=32, in_channels=3, num_classes=10, stem_channels=16,
                         stem_kernel=3, stem_stride=1, stem_pool=False,
                         stages=[[16, 1, 1], [32, 1, 2], [64, 1, 2]])),
    "resnet18": ("224x224 RGB ImageNet ResNet-18: 7x7 stride-2 stem, max pool, "
                 "[2, 2, 2, 2] blocks of 64/128/256/512",
                 "photos",
                 dict(image_size=224, in_channels=3, num_classes=1000, stem_channels=64,
                      stem_kernel=7, stem_stride=2, stem_pool=True,
                      stages=[[64, 2, 1], [128, 2, 2], [256, 2, 2], [512, 2, 2]],
                      shortcut="conv")),
    "resnet34": ("224x224 RGB ImageNet ResNet-34: as resnet18 with [3, 4, 6, 3] blocks",
                 "photos",
                 dict(image_size=224, in_channels=3, num_classes=1000, stem_channels=64,
                      stem_kernel=7, stem_stride=2, stem_pool=True,
                      stages=[[64, 3, 1], [128, 4, 2], [256, 6, 2], [512, 3, 2]],
                      shortcut="conv")),
}


def arch_config(arch, *, bpac=False, dilations=None, **fields) -> GroupNetConfig:
    """A validated config for a zoo topology.

    Parameters
    ----------
    arch : str
        A key of :data:`ARCHS`.
    bpac : bool
        Use the paper's default BPAC rates for the last two stages.
    dilations : list of list of int, optional
        Explicit per-stage, per-base rates (overrides ``bpac``).
    **fields
        Any other :class:`GroupNetConfig` field (variant, bases, act_bits, ...).

    Raises
    ------
    ConfigError
        unknown arch or an invalid field (one line naming it).
    """
    if arch not in ARCHS:
        raise ConfigError("arch", f"= {arch!r} is not in the zoo; known: {', '.join(ARCHS)}")
    base = dict(ARCHS[arch][2])
    base.update(fields)
    if dilations is None and bpac:
        dilations = bpac_rates(base.get("bases", GroupNetConfig.bases), len(base["stages"]))
    if dilations is not None:
        base["dilations"] = dilations
    return GroupNetConfig(**base)
