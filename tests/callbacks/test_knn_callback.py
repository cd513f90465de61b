"""CoGEvaluationCallback logging the k-NN top-1 per level during a real CPU training run, beside or instead of
its linear probes."""

from __future__ import annotations

import numpy as np
import pytest
from test_cog_callback import Net, _callback, _fit, bench  # noqa: F401 - the module's benchmark fixture
from test_knn import brute_force

from cog_pl.callbacks.cog_eval import CoGEvaluationCallback
from cog_pl.data.sampling import val_split
from cog_pl.probe.knn_protocol import choose_k

LEVELS = ("in1k", "l1", "l2", "l3", "l4", "l5")


def test_knn_top1_is_logged_per_level_beside_the_probes(bench, tmp_path):  # noqa: F811
    cog = _callback(bench, every_n_epochs=1, methods=("linear", "knn"), knn_ks=(1, 3, 10), knn_precision="32-true")
    _, trainer = _fit(bench, tmp_path, [cog], epochs=1)
    for level in LEVELS:
        assert 0 <= trainer.callback_metrics[f"cog/{level}/knn_top1"] <= 1  # fractions, as every logged accuracy
        assert f"cog/{level}/top1" in trainer.callback_metrics
    # the logged value is the brute-force k-NN of the callback's own features, k chosen on its validation split
    model = Net()
    only = _callback(bench, methods=("knn",), knn_ks=(1, 3, 10), knn_precision="32-true")
    metrics = only.evaluate(model)
    assert not any(k.endswith("/top1") and "knn" not in k for k in metrics)
    xtr, ytr, xte, yte = only._data["cog_l2"]
    fn = only._features_fn(model)
    model.eval()
    ftr, fte = only._features(fn, xtr, model.device).numpy(), only._features(fn, xte, model.device).numpy()
    ytr, yte = ytr.numpy(), yte.numpy()
    fit, val = val_split(ytr, 0.2, 0)
    classes = int(max(ytr.max(), yte.max())) + 1
    by_k = {k: 100 * np.mean(brute_force(ftr, ytr, ftr[val], classes, k, rows=fit)[1][:, 0] == ytr[val])
            for k in (1, 3, 10)}
    k = choose_k(by_k)
    expected = np.mean(brute_force(ftr, ytr, fte, classes, k)[1][:, 0] == yte)
    assert metrics["cog/l2/knn_top1"] == pytest.approx(expected)


def test_unknown_methods_are_refused_at_once(tmp_path):
    with pytest.raises(ValueError, match="methods \\['svm'\\]; choose one or more of linear, knn"):
        CoGEvaluationCallback(in21k_root=str(tmp_path), domains=("cog_l1",), methods=("svm",))
