"""``cog-pl demo --token-probes``: the baseline's token stores probed by the attentive and MLP probes beside its
linear probe, in one report (issue 40, item 2)."""

from __future__ import annotations

import pytest

from cog_pl.cli.main import main
from cog_pl.results import read_rows

TINY = ["--seen", "4", "--per-level", "3", "--train-per-concept", "8", "--test-per-concept", "4",
        "--pretrain-epochs", "1", "--ssl-epochs", "0", "--trials", "2", "--epochs", "2", "--seeds", "22",
        "--shots", "all", "--variants", "--no-finetune", "--no-html", "--no-noise-predictions"]


@pytest.mark.slow  # a whole demo: the baseline's pretraining, two extractions, three probes, the report
def test_the_demo_runs_attentive_and_mlp_on_token_stores_beside_the_linear_probe(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *TINY, "--token-probes"]) == 0
    rows = read_rows(out / "results.sqlite")
    methods = {(r["model"], r["method"]) for r in rows}
    base = next(m for m, method in methods if method == "linear")
    assert methods == {(base, "linear"), (base, "knn"), (f"{base}+tokens2x2", "attentive"),
                       (f"{base}+tokens2x2", "mlp")}
    tokens = [r for r in rows if r["method"] in ("attentive", "mlp")]
    assert {(r["feature"], r["tokens"], r["preset"] or "-") for r in tokens} == {("tokens2x2", 5, "vjepa2"),
                                                                                  ("tokens2x2", 5, "-")}
    assert {r["domain"] for r in tokens} == {r["domain"] for r in rows if r["method"] == "linear"}  # every level
    text = (out / "report" / "report.md").read_text()
    assert "attentive probe" in text and "MLP probe" in text
