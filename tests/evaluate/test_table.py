"""The method table: the built-in methods by name and in report order, refusals by name, and a built-in replaced by
a user's method of the same name."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_probe_fixtures import write_features

from cog_pl.evaluate import Method, get_method, list_methods, method_label, register_method, token_methods
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import read_rows


def test_the_table_lists_the_built_in_methods_in_report_order_and_refuses_unknown_names():
    assert list_methods() == ("linear", "linear_text_init", "zeroshot", "attentive", "mlp", "finetune",
                              "attentive_images", "ridge", "knn")
    assert list_methods(probe=False) == ("finetune", "attentive_images")
    assert token_methods() == ("attentive", "mlp")
    assert (method_label("knn"), method_label("not_registered")) == ("k-NN", "not_registered")
    with pytest.raises(ValueError, match="unknown method 'svm'; known: linear, linear_text_init, zeroshot, "
                                         "attentive, mlp, finetune, attentive_images, ridge, knn"):
        get_method("svm")
    with pytest.raises(ValueError, match="evaluation method 'linear' is already registered"):
        register_method(get_method("linear"))

    class Bad(Method):
        name = "two words"

    with pytest.raises(ValueError, match="a Python identifier"):
        register_method(Bad())


def test_the_linear_probe_runs_by_name(tmp_path):
    root = write_features(tmp_path / "feats", classes=4, dim=8, per_class=20, test_per_class=5)
    rows = run_on_stores("linear", root, tmp_path / "rows.sqlite", model="m", domain="cog_l1",
                         storage=str(tmp_path / "s.db"), protocol=replace(ProbeProtocol(), trials=2, epochs=2),
                         plan=SearchPlan(mode="exact"), seeds=(22,), shots=(None,))
    assert [(r["method"], r["model"], r["domain"], r["seed"]) for r in read_rows(tmp_path / "rows.sqlite")] == [
        ("linear", "m", "cog_l1", 22)] and len(rows) == 1


class NearestNeighbour(Method):
    """1-nearest neighbour on L2-normalised features, registered over the built-in k-NN."""

    name, label, order, batched = "knn", "1-NN", 20.0, False
    description = "1-nearest neighbour on L2-normalised features"

    def identity(self, job, state):
        return {"rule": "1-nn"}

    def run_cell(self, job, state, cell, want):
        from cog_pl.probe.cell import Splits

        splits = Splits.load(state)
        nearest = (splits.test_x @ splits.train_x.T).argmax(dim=1)
        return {"test_top1": 100.0 * float((splits.train_y[nearest] == splits.test_y).float().mean())}


@pytest.fixture
def one_nn():
    builtin = get_method("knn")
    register_method(NearestNeighbour(), replace=True)
    yield
    register_method(builtin, replace=True)


def test_a_method_registered_over_a_built_in_is_found_by_name_and_writes_its_rows(one_nn, tmp_path):
    root = write_features(tmp_path / "feats", classes=4, dim=8, per_class=20, test_per_class=5)
    assert get_method("knn").title == "1-NN" and "knn" in list_methods()
    (row,) = run_on_stores("knn", root, tmp_path / "rows.sqlite", model="m", domain="cog_l1", seeds=(22,),
                           shots=(None,))
    (stored,) = read_rows(tmp_path / "rows.sqlite")
    assert (stored["method"], stored["rule"], stored["test_top1"]) == ("knn", "1-nn", row["test_top1"])
    assert 25.0 < row["test_top1"] <= 100.0
