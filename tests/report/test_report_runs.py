"""Several runs in one report through the installed ``cog-pl report --runs A B`` / ``--results A --results B``: each
label's rows from one run, named in the main table, results.csv, report.html and section Runs, its predictions read
beside its own store; stores of other benchmarks, similarity sources or protocols, a label of other weights: one
line."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from bad_input_cases import COG_PL, ERROR_LINE
from concept_fixtures import simulated_results

from cog_pl.cli.main import main
from cog_pl.results import append_row, read_rows, write_info
from cog_pl.results.predictions import read_row_predictions

LEVEL1 = "a" * 64


def _report(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(COG_PL), "report", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _with_features(results: Path, weights: dict[str, str], level: str = LEVEL1) -> None:
    """Give every row the feature stores' identity a run records: each label's weights digest, the benchmark's."""
    for row in read_rows(results):
        split = {"weights_sha256": weights[row["model"]], "level_file_sha256": level, "domain": row["domain"]}
        append_row(results, {**row, "features": {"train": {**split, "split": "train"},
                                                 "test": {**split, "split": "test"}}})


@pytest.fixture
def two_runs(tmp_path):
    """Run folders ``a`` (base, better) and ``b`` (base again, the same weights, and other), as cog-pl run leaves
    them: results.sqlite with rows and their predictions."""
    simulated_results(tmp_path / "a", {"base": 0.0, "better": 0.25}, seeds=(22, 37), n=12, images=10)
    simulated_results(tmp_path / "b", {"base": 0.0, "other": 0.1}, seeds=(22, 37), n=12, images=10, seed=1)
    digests = {"base": "1" * 64, "better": "2" * 64, "other": "3" * 64}
    for run in "ab":
        _with_features(tmp_path / run / "results.sqlite", digests)
    return tmp_path


def _csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_two_runs_make_one_report_naming_each_labels_run(two_runs):
    root = two_runs
    done = _report(root, "--runs", "a", "b", "--baseline", "base", "--levels", "a/levels.json", "--out", "r")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Rows of 2 runs, each label's from one (section Runs): a (base, better); b (other).")
    text = (root / "r" / "report.md").read_text()
    main = text.split("## Linear probes on all training data")[1].split("\n## ")[0]
    assert "| L1−L5 | slope (points per +0.1 similarity) | run |" in main
    run_of = {ln.split(" | ")[0][2:]: ln.rstrip(" |").rsplit(" | ", 1)[1] for ln in main.splitlines()
              if ln.startswith(("| base ", "| better ", "| other "))}
    assert run_of == {"base": "a", "better": "a", "other": "b"}
    runs = text.split("## Runs")[1].split("\n## ")[0]
    assert "| a | a/results.sqlite | base, better | aaaaaaaaaaaa |" in runs
    assert "| b | b/results.sqlite | other | aaaaaaaaaaaa |" in runs
    assert "base: 12 row(s) of b left out, a's shown." in runs
    lines = _csv(root / "r" / "results.csv")
    assert {(ln["model"], ln["run"]) for ln in lines} == {("base", "a"), ("better", "a"), ("other", "b")}
    rows = {(run, r["model"], r["domain"], r["seed"]): r for run in "ab"
            for r in read_rows(root / run / "results.sqlite")}
    for ln in lines:  # each label's numbers are its own run's rows (base: a's, not b's)
        mine = [rows[ln["run"], ln["model"], ln["domain"], s]["test_top1"] for s in (22, 37)]
        assert float(ln["top1_mean"]) == pytest.approx(np.mean(mine), abs=1e-4)
    # other's predictions are read beside b's store: its paired differences to base (a's) recomputed here
    paired = text.split("## Paired differences to base")[1].split("\n## ")[0]
    line = next(ln for ln in paired.splitlines() if ln.startswith("| other | L5 |"))
    other = [read_row_predictions(root / "b" / "results.sqlite", rows["b", "other", "cog_l5", s]) for s in (22, 37)]
    base = [read_row_predictions(root / "a" / "results.sqlite", rows["a", "base", "cog_l5", s]) for s in (22, 37)]
    want = np.mean([100 * (o.correct.mean() - b.correct.mean()) for o, b in zip(other, base)])
    assert float(line.split(" | ")[2]) == pytest.approx(want, abs=0.005)
    assert "| other | linear probe | L5 |" in text.split("## Mistake severity per level")[1]
    html = (root / "r" / "report.html").read_text()
    assert ">Runs</h2>" in html and "<td>b/results.sqlite</td>" in html
    # --results given for each store is the same report
    again = _report(root, "--results", "a/results.sqlite", "--results", "b/results.sqlite", "--baseline", "base",
                    "--levels", "a/levels.json", "--out", "r2")
    assert again.returncode == 0, again.stderr
    assert (root / "r2" / "report.md").read_text() == text
    # --results A B (the SQLite files after --results are stores, the other words labels): the same report too
    both = _report(root, "--results", "a/results.sqlite", "b/results.sqlite", "--baseline", "base", "--levels",
                   "a/levels.json", "--out", "r4")
    assert both.returncode == 0, both.stderr
    assert (root / "r4" / "report.md").read_text() == text
    some = _report(root, "--results", "a/results.sqlite", "b/results.sqlite", "other", "--baseline", "other",
                   "--levels", "a/levels.json", "--out", "r5", "--no-html")
    assert some.returncode == 0, some.stderr
    assert {ln["model"] for ln in _csv(root / "r5" / "results.csv")} == {"other"}
    # one store: no run column, no section Runs
    one = _report(root, "--results", "a/results.sqlite", "--out", "r3", "--no-html")
    assert one.returncode == 0, one.stderr
    assert "## Runs" not in (root / "r3" / "report.md").read_text()
    assert "run" not in _csv(root / "r3" / "results.csv")[0]


