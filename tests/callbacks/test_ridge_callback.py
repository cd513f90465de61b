"""CoGEvaluationCallback logging the closed-form ridge probe's top-1 per level during a real CPU training run, the
cheap online signal, beside or instead of its linear probes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_cog_callback import Net, _callback, _fit, bench  # noqa: F401 - the module's benchmark fixture

from cog_pl.callbacks.cog_eval import CoGEvaluationCallback
from cog_pl.data.sampling import val_split
from cog_pl.errors import CogError
from cog_pl.probe.ridge import choose_reg, design, targets

LEVELS = ("in1k", "l1", "l2", "l3", "l4", "l5")
REGS = (1e-3, 0.1, 10.0, 1e3)


def _ridge_predict(x, y, classes, reg, eval_x):
    """A direct solve of big_vision's ridge system, ``(X^T X + reg I) W = X^T Y``, and its argmax on ``eval_x``."""
    xt, yt = design(x), targets(y, classes)
    w = torch.linalg.solve(xt.T @ xt + reg * torch.eye(xt.shape[1], dtype=torch.float64), xt.T @ yt)
    return (design(eval_x) @ w).argmax(1)


def test_ridge_top1_is_logged_per_level_every_epoch(bench, tmp_path):  # noqa: F811
    cog = _callback(bench, every_n_epochs=1, methods=("ridge", "linear"), ridge_regs=REGS)
    _, trainer = _fit(bench, tmp_path, [cog], epochs=2)
    assert [h["epoch"] for h in cog.history] == [0, 1]
    for level in LEVELS:
        assert 0 <= trainer.callback_metrics[f"cog/{level}/ridge_top1"] <= 1  # a fraction, as every logged accuracy
        assert f"cog/{level}/top1" in trainer.callback_metrics
        assert all(f"cog/{level}/ridge_top1" in h for h in cog.history)
    assert cog._settings_record()["ridge_regs"] == list(REGS)
    # the logged value is the ridge probe of the callback's own features: the penalty chosen on its validation split
    # by a direct solve per penalty, refitted on every train image
    model = Net()
    only = _callback(bench, methods=("ridge",), ridge_regs=REGS)
    metrics = only.evaluate(model)
    assert set(metrics) == {f"cog/{level}/ridge_top1" for level in LEVELS}
    xtr, ytr, xte, yte = only._data["cog_l3"]
    fn = only._features_fn(model)
    model.eval()
    ftr, fte = only._features(fn, xtr, model.device), only._features(fn, xte, model.device)
    classes = int(max(ytr.max(), yte.max())) + 1
    fit, val = val_split(ytr.numpy(), 0.2, 0)
    by_reg = {r: float((_ridge_predict(ftr[fit], ytr[fit], classes, r, ftr[val]) == ytr[val]).double().mean())
              for r in REGS}
    expected = float((_ridge_predict(ftr, ytr, classes, choose_reg(by_reg), fte) == yte).double().mean())
    assert metrics["cog/l3/ridge_top1"] == pytest.approx(expected)


def test_bad_penalties_are_refused_at_once(tmp_path):
    with pytest.raises(CogError, match=r"CoGEvaluationCallback: ridge_regs \[-1.0\]: give one or more finite"):
        CoGEvaluationCallback(in21k_root=str(tmp_path), domains=("cog_l1",), methods=("ridge",), ridge_regs=(-1.0,))
    assert np.isclose(CoGEvaluationCallback(in21k_root=str(tmp_path), domains=("cog_l1",), methods=("ridge",))
                      .settings.ridge_regs[0], 2.0 ** -10)
