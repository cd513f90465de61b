"""Paired statistics of two models on the same domain: the difference in top-1 with a bootstrap interval and a
permutation p-value, from their stored test predictions.

Both models answer the same test images, under the same seeds. Per image ``i``, ``D_i`` is the mean over the seeds of
``correct_A(i, seed) - correct_B(i, seed)``; the difference in top-1 is ``100 * mean_i D_i``, the mean over the
seeds of each seed's difference.

- **Interval**: a paired bootstrap over test images within each seed, combined over seeds: each replicate draws one
  resample of the images (with replacement), applies it to every seed (the seeds share the test images), takes each
  seed's difference on it and averages them; the interval is the percentile interval of the replicates. Because the
  seed-averaged ``D_i`` of a replicate only depends on how many drawn images have each value of ``D_i`` (one of
  ``2S + 1``), a replicate is one multinomial draw of those counts: the same distribution as drawing image indices,
  at a cost independent of the number of images. Training noise that flips images independently is inside ``D_i``;
  the interval treats the test images as a sample of the concepts' images.
- **p-value**: a paired permutation test: under "the models are exchangeable", swapping A and B on an image (in
  every seed at once) flips the sign of ``D_i``; the statistic is ``|sum_i D_i|``; ``p = (1 + #{replicates at least
  as extreme}) / (1 + replicates)``. The sign flips of the images with ``|D_i| = j / S`` are one binomial draw.

Both are seeded (``seed``) so a report is reproducible. Two rows are paired only when made on one test split: rows
recording different ``split_sha256`` digests are refused (:func:`check_same_test_split`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from cog_pl.errors import CogError
from cog_pl.results import NO_SEED
from cog_pl.results.predictions import Predictions

#: Replicates of the bootstrap and of the permutation test, the level of the interval, the report's seed.
N_BOOT = 10_000
N_PERM = 10_000
LEVEL = 0.95
SEED = 0


@dataclass(frozen=True)
class PairedDifference:
    """Top-1 of A minus top-1 of B (points), its interval at ``level``, the permutation p-value, and what it was
    computed on and with."""

    difference: float
    low: float
    high: float
    p_value: float
    images: int
    seeds: tuple[int, ...]
    n_boot: int = N_BOOT
    n_perm: int = N_PERM
    level: float = LEVEL
    seed: int = SEED

    def significant(self, alpha: float = 0.05) -> bool:
        """Whether the permutation test rejects "no difference" at ``alpha``."""
        return self.p_value < alpha


def _levels(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(values, counts, S)``: each image's ``sum over seeds of correct_A - correct_B`` (an integer in ``[-S, S]``)
    tallied per value."""
    a, b = np.atleast_2d(np.asarray(a, dtype=bool)), np.atleast_2d(np.asarray(b, dtype=bool))
    if a.shape != b.shape or a.shape[1] == 0:
        raise ValueError(f"paired statistics need two (seeds, images) arrays of one shape, got {a.shape} and "
                         f"{b.shape}")
    s = a.shape[0]
    k = a.sum(0, dtype=np.int64) - b.sum(0, dtype=np.int64)
    counts = np.bincount(k + s, minlength=2 * s + 1)
    return np.arange(-s, s + 1), counts, s


def bootstrap_differences(a: np.ndarray, b: np.ndarray, n_boot: int = N_BOOT,
                          rng: np.random.Generator | None = None) -> np.ndarray:
    """``n_boot`` replicates of the paired difference in top-1 (points) of ``(seeds, images)`` correctness arrays,
    each image resample shared by every seed."""
    values, counts, s = _levels(a, b)
    n = int(counts.sum())
    rng = rng or np.random.default_rng(SEED)
    draws = rng.multinomial(n, counts / n, size=n_boot)
    return 100.0 * (draws @ values) / (s * n)


def permutation_p_value(a: np.ndarray, b: np.ndarray, n_perm: int = N_PERM,
                        rng: np.random.Generator | None = None) -> float:
    """The paired (sign-flip) permutation p-value of ``|sum_i D_i|``."""
    values, counts, s = _levels(a, b)
    observed = abs(int(counts @ values))
    sizes = np.array([counts[s + j] + counts[s - j] for j in range(1, s + 1)])  # images with |D_i| = j / S
    rng = rng or np.random.default_rng(SEED)
    heads = rng.binomial(sizes, 0.5, size=(n_perm, s))  # images of each |D_i| keeping their sign
    flipped = np.abs((2 * heads - sizes) @ np.arange(1, s + 1))
    return float((1 + np.count_nonzero(flipped >= observed)) / (1 + n_perm))


