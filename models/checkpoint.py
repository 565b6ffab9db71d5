"""Self-describing checkpoints, loaded as untrusted input.

A checkpoint is a plain dict of tensors and JSON-like values (no pickled
objects), read with ``torch.load(..., weights_only=True)`` and validated against
the architecture it declares before any weight is used.
"""

from __future__ import annotations

import os
import pickle
import zipfile

import torch

from .groupnet import GroupNet, GroupNetConfig
from .quantize import QuantConfig

__all__ = ["FORMAT", "CheckpointError", "save_checkpoint", "load_checkpoint"]

FORMAT = "groupnet-hw/checkpoint/1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line saying why."""


def _versions():
    import amaranth
    import numpy
    import groupnet_hw
    return {"groupnet_hw": groupnet_hw.__version__, "torch": str(torch.__version__),
            "numpy": str(numpy.__version__), "amaranth": str(amaranth.__version__)}


def save_checkpoint(path, model: GroupNet, *, dataset=None, metrics=None, train_config=None):
    """Write ``model`` with everything needed to rebuild it; atomic (temp file + rename)."""
    payload = {
        "format": FORMAT,
        "config": model.config.to_dict(),
        "quant": model.quant.to_dict(),
        "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "dataset": dataset or {},
        "metrics": metrics or {},
        "train": train_config or {},
        "versions": _versions(),
    }
    path = os.fspath(path)
    tmp = path + ".partial"
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_checkpoint(path):
    """Load and validate a checkpoint; returns ``(model in eval mode, payload dict)``.

    Raises
    ------
    CheckpointError
        missing file, not a checkpoint, pickled objects, foreign format,
        architecture/weights mismatch, non-finite weights.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CheckpointError(f"{path}: is a directory, expected a .pt checkpoint")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unsafe content"
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            raise CheckpointError(f"{path}: refuses to load pickled Python objects "
                                  "(only tensors and plain values are accepted)") from None
        raise CheckpointError(f"{path}: not a readable checkpoint ({first})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: corrupted or not a PyTorch checkpoint ({msg})") from None
    except Exception as exc:  # torch raises assorted types for malformed archives
        raise CheckpointError(f"{path}: corrupted or not a PyTorch checkpoint "
                              f"({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(f"{path}: not a groupnet-hw checkpoint (format {found!r}, "
                              f"expected {FORMAT!r}); create one with `groupnet-hw train`")
    for key in ("config", "quant", "state_dict"):
        if not isinstance(payload.get(key), dict):
            raise CheckpointError(f"{path}: checkpoint lacks a valid {key!r} entry")
    try:
        config = GroupNetConfig.from_dict(dict(payload["config"]))
        quant = QuantConfig.from_dict(dict(payload["quant"]))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: invalid architecture: {exc}") from None
    model = GroupNet(config, quant)
    expected = model.state_dict()
    state = payload["state_dict"]
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        what = f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}"
        raise CheckpointError(f"{path}: weights do not match the declared architecture ({what})")
    for name, ref in expected.items():
        value = state[name]
        if not isinstance(value, torch.Tensor) or value.shape != ref.shape:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise CheckpointError(f"{path}: {name} has shape {shape}, "
                                  f"the architecture needs {tuple(ref.shape)}")
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise CheckpointError(f"{path}: {name} contains NaN or infinite values")
    model.load_state_dict(state)
    model.eval()
    return model, payload
