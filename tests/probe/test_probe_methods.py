"""The probe-method table: the built-in linear probe by name, refusals by name, and a k-NN method added by a user."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cog_pl.methods import register_method
from cog_pl.probe.methods import get_probe_method, list_probe_methods, register_probe_method
from test_probe_fixtures import write_features

from cog_pl.probe.cell import Splits
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import append_row, read_rows


def test_the_table_lists_the_built_in_method_and_refuses_unknown_names():
    assert list_probe_methods() == ("linear", "linear_text_init", "zeroshot", "attentive", "mlp", "knn")
    with pytest.raises(ValueError, match="unknown probe method 'svm'; known: linear, linear_text_init, zeroshot, "
                                         "attentive, mlp, knn"):
        get_probe_method("svm")
    with pytest.raises(ValueError, match="probe method 'linear' is already registered"):
        register_probe_method("linear")(lambda root, results, **kw: [])


def test_the_linear_probe_runs_by_name(tmp_path):
    root = write_features(tmp_path / "feats", classes=4, dim=8, per_class=20, test_per_class=5)
    rows = get_probe_method("linear").run(root, tmp_path / "rows.sqlite", model="m", domain="cog_l1",
                                          storage=tmp_path / "s.db", protocol=replace(ProbeProtocol(), trials=2,
                                                                                      epochs=2),
                                          plan=SearchPlan(mode="exact"), seeds=(22,), shots=(None,))
    assert [(r["method"], r["model"], r["domain"], r["seed"]) for r in read_rows(tmp_path / "rows.sqlite")] == [
        ("linear", "m", "cog_l1", 22)] and len(rows) == 1


@pytest.fixture
def knn():
    builtin = get_probe_method("knn")

    @register_probe_method("knn", description="1-nearest neighbour on L2-normalised features", replace=True)
    def run(root, results, *, model, domain, seeds=(0,), **_):
        splits = Splits.load(root)
        nearest = (splits.test_x @ splits.train_x.T).argmax(dim=1)
        top1 = 100.0 * float((splits.train_y[nearest] == splits.test_y).float().mean())
        rows = [{"model": model, "method": "knn", "domain": domain, "shots": None, "seed": s, "test_top1": top1}
                for s in seeds]
        for row in rows:
            append_row(results, row)
        return rows

    yield run
    register_method(builtin, replace=True)


def test_a_registered_method_is_found_by_name_and_writes_its_rows(knn, tmp_path):
    root = write_features(tmp_path / "feats", classes=4, dim=8, per_class=20, test_per_class=5)
    assert list_probe_methods() == ("linear", "linear_text_init", "zeroshot", "attentive", "mlp", "knn")
    method = get_probe_method("knn")
    rows = method.run(root, tmp_path / "rows.sqlite", model="m", domain="cog_l1", seeds=(22,))
    stored = read_rows(tmp_path / "rows.sqlite")
    assert [(r["method"], r["test_top1"]) for r in stored] == [("knn", rows[0]["test_top1"])]
    assert 25.0 < rows[0]["test_top1"] <= 100.0
