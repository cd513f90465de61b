"""How well a cheap method ranks models as a reference method does, per level: Spearman's rank correlation over the
models that have both, and the mean top-1 gap with its paired interval.

- **Spearman's rho** (:func:`spearman`): Pearson's correlation of the two methods' ranks of the models' mean top-1
  (average ranks for ties); not defined for fewer than 3 models (two points always correlate perfectly) or when one
  method gives every model the same top-1 (:data:`NOT_DEFINED` says why).
- **Gap**: the mean over the models of the method's top-1 minus the reference's (points), from the cells.
- **Paired interval** (:func:`pooled_difference`): the models' test predictions stacked, each (model, seed) a row of
  the ``(rows, images)`` correctness arrays of :func:`cog_pl.analysis.paired.paired_difference`, on the test images
  every model answered and the seeds every model has on both sides. Its bootstrap draws one resample of the images
  for every row (the models share the level's test images), so the interval is that of the mean over the models of
  each one's seed-averaged difference: the gap, measured on those images and seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cog_pl.analysis.paired import SEED, PairedDifference, paired_difference, positions
from cog_pl.errors import CogError
from cog_pl.results.predictions import Predictions

__all__ = ["NOT_DEFINED", "LevelAgreement", "pooled_difference", "rank_agreement", "spearman"]

#: The fewest models Spearman's rho is given for.
MIN_MODELS = 3
NOT_DEFINED = {"few": f"not defined for n < {MIN_MODELS}", "constant": "not defined: one method ties every model"}


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0
            start = end
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation of paired values ``a`` and ``b``; None where it is not defined (fewer than
    :data:`MIN_MODELS` pairs, or one side constant)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"spearman takes two sequences of one length, got {a.shape} and {b.shape}")
    if len(a) < MIN_MODELS:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    norm = float(np.sqrt((ra ** 2).sum() * (rb ** 2).sum()))
    return None if norm == 0 else float((ra * rb).sum() / norm)


@dataclass(frozen=True)
class LevelAgreement:
    """One (domain, shots) of two methods: the models with both, Spearman's rho over them (None: ``rho_note`` says
    why), the mean gap (method minus reference, points), and the paired difference pooled over the models' stored
    predictions (None: ``paired_note`` says why)."""

    domain: str
    shots: int | None
    models: tuple[str, ...]
    rho: float | None
    gap: float
    rho_note: str = ""
    paired: PairedDifference | None = None
    paired_note: str = ""


def rank_agreement(top1: Mapping[tuple[str, str, str, int | None], float], method: str, reference: str,
                   predictions: Mapping[tuple[str, str, str], Mapping[int, Predictions]] | None = None,
                   seed: int = SEED) -> list[LevelAgreement]:
    """For every (domain, shots) where some model has cells of both ``method`` and ``reference`` (``top1``: each
    ``(model, method, domain, shots)`` cell's mean top-1), their :class:`LevelAgreement`; with ``predictions``
    (``(model, method, domain) -> {seed: predictions}`` of all-data rows), the pooled paired difference of the
    all-data ones (:func:`pooled_difference`, its bootstrap drawn from ``seed``). In the order the keys come."""
    levels = dict.fromkeys((d, n) for _, m, d, n in top1 if m == method)
    out = []
    for domain, shots in levels:
        models = tuple(sorted(mod for mod, m, d, n in top1 if m == method and (d, n) == (domain, shots)
                              and (mod, reference, domain, shots) in top1))
        if not models:
            continue
        a = [top1[mod, method, domain, shots] for mod in models]
        b = [top1[mod, reference, domain, shots] for mod in models]
        rho = spearman(a, b)
        note = "" if rho is not None else NOT_DEFINED["few" if len(models) < MIN_MODELS else "constant"]
        paired, why = None, ""
        if predictions is not None and shots is None:
            try:
                paired = pooled_difference([(predictions[mod, method, domain], predictions[mod, reference, domain])
                                            for mod in models if (mod, method, domain) in predictions
                                            and (mod, reference, domain) in predictions], seed)
            except CogError as err:
                why = str(err)
        out.append(LevelAgreement(domain, shots, models, rho, float(np.mean(np.subtract(a, b))), note, paired, why))
    return out


def pooled_difference(pairs: Sequence[tuple[Mapping[int, Predictions], Mapping[int, Predictions]]],
                      seed: int = SEED) -> PairedDifference:
    """The paired difference (method minus reference, points) pooled over models: ``pairs`` holds each model's
    ``({seed: method's predictions}, {seed: reference's predictions})``; the seeds every side has and the test images
    every side answered are kept, each (model, seed) a row. Refused in one line where no model, seed or image is
    common, or where two sides give an image other labels (other test splits)."""
    if not pairs:
        raise CogError("no model has stored predictions of both methods")
    sides = [side for pair in pairs for side in pair]
    seeds = sorted(set.intersection(*(set(side) for side in sides)))
    if not seeds:
        raise CogError("no seed common to every model's rows of both methods")
    images = sides[0][seeds[0]].image
    for side in sides:
        for s in seeds:
            images = np.intersect1d(images, side[s].image)
    if len(images) == 0:
        raise CogError("no test image answered by every model of both methods")
    labels, rows_a, rows_b = None, [], []
    for side_a, side_b in pairs:
        for s in seeds:
            for side, out in ((side_a, rows_a), (side_b, rows_b)):
                preds = side[s]
                pos = positions(preds.image, images)
                if pos is None:
                    raise CogError("a model's predictions hold other test images than another's")
                if labels is None:
                    labels = preds.label[pos]
                elif not np.array_equal(labels, preds.label[pos]):
                    raise CogError("two models' predictions give other labels to the same test images (other test "
                                   "splits)")
                out.append(preds.correct[pos])
    return paired_difference(np.stack(rows_a), np.stack(rows_b), seeds=tuple(seeds), seed=seed)
