"""``cog-pl report --export``: one file per model that validates against the shipped JSON Schema and holds the report's
numbers, a leaderboard ranked by L5 and by the L1−L5 drop, and ``--leaderboard`` of contributed exports refusing
another benchmark, protocol or format in one line."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from bad_input_cases import COG_PL, ERROR_LINE
from concept_fixtures import simulated_results

from cog_pl.analysis.intervals import top1_interval
from cog_pl.report.export import export_schema
from cog_pl.resources import level_file_sha256
from cog_pl.results import append_row, read_rows
from cog_pl.results.predictions import read_row_predictions

DIGESTS = {"base": "1" * 64, "better": "2" * 64, "twin": "3" * 64}
PAPER = {"trials": 30, "epochs": 100, "seeds": [22, 37], "shots": [], "extra": {}}


def _report(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(COG_PL), "report", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture
def store(tmp_path):
    """A results store whose rows record what cog-pl run's rows record of the weights, benchmark and protocol."""
    results, levels = simulated_results(tmp_path, {"base": 0.0, "better": 0.25, "twin": 0.0}, n=12, images=10)
    for row in read_rows(results):
        split = {"weights_sha256": DIGESTS[row["model"]], "level_file_sha256": level_file_sha256()}
        append_row(results, {**row, "features": {"train": split, "test": split}, "protocol": PAPER})
    return results, levels


def test_export_writes_a_file_per_model_in_its_schema_and_a_leaderboard(store, tmp_path):
    results, levels = store
    done = _report(tmp_path, "--results", str(results), "--levels", str(levels), "--out", "r", "--export",
                   "--no-html")
    assert done.returncode == 0, done.stderr
    assert "file:   r/export" in done.stdout and "report: r/leaderboard.md" in done.stdout
    cells = {(c["model"], c["domain"]): c for c in csv.DictReader(io.StringIO((tmp_path / "r" / "results.csv")
                                                                              .read_text()))}
    rows = read_rows(results)
    records = {}
    for label, digest in DIGESTS.items():
        rec = json.loads((tmp_path / "r" / "export" / f"{label}.json").read_text())
        jsonschema.validate(rec, export_schema())
        records[label] = rec
        assert rec["model"] == {"label": label, "arch": None, "weights": None, "weights_sha256": digest,
                                "definition": None}
        assert rec["benchmark"] == {"name": "imagenet-cog", "sha256": level_file_sha256()}
        linear = rec["methods"]["linear"]
        assert linear["protocol"]["words"] == "custom (30 trials × 100 epochs, 2 seeds)"
        assert linear["protocol"]["record"] == PAPER
        for domain, got in linear["domains"].items():
            assert got["top1"] == pytest.approx(float(cells[label, domain]["top1_mean"]), abs=1e-4)
            assert got["std"] == pytest.approx(float(cells[label, domain]["top1_std"]), abs=1e-4)
            mine = sorted((r for r in rows if (r["model"], r["domain"]) == (label, domain)), key=lambda r: r["seed"])
            correct = np.stack([read_row_predictions(results, r).correct for r in mine])
            _, low, high = top1_interval(correct, seed=0)
            assert (got["interval"]["low"], got["interval"]["high"]) == (round(low, 4), round(high, 4))
            assert got["interval"]["low"] <= got["top1"] <= got["interval"]["high"]
        drops = [next(r["test_top1"] for r in rows if (r["model"], r["domain"], r["seed"]) == (label, "cog_l1", s))
                 - next(r["test_top1"] for r in rows if (r["model"], r["domain"], r["seed"]) == (label, "cog_l5", s))
                 for s in (22, 37)]
        assert linear["drop_l1_l5"]["mean"] == pytest.approx(np.mean(drops), abs=1e-4)
    board = (tmp_path / "r" / "leaderboard.md").read_text()
    by_l5 = board.split("## Sorted by L5 top-1")[1].split("## ")[0]
    by_drop = board.split("## Sorted by the L1−L5 drop")[1]
    ranked = [ln.split(" | ")[1] for ln in by_l5.splitlines() if ln.startswith("| 1 ") or ln[2:3].isdigit()]
    l5 = {k: r["methods"]["linear"]["domains"]["cog_l5"]["top1"] for k, r in records.items()}
    assert ranked == sorted(l5, key=lambda k: -l5[k])
    drop = {k: r["methods"]["linear"]["drop_l1_l5"]["mean"] for k, r in records.items()}
    assert [ln.split(" | ")[1] for ln in by_drop.splitlines() if ln[2:3].isdigit()] == sorted(drop, key=drop.get)
    assert f"| {DIGESTS['better'][:12]} | custom (30 trials × 100 epochs, 2 seeds) |" in by_l5
    assert f"benchmark imagenet-cog (sha256 {level_file_sha256()[:12]})" in board
    # the report again without --export: the export files and the leaderboard of the earlier one go
    again = _report(tmp_path, "--results", str(results), "--levels", str(levels), "--out", "r", "--no-html")
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "r" / "leaderboard.md").exists() and not list((tmp_path / "r" / "export").glob("*.json"))


def test_a_shared_leaderboard_takes_exports_of_one_benchmark_and_protocol(store, tmp_path, capsys):
    results, levels = store
    assert _report(tmp_path, "--results", str(results), "--levels", str(levels), "--out", "r", "--export",
                   "--no-html").returncode == 0
    files = [str(tmp_path / "r" / "export" / f"{label}.json") for label in DIGESTS]
    done = _report(tmp_path, "--leaderboard", *files, "--out", "board")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3 model(s) ranked: board/leaderboard.md"
    made = (tmp_path / "board" / "leaderboard.md").read_text()
    assert made.split("## ")[1:] == (tmp_path / "r" / "leaderboard.md").read_text().split("## ")[1:]

    from cog_pl.cli.main import main

    def refused(*paths: str) -> str:
        assert main(["report", "--leaderboard", *paths, "--out", str(tmp_path / "no")]) == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert ERROR_LINE.match(last) and not (tmp_path / "no").exists(), last
        return last

    other = json.loads(Path(files[1]).read_text())
    for change, path, words in (
            (lambda r: r["benchmark"].update(sha256="f" * 64), "other_bench.json", "is of benchmark ffffffffffff"),
            (lambda r: r["methods"]["linear"]["protocol"].update(words="quick (10 trials × 30 epochs, 1 seed)"),
             "other_protocol.json", "was made under protocol quick (10 trials × 30 epochs, 1 seed)"),
            (lambda r: r.update(version=2), "v2.json", "is cog-pl-export v2; a leaderboard reads cog-pl-export v1")):
        rec = json.loads(json.dumps(other))
        rec["model"]["label"] = "contributed"
        change(rec)
        (tmp_path / path).write_text(json.dumps(rec))
        assert f"export file {tmp_path / path} {words}" in refused(files[0], str(tmp_path / path))
    assert "is of label base, as" in refused(files[0], files[0])
    broken = json.loads(json.dumps(other))
    del broken["methods"]["linear"]["domains"]["cog_l5"]["top1"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert f"export file {tmp_path / 'broken.json'}: its linear probe's entry lacks" in refused(str(tmp_path /
                                                                                                  "broken.json"))
