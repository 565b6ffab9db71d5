"""Training of Group-Net on the built-in digits data (paper section 4.1: Adam, no dropout,
step learning-rate decay)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from .data import load_digits_split
from .groupnet import GroupNet, GroupNetConfig
from .quantize import QuantConfig

__all__ = ["TrainConfig", "train_digits", "evaluate"]


@dataclass
class TrainConfig:
    epochs: int = 40
    batch_size: int = 64
    lr: float = 5e-3
    seed: int = 0

    def to_dict(self):
        return asdict(self)


@torch.no_grad()
def evaluate(model: GroupNet, x, y):
    """Float accuracy, quantized accuracy and their prediction agreement rate on (x, y)."""
    model.eval()
    float_pred = model(x).argmax(dim=1)
    quant_pred = model.forward_quantized(x).classes
    return {
        "float_accuracy": (float_pred == y).float().mean().item(),
        "quantized_accuracy": (quant_pred == y).float().mean().item(),
        "float_quantized_agreement": (float_pred == quant_pred).float().mean().item(),
        "test_images": int(len(y)),
    }


def train_digits(config: GroupNetConfig, train: TrainConfig, quant: QuantConfig | None = None,
                 progress=None):
    """Train on the fixed digits split; returns ``(model, metrics)``.

    ``progress(epoch, epochs, loss)`` is called after each epoch when given.
    Runs are reproducible for a given seed (single-threaded determinism of CPU torch).
    """
    torch.manual_seed(train.seed)
    x_tr, y_tr, x_te, y_te = load_digits_split()
    model = GroupNet(config, quant)
    opt = torch.optim.Adam(model.parameters(), lr=train.lr)
    sched = torch.optim.lr_scheduler.MultiStepLR(
        opt, milestones=[int(train.epochs * 0.6), int(train.epochs * 0.85)], gamma=0.1)
    gen = torch.Generator().manual_seed(train.seed)
    for epoch in range(train.epochs):
        model.train()
        order = torch.randperm(len(y_tr), generator=gen)
        total = 0.0
        for start in range(0, len(order), train.batch_size):
            idx = order[start:start + train.batch_size]
            loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        sched.step()
        if progress:
            progress(epoch + 1, train.epochs, total / len(y_tr))
    metrics = evaluate(model, x_te, y_te)
    return model, metrics
