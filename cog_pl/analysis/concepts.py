"""Concept-level results from stored test predictions: per-concept top-1, accuracy against similarity to the seen
concepts as a binned curve with confidence bands, its slope, and the concepts a model gets most and least right.

Pure functions of predictions, similarities and an explicit seed. A concept's top-1 is the share of its test images
whose first class is right, pooled over the seeds (the seeds share the test images, so this is the mean over seeds
of each seed's per-concept top-1). The curve pools the concepts of all levels, cuts their similarities into bins of
about equal counts (:func:`quantile_edges`), and shows each bin's mean concept top-1 with a percentile bootstrap
interval over the bin's concepts; the slope is the least-squares slope of concept top-1 on similarity, with a
bootstrap interval over concepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cog_pl.errors import CogError
from cog_pl.results.predictions import Predictions

#: Bootstrap replicates of the curve's bands and the slope's interval, and the bands' level.
N_BOOT = 2000
LEVEL = 0.95
#: Similarity unit the report states slopes in (top-1 points per +0.1 of similarity).
SLOPE_UNIT = 0.1


@dataclass(frozen=True)
class ConceptScores:
    """Per-concept test top-1 (%) of one (model, method, domain), pooled over ``seeds``; ``images``: the test
    images of each concept (per seed). ``classes``: the concepts' wnids (``class <i>`` where the stores name none);
    a concept without test images has NaN."""

    model: str
    method: str
    domain: str
    classes: tuple[str, ...]
    top1: np.ndarray
    images: np.ndarray
    seeds: tuple[int, ...]


def concept_accuracy(label: np.ndarray, correct: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(top1, images)`` per class: the percentage of each class's rows that are ``correct`` (NaN for a class
    without rows) and its row count. ``correct`` may be ``(seeds, N)``: pooled over the seeds."""
    label = np.asarray(label, dtype=np.int64)
    correct = np.atleast_2d(np.asarray(correct, dtype=bool))
    images = np.bincount(label, minlength=num_classes)
    right = np.bincount(np.tile(label, correct.shape[0]), weights=correct.ravel(), minlength=num_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        top1 = np.where(images > 0, 100.0 * right / (images * correct.shape[0]), np.nan)
    return top1, images


def concept_scores(model: str, method: str, domain: str, by_seed: Mapping[int, Predictions]) -> ConceptScores:
    """The per-concept top-1 of one (model, method, domain) from its predictions per seed (the same test images and
    labels in every seed: refused otherwise)."""
    seeds = tuple(sorted(by_seed))
    if not seeds:
        raise CogError(f"{model}/{method}/{domain}: no predictions")
    first = by_seed[seeds[0]]
    for s in seeds[1:]:
        other = by_seed[s]
        if not (np.array_equal(other.image, first.image) and np.array_equal(other.label, first.label)
                and other.classes == first.classes):
            raise CogError(f"{model}/{method}/{domain}: seed {s}'s predictions hold other test images or labels "
                           f"than seed {seeds[0]}'s")
    num = len(first.classes) if first.classes is not None else int(first.label.max(initial=-1)) + 1
    top1, images = concept_accuracy(first.label, np.stack([by_seed[s].correct for s in seeds]), num)
    classes = first.classes if first.classes is not None else tuple(f"class {i}" for i in range(num))
    return ConceptScores(model, method, domain, tuple(classes), top1, images, seeds)


@dataclass(frozen=True)
class Curve:
    """Mean concept value per similarity bin (``edges``: ``bins + 1``), its interval ``[low, high]`` and the number
    of concepts in each bin; ``center``: the bin's mean similarity. Empty bins hold NaN."""

    edges: np.ndarray
    center: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    concepts: np.ndarray


def quantile_edges(similarity: Sequence[float], bins: int) -> np.ndarray:
    """Edges of at most ``bins`` bins holding about equal numbers of concepts (repeated edges merged)."""
    sim = np.asarray(similarity, dtype=np.float64)
    sim = sim[np.isfinite(sim)]
    if len(sim) == 0:
        raise CogError("no concept with a similarity to bin")
    edges = np.unique(np.quantile(sim, np.linspace(0, 1, max(1, bins) + 1)))
    return edges if len(edges) > 1 else np.array([edges[0], edges[0]])


def default_bins(concepts: int) -> int:
    """Bins for a curve over ``concepts`` concepts: 10, fewer so that a bin holds at least 8."""
    return int(min(10, max(1, concepts // 8)))


def bin_of(similarity: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each similarity's bin (the last edge included in the last bin; -1 outside the edges)."""
    idx = np.searchsorted(edges, similarity, side="right") - 1
    idx = np.where(similarity == edges[-1], len(edges) - 2, idx)
    return np.where((idx < 0) | (idx > len(edges) - 2) | ~np.isfinite(similarity), -1, idx)


def binned_curve(similarity: Sequence[float], values: Sequence[float], edges: np.ndarray, *, n_boot: int = N_BOOT,
                 level: float = LEVEL, seed: int = 0) -> Curve:
    """Mean of ``values`` (one per concept) per similarity bin, with a percentile bootstrap interval over the bin's
    concepts (``n_boot`` replicates from ``seed``); concepts with a NaN value or similarity are left out."""
    sim, val = np.asarray(similarity, dtype=np.float64), np.asarray(values, dtype=np.float64)
    keep = np.isfinite(sim) & np.isfinite(val)
    sim, val = sim[keep], val[keep]
    which = bin_of(sim, edges)
    bins = len(edges) - 1
    out = {k: np.full(bins, np.nan) for k in ("center", "mean", "low", "high")}
    counts = np.zeros(bins, dtype=np.int64)
    rng = np.random.default_rng(seed)
    tail = (1 - level) / 2
    for b in range(bins):
        v = val[which == b]
        counts[b] = len(v)
        if not len(v):
            continue
        out["center"][b], out["mean"][b] = sim[which == b].mean(), v.mean()
        reps = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
        out["low"][b], out["high"][b] = np.quantile(reps, [tail, 1 - tail])
    return Curve(np.asarray(edges, dtype=np.float64), out["center"], out["mean"], out["low"], out["high"], counts)


def fit_slope(similarity: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` on ``similarity`` (value units per unit of similarity); NaN with fewer
    than two distinct similarities."""
    sim, val = np.asarray(similarity, dtype=np.float64), np.asarray(values, dtype=np.float64)
    keep = np.isfinite(sim) & np.isfinite(val)
    sim, val = sim[keep], val[keep]
    dx = sim - sim.mean()
    ss = float(dx @ dx)
    return float(dx @ (val - val.mean()) / ss) if ss > 0 else float("nan")


def slope_interval(similarity: Sequence[float], values: Sequence[float], *, n_boot: int = N_BOOT,
                   level: float = LEVEL, seed: int = 0) -> tuple[float, float, float]:
    """``(slope, low, high)``: :func:`fit_slope` with a percentile bootstrap interval over concepts."""
    sim, val = np.asarray(similarity, dtype=np.float64), np.asarray(values, dtype=np.float64)
    keep = np.isfinite(sim) & np.isfinite(val)
    sim, val = sim[keep], val[keep]
    slope = fit_slope(sim, val)
    if not np.isfinite(slope):
        return slope, float("nan"), float("nan")
    n = len(sim)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    # each replicate's sums of x, y, x^2, xy from how often it drew each concept: one bincount and one product
    counts = np.bincount((idx + n * np.arange(n_boot)[:, None]).ravel(), minlength=n_boot * n).reshape(n_boot, n)
    sx, sy, sxx, sxy = (counts @ np.stack([sim, val, sim * sim, sim * val], axis=1)).T
    ss = n * sxx - sx * sx
    reps = ((n * sxy - sx * sy) / np.where(ss > 1e-12 * n * n, ss, np.nan))
    reps = reps[np.isfinite(reps)]
    tail = (1 - level) / 2
    low, high = np.quantile(reps, [tail, 1 - tail])
    return slope, float(low), float(high)


def extremes(classes: Sequence[str], top1: np.ndarray, k: int = 3) -> tuple[list[tuple[str, float]],
                                                                            list[tuple[str, float]]]:
    """The ``k`` concepts of highest and of lowest top-1, ``(wnid, top-1)`` each (ties by wnid; NaN left out); at
    most half the concepts each, so that no concept is in both lists."""
    pairs = [(c, float(v)) for c, v in zip(classes, top1) if np.isfinite(v)]
    k = min(k, len(pairs) // 2) if len(pairs) > 1 else len(pairs)
    best = sorted(pairs, key=lambda p: (-p[1], p[0]))[:k]
    worst = sorted(pairs, key=lambda p: (p[1], p[0]))[:k]
    return best, worst
