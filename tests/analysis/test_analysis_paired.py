"""Paired statistics of two models (cog_pl.analysis.paired): the bootstrap interval against the exact bootstrap of
small predictions, its coverage of a known gap, the permutation p-value's uniformity under identical models, and
pairing by test image."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from cog_pl.analysis.paired import aligned, bootstrap_differences, paired_difference, permutation_p_value
from cog_pl.results.predictions import Predictions

#: Image types of the simulated population: share, top-1 chance of model B, of model A (a gap of 5 points).
TYPES = np.array([0.5, 0.3, 0.2])
P_B = np.array([0.95, 0.60, 0.20])
P_A = np.array([0.97, 0.70, 0.25])
TRUE_GAP = 100 * float(TYPES @ (P_A - P_B))


def _simulate(rng, p_a, p_b, images=600, seeds=3):
    """One test set drawn from the population and each model's correctness per seed (training noise independent per
    image and seed)."""
    kind = rng.choice(len(TYPES), size=images, p=TYPES)
    a = rng.random((seeds, images)) < p_a[kind]
    b = rng.random((seeds, images)) < p_b[kind]
    return a, b


def test_interval_is_the_exact_paired_bootstrap_of_small_predictions():
    a = np.array([[1, 1, 0, 1, 0, 1], [1, 0, 0, 1, 1, 1]], dtype=bool)  # 2 seeds x 6 images
    b = np.array([[0, 1, 0, 0, 0, 1], [1, 0, 1, 0, 0, 1]], dtype=bool)
    # the direct computation: every one of the 6^6 resamples of the images, each applied to both seeds, each seed's
    # difference on it, averaged over the seeds
    idx = np.array(list(itertools.product(range(6), repeat=6)))
    exact = np.mean([100 * (a[s][idx].mean(1) - b[s][idx].mean(1)) for s in range(2)], axis=0)
    want = np.quantile(exact, [0.025, 0.975], method="inverted_cdf")
    got = paired_difference(a, b, seeds=(22, 37), n_boot=200_000, n_perm=1000, seed=3)
    assert got.difference == pytest.approx(100 * (a.mean() - b.mean())) == pytest.approx(np.mean(
        [100 * (a[s].mean() - b[s].mean()) for s in range(2)]))
    assert (got.low, got.high) == pytest.approx(tuple(want)) and got.images == 6 and got.seeds == (22, 37)
    reps = bootstrap_differences(a, b, 200_000, np.random.default_rng(0))
    assert reps.mean() == pytest.approx(exact.mean(), abs=0.05) and reps.std() == pytest.approx(exact.std(), rel=0.01)
    # the permutation p-value against all 2^6 sign flips of the images' seed-averaged differences
    d = (a.astype(int) - b).sum(0)
    flips = np.array(list(itertools.product((-1, 1), repeat=6)))
    exact_p = np.mean(np.abs(flips @ d) >= abs(d.sum()))
    assert permutation_p_value(a, b, 200_000, np.random.default_rng(1)) == pytest.approx(exact_p, abs=0.005)


def test_the_same_seed_gives_the_same_statistics():
    a, b = _simulate(np.random.default_rng(5), P_A, P_B)
    one, two = paired_difference(a, b, seed=7), paired_difference(a, b, seed=7)
    assert one == two
    assert paired_difference(a, b, seed=8).low != one.low


def test_interval_covers_a_known_gap_at_the_nominal_rate():
    rng = np.random.default_rng(2021)
    runs = 400
    covered = []
    for _ in range(runs):
        a, b = _simulate(rng, P_A, P_B)
        p = paired_difference(a, b, n_boot=2000, n_perm=100, seed=int(rng.integers(1 << 31)))
        covered.append(p.low <= TRUE_GAP <= p.high)
    rate = float(np.mean(covered))
    # 95 % nominal; 400 runs give a standard error of 1.1 points
    assert 0.92 <= rate <= 0.98, f"coverage {rate:.3f} of a {TRUE_GAP:.1f}-point gap over {runs} simulated test sets"


def test_p_value_is_uniform_when_two_models_are_identical():
    rng = np.random.default_rng(37)
    p_values = []
    for _ in range(500):  # 10,000 images: the statistic takes values fine enough for a near-continuous p
        a, b = _simulate(rng, P_B, P_B, images=10_000)
        p_values.append(permutation_p_value(a, b, 999, np.random.default_rng(int(rng.integers(1 << 31)))))
    p_values = np.array(p_values)
    assert stats.kstest(p_values, "uniform").pvalue > 0.01, np.histogram(p_values, bins=10, range=(0, 1))[0]
    assert 0.025 <= np.mean(p_values < 0.05) <= 0.08 and 0.06 <= np.mean(p_values < 0.1) <= 0.14
    # and a real gap of 5 points on 600 images is found almost always
    found = [permutation_p_value(*_simulate(rng, P_A, P_B), 999, rng) < 0.05 for _ in range(50)]
    assert np.mean(found) > 0.8


def _preds(images, labels, right, classes=("a", "b", "c")):
    top = np.where(right, labels, (labels + 1) % 3)
    return Predictions.of(np.stack([top, (top + 1) % 3], 1), labels, images, classes)


def test_models_are_paired_by_test_image_and_seed():
    labels = np.array([0, 1, 2, 0, 1])
    right_a = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 0, 0]], dtype=bool)
    right_b = np.array([[0, 1, 0, 0, 0], [1, 0, 1, 0, 0]], dtype=bool)
    images = np.array([10, 11, 12, 13, 14])
    a = {22: _preds(images, labels, right_a[0]), 37: _preds(images, labels, right_a[1])}
    order = np.array([4, 2, 0, 1, 3])  # model B's images in another order, and one more seed
    b = {s: _preds(images[order], labels[order], right_b[i][order]) for i, s in enumerate((22, 37))}
    b[45] = b[22]
    ca, cb, seeds = aligned(a, b)
    assert seeds == (22, 37) and np.array_equal(ca, right_a) and np.array_equal(cb, right_b)
    half = {22: _preds(images[:3], labels[:3], right_b[0][:3])}  # B answered 3 of the images: those are compared
    ca, cb, _ = aligned(a, half)
    assert ca.shape == (1, 3) and np.array_equal(cb[0], right_b[0][:3])


def test_a_seedless_side_is_paired_with_every_seed_of_the_other():
    from cog_pl.results import NO_SEED

    labels, images = np.array([0, 1, 2]), np.arange(3)
    zeroshot = {NO_SEED: _preds(images, labels, np.array([1, 0, 1], bool))}  # one row, no seed (zero-shot's)
    linear = {22: _preds(images, labels, np.ones(3, bool)), 37: _preds(images, labels, np.array([1, 1, 0], bool))}
    for a, b in ((zeroshot, linear), (linear, zeroshot)):
        ca, cb, seeds = aligned(a, b)
        assert seeds == (22, 37) and ca.shape == cb.shape == (2, 3)
    ca, cb, _ = aligned(zeroshot, linear)
    assert np.array_equal(ca, [[1, 0, 1], [1, 0, 1]]) and np.array_equal(cb, [[1, 1, 1], [1, 1, 0]])


def test_pairs_that_cannot_be_compared_are_refused():
    labels, images = np.array([0, 1, 2]), np.arange(3)
    a = {22: _preds(images, labels, np.ones(3, bool))}
    with pytest.raises(ValueError, match="no seed in common"):
        aligned(a, {37: a[22]})
    with pytest.raises(ValueError, match="other labels"):
        aligned(a, {22: _preds(images, np.array([0, 2, 1]), np.ones(3, bool))})
    with pytest.raises(ValueError, match="name other concepts"):
        aligned(a, {22: _preds(images, labels, np.ones(3, bool), classes=("x", "y", "z"))})
    with pytest.raises(ValueError, match="no test image in common"):
        aligned(a, {22: _preds(images + 10, labels, np.ones(3, bool))})


def test_rows_of_two_test_splits_are_never_paired():
    """Issue 37: predictions are matched by dataset row, which names other images in another test split; two rows
    recording different split digests are refused, naming both rows and digests. Rows of one split, or rows that
    record none (IN-1K's official val set, a plain store), pass."""
    from cog_pl.analysis.paired import check_same_test_split, split_sha256_of
    from cog_pl.errors import CogError

    def row(model, split):
        features = {"test": {"split_sha256": split}} if split else {"test": {"plain": True}}
        return {"model": model, "method": "linear", "domain": "cog_l3", "shots": None, "seed": 22, "features": features}

    ours, theirs = "a" * 64, "b" * 64
    assert split_sha256_of(row("m", ours)) == ours and split_sha256_of(row("m", None)) is None
    check_same_test_split(row("m", ours), row("base", ours))
    check_same_test_split(row("m", ours), row("base", None))
    with pytest.raises(CogError, match=f"^results.sqlite: cannot pair m/linear/cog_l3/shots=all/seed=22 \\(test split "
                                       f"sha256 {ours[:16]}\\) with base/linear/cog_l3/shots=all/seed=22 \\(test split "
                                       f"sha256 {theirs[:16]}\\): they were tested on other images"):
        check_same_test_split(row("m", ours), row("base", theirs), "results.sqlite")
