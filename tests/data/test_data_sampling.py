"""Validation split and N-shot sampling: per-class counts, disjointness, determinism, fixed values."""

import numpy as np
import pytest

from cog_pl.data.sampling import (
    check_shots,
    few_shot,
    final_indices,
    final_seed,
    tuning_indices,
    tuning_seed,
    val_split,
)


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


def test_an_n_shot_cell_is_n_rows_of_every_class_or_refused():
    """N shots is N rows of each class in the tuning sample and the final one; a class short of N is refused by
    name, never drawn whole and filed as N shots."""
    y = _labels()  # classes of 10, 11, 5, 1, 20, 13, 7 rows: class 3 has one
    with pytest.raises(ValueError, match=r"^--shots 2: class 3 has 1 train rows \(1 left for tuning by the 20% "
                                         r"validation split\), fewer than 2; an N-shot cell needs N rows of every "
                                         r"class \(here at most 1 shots\)$"):
        tuning_indices(y, 0.2, 22, 2)
    with pytest.raises(ValueError, match=r"^--shots 2: class 3 has 1 train rows, fewer than 2"):
        final_indices(y, 22, 2)
    y = np.repeat(np.arange(3), 40)  # 40 rows a class: the validation split keeps 8, leaves 32 for tuning
    train, _ = tuning_indices(y, 0.2, 22, 32)
    assert np.bincount(y[train]).tolist() == [32] * 3 and np.bincount(y[final_indices(y, 22, 40)]).tolist() == [40] * 3
    check_shots(y, 0.2, [None, 1, 32])  # all data needs nothing; 32 fits
    for n in (33, 100000):  # 33 would draw 32 for tuning; 100000 would train on everything, as all data does
        with pytest.raises(ValueError, match=rf"--shots {n}: class 0 has 40 train rows \(32 left for tuning"):
            check_shots(y, 0.2, [None, 1, n])


#: Chi-square with 9 degrees of freedom exceeds this with probability 1e-4 under uniform draws (scipy.stats.chi2.isf).
CHI2_9DF_P1E4 = 33.72


def _chi_square(counts: np.ndarray) -> float:
    expected = counts.sum() / len(counts)
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("shots", [1, 2, 4])
def test_tuning_draw_picks_every_row_of_a_class_equally_often(shots):
    """Over many seeds, each of a class's 10 rows enters the tuning sample equally often (P = 0.8 * shots / 8). The
    draw once reused the validation split's per-class stream and picked a class's first row about 1.3x too often
    (chi-square over 100 in this setting)."""
    y = np.repeat(np.arange(20), 10)  # 20 classes of 10 rows: the validation split keeps 2, leaves 8
    counts = np.zeros(10)
    for seed in range(300):
        train, _ = tuning_indices(y, 0.2, seed, shots)
        np.add.at(counts, train % 10, 1)
    assert counts.sum() == 300 * 20 * shots
    assert _chi_square(counts) < CHI2_9DF_P1E4, counts


def test_validation_and_final_draws_are_uniform_too():
    y = np.repeat(np.arange(20), 10)
    val, final = np.zeros(10), np.zeros(10)
    for seed in range(300):
        np.add.at(val, tuning_indices(y, 0.2, seed, 2)[1] % 10, 1)
        np.add.at(final, final_indices(y, seed, 2) % 10, 1)
    assert _chi_square(val) < CHI2_9DF_P1E4 and _chi_square(final) < CHI2_9DF_P1E4


def test_each_draw_of_a_run_has_its_own_seed():
    assert len({22, tuning_seed(22), final_seed(22)}) == 3 and tuning_seed(22) == tuning_seed(22) != tuning_seed(37)
    y = np.repeat(np.arange(2), 10)
    # the tuning sample of seed 22: fixed rows, the same on every machine (numpy's PCG64)
    assert tuning_indices(y, 0.2, 22, 2)[0].tolist() == [3, 5, 10, 17]
    assert few_shot(y, val_split(y, 0.2, 22)[0], 2, tuning_seed(22)).tolist() == [3, 5, 10, 17]
