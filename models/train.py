"""Training of the network families (Group-Net, FINN's CNV) on the built-in datasets
(paper section 4.1: Adam, no dropout, step learning-rate decay), then calibration of the
fixed-point format."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from .calibrate import calibrate
from .data import load_dataset
from .groupnet import GroupNet, GroupNetConfig
from .quantize import QuantConfig
from .zoo import build_model

__all__ = ["TrainConfig", "train_digits", "train_model", "evaluate", "dataset_for"]


@dataclass
class TrainConfig:
    epochs: int = 40
    batch_size: int = 64
    lr: float = 5e-3
    seed: int = 0
    #: stop after this many optimizer steps (0: no limit); ImageNet-size smoke runs
    max_steps: int = 0

    def to_dict(self):
        return asdict(self)


def dataset_for(config: GroupNetConfig):
    """The built-in dataset whose images fit ``config`` (any family's: its
    ``image_size`` and ``in_channels``)."""
    if config.image_size == 8 and config.in_channels == 1:
        return "digits"
    if config.image_size == 32 and config.in_channels == 3:
        return "digits-on-photos"
    if config.image_size == 224 and config.in_channels == 3:
        return "photos"
    raise ValueError(f"no built-in dataset has {config.in_channels}-channel "
                     f"{config.image_size}x{config.image_size} images (built in: 8x8 grey "
                     "digits, 32x32 RGB digits-on-photos, 224x224 RGB photos)")


@torch.no_grad()
def evaluate(model: GroupNet, x, y, batch=256):
    """Float accuracy, quantized accuracy and their prediction agreement rate on (x, y)."""
    model.eval()
    fp, qp = [], []
    for s in range(0, len(y), batch):
        fp.append(model(x[s:s + batch]).argmax(dim=1))
        qp.append(model.forward_quantized(x[s:s + batch]).classes)
    float_pred, quant_pred = torch.cat(fp), torch.cat(qp)
    return {
        "float_accuracy": (float_pred == y).float().mean().item(),
        "quantized_accuracy": (quant_pred == y).float().mean().item(),
        "float_quantized_agreement": (float_pred == quant_pred).float().mean().item(),
        "test_images": int(len(y)),
    }


def train_model(config: GroupNetConfig, train: TrainConfig, quant: QuantConfig | None = None,
                progress=None, data=None):
    """Train the network of ``config``'s family (:func:`~.zoo.build_model`) on its built-in
    dataset (:func:`dataset_for`), calibrate the fractional bits on the training split,
    evaluate on the test split.

    Returns ``(model, metrics)``. ``progress(epoch, epochs, loss)`` is called after each
    epoch when given. Runs are reproducible for a given seed (single-threaded
    determinism of CPU torch).
    """
    torch.manual_seed(train.seed)
    x_tr, y_tr, x_te, y_te = data or load_dataset(dataset_for(config))
    model = build_model(config, quant)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=train.lr)
    sched = torch.optim.lr_scheduler.MultiStepLR(
        opt, milestones=[int(train.epochs * 0.6), int(train.epochs * 0.85)], gamma=0.1)
    gen = torch.Generator().manual_seed(train.seed)
    steps = 0
    for epoch in range(train.epochs):
        model.train()
        order = torch.randperm(len(y_tr), generator=gen)
        total, seen = 0.0, 0
        for start in range(0, len(order), train.batch_size):
            idx = order[start:start + train.batch_size]
            if len(idx) == 1 and start:
                # a batch norm over 1x1 maps (CNV's fully connected layers) has no
                # statistics for one image; the epoch's remainder of one is dropped
                continue
            loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            seen += len(idx)
            steps += 1
            if train.max_steps and steps >= train.max_steps:
                break
        sched.step()
        if progress:
            progress(epoch + 1, train.epochs, total / max(1, seen))
        if train.max_steps and steps >= train.max_steps:
            break
    model.eval()
    calibrate(model, x_tr)   # fractional bits from the training split only
    metrics = evaluate(model, x_te, y_te)
    return model, metrics


def train_digits(config: GroupNetConfig, train: TrainConfig, quant: QuantConfig | None = None,
                 progress=None):
    """:func:`train_model` on the digits (kept for the digits-only callers)."""
    return train_model(config, train, quant, progress)
