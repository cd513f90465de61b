"""The report's mistake severity through the installed ``cog-pl report``: the section of report.md, the columns of
concepts.csv and severity.png, each number recomputed here from the stored predictions with NLTK's hypernym distances,
and a cell whose classes are no synsets named as having none."""

from __future__ import annotations

import csv
import io
import subprocess
from collections import defaultdict
from functools import cache

import numpy as np
import pytest
from bad_input_cases import COG_PL
from concept_fixtures import simulated_results

from cog_pl.results import append_row, read_rows
from cog_pl.results.predictions import Predictions, read_row_predictions
from cog_pl.wordnet.ontology import synset_of

LABELS = {"in1k": "IN-1K", **{f"cog_l{i}": f"L{i}" for i in range(1, 6)}}


def _steps(wn):
    @cache
    def steps(a: str, b: str) -> tuple[int, bool]:
        sa, sb = synset_of(wn, a), synset_of(wn, b)
        up: dict = {}
        for s, d in sa.hypernym_distances():
            up[s] = min(d, up.get(s, d))
        shared = {s for s, _ in sb.hypernym_distances()}
        same = set(sa.hypernyms() + sa.instance_hypernyms()) & set(sb.hypernyms() + sb.instance_hypernyms())
        return min(d for s, d in up.items() if s in shared), bool(same)
    return steps


def _table(text: str) -> dict[tuple[str, str], list[str]]:
    section = text.split("## Mistake severity per level")[1].split("\n## ")[0]
    lines = [[c.strip() for c in ln.strip("|").split("|")] for ln in section.splitlines() if ln.startswith("| ")]
    return {(ln[0], ln[2]): ln for ln in lines[1:]}


def test_cog_pl_report_shows_each_levels_mistake_severity_from_the_stored_predictions(tmp_path, wn):
    results, levels = simulated_results(tmp_path, {"base": 0.0, "better": 0.25}, seeds=(22, 37), n=12, images=10)
    # a row whose predictions name no synsets (a store of made-up classes): its cell has no severity, said so
    made_up = Predictions.of(np.array([[1, 0], [0, 1]]), np.array([0, 1]), np.arange(2), ("cat", "dog"))
    append_row(results, {"model": "toy", "method": "linear", "domain": "cog_l1", "shots": None, "seed": 22,
                         "test_top1": 0.0, "test_top5": 100.0, "predictions": made_up})
    done = subprocess.run([str(COG_PL), "report", "--results", str(results), "--levels", str(levels), "--out",
                           str(tmp_path / "r"), "--no-html"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "  - Mistake severity per level (all data, over seeds)" in done.stdout
    assert f"plot:   {tmp_path / 'r' / 'severity.png'}" in done.stdout
    assert (tmp_path / "r" / "severity.png").read_bytes()[:4] == b"\x89PNG"
    table = _table((tmp_path / "r" / "report.md").read_text())
    steps = _steps(wn)
    per_cell: dict[tuple[str, str], list[tuple[int, bool]]] = defaultdict(list)
    per_concept: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for row in read_rows(results):
        if row["model"] == "toy":
            continue
        p = read_row_predictions(results, row)
        for true, first in zip(p.label, p.top5[:, 0]):
            if true != first:
                got = steps(p.classes[true], p.classes[first])
                per_cell[row["model"], row["domain"]].append(got)
                per_concept[row["model"], row["domain"], p.classes[true]].append(got[0])
    assert len(per_cell) == 12
    for (model, domain), errors in per_cell.items():
        line = table[model, LABELS[domain]]
        assert line[3] == f"{len(errors)} of 240" and line[7] == "22, 37"
        assert float(line[4]) == pytest.approx(np.mean([e[0] for e in errors]), abs=0.005)
        low, high = (float(v) for v in line[5].strip("[]").split(", "))
        assert low <= float(line[4]) <= high
        assert line[6] == f"{100 * np.mean([e[1] for e in errors]):.1f} %"
    assert table["toy", "L1"][5] == "its classes are not WordNet synsets (no wnids stored)"
    lines = list(csv.DictReader(io.StringIO((tmp_path / "r" / "concepts.csv").read_text())))
    checked = 0
    for ln in lines:
        got = per_concept.get((ln["model"], ln["domain"], ln["wnid"]))
        if ln["model"] == "toy":
            assert ln["errors"] == ln["severity"] == ""
        elif got:
            assert int(ln["errors"]) == len(got) and float(ln["severity"]) == pytest.approx(np.mean(got), abs=1e-4)
            checked += 1
        else:
            assert ln["errors"] == "0" and ln["severity"] == ""
    assert checked > 50
