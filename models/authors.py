"""Import of checkpoints written by the Group-Net authors' training code
(`groupnet-hw import FILE.pth --arch resnet18`).

Their files (``checkpoint.pth.tar`` / ``model_best.pth.tar``) are a dict with ``epoch``,
``state_dict`` (``module.``-prefixed: the model was wrapped in ``nn.DataParallel``),
``optimizer``, ``best_top1`` and ``learning_rate``. The network is a ResNet-18/34
Group-Net** (a real-valued shortcut around every binary convolution, one soft-gate theta
per block, per-tensor alpha, a binary 1x1 downsample shared by the bases); it maps onto
:class:`~.groupnet.GroupNet` with ``variant="groupnet-star", shortcut="conv",
gate="block", alpha="tensor"``. The file is untrusted: it is read with
``torch.load(weights_only=True)`` and every key, shape and value is checked against the
declared architecture before anything is copied.

Every semantic difference is resolved explicitly and reported (:class:`ImportReport`):
sign(0), per-tensor alpha, the in-place defect of the fixed-mean variant, dilation rates,
input normalization, the optional stem bias.
"""

from __future__ import annotations

import os
import pickle
import re
from dataclasses import dataclass, field

import torch

from .groupnet import GroupNet
from .zoo import arch_config

__all__ = ["ImportError_", "ImportReport", "import_authors_checkpoint", "IMAGENET_MEAN",
           "IMAGENET_STD", "AUTHORS_ARCHS"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: arch -> blocks per stage in the authors' code
AUTHORS_ARCHS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3]}
_TOP_KEYS = {"epoch", "state_dict", "optimizer", "best_top1", "learning_rate"}
_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


class ImportError_(ValueError):
    """A file that is not an authors' checkpoint of the requested architecture; the
    message is one line."""


@dataclass
class ImportReport:
    """What the import found and every difference it resolved (one line each)."""

    arch: str
    bases: int
    learned_scales: bool
    stem_bias: bool
    differences: list = field(default_factory=list)

    def lines(self):
        head = (f"{self.arch}, K={self.bases}, "
                f"{'learned scales' if self.learned_scales else 'fixed 1/K mean'}, "
                f"stem conv {'with' if self.stem_bias else 'without'} bias")
        return [head] + [f"- {d}" for d in self.differences]


def _fail(path, problem):
    raise ImportError_(f"{path}: {problem}")


def _load(path):
    if not os.path.isfile(path):
        _fail(path, "no such file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        _fail(path, "refuses to load pickled Python objects (only tensors and plain values)")
    except Exception as exc:  # torch raises assorted types for malformed archives
        _fail(path, f"not a readable PyTorch file ({type(exc).__name__})")
    if isinstance(payload, dict) and "state_dict" in payload:
        extra = set(payload) - _TOP_KEYS
        if extra:
            _fail(path, f"unexpected top-level entries {sorted(map(str, extra))[:3]}; the "
                        f"authors' files hold {', '.join(sorted(_TOP_KEYS))}")
        state = payload["state_dict"]
    else:
        state = payload  # a bare state dict
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        _fail(path, "no state dict of named tensors")
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}


def _name_map(blocks_per_stage, bases, learned_scales, stem_bias):
    """authors' name -> our name (and which block each gate/scale belongs to)."""
    m = {"conv1.weight": "stem.0.weight", "fc.weight": "fc.weight", "fc.bias": "fc.bias"}
    if stem_bias:
        m["conv1.bias"] = "stem.0.bias"
    for b in _BN:
        m[f"bn1.{b}"] = f"stem.2.{b}"
    n = 0
    for s, count in enumerate(blocks_per_stage, 1):
        for blk in range(count):
            src, dst = f"layer{s}.{blk}", f"blocks.{n}"
            for i in range(bases):
                for c in (1, 2):
                    m[f"{src}.conv{c}.{i}.weight"] = f"{dst}.bases.{i}.layer{c}.conv.weight"
                    for b in _BN:
                        m[f"{src}.bn{c}.{i}.{b}"] = f"{dst}.bases.{i}.layer{c}.bn.{b}"
                if learned_scales:
                    m[f"{src}.scales.{i}"] = (f"{dst}.aggregate.lambdas", i)
            if s > 1 and blk == 0:
                m[f"{src}.downsample.conv.weight"] = f"{dst}.residual.1.weight"
                for b in _BN:
                    m[f"{src}.downsample.batch_norm.{b}"] = f"{dst}.residual.2.{b}"
            if n > 0:
                m[f"{src}.block_gate"] = f"{dst}.gate.theta"
            n += 1
    return m


