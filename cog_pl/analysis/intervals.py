"""A model's top-1 with its bootstrap interval over test images, from the stored predictions of its seeds.

The top-1 of a cell is the mean over its seeds (the seeds share the test images); its interval resamples the test
images, each image's answers of every seed together (as :mod:`cog_pl.analysis.paired` resamples them for a
difference). An image's contribution is how many of the ``S`` seeds got it right, ``0..S``: a resample of the ``N``
images is a multinomial draw of ``N`` over those ``S + 1`` kinds, exactly, at the cost of ``S + 1`` numbers per
resample.
"""

from __future__ import annotations

import numpy as np

from cog_pl.analysis.concepts import LEVEL, N_BOOT
from cog_pl.errors import CogError

__all__ = ["top1_interval"]


def top1_interval(correct: np.ndarray, *, n_boot: int = N_BOOT, level: float = LEVEL,
                  seed: int = 0) -> tuple[float, float, float]:
    """``(top-1, low, high)`` in %: the mean over seeds of ``correct`` (``(seeds, images)``, whether each image's
    first class is right) and its percentile bootstrap interval over images (``n_boot`` resamples from ``seed``)."""
    correct = np.atleast_2d(np.asarray(correct, dtype=bool))
    if correct.shape[1] == 0:
        raise CogError("top-1 interval: no test images")
    s, n = correct.shape
    counts = np.bincount(correct.sum(0), minlength=s + 1)
    draws = np.random.default_rng(seed).multinomial(n, counts / n, size=n_boot)
    reps = 100.0 * (draws @ np.arange(s + 1)) / (s * n)
    tail = (1 - level) / 2
    low, high = np.quantile(reps, [tail, 1 - tail])
    return 100.0 * float(correct.mean()), float(low), float(high)
