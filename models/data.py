"""Built-in datasets: nothing is downloaded, everything ships with scikit-learn.

- ``digits``: scikit-learn's 8x8 handwritten digits, pixels stored as uint8
  ``min(16*v, 255)`` of the 0..16 grey levels (the accelerator's input format).
- ``digits-on-photos``: a CIFAR-size (32x32 RGB, 10 classes) task generated from two
  packaged sources: each digit is scaled x3 (24x24), given a random colour that
  contrasts with its background and pasted at a random position onto a random 32x32
  crop (at a random scale, half contrast) of scikit-learn's two sample photographs
  (``china.jpg``, ``flower.jpg``). It is a fair test
  of the RGB, 32x32, ResNet-20-style pipeline: the label depends only on the digit's
  shape, while colour, position and a natural textured background vary, so a network
  must use all three channels and spatial context; the split is the digits split, so
  no test digit is ever seen in training, and the backgrounds are drawn
  independently per image with a fixed seed (reproducible).
- ``photos``: random 224x224 crops of the two sample photographs with random labels,
  only to exercise ImageNet-size networks for a training step (no accuracy meaning).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

__all__ = ["DIGITS_SPLIT_SEED", "DATASETS", "load_digits_split", "load_dataset",
           "dataset_description", "digits_description"]

#: The train/test split is fixed so every checkpoint's test accuracy is comparable.
DIGITS_SPLIT_SEED = 0
TEST_FRACTION = 0.25
PHOTO_SEED = 1234

#: name -> (image size, channels, classes, what it is)
DATASETS = {
    "digits": (8, 1, 10, "scikit-learn 8x8 digits, grey"),
    "digits-on-photos": (32, 3, 10, "digits x3, coloured, on crops of scikit-learn's sample "
                                    "photos (CIFAR size)"),
    "photos": (224, 3, 1000, "crops of scikit-learn's sample photos, random labels "
                             "(ImageNet size; a smoke test only)"),
}


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


def _photos():
    """scikit-learn's two sample photos as ``load_sample_images`` returns them (its
    ``datasets/images/*.jpg`` in name order, decoded by Pillow), read from the package's
    folder without importing scikit-learn, whose import takes 3 s."""
    from importlib.util import find_spec
    from PIL import Image
    spec = find_spec("sklearn")
    folder = Path(spec.submodule_search_locations[0]) / "datasets" / "images"
    paths = sorted(folder.glob("*.jpg"))
    if not paths:           # a scikit-learn that keeps them elsewhere: its own loader
        from sklearn.datasets import load_sample_images
        return [np.asarray(img, dtype=np.uint8) for img in load_sample_images().images]
    photos = []
    for path in paths:
        with Image.open(path) as image:
            photos.append(np.asarray(image, dtype=np.uint8))
    return photos


def _on_photos(digits, rng, photos, size=32):
    """[N, 8, 8] uint8 digits -> [N, 3, size, size] uint8 composites."""
    out = np.empty((len(digits), 3, size, size), dtype=np.uint8)
    for n, digit in enumerate(digits):
        photo = photos[rng.integers(len(photos))]
        scale = rng.integers(1, 5)                        # background at 1/1 .. 1/4 resolution
        span = size * scale
        y0 = rng.integers(0, photo.shape[0] - span + 1)
        x0 = rng.integers(0, photo.shape[1] - span + 1)
        # the background at half contrast, the digit in a random colour far from it:
        # the shape stays visible whatever the crop, as a digit on a photo would be
        bg = photo[y0:y0 + span:scale, x0:x0 + span:scale].astype(np.float32) * 0.5 + 64
        glyph = np.kron(digit.astype(np.float32) / 255.0, np.ones((3, 3), np.float32))
        mean = bg.reshape(-1, 3).mean(axis=0)
        colour = np.where(mean < 128, rng.integers(200, 256, 3), rng.integers(0, 56, 3))
        colour = colour.astype(np.float32)
        oy, ox = rng.integers(0, size - 24 + 1, 2)
        patch = bg[oy:oy + 24, ox:ox + 24]
        bg[oy:oy + 24, ox:ox + 24] = (1 - glyph[..., None]) * patch + glyph[..., None] * colour
        out[n] = np.clip(np.round(bg), 0, 255).astype(np.uint8).transpose(2, 0, 1)
    return out


def load_dataset(name):
    """``(x_train, y_train, x_test, y_test)`` of a built-in dataset (uint8 images
    [N, H, W] for grey, [N, 3, H, W] for RGB; int64 labels).

    Raises
    ------
    ValueError
        unknown name.
    """
    if name == "digits":
        return load_digits_split()
    if name == "digits-on-photos":
        x_tr, y_tr, x_te, y_te = load_digits_split()
        photos = _photos()
        rng = np.random.default_rng(PHOTO_SEED)
        return (torch.from_numpy(_on_photos(x_tr.numpy(), rng, photos)), y_tr,
                torch.from_numpy(_on_photos(x_te.numpy(), rng, photos)), y_te)
    if name == "photos":
        photos = _photos()
        rng = np.random.default_rng(PHOTO_SEED)
        def crops(n):
            out = np.empty((n, 3, 224, 224), dtype=np.uint8)
            for i in range(n):
                p = photos[rng.integers(len(photos))]
                y0, x0 = rng.integers(0, p.shape[0] - 224), rng.integers(0, p.shape[1] - 224)
                out[i] = p[y0:y0 + 224, x0:x0 + 224].transpose(2, 0, 1)
            return torch.from_numpy(out)
        return (crops(8), torch.from_numpy(rng.integers(0, 1000, 8)).long(),
                crops(2), torch.from_numpy(rng.integers(0, 1000, 2)).long())
    raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")


def dataset_description(name):
    size, channels, classes, what = DATASETS[name]
    desc = {"name": name, "split_seed": DIGITS_SPLIT_SEED, "test_fraction": TEST_FRACTION,
            "image_size": size, "channels": channels, "classes": classes, "about": what}
    if name != "digits":
        desc["photo_seed"] = PHOTO_SEED
    return desc


def digits_description():
    return {"name": "sklearn-digits", "split_seed": DIGITS_SPLIT_SEED,
            "test_fraction": TEST_FRACTION, "image_size": 8, "pixel_format": "uint8 min(16*v,255)"}
