"""Named topologies (``groupnet-hw zoo``, ``train --arch``) and the network families.

Group-Net topologies (:data:`ARCHS`) are partial :class:`~.groupnet.GroupNetConfig`;
the variant, K, activation bits and BPAC rates are chosen separately (``train
--variant --bases --act-bits --bpac``). FINN's CNV topologies (:data:`CNV_ARCHS`) are
complete :class:`~.cnv.CNVConfig` (K = 1, binary weights and activations).

A family (:data:`FAMILIES`) is a config class and the network class built from it;
checkpoints record the family so the loader rebuilds the right class.
"""

from __future__ import annotations

from .cnv import CNV, CNVConfig
from .groupnet import GroupNet, GroupNetConfig, bpac_rates
from .quantize import ConfigError

__all__ = ["ARCHS", "CNV_ARCHS", "FAMILIES", "arch_config", "arch_family", "all_archs",
           "build_model", "family_of"]

#: family name -> (config class, network class)
FAMILIES = {
    "groupnet": (GroupNetConfig, GroupNet),
    "cnv": (CNVConfig, CNV),
}

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


#: FINN's CNV (BNN-PYNQ CNV-W1A1) and a scaled-down copy: name -> (description,
#: dataset, config fields)
CNV_ARCHS = {
    "cnv": ("FINN's CNV-W1A1 (BNN-PYNQ): 32x32 RGB, six 3x3 valid binary convs "
            "64/64/128/128/256/256 with two max pools, fc 512/512/10, K=1",
            "digits-on-photos",
            dict(image_size=32, in_channels=3, num_classes=10,
                 conv_channels=[64, 64, 128, 128, 256, 256], fc_features=[512, 512])),
    "cnv-small": ("cnv with channels divided by 8: convs 8/8/16/16/32/32, fc 64/64/10 "
                  "(fast RTL checks)",
                  "digits-on-photos",
                  dict(image_size=32, in_channels=3, num_classes=10,
                       conv_channels=[8, 8, 16, 16, 32, 32], fc_features=[64, 64])),
}


def all_archs():
    """Every topology name, Group-Net first."""
    return list(ARCHS) + list(CNV_ARCHS)


def arch_family(arch):
    """``"groupnet"`` or ``"cnv"`` for a topology name, ``None`` if it is not in the zoo."""
    return "groupnet" if arch in ARCHS else "cnv" if arch in CNV_ARCHS else None


def family_of(model):
    """Family name of a network (or config) instance.

    Raises
    ------
    ValueError
        an instance of no registered family.
    """
    for name, classes in FAMILIES.items():
        if type(model) in classes:
            return name
    raise ValueError(f"{type(model).__name__} belongs to no network family "
                     f"({', '.join(FAMILIES)})")


def build_model(config, quant=None):
    """The network of ``config``'s family, built from ``(config, quant)``."""
    return FAMILIES[family_of(config)][1](config, quant)


def arch_config(arch, *, bpac=False, dilations=None, **fields):
    """A validated config for a zoo topology.

    Parameters
    ----------
    arch : str
        A key of :data:`ARCHS` (gives a :class:`GroupNetConfig`) or of :data:`CNV_ARCHS`
        (a :class:`~.cnv.CNVConfig`).
    bpac : bool
        Use the paper's default BPAC rates for the last two stages (Group-Net only).
    dilations : list of list of int, optional
        Explicit per-stage, per-base rates (overrides ``bpac``; Group-Net only).
    **fields
        Any other field of the topology's config class (variant, bases, act_bits, ...
        for Group-Net; conv_channels, fc_features, ... for CNV).

    Raises
    ------
    ConfigError
        unknown arch or an invalid field (one line naming it).
    """
    family = arch_family(arch)
    if family is None:
        raise ConfigError("arch", f"= {arch!r} is not in the zoo; known: "
                                  f"{', '.join(all_archs())}")
    if family == "cnv":
        allowed = CNVConfig.__dataclass_fields__
        if bpac or dilations is not None:
            raise ConfigError("bpac" if bpac else "dilations",
                              f"does not apply to {arch} (CNV has one base and no dilation)")
        for key in fields:
            if key not in allowed:
                raise ConfigError(key, f"is not a field of {arch}; allowed: {', '.join(allowed)}")
        return CNVConfig(**{**CNV_ARCHS[arch][2], **fields})
    base = dict(ARCHS[arch][2])
    base.update(fields)
    if dilations is None and bpac:
        dilations = bpac_rates(base.get("bases", GroupNetConfig.bases), len(base["stages"]))
    if dilations is not None:
        base["dilations"] = dilations
    return GroupNetConfig(**base)
