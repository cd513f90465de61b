"""Ranking agreement of two methods: Spearman's rho as scipy computes it (ties included), not given for n < 3 or a
constant side, and the gap's paired difference pooled over models on their common seeds and test images."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from cog_pl.analysis.agreement import NOT_DEFINED, pooled_difference, rank_agreement, spearman
from cog_pl.analysis.paired import paired_difference
from cog_pl.errors import CogError
from cog_pl.results.predictions import Predictions


@pytest.mark.parametrize(("a", "b"), [([60, 55, 50, 45], [58, 56, 47, 40]), ([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]),
                                      ([70, 70, 65, 50], [60, 61, 61, 40]), ([3, 1, 2], [1, 2, 3])])
def test_spearman_is_scipys(a, b):
    assert spearman(a, b) == pytest.approx(spearmanr(a, b).statistic)


def test_spearman_is_not_defined_for_fewer_than_three_models_or_a_constant_side():
    assert spearman([1.0, 2.0], [2.0, 3.0]) is None and spearman([5, 5, 5], [1, 2, 3]) is None
    top1 = {(m, meth, "cog_l1", None): v for m, pair in {"a": (50, 52), "b": (40, 45)}.items()
            for meth, v in zip(("ridge", "linear"), pair)}
    (level,) = rank_agreement(top1, "ridge", "linear")
    assert level.models == ("a", "b") and level.rho is None and level.rho_note == NOT_DEFINED["few"]
    assert level.gap == pytest.approx(((50 - 52) + (40 - 45)) / 2) and level.paired is None


def _preds(correct: np.ndarray, images: np.ndarray, labels: np.ndarray) -> Predictions:
    first = np.where(correct, labels, (labels + 1) % 4)
    return Predictions.of(np.stack([(first + k) % 4 for k in range(4)], 1), labels, images)


def test_pooled_difference_is_the_mean_gap_on_common_seeds_and_images():
    rng = np.random.default_rng(0)
    images, labels = np.arange(40), np.arange(40) % 4
    truth, pairs = {}, []
    for m, (pa, pb) in enumerate(((0.7, 0.6), (0.5, 0.55), (0.8, 0.6))):
        seeds = (22, 37, 45) if m == 0 else (22, 37)  # seed 45: not every model's, left out
        sides = []
        for p in (pa, pb):
            side = {}
            for s in seeds:
                right = rng.random(40) < p
                truth[m, p, s] = right[:35]
                side[s] = _preds(right[:35] if m == 2 else right, images[:35] if m == 2 else images,
                                 labels[:35] if m == 2 else labels)  # model 2 answered the first 35 images only
            sides.append(side)
        pairs.append(tuple(sides))
    got = pooled_difference(pairs, seed=3)
    a = np.stack([truth[m, pa, s] for m, (pa, _) in enumerate(((0.7, 0.6), (0.5, 0.55), (0.8, 0.6))) for s in (22, 37)])
    b = np.stack([truth[m, pb, s] for m, (_, pb) in enumerate(((0.7, 0.6), (0.5, 0.55), (0.8, 0.6))) for s in (22, 37)])
    assert got.seeds == (22, 37) and got.images == 35
    per_model = [100 * (a[2 * m:2 * m + 2].mean() - b[2 * m:2 * m + 2].mean()) for m in range(3)]
    assert got.difference == pytest.approx(np.mean(per_model))
    assert got == paired_difference(a, b, seeds=(22, 37), seed=3)
    assert got.low <= got.difference <= got.high


def test_pooling_refuses_other_splits_and_nothing_in_common():
    images = np.arange(8)
    one = {22: _preds(np.ones(8, bool), images, images % 4)}
    other_labels = {22: _preds(np.ones(8, bool), images, (images + 1) % 4)}
    with pytest.raises(CogError, match="other labels to the same test images"):
        pooled_difference([(one, one), (other_labels, other_labels)])
    with pytest.raises(CogError, match="no seed common"):
        pooled_difference([(one, {37: one[22]})])
    with pytest.raises(CogError, match="no model has stored predictions"):
        pooled_difference([])