def _refused(root: Path, *args: str, process: bool = False, capsys=None) -> str:
    """The one error line of a refused report: of the installed ``cog-pl`` (``process``), else of its entry point in
    this process (the same code, without the start-up)."""
    if process:
        done = _report(root, *args, "--out", "refused")
        status, err = done.returncode, done.stderr
    else:
        cwd = os.getcwd()
        os.chdir(root)
        try:
            status = main(["report", *args, "--out", "refused"])
        finally:
            os.chdir(cwd)
        err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert ERROR_LINE.match(last), last
    assert not (root / "refused").exists()  # refused before any work
    return last


def test_runs_that_cannot_be_set_side_by_side_are_refused_in_one_line(two_runs, capsys):
    root = two_runs
    b = root / "b" / "results.sqlite"
    base = next(r for r in read_rows(b) if r["model"] == "other" and r["domain"] == "cog_l3" and r["seed"] == 22)
    # another protocol: b's linear rows of other made with 2 trials of 1 epoch
    append_row(b, {**base, "protocol": {"trials": 2, "epochs": 1, "seeds": [22, 37], "shots": [], "extra": {}}})
    line = _refused(root, "--runs", "a", "b", process=True)
    assert "a/results.sqlite and b/results.sqlite were made under other protocols: linear probe rows under " \
           "not recorded in the first, custom (2 trials × 1 epoch" in line
    append_row(b, base)  # back to a's protocol
    write_info(b, "similarity", {"file": None, "measure": "lin", "seen": ["n01440764", "n01443537"],
                                 "seen_name": "2 concepts"})
    assert "record other similarity sources (WordNet, Lin similarity to the 1000 IN-1K concepts against WordNet, " \
           "Lin similarity to 2 concepts)" in _refused(root, "--runs", "a", "b", capsys=capsys)
    write_info(b, "similarity", {"file": None, "measure": "lin", "seen": None,
                                 "seen_name": "the 1000 IN-1K concepts"})
    assert main(["report", "--runs", str(root / "a"), str(root / "b"), "--out", str(root / "fine"), "--no-html"]) == 0
    _with_features(b, {"base": "1" * 64, "other": "3" * 64}, level="b" * 64)
    assert "hold rows of other benchmarks (level file sha256 aaaaaaaaaaaa against bbbbbbbbbbbb)" in _refused(
        root, "--runs", "a", "b", capsys=capsys)
    _with_features(b, {"base": "9" * 64, "other": "3" * 64})  # base: other weights under the same label
    assert "label base names other weights in a/results.sqlite (sha256 1111111111111111) and in b/results.sqlite " \
           "(9999999999999999)" in _refused(root, "--runs", "a", "b", capsys=capsys)
    twice = _refused(root, "--results", "a/results.sqlite", "--results", "a/../a/results.sqlite", capsys=capsys)
    assert "a/../a/results.sqlite is given twice (a/results.sqlite)" in twice
    (root / "c").mkdir()
    assert "--runs c: the folder has no results.sqlite (cog-pl run --out c writes c/results.sqlite)" in _refused(
        root, "--runs", "a", "c", process=True)
    assert "--features a names one feature stores' root" in _refused(root, "--runs", "a", "b", "--features", "a",
                                                                     capsys=capsys)


