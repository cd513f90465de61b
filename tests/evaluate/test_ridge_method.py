"""The ``ridge`` method on real feature stores through the grid runner: its rows, what their selection figures mean,
the test store read only after every penalty is chosen, resuming and refusing rows of other penalties."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from test_probe_fixtures import write_features

import cog_pl.probe.data as probe_data
import cog_pl.probe.ridge as ridge
from cog_pl.data.sampling import final_indices, tuning_indices
from cog_pl.errors import CogError
from cog_pl.evaluate import get_method, list_methods
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.features.pair import open_pair
from cog_pl.probe.data import l2_normalize, load_store
from cog_pl.probe.knn_protocol import rows_digest
from cog_pl.results import read_rows
from cog_pl.results.predictions import read_row_predictions

REGS = (0.01, 1.0, 100.0)
GRID = {"model": "m", "domain": "cog_l2", "seeds": (22, 37), "shots": (None, 2, 5), "options": {"regs": REGS}}


def _direct(x, y, rows, reg, eval_x, classes):
    xt, yt = ridge.design(x[rows]), ridge.targets(y[rows], classes)
    w = torch.linalg.solve(xt.T @ xt + reg * torch.eye(xt.shape[1], dtype=torch.float64), xt.T @ yt)
    return (ridge.design(eval_x) @ w).argmax(1)


def test_rows_hold_the_chosen_penalty_its_refit_and_the_oracle_of_the_same_heads(tmp_path):
    root = write_features(tmp_path / "f", classes=6, dim=10, per_class=40, test_per_class=10)
    results = tmp_path / "r.sqlite"
    assert "ridge" in list_methods(probe=True) and get_method("ridge").batched
    made = run_on_stores("ridge", root, results, **GRID)
    rows = read_rows(results)
    assert len(made) == len(rows) == 6 and {r["method"] for r in rows} == {"ridge"}
    pair = open_pair(root)
    (x, y), (tx, ty) = load_store(pair.train), load_store(pair.test)
    x, tx = l2_normalize(x), l2_normalize(tx)
    for r in rows:
        n, seed = r["shots"], r["seed"]
        tune, val = tuning_indices(y.numpy(), 0.2, seed, n)
        final = final_indices(y.numpy(), seed, n)
        assert (r["tuning_rows"], r["val_rows"], r["train_rows"]) == (len(tune), len(val), len(final))
        assert r["tuning_rows_sha256"] == rows_digest(tune) and r["train_rows_sha256"] == rows_digest(final)
        val_by_reg = {str(g): 100.0 * float((_direct(x, y, tune, g, x[val], 6) == y[val]).double().mean())
                      for g in REGS}
        assert r["val_top1_by_reg"] == pytest.approx(val_by_reg)
        assert r["reg"] == ridge.choose_reg({float(k): v for k, v in r["val_top1_by_reg"].items()})
        assert r["val_top1"] == r["val_top1_by_reg"][str(r["reg"])]
        test_by_reg = {str(g): 100.0 * float((_direct(x, y, final, g, tx, 6) == ty).double().mean()) for g in REGS}
        assert r["test_top1_by_reg"] == pytest.approx(test_by_reg)
        # selected: the chosen penalty's refitted head (the row's test_top1); oracle: the best of the same heads
        assert r["selected_test_top1"] == r["test_top1"] == r["test_top1_by_reg"][str(r["reg"])]
        assert r["oracle_test_top1"] == max(r["test_top1_by_reg"].values()) >= r["selected_test_top1"]
        assert r["test_top1_by_reg"][str(r["oracle_reg"])] == r["oracle_test_top1"]
        assert 0 <= r["test_top1"] <= r["test_top5"] <= 100
        preds = read_row_predictions(results, r)
        assert 100.0 * np.mean(preds.top5[:, 0] == preds.label) == pytest.approx(r["test_top1"])
        assert r["ridge"]["regs"] == list(REGS) and r["precision"] == "64-true"
    # all data: one final sample for every seed
    assert len({r["train_rows_sha256"] for r in rows if r["shots"] is None}) == 1


def test_the_test_store_is_read_after_every_choice_and_its_labels_change_no_choice(tmp_path, monkeypatch):
    root = write_features(tmp_path / "f", classes=5, dim=8, per_class=30, test_per_class=8)
    events = []
    real_load, real_choose = probe_data.load_store, ridge.RidgeProbe.choose

    def load(store, *args, **kw):
        events.append(("load", store.path.name))
        return real_load(store, *args, **kw)

    def choose(self, seed, shots, fraction):
        events.append(("choose", shots, seed))
        return real_choose(self, seed, shots, fraction)

    monkeypatch.setattr(probe_data, "load_store", load)
    monkeypatch.setattr(ridge.RidgeProbe, "choose", choose)
    first = run_on_stores("ridge", root, tmp_path / "a.sqlite", **GRID)
    assert events[0] == ("load", "train") and events.index(("load", "test")) == len(events) - 1
    assert sum(e[0] == "choose" for e in events) == 6
    other = shutil.copytree(root, tmp_path / "g")
    np.save(other / "test" / "labels.npy", np.roll(np.load(root / "test" / "labels.npy"), 3))
    second = run_on_stores("ridge", other, tmp_path / "b.sqlite", **GRID)
    assert [(r["reg"], r["val_top1_by_reg"]) for r in first] == [(r["reg"], r["val_top1_by_reg"]) for r in second]
    assert [r["test_top1_by_reg"] for r in first] != [r["test_top1_by_reg"] for r in second]


def test_rows_resume_and_refuse_other_penalties(tmp_path):
    root = write_features(tmp_path / "f", classes=4, dim=6, per_class=25, test_per_class=5)
    results = tmp_path / "r.sqlite"
    kw = {**GRID, "shots": (None, 1)}
    assert len(run_on_stores("ridge", root, results, **kw)) == 4
    assert run_on_stores("ridge", root, results, **kw) == []  # the same values: skipped
    other = {**kw, "options": {"regs": (1.0,)}}
    with pytest.raises(CogError, match=r"row m/ridge/cog_l2/shots=all/seed=22 was made with regs=\[0.01, 1.0, 100.0\]"
                                       r", this run has regs=\[1.0\]; pass --overwrite"):
        run_on_stores("ridge", root, results, **other)
    assert len(run_on_stores("ridge", root, results, **other, overwrite=True)) == 4
    assert {r["reg"] for r in read_rows(results)} == {1.0}


def test_stores_without_a_validation_row_are_refused_before_any_work(tmp_path):
    root = write_features(tmp_path / "f", classes=3, dim=4, per_class=4, test_per_class=2)
    with pytest.raises(CogError, match="validation split, which holds no row here"):
        run_on_stores("ridge", root, tmp_path / "r.sqlite", **{**GRID, "shots": (None,)})
    assert not (tmp_path / "r.sqlite").exists() or read_rows(tmp_path / "r.sqlite") == []
