"""The top-1 interval over test images: the draw over kinds of images is the plain image bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from cog_pl.analysis.intervals import top1_interval
from cog_pl.errors import CogError


def test_the_top1_interval_is_the_image_bootstrap_of_the_mean_over_seeds():
    rng = np.random.default_rng(0)
    correct = rng.random((3, 400)) < np.linspace(0.2, 0.9, 400)  # three seeds sharing 400 images
    top1, low, high = top1_interval(correct, n_boot=4000, seed=1)
    assert top1 == pytest.approx(100 * correct.mean())
    idx = np.random.default_rng(2).integers(0, 400, (4000, 400))
    plain = 100 * correct[:, idx].mean(axis=(0, 2))  # each resample: the same images for every seed
    want = np.quantile(plain, [0.025, 0.975])
    assert abs(low - want[0]) < 0.5 and abs(high - want[1]) < 0.5
    assert top1_interval(correct, n_boot=4000, seed=1) == (top1, low, high)  # seeded
    with pytest.raises(CogError, match="no test images"):
        top1_interval(np.zeros((2, 0), dtype=bool))