def paired_difference(a: np.ndarray, b: np.ndarray, *, seeds: tuple[int, ...] = (), n_boot: int = N_BOOT,
                      n_perm: int = N_PERM, level: float = LEVEL, seed: int = SEED) -> PairedDifference:
    """Difference in top-1 of A and B with its paired bootstrap interval and permutation p-value, from their
    ``(seeds, images)`` correctness arrays (the same images in the same order, row ``j`` of both from one seed)."""
    if not 0 < level < 1:
        raise CogError(f"interval level must be between 0 and 1, got {level}")
    a, b = np.atleast_2d(np.asarray(a, dtype=bool)), np.atleast_2d(np.asarray(b, dtype=bool))
    boot_rng, perm_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    reps = bootstrap_differences(a, b, n_boot, boot_rng)
    tail = (1 - level) / 2
    low, high = np.quantile(reps, [tail, 1 - tail], method="inverted_cdf")
    diff = 100.0 * float(a.mean() - b.mean())
    return PairedDifference(diff, float(low), float(high), permutation_p_value(a, b, n_perm, perm_rng),
                            a.shape[1], tuple(seeds), n_boot, n_perm, level, seed)


def seeded_alike(a: Mapping[int, Predictions], b: Mapping[int, Predictions]) -> tuple[Mapping[int, Predictions],
                                                                                      Mapping[int, Predictions]]:
    """The predictions per seed of two sides, a side whose only key is :data:`~cog_pl.results.NO_SEED` (a seedless
    row's, zero-shot's: the same for every seed) given under each seed of the other."""
    return tuple({s: side[NO_SEED] for s in other} if set(side) == {NO_SEED} else side  # type: ignore[return-value]
                 for side, other in ((a, b), (b, a)))


def aligned(a: Mapping[int, Predictions], b: Mapping[int, Predictions]) -> tuple[np.ndarray, np.ndarray,
                                                                                 tuple[int, ...]]:
    """The ``(seeds, images)`` top-1 correctness of two models on the seeds both have and the test images both
    answered (matched by dataset row); refused when they name other concepts or other labels for an image. A
    seedless side is paired with each seed of the other (:func:`seeded_alike`)."""
    a, b = seeded_alike(a, b)
    seeds = tuple(sorted(a.keys() & b.keys()))
    if not seeds:
        raise CogError(f"no seed in common (seeds {sorted(a)} and {sorted(b)})")
    first_a, first_b = a[seeds[0]], b[seeds[0]]
    if first_a.classes is not None and first_b.classes is not None and first_a.classes != first_b.classes:
        raise CogError("the two models' predictions name other concepts (class lists differ)")
    images = np.intersect1d(first_a.image, first_b.image)
    if len(images) == 0:
        raise CogError("the two models answered no test image in common")
    rows_a, rows_b = [], []
    for s in seeds:
        for preds, out in ((a[s], rows_a), (b[s], rows_b)):
            pos = positions(preds.image, images)
            if pos is None:
                raise CogError("the predictions of one seed hold other test images than another's")
            out.append((preds.label[pos], preds.correct[pos]))
    labels = [lab for lab, _ in rows_a + rows_b]
    if any(not np.array_equal(labels[0], lab) for lab in labels[1:]):
        raise CogError("the two models' predictions give other labels to the same test images")
    return np.stack([c for _, c in rows_a]), np.stack([c for _, c in rows_b]), seeds


def split_sha256_of(row: Mapping[str, Any]) -> str | None:
    """The digest of the test split a row was made on (its test store's ``split_sha256``, as the row's ``features``
    record it); None where the row does not record one (a plain store, IN-1K's official val set, a row made from
    images rather than stores)."""
    features = row.get("features")
    test = features.get("test") if isinstance(features, dict) else None  # "on-the-fly": a row made from images
    found = test.get("split_sha256") if isinstance(test, dict) else None
    return str(found) if found else None


def check_same_test_split(a: Mapping[str, Any], b: Mapping[str, Any], where: str = "") -> None:
    """Refuse to pair rows made on two different test splits (both digests recorded and different): their
    predictions' dataset rows name other images, so matching them by row would compare unrelated answers."""
    da, db = split_sha256_of(a), split_sha256_of(b)
    if da is not None and db is not None and da != db:
        raise CogError(f"{where + ': ' if where else ''}cannot pair {_row_name(a)} (test split sha256 {da[:16]}) "
                       f"with {_row_name(b)} (test split sha256 {db[:16]}): they were tested on other images; "
                       "compare models made on one benchmark and split")


def _row_name(row: Mapping[str, Any]) -> str:
    return (f"{row.get('model')}/{row.get('method') or 'linear'}/{row.get('domain')}/shots={row.get('shots') or 'all'}"
            f"/seed={row.get('seed')}")


def positions(have: np.ndarray, want: np.ndarray) -> np.ndarray | None:
    """Where each of ``want`` sits in ``have`` (dataset rows, any order); None when one is absent."""
    order = np.argsort(have, kind="stable")
    at = np.searchsorted(have[order], want)
    if np.any(at >= len(have)):
        return None
    pos = order[at]
    return pos if np.array_equal(have[pos], want) else None