def import_authors_checkpoint(path, arch="resnet18", *, inplace_defect="auto",
                              normalization="fold", dilations=None, config_overrides=None):
    """Convert an authors'-layout checkpoint into a :class:`GroupNet`.

    Parameters
    ----------
    path : path-like
    arch : str
        ``resnet18`` or ``resnet34``.
    inplace_defect : str
        ``auto`` (emulate it when the file is the fixed-mean variant, the only one that
        has it), ``emulate`` or ``fix`` (the intended eq. 7: each base gated with its own
        output).
    normalization : str
        ``fold``: fold the ImageNet mean/std the authors' inputs were normalized with into
        the stem convolution, so the model takes raw uint8 pixels (exact inside the
        image; at the zero-padded border the authors padded the *normalized* image with
        0, we pad the pixels with 0); ``none``: keep the stem as trained (feed
        normalized inputs yourself).
    dilations : list of list of int, optional
        BPAC rates per stage and base to apply (segmentation-style checkpoints lost
        theirs; the weights do not depend on the rate).
    config_overrides : dict, optional
        Geometry overrides (image size, channels) for files of a smaller test geometry.

    Returns
    -------
    (GroupNet, ImportReport)

    Raises
    ------
    ImportError_
        one line: what is wrong with the file.
    """
    path = os.fspath(path)
    if arch not in AUTHORS_ARCHS:
        raise ImportError_(f"--arch {arch!r}: the authors' checkpoints are "
                           f"{', '.join(AUTHORS_ARCHS)}")
    if inplace_defect not in ("auto", "emulate", "fix"):
        raise ImportError_(f"inplace_defect {inplace_defect!r}: choose auto, emulate or fix")
    if normalization not in ("fold", "none"):
        raise ImportError_(f"normalization {normalization!r}: choose fold or none")
    state = _load(path)
    first = sorted(k for k in state if re.fullmatch(r"layer1\.0\.conv1\.\d+\.weight", k))
    bases = len(first)
    if not 1 <= bases <= 8:
        _fail(path, f"found {bases} bases (layer1.0.conv1.<i>.weight); a Group-Net has 1..8 "
                    f"(is this a {arch} Group-Net checkpoint?)")
    learned = "layer1.0.scales.0" in state
    stem_bias = "conv1.bias" in state
    emulate = inplace_defect == "emulate" or (inplace_defect == "auto" and not learned)
    fields = dict(variant="groupnet-star", bases=bases, gate="block", alpha="tensor",
                  shortcut="conv", stem_bias=stem_bias or normalization == "fold",
                  emulate_inplace_sum=emulate)
    fields.update(config_overrides or {})
    try:
        config = arch_config(arch, dilations=dilations, **fields)
    except ValueError as exc:
        raise ImportError_(f"{path}: {exc}") from None
    blocks = [n for _, n, _ in config.stages]
    if blocks != AUTHORS_ARCHS[arch] and not config_overrides:
        _fail(path, f"{arch} has {AUTHORS_ARCHS[arch]} blocks per stage")
    names = _name_map(blocks, bases, learned, stem_bias)
    missing = [k for k in names if k not in state and not k.endswith("num_batches_tracked")]
    if missing:
        _fail(path, f"{missing[0]} is missing ({len(missing)} missing keys); not a {arch} "
                    f"Group-Net checkpoint with K={bases}")
    unknown = [k for k in state if k not in names]
    if unknown:
        _fail(path, f"unexpected key {unknown[0]!r} ({len(unknown)} unexpected); not a {arch} "
                    f"Group-Net checkpoint")
    model = GroupNet(config)
    ours = model.state_dict()
    with torch.no_grad():
        if "stem.0.bias" in ours:
            ours["stem.0.bias"].zero_()   # the folded normalization's offset starts from 0
        for src, dst in names.items():
            if src not in state:
                continue
            value = state[src]
            if not isinstance(value, torch.Tensor):
                _fail(path, f"{src} is not a tensor")
            if value.is_floating_point() and not torch.isfinite(value).all():
                _fail(path, f"{src} contains NaN or infinite values")
            if isinstance(dst, tuple):
                target, index = ours[dst[0]], dst[1]
                if value.numel() != 1:
                    _fail(path, f"{src} has shape {list(value.shape)}; a scale is one number")
                target[index] = value.reshape(())
                continue
            target = ours[dst]
            if value.numel() != target.numel() or (value.dim() and list(value.shape) !=
                                                   list(target.shape)):
                _fail(path, f"{src} has shape {list(value.shape)}, expected {list(target.shape)}")
            target.copy_(value.reshape(target.shape))
        if not learned:
            for name, t in ours.items():
                if name.endswith("aggregate.lambdas"):
                    t.fill_(1.0 / bases)
        for name, t in ours.items():
            if name.endswith("running_var") and (t < 0).any():
                _fail(path, f"{name} has a negative variance")
        model.load_state_dict(ours)
        report = ImportReport(arch, bases, learned, stem_bias)
        d = report.differences
        d.append("sign(0): the authors' torch.sign maps an exact 0 to 0, ours to +1 (docs/"
                 "architecture.md section 3); only pre-activations that are exactly 0 differ")
        d.append("alpha: kept per tensor (one mean|w| per binary weight tensor), as trained")
        if learned:
            d.append("in-place defect: not present (learned scales: the aggregate is a new "
                     "tensor)")
        elif emulate:
            d.append("in-place defect: EMULATED (fixed 1/K mean variant): base 0 of every gated "
                     "block is gated with the sum of the previous block's bases, as the model "
                     "was trained; pass --inplace-defect fix for the intended eq. 7")
        else:
            d.append("in-place defect: FIXED: each base is gated with its own output (eq. 7); "
                     "a model trained with the defect loses accuracy this way")
        if dilations is not None:
            d.append(f"dilation rates: applied {dilations} per stage and base (segmentation "
                     "checkpoints lost theirs: every base had the last rate)")
        else:
            d.append("dilation rates: none in classification checkpoints (all 1); segmentation "
                     "checkpoints lost theirs, restore the intended ones with --dilations")
        if normalization == "fold":
            _fold_normalization(model)
            d.append("input normalization: ImageNet mean/std folded into the stem conv; the "
                     "model takes raw uint8 RGB pixels. Exact inside the image; on the 3-pixel "
                     "border the authors zero-padded the normalized image, we pad pixels with 0")
        else:
            d.append("input normalization: not folded; the model expects inputs that were "
                     "normalized with the ImageNet mean/std before quantization")
        if stem_bias:
            d.append("stem conv bias: present, kept (folded into the stem batch norm in fixed "
                     "point)")
        d.append("batch norm eps 1e-5 and the 7x7/2 conv, 3x3/2 max pool, BN stem order as "
                 "trained")
    model.eval()
    return model, report


@torch.no_grad()
def _fold_normalization(model):
    """conv((p/255 - m)/s) with our input p/256: W' = W*256/(255 s_c), b' = b - sum W m/s."""
    conv = model.stem[0]
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float64).view(1, -1, 1, 1)
    w = conv.weight.double()
    shift = (w * (mean / std)).sum(dim=(1, 2, 3))
    conv.weight.copy_((w * 256.0 / (255.0 * std)).float())
    conv.bias.copy_((conv.bias.double() - shift).float())
