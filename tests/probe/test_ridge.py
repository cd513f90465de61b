"""The ridge probe's numerics: every penalty's solution from one eigendecomposition equals a direct solve and
big_vision's own formulation, and the penalty is chosen on the held-out split of the linear probe's samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cog_pl.data.sampling import final_indices, tuning_indices
from cog_pl.errors import CogError
from cog_pl.probe.ridge import (
    BIAS_CONSTANT,
    REGS,
    RidgeProbe,
    check_regs,
    choose_reg,
    design,
    moments,
    score,
    solve,
    targets,
)

# -- big_vision's evaluator, transcribed from google-research/big_vision big_vision/evaluators/fewshot_lsr.py
# (commit 1475d53d) line by line, jnp -> np, in float64; only the two functions' return values are rearranged.
BV_BIAS_CONSTANT = 100.0


def bv_precompute_cache(x, y, num_classes):
    mean = np.mean(x, axis=0, keepdims=True)
    std = np.std(x, axis=0, keepdims=True) + 1e-5
    x = (x - mean) / std
    x = np.pad(x, ((0, 0), (0, 1)), constant_values=BV_BIAS_CONSTANT)
    y = 2.0 * np.eye(num_classes)[y] - 1.0  # jax.nn.one_hot
    num_points, dim = x.shape
    if num_points >= dim:
        eigs, q = np.linalg.eigh(x.T @ x)
        rhs = q.T @ (x.T @ y)
        lhs = q
    else:
        eigs, q = np.linalg.eigh(x @ x.T)
        rhs = q.T @ y
        lhs = x.T @ q
    return {"eigs": eigs, "rhs": rhs, "lhs": lhs, "mean": mean, "std": std}


def bv_eig_fewshot_acc_fn(cache, x_test, y_test, l2_reg):
    x_test = (x_test - cache["mean"]) / cache["std"]
    x_test = np.pad(x_test, ((0, 0), (0, 1)), constant_values=BV_BIAS_CONSTANT)
    scaling = 1.0 / (cache["eigs"] + l2_reg * np.ones_like(cache["eigs"]))
    scaling = scaling.reshape((1, -1))
    w = (cache["lhs"] * scaling) @ cache["rhs"]
    preds = np.argmax(x_test @ w, axis=1)
    return np.mean(preds == y_test), w


def _data(n, dim, classes=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    means = 2 * torch.randn(classes, dim, generator=g)
    y = torch.arange(n) % classes
    return F.normalize(torch.relu(means[y] + torch.randn(n, dim, generator=g)), dim=1), y


@pytest.mark.parametrize(("n", "dim"), [(300, 24), (12, 40)])  # X^T X (N >= D + 1) and X X^T (N < D + 1)
def test_every_penalty_equals_a_direct_solve(n, dim):
    x, y = _data(n, dim)
    system = solve(x, y, 5)
    assert system.lhs.shape == ((dim + 1, dim + 1) if n >= dim + 1 else (dim + 1, n))
    xt, yt = design(x), targets(y, 5)
    assert xt.dtype == torch.float64 and torch.equal(xt[:, -1], torch.full((n,), BIAS_CONSTANT, dtype=torch.float64))
    assert torch.equal(yt.sum(1), torch.full((n,), 2.0 - 5, dtype=torch.float64))  # one +1, four -1 per row
    for reg in (1e-3, 0.37, 2.0 ** 10, 1e5):
        direct = torch.linalg.solve(xt.T @ xt + reg * torch.eye(dim + 1, dtype=torch.float64), xt.T @ yt)
        w = system.weights(reg)
        assert float((w - direct).norm() / direct.norm()) < 1e-6
        scores = system.scores(system.project(x), reg)
        assert float((scores - xt @ direct).norm() / (xt @ direct).norm()) < 1e-6


def test_moments_add_and_subtract_by_rows():
    x, y = _data(90, 6)
    whole, part = moments(x, y, 5, chunk=7), moments(x, y, 5, np.arange(30), chunk=11)
    rest = moments(x, y, 5, np.arange(30, 90))
    assert torch.allclose((whole - part).xx, rest.xx) and torch.allclose((part + rest).xy, whole.xy)
    assert (whole - part).rows == 60


@pytest.mark.parametrize(("n", "dim"), [(400, 16), (30, 64)])
def test_big_visions_formulation_transcribed(n, dim):
    """Given big_vision's standardised features, the weights and test accuracy of every penalty are big_vision's."""
    x, y = _data(n, dim, seed=1)
    tx, ty = _data(200, dim, seed=2)
    xn, yn, txn, tyn = x.double().numpy(), y.numpy(), tx.double().numpy(), ty.numpy()
    cache = bv_precompute_cache(xn, yn, 5)
    mean, std = cache["mean"], cache["std"]
    system = solve(torch.from_numpy((xn - mean) / std), y, 5)
    regs = (2.0 ** -4, 1.0, 2.0 ** 10)  # 2^10: big_vision's configs/common_fewshot.py default
    top1, _ = score(system, torch.from_numpy((txn - mean) / std), ty, regs)
    for reg in regs:
        accuracy, w = bv_eig_fewshot_acc_fn(cache, txn, tyn, reg)
        assert np.abs(system.weights(reg).numpy() - w).max() <= 1e-8 * np.abs(w).max()
        assert top1[reg] == pytest.approx(100.0 * accuracy)


def _brute(x, y, rows, reg, eval_x):
    """Ridge predictions by a direct solve on ``rows`` (the definition, not the eigendecomposition)."""
    xt, yt = design(x[rows]), targets(y[rows], 5)
    w = torch.linalg.solve(xt.T @ xt + reg * torch.eye(xt.shape[1], dtype=torch.float64), xt.T @ yt)
    return (design(eval_x) @ w).argmax(1)


@pytest.mark.parametrize("shots", [None, 3, 20])  # all data: the shared moments less the held-out rows'
def test_penalty_is_chosen_on_the_held_out_split_of_the_linear_probes_samples(shots):
    x, y = _data(250, 12)
    regs = (1e-2, 1.0, 30.0, 1e3)
    probe = RidgeProbe(x, y, 5, regs, chunk=64)
    choice = probe.choose(22, shots, 0.2)
    tune, val = tuning_indices(y.numpy(), 0.2, 22, shots)
    assert np.array_equal(choice.tuning_rows, tune) and np.array_equal(choice.val_rows, val)
    expected = {r: 100.0 * float((_brute(x, y, tune, r, x[val]) == y[val]).double().mean()) for r in regs}
    assert choice.val_top1_by_reg == pytest.approx(expected)
    assert choice.reg == choose_reg(expected)
    tx, ty = _data(60, 12, seed=5)
    tested = probe.test(22, shots, choice.reg, tx, ty)
    final = final_indices(y.numpy(), 22, shots)
    assert np.array_equal(tested.train_rows, final)
    by_reg = {r: 100.0 * float((_brute(x, y, final, r, tx) == ty).double().mean()) for r in regs}
    assert tested.test_top1_by_reg == pytest.approx(by_reg)
    assert tested.test_top1 == tested.test_top1_by_reg[choice.reg] <= tested.test_top1_by_reg[tested.oracle_reg]
    assert torch.equal(tested.ranked[:, 0], _brute(x, y, final, choice.reg, tx))
    assert tested.test_top5 >= tested.test_top1


@pytest.mark.parametrize(("shots", "n", "dim"), [(None, 250, 12), (8, 250, 12), (None, 30, 40)])
def test_one_penaltys_test_top1_by_a_cholesky_solve_is_the_full_passs(shots, n, dim):
    """The callback's path (:meth:`RidgeProbe.test_top1`: one Cholesky solve of the chosen penalty; the
    eigendecomposition's where the sample has fewer rows than columns) gives the top-1 of :meth:`RidgeProbe.test`
    and of a direct solve, at every penalty, the smallest among them."""
    x, y = _data(n, dim)
    tx, ty = _data(400, dim, seed=7)
    probe = RidgeProbe(x, y, 5, REGS, chunk=64)
    final = final_indices(y.numpy(), 22, shots)
    for reg in REGS:
        one = probe.test_top1(22, shots, reg, tx, ty)
        assert one == probe.test(22, shots, reg, tx, ty).test_top1
        assert one == pytest.approx(100.0 * float((_brute(x, y, final, reg, tx) == ty).double().mean()))


def test_a_test_pass_leaves_the_choice_as_it_was_and_ties_go_to_the_larger_penalty():
    x, y = _data(200, 10)
    probe = RidgeProbe(x, y, 5, (0.1, 10.0))
    first = probe.choose(37, None, 0.2)
    tx, ty = _data(50, 10, seed=3)
    probe.test(37, None, first.reg, tx, ty)  # the shared all-data system made and used on test in between
    again = probe.choose(37, None, 0.2)
    assert (again.reg, again.val_top1_by_reg) == (first.reg, first.val_top1_by_reg)
    assert choose_reg({0.1: 50.0, 1.0: 60.0, 10.0: 60.0}) == 10.0


def test_bad_penalties_are_refused_in_one_line():
    assert check_regs((4.0, 0.5)) == (0.5, 4.0) and REGS[0] == 2.0 ** -10 and 2.0 ** 10 in REGS
    for bad, words in (((), "give one or more"), ((0.0,), "0.0 is not"), ((float("nan"),), "nan is not"),
                       ((1.0, 1.0), "given twice")):
        with pytest.raises(CogError, match=words):
            check_regs(bad)
    with pytest.raises(CogError, match="not among those scored"):
        score(solve(*_data(20, 4), 5), *_data(5, 4), (1.0,), rank=2.0)
