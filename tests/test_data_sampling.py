"""Validation split and N-shot sampling: per-class counts, disjointness, determinism, fixed values."""

import numpy as np
import pytest

from cog_pl.data.sampling import few_shot, final_seed, val_split


def _labels(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.permutation(np.repeat(np.arange(7), [10, 11, 5, 1, 20, 13, 7]))


def test_val_split_holds_out_a_floor_fifth_of_every_class():
    y = _labels()
    tr, va = val_split(y, 0.2, seed=22)
    assert len(np.intersect1d(tr, va)) == 0
    assert np.array_equal(np.sort(np.concatenate([tr, va])), np.arange(len(y)))
    for c, n in enumerate([10, 11, 5, 1, 20, 13, 7]):
        assert (y[va] == c).sum() == int(n * 0.2)
    assert tr.dtype == va.dtype == np.int64 and np.all(np.diff(tr) > 0)


def test_val_split_depends_on_seed_only_and_matches_fixed_values():
    y = _labels()
    a, b = val_split(y, 0.2, 22), val_split(y.copy(), 0.2, 22)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not np.array_equal(a[1], val_split(y, 0.2, 37)[1])
    # numpy's PCG64 streams are platform independent: these rows are what every machine gets
    assert val_split(np.repeat(np.arange(2), 10), 0.2, 22)[1].tolist() == [0, 4, 13, 18]


def test_a_class_draw_does_not_depend_on_other_classes():
    y = _labels()
    _, va = val_split(y, 0.2, 5)
    y2 = y.copy()
    y2[y2 == 4] = 6  # merge two other classes
    _, va2 = val_split(y2, 0.2, 5)
    assert np.array_equal(va[y[va] == 1], va2[y2[va2] == 1])


def test_few_shot_draws_from_candidates_only():
    y = _labels()
    tr, va = val_split(y, 0.2, 22)
    idx = few_shot(y, tr, 4, seed=22)
    assert set(idx) <= set(tr) and not set(idx) & set(va)
    counts = np.bincount(y[idx], minlength=7)
    assert counts.tolist() == [4, 4, 4, 1, 4, 4, 4]  # class 3 has one image, all of it is used
    assert np.array_equal(idx, few_shot(y, tr[::-1].copy(), 4, seed=22))  # candidate order does not matter
    assert few_shot(np.repeat(np.arange(2), 10), np.arange(20), 2, 22).tolist() == [1, 5, 11, 14]


def test_final_sample_is_fresh():
    y = np.repeat(np.arange(50), 40)
    allrows = np.arange(len(y))
    tuned = few_shot(y, allrows, 4, 22)
    final = few_shot(y, allrows, 4, final_seed(22))
    assert not np.array_equal(tuned, final)
    assert final_seed(22) == final_seed(22) != final_seed(37)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="fraction"):
        val_split(np.zeros(4, int), 1.0, 0)
    with pytest.raises(ValueError, match="shots"):
        few_shot(np.zeros(4, int), np.arange(4), 0, 0)
