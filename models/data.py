"""Built-in dataset: scikit-learn's 8x8 handwritten digits (ships with the package,
no download).

Pixels are stored as uint8 ``min(16*v, 255)`` of the 0..16 grey levels, the
format the accelerator's input stream and the UART host link carry.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["DIGITS_SPLIT_SEED", "load_digits_split", "digits_description"]

#: The train/test split is fixed so every checkpoint's test accuracy is comparable.
DIGITS_SPLIT_SEED = 0
TEST_FRACTION = 0.25


def load_digits_split():
    """Return ``(x_train, y_train, x_test, y_test)``: uint8 [N, 8, 8] images, int64 labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = np.minimum(digits.images * 16, 255).astype(np.uint8)
    x_tr, x_te, y_tr, y_te = train_test_split(
        pixels, digits.target, test_size=TEST_FRACTION, random_state=DIGITS_SPLIT_SEED,
        stratify=digits.target)
    return (torch.from_numpy(x_tr), torch.from_numpy(y_tr).long(),
            torch.from_numpy(x_te), torch.from_numpy(y_te).long())


def digits_description():
    return {"name": "sklearn-digits", "split_seed": DIGITS_SPLIT_SEED,
            "test_fraction": TEST_FRACTION, "image_size": 8, "pixel_format": "uint8 min(16*v,255)"}
