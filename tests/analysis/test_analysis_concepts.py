"""Concept-level analyses (cog_pl.analysis.concepts, cog_pl.analysis.confusions) against direct computations on
small predictions."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cog_pl.analysis.concepts import (
    binned_curve,
    concept_accuracy,
    concept_scores,
    default_bins,
    extremes,
    fit_slope,
    quantile_edges,
    slope_interval,
)
from cog_pl.analysis.confusions import most_taken_for, top_confusions
from cog_pl.results.predictions import Predictions

CLASSES = ("n01", "n02", "n03", "n04")


def _seed_predictions(rng, labels, first):
    return Predictions.of(np.stack([first, (first + 1) % 4], 1), labels, np.arange(len(labels)), CLASSES)


def test_per_concept_top1_is_the_direct_count_pooled_over_seeds():
    rng = np.random.default_rng(0)
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])  # n04 has no test image
    by_seed = {s: _seed_predictions(rng, labels, rng.integers(0, 4, len(labels))) for s in (22, 37, 45)}
    scores = concept_scores("m", "linear", "cog_l2", by_seed)
    for c in range(3):
        direct = [np.mean([p.top5[i, 0] == c for i in range(len(labels)) if labels[i] == c]) for p in
                  by_seed.values()]
        assert scores.top1[c] == pytest.approx(100 * np.mean(direct))  # the mean over seeds of each seed's
        assert scores.images[c] == list(labels).count(c)
    assert np.isnan(scores.top1[3]) and scores.images[3] == 0
    assert scores.classes == CLASSES and scores.seeds == (22, 37, 45)
    top1, images = concept_accuracy(labels, by_seed[22].correct, 4)
    assert list(images) == [3, 2, 4, 0] and top1[0] == pytest.approx(100 * by_seed[22].correct[:3].mean())
    moved = {**by_seed, 93: Predictions.of(by_seed[22].top5, labels, np.arange(len(labels)) + 1, CLASSES)}
    with pytest.raises(ValueError, match="seed 93's predictions hold other test images"):
        concept_scores("m", "linear", "cog_l2", moved)


def test_binned_curve_is_each_bins_mean_with_a_band_around_it():
    rng = np.random.default_rng(1)
    sim = rng.random(40)
    val = 100 * sim + rng.normal(0, 5, 40)
    edges = quantile_edges(sim, 4)
    assert len(edges) == 5 and edges[0] == sim.min() and edges[-1] == sim.max()
    curve = binned_curve(sim, val, edges, seed=3)
    for b in range(4):
        inside = (sim >= edges[b]) & ((sim < edges[b + 1]) if b < 3 else (sim <= edges[b + 1]))
        assert curve.concepts[b] == inside.sum() == 10
        assert curve.mean[b] == pytest.approx(val[inside].mean()) and curve.center[b] == pytest.approx(
            sim[inside].mean())
        assert curve.low[b] < curve.mean[b] < curve.high[b]
        se = val[inside].std(ddof=1) / np.sqrt(10)  # the band is about the mean's normal interval
        assert curve.high[b] - curve.low[b] == pytest.approx(2 * 1.96 * se, rel=0.35)
    again = binned_curve(sim, val, edges, seed=3)  # seeded: the same bands every time
    assert np.array_equal(again.low, curve.low) and np.array_equal(again.high, curve.high)
    assert default_bins(75) == 9 and default_bins(5000) == 10 and default_bins(5) == 1


def test_slope_is_the_least_squares_slope_with_an_interval():
    rng = np.random.default_rng(2)
    sim = rng.random(200)
    val = 30 + 40 * sim + rng.normal(0, 4, 200)
    assert fit_slope(sim, val) == pytest.approx(np.polyfit(sim, val, 1)[0])
    slope, low, high = slope_interval(sim, val, seed=0)
    assert low < 40 < high and low < slope < high and high - low < 6
    assert np.isnan(fit_slope([0.5, 0.5], [1.0, 2.0]))


def test_extremes_are_the_best_and_worst_concepts_ties_by_wnid():
    classes = ("n3", "n1", "n2", "n4", "n5", "n6")
    best, worst = extremes(classes, np.array([50.0, 90.0, 50.0, np.nan, 10.0, 70.0]), k=2)
    assert best == [("n1", 90.0), ("n6", 70.0)] and worst == [("n5", 10.0), ("n2", 50.0)]  # ties by wnid
    best, worst = extremes(classes[:3], np.array([50.0, 90.0, 40.0]), k=3)
    assert best == [("n1", 90.0)] and worst == [("n2", 40.0)]  # three concepts: none in both lists


def test_confusions_are_the_direct_counts_over_seeds():
    rng = np.random.default_rng(4)
    labels = [np.repeat(np.arange(5), 6) for _ in range(3)]
    firsts = [np.where(rng.random(30) < 0.5, lab, rng.integers(0, 5, 30)) for lab in labels]
    firsts[0][0] = -1  # no prediction: no confusion either
    got = top_confusions(labels, firsts, 5, k=4)
    pairs = Counter((int(t), int(p)) for lab, first in zip(labels, firsts) for t, p in zip(lab, first)
                    if p >= 0 and t != p)
    want = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
    assert [((c.true, c.predicted), c.count) for c in got] == want
    assert all(c.total == 18 and c.share == pytest.approx(100 * c.count / 18) for c in got)


def test_most_taken_for_names_the_seen_class_of_most_images():
    labels = [np.array([0, 0, 0, 1, 1, 2])]
    firsts = [np.array([4, 4, 1, 2, 3, 0])]
    taken = most_taken_for(labels, firsts, n_label=4, n_pred=5)
    assert [(c.predicted, c.count, c.total) for c in taken[:3]] == [(4, 2, 3), (2, 1, 2), (0, 1, 1)]
    assert taken[3] is None  # no image of the fourth concept
