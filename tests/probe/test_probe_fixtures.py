"""Small generated feature sets in the plain layout (``train/`` and ``test/``), shared by the probe tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_features(root: Path, classes: int = 10, dim: int = 32, per_class: int = 60, test_per_class: int = 10,
                   seed: int = 0, test_value: float | None = None) -> Path:
    """Gaussian class clusters, float16 features, int64 labels; ``test_value`` fills the test features with it."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(classes, dim))
    for split, n in (("train", per_class), ("test", test_per_class)):
        y = np.repeat(np.arange(classes), n)
        x = np.maximum(means[y] + 1.5 * rng.normal(size=(len(y), dim)), 0)
        order = rng.permutation(len(y))
        x, y = x[order], y[order]
        if split == "test" and test_value is not None:
            x = np.full_like(x, test_value)
        (root / split).mkdir(parents=True, exist_ok=True)
        np.save(root / split / "features.npy", x.astype(np.float16))
        np.save(root / split / "labels.npy", y.astype(np.int64))
    return root


def test_write_features_plain_layout(tmp_path):
    root = write_features(tmp_path, classes=3, dim=4, per_class=5, test_per_class=2)
    assert np.load(root / "train" / "features.npy").shape == (15, 4)
    assert np.load(root / "test" / "labels.npy").dtype == np.int64
