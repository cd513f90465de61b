"""``cog-pl demo --token-probes``: the baseline's token stores probed by the attentive and MLP probes beside its
linear probe, in one report (issue 40, item 2): each set against the linear probe of the same weights per level,
with its paired interval, and its selection optimism never negative (issue 46)."""

from __future__ import annotations

import csv
import io
import re

import pytest

from cog_pl.cli.main import main
from cog_pl.report.tables import selection_gap
from cog_pl.results import read_rows

TINY = ["--seen", "4", "--per-level", "3", "--train-per-concept", "8", "--test-per-concept", "4",
        "--pretrain-epochs", "1", "--ssl-epochs", "0", "--trials", "2", "--epochs", "2", "--seeds", "22",
        "--shots", "all", "--variants", "--no-finetune", "--no-html", "--no-noise-predictions"]
LEVELS = ("IN-1K", "L1", "L2", "L3", "L4", "L5")


@pytest.mark.slow  # a whole demo: the baseline's pretraining, two extractions, four probes, the report (2026-12-04,
# shared 2 cores: 38 s to 106 s under other jobs' load)
def test_the_demo_runs_attentive_and_mlp_on_token_stores_beside_the_linear_probe(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *TINY, "--token-probes"]) == 0
    shown = capsys.readouterr().out
    rows = read_rows(out / "results.sqlite")
    methods = {(r["model"], r["method"]) for r in rows}
    base = next(m for m, method in methods if method == "linear")
    tokens = f"{base}+tokens2x2"
    assert methods == {(base, "linear"), (base, "knn"), (base, "ridge"), (tokens, "attentive"), (tokens, "mlp")}
    made = [r for r in rows if r["method"] in ("attentive", "mlp")]
    assert {(r["feature"], r["tokens"], r["preset"] or "-") for r in made} == {("tokens2x2", 5, "ep"),
                                                                                ("tokens2x2", 5, "-")}
    assert {r["domain"] for r in made} == {r["domain"] for r in rows if r["method"] == "linear"}  # every level
    for row in rows:  # every tuned row: oracle - selected on the same trials, heads or ks
        assert row["selected_test_top1"] <= row["oracle_test_top1"] and selection_gap(row) >= 0, row["method"]
    text = (out / "report" / "report.md").read_text()
    for label in ("attentive probe", "MLP probe"):
        section = text.split(f"## {label} against the linear probe")[1].split("\n## ")[0]
        assert "no linear-probe predictions" not in section
        for level in LEVELS:  # the gain over the baseline's linear probe (its vector stores) with its interval
            assert re.search(rf"^\| {re.escape(tokens)} \| {base} \| {level} \| [+-]\d+\.\d\d \| "
                             rf"\[[+-]\d+\.\d\d, [+-]\d+\.\d\d\]", section, re.M), (level, section)
    optimism = text.split("## Selection optimism")[1].split("\n## ")[0]
    for label in ("linear probe", "ridge", "k-NN", "attentive probe", "MLP probe"):
        line = next(ln for ln in optimism.splitlines() if f" | {label} | " in ln)
        values = [v.strip() for v in line.strip("|").split("|")[2:]]
        assert len(values) == len(LEVELS) and all(re.fullmatch(r"\+\d+\.\d\d \(n = 1\)", v) for v in values), line
    gaps = [float(r["selection_gap_mean"]) for r in csv.DictReader(io.StringIO(
        (out / "report" / "results.csv").read_text()))]
    assert len(gaps) == 5 * len(LEVELS) and min(gaps) >= 0
    assert (out / "report" / "probe_gains.png").is_file()
    # the console: the main table and a line per other section, the whole report in its files
    assert "  - attentive probe against the linear probe: gain per level and over concept similarity" in shown
    assert "protocol: custom (2 trials × 2 epochs)" in shown and "## " not in shown