@pytest.mark.slow  # 2026-12-04, shared 2 cores: about 70 s (two cog-pl runs as processes); the core stays fast above
def test_two_demo_runs_in_two_folders_make_one_report(onto, tmp_path):
    """Issue 48: the demo's model and the same network at random weights, each evaluated by its own ``cog-pl run``
    into its own folder on the demo's benchmark; ``cog-pl report --runs`` sets them side by side, with each level's
    mistake severity, and exports them."""
    import jsonschema

    from cog_pl.demo.backbone import DemoCNN
    from cog_pl.demo.pretrain import save_backbone
    from cog_pl.demo.synthetic import make_demo
    from cog_pl.report.export import export_schema

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=3, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    save_backbone(DemoCNN(), tmp_path / "demo_cnn.pt")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    common = ["--in21k-root", str(tmp_path / "d" / "in21k"), "--benchmark", str(bench), "--domains", "cog_l1",
              "cog_l5", "--no-check", "--num-workers", "0", "--seeds", "22", "--shots", "all", "--trials", "2",
              "--epochs", "1", "--accelerator", "cpu", "--probe-device", "cpu", "--no-html"]
    for folder, weights in (("a", ["--checkpoint", str(tmp_path / "demo_cnn.pt")]), ("b", ["--random-weights"])):
        done = subprocess.run([str(COG_PL), "run", "--model", "external:demo_cnn", *weights, "--out",
                               str(tmp_path / folder), *common], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    done = _report(tmp_path, "--runs", "a", "b", "--out", "both", "--export", "--no-html")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Rows of 2 runs, each label's from one (section Runs): a (demo_cnn); "
                                  "b (demo_cnn@random).")
    text = (tmp_path / "both" / "report.md").read_text()
    runs = text.split("## Runs")[1].split("\n## ")[0]
    assert "| a | a/results.sqlite | demo_cnn |" in runs and "| b | b/results.sqlite | demo_cnn@random |" in runs
    assert "| benchmark.json (15 concepts) | linear probe: custom (2 trials × 1 epoch) | 2 |" in runs
    severity = _table_lines(text.split("## Mistake severity per level")[1].split("\n## ")[0])
    assert {(ln[0], ln[2]) for ln in severity} == {(m, lv) for m in ("demo_cnn", "demo_cnn@random")
                                                     for lv in ("L1", "L5")}
    assert {ln["run"] for ln in _csv(tmp_path / "both" / "results.csv")} == {"a", "b"}
    for label in ("demo_cnn", "demo_cnn@random"):
        rec = json.loads((tmp_path / "both" / "export" / f"{label}.json").read_text())
        jsonschema.validate(rec, export_schema())
        assert rec["benchmark"]["name"].startswith("cog-demo-seed") and rec["run"] in ("a", "b")
    assert "## Sorted by L5 top-1" in (tmp_path / "both" / "leaderboard.md").read_text()


def _table_lines(section: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in section.splitlines() if ln.startswith("| ")][1:]
