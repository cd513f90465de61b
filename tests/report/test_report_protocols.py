"""Rows carry their protocol and a table never mixes protocols (issue 37, items 4 and 5): a run resumed with other
settings and ``overwrite`` removes the rows of its model, method and domain that it would not make again; a report
cell averages the rows of its newest protocol only, lists the others as stale and shows its n where it is not the
protocol's seed count; a relative sets each method against the baseline's row of the same method."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from test_probe_fixtures import write_features

from cog_pl.io import digest
from cog_pl.protocol import ProbeProtocol
from cog_pl.report.tables import summarize
from cog_pl.results import append_row, read_rows
from cog_pl.results.identity import settings_of, wanted

REPO = Path(__file__).resolve().parents[2]
COG_PL = Path(sys.executable).with_name("cog-pl")  # the console script installed beside the test's Python
SEARCH = {"mode": "fast", "startup_trials": 10, "trial_batch": 4}


def _report(results: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(COG_PL), "report", "--results", str(results), "--out", str(out), *extra], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def _csv(path: Path) -> dict[tuple, dict[str, str]]:
    lines = csv.DictReader(io.StringIO(path.read_text()))
    return {(r["model"], r["method"], r["domain"], r["shots"]): r for r in lines}


def test_a_run_resumed_with_other_settings_is_never_averaged_with_the_old_rows(tmp_path, caplog):
    from run_stages import probe_stage

    from cog_pl.pipeline import ProbeOptions, RunConfig

    out = tmp_path / "out"
    for domain in ("cog_l1", "cog_l2"):
        write_features(out / "features" / "m" / domain, classes=3, dim=8, per_class=20, test_per_class=4)
    (tmp_path / "in21k").mkdir()

    def config(seeds, trials: int, epochs: int, **kw) -> RunConfig:
        return RunConfig(model="resnet50", random_weights=True, in1k_root=None, in21k_root=str(tmp_path / "in21k"),
                         out=str(out), domains=("cog_l1", "cog_l2"), seeds=seeds, shots=(None,), check=False,
                         probe=ProbeOptions(trials=trials, epochs=epochs, device="cpu", trial_batch=1), **kw)

    results = out / "results.sqlite"
    assert probe_stage(config((22, 37, 45), 3, 2), out, "m") == 6  # the first run: three seeds, 3 trials x 2 epochs
    assert probe_stage(config((22,), 3, 2, overwrite=True), out, "m") == 0  # the same settings: its other seeds stay
    assert len(read_rows(results)) == 6
    with caplog.at_level(logging.INFO, logger="cog_pl.results.identity"):
        assert probe_stage(config((22, 37), 2, 1, overwrite=True), out, "m") == 4  # resumed: other seeds and settings
    rows = read_rows(results)
    assert sorted((r["domain"], r["seed"], r["protocol"]["trials"], r["protocol"]["epochs"]) for r in rows) == [
        ("cog_l1", 22, 2, 1), ("cog_l1", 37, 2, 1), ("cog_l2", 22, 2, 1), ("cog_l2", 37, 2, 1)]
    removed = [r.getMessage() for r in caplog.records if "stale" in r.getMessage()]
    assert removed == [f"m/linear/{d}: removed 1 stale row(s) outside this run's grid (shots=all/seed=45), made with "
                       "epochs=2, trials=3; this run has epochs=1, trials=2" for d in ("cog_l1", "cog_l2")]

    _report(results, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    by = {(r["domain"]): r["test_top1"] for r in rows if r["seed"] == 22}
    other = {(r["domain"]): r["test_top1"] for r in rows if r["seed"] == 37}
    line = next(x for x in text.splitlines() if x.startswith("| m |"))
    for d in ("cog_l1", "cog_l2"):  # the two rows of the new protocol, n shown: the protocol has five seeds
        assert f"{(by[d] + other[d]) / 2:.2f} ± " in line and line.count("(n = 2)") == 2
    assert "Stale rows" not in text
    cells = _csv(tmp_path / "report" / "results.csv")
    assert cells["m", "linear", "cog_l1", "All"]["seeds"] == "2"


def _row(model: str, method: str, domain: str, seed: int, top1: float, trials: int = 30, epochs: int = 100) -> dict:
    """A linear probe's row with the identity fields a real one records (:func:`cog_pl.results.identity.wanted`)."""
    protocol = replace(ProbeProtocol(), trials=trials, epochs=epochs)
    features = {"train": {"model": model, "domain": domain, "meta_sha256": "ab" * 32}}
    want = wanted(features, protocol, SEARCH, "32-true")
    return {"model": model, "method": method, "domain": domain, "shots": None, "seed": seed, "test_top1": top1,
            "test_top5": top1 + 10, **want}


def _set_updated(results: Path, seeds: tuple[int, ...], when: str) -> None:
    con = sqlite3.connect(results)
    with con:
        con.execute(f"UPDATE rows SET updated=? WHERE seed IN ({', '.join('?' * len(seeds))})", (when, *seeds))
    con.close()


def test_a_cell_averages_its_newest_protocol_and_lists_the_other_rows_as_stale(tmp_path):
    results = tmp_path / "results.sqlite"
    old = {22: 70.0, 37: 71.0, 45: 72.0, 77: 73.0, 93: 74.0}  # a default run: 30 trials x 100 epochs, five seeds
    for seed, top1 in old.items():
        append_row(results, _row("m", "linear", "in1k", seed, top1))
    _set_updated(results, tuple(old), "2026-12-01T10:00:00+00:00")
    for seed, top1 in ((22, 60.0), (37, 61.0)):  # resumed with --seeds 22 37 --trials 5 --epochs 10 --overwrite
        append_row(results, _row("m", "linear", "in1k", seed, top1, trials=5, epochs=10))
    _set_updated(results, (22, 37), "2026-12-01T11:00:00+00:00")

    _report(results, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| m | 60.50 ± 0.71 (n = 2) |" in text  # the newest protocol's two rows, never the old three
    assert "| m | linear probe | IN-1K | All | 45, 77, 93 | epochs=100, trials=30 | epochs=10, trials=5 |" in text
    cell = _csv(tmp_path / "report" / "results.csv")["m", "linear", "in1k", "All"]
    assert (cell["top1_mean"], cell["seeds"]) == ("60.5000", "2")
    new, stale = (next(r for r in read_rows(results) if r["seed"] == s) for s in (22, 45))  # of each protocol
    assert cell["protocol"] == digest(settings_of(new))[:12] != digest(settings_of(stale))[:12]
    assert cell["protocol_name"] == "custom (5 trials × 10 epochs)"  # from the rows, in words
    assert "protocol: custom (5 trials × 10 epochs)" in text
    with pytest.raises(ValueError, match=r"rows of m/linear/in1k/shots=all were made under two protocols \("
                                         r"epochs=10, trials=5 against epochs=100, trials=30\)"):
        summarize(read_rows(results))


def test_relatives_set_each_method_against_the_baselines_row_of_that_method(tmp_path):
    results = tmp_path / "results.sqlite"
    top1 = {("resnet50", "linear"): 70.0, ("resnet50", "knn"): 60.0,
            ("dino", "linear"): 75.0, ("dino", "knn"): 68.0, ("dino", "finetune"): 80.0}
    for (model, method), value in top1.items():
        for seed in (22, 37):
            append_row(results, {"model": model, "method": method, "domain": "in1k", "shots": None, "seed": seed,
                                 "test_top1": value + (seed == 37), "test_top5": 95.0})
    _report(results, tmp_path / "report", "--baseline", "resnet50")
    cells = _csv(tmp_path / "report" / "results.csv")
    linear, knn, tuned = (cells["dino", m, "in1k", "All"] for m in ("linear", "knn", "finetune"))
    assert (linear["top1_relative"], linear["relative_to"]) == ("5.0000", "resnet50/linear")
    assert (knn["top1_relative"], knn["relative_to"]) == ("8.0000", "resnet50/knn")  # k-NN against k-NN, not linear
    assert (tuned["top1_relative"], tuned["relative_to"]) == ("", "")  # the baseline was never fine-tuned
    assert tuned["relative_note"] == "resnet50 has no fine-tuned row on IN-1K, shots All"


def test_knn_overwrite_removes_the_rows_of_other_values_outside_its_grid(tmp_path, caplog):
    from cog_pl.evaluate.runner import run_on_stores

    root = write_features(tmp_path / "f", classes=4, dim=8, per_class=30, test_per_class=5)
    results = tmp_path / "r.sqlite"
    kw = {"model": "m", "domain": "cog_l2", "shots": (None, 4), "device": "cpu"}
    fp32, fp64 = {"precision": "32-true"}, {"precision": "64-true"}
    run_on_stores("knn", root, results, seeds=(22, 37, 45), options=fp32, **kw)
    run_on_stores("knn", root, results, seeds=(22,), options=fp32, overwrite=True, **kw)  # same values: all kept
    assert len(read_rows(results)) == 6
    with caplog.at_level(logging.INFO, logger="cog_pl.results.identity"):
        run_on_stores("knn", root, results, seeds=(22, 37), options=fp64, overwrite=True, **kw)
    assert sorted((r["shots"] or 0, r["seed"], r["precision"]) for r in read_rows(results)) == [
        (0, 22, "64-true"), (0, 37, "64-true"), (4, 22, "64-true"), (4, 37, "64-true")]
    assert [r.getMessage() for r in caplog.records if "stale" in r.getMessage()] == [
        "m/knn/cog_l2: removed 2 stale row(s) outside this run's grid (shots=all/seed=45, shots=4/seed=45), made "
        "with precision=32-true; this run has precision=64-true"]


def test_finetune_overwrite_removes_the_rows_of_other_inputs_outside_its_seeds(tmp_path):
    from cog_pl.finetune.compare import finetune_identity
    from cog_pl.results.identity import differences, remove_stale

    results = tmp_path / "r.sqlite"
    old, new = (finetune_identity("resnet50", None, recipe={}, epochs=e, batch_size=128, precision="32-true",
                                  transform=None, benchmark=None) for e in (10, 2))
    for seed, want in ((22, old), (37, old), (45, new)):
        append_row(results, {"model": "resnet50", "method": "finetune", "domain": "in1k", "shots": None,
                             "seed": seed, "test_top1": 70.0, **want})
    assert remove_stale(results, model="resnet50", method="finetune", domain="in1k", seeds=(22,), shots=(None,),
                        want=new, compare=differences) == 1  # seed 37's other epochs; seed 45's row stays
    assert [r["seed"] for r in read_rows(results)] == [22, 45]


def test_cells_of_one_model_made_with_other_settings_are_marked_and_relatives_say_so(tmp_path):
    results = tmp_path / "results.sqlite"
    for seed in (22, 37):  # an overwrite run stopped after IN-1K: L1 still holds the default run's rows
        append_row(results, _row("m", "linear", "in1k", seed, 60.0 + (seed == 37), trials=5, epochs=10))
        append_row(results, _row("m", "linear", "cog_l1", seed, 50.0 + (seed == 37)))
        append_row(results, _row("resnet50", "linear", "in1k", seed, 55.0 + (seed == 37)))
    _report(results, tmp_path / "report", "--baseline", "resnet50")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| m | 60.50 ± 0.71 (n = 2) [a] | 50.50 ± 0.71 (n = 2) [b] |" in text
    assert "| m | +5.00 [a] | – |" in text
    assert "| m | linear probe | [a] | epochs=10, trials=5 | IN-1K (All) |" in text
    assert "| m | linear probe | [b] | epochs=100, trials=30 | L1 (All) |" in text
    assert ("Relatives between cells of other settings: m on IN-1K: resnet50 made with epochs=100, trials=30, this "
            "cell with epochs=10, trials=5.") in text
    cell = _csv(tmp_path / "report" / "results.csv")["m", "linear", "in1k", "All"]
    assert (cell["top1_relative"], cell["relative_to"]) == ("5.0000", "resnet50/linear")
    assert cell["relative_note"] == "resnet50 made with epochs=100, trials=30, this cell with epochs=10, trials=5"


@pytest.mark.slow  # 2026-12-02, shared 2 cores: 125 s (two runs); the probe stage's resume above stays fast
def test_cog_pl_run_resumed_with_other_seeds_and_settings_reports_only_its_rows(onto, tmp_path):
    """The issue's case through the installed `cog-pl run`: a run of three seeds, then `--seeds 22 37` with other
    trials and epochs and `--overwrite`; the second run's report averages its two rows, n shown."""
    from cog_pl.demo.synthetic import make_demo

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}

    def run(*extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(COG_PL), "run", "--model", "external:demo_cnn", "--random-weights", "--in21k-root",
                               str(tmp_path / "d" / "in21k"), "--benchmark", str(bench), "--out", str(out),
                               "--domains", "cog_l2", "--no-check", "--num-workers", "0", "--batch-size", "16",
                               "--shots", "all", "--probe-device", "cpu", "--trial-batch", "1", *extra],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return done

    run("--seeds", "22", "37", "45", "--trials", "3", "--epochs", "2")
    done = run("--seeds", "22", "37", "--trials", "2", "--epochs", "1", "--overwrite")
    (removed,) = [line for line in done.stderr.splitlines() if "stale" in line]  # (the stores extracted again)
    assert removed.startswith("demo_cnn@random/linear/cog_l2: removed 1 stale row(s) outside this run's grid "
                              "(shots=all/seed=45), made with epochs=2, trials=3, features.train.meta_sha256=")
    rows = read_rows(out / "results.sqlite")
    assert sorted((r["seed"], r["protocol"]["trials"], r["protocol"]["epochs"]) for r in rows) == [
        (22, 2, 1), (37, 2, 1)]
    text = (out / "report" / "report.md").read_text()
    mean = sum(r["test_top1"] for r in rows) / 2
    assert f"| demo_cnn@random | {mean:.2f} ± " in text and "(n = 2) |" in text and "Stale rows" not in text


def test_a_run_adding_rows_to_a_cell_of_other_settings_is_refused_before_any_work(tmp_path):
    from cog_pl.evaluate.runner import run_on_stores
    from cog_pl.probe.tuner import SearchPlan

    root = write_features(tmp_path / "f", classes=3, dim=8, per_class=20, test_per_class=4)
    results, storage = tmp_path / "r.sqlite", tmp_path / "optuna.db"
    kw = {"model": "m", "domain": "cog_l3", "shots": (None,), "storage": storage, "device": "cpu",
          "plan": SearchPlan(startup_trials=2, trial_batch=1)}
    run_on_stores("linear", root, results, seeds=(22, 37), protocol=replace(ProbeProtocol(), trials=3, epochs=2), **kw)
    other = replace(ProbeProtocol(), trials=2, epochs=2)
    with pytest.raises(ValueError, match=r"r\.sqlite: row m/linear/cog_l3/shots=all/seed=22 of a cell this run adds "
                                         r"rows to was made with trials=3, this run has trials=2; a cell averages "
                                         r"rows of one protocol: run with its settings, or pass --overwrite"):
        run_on_stores("linear", root, results, seeds=(45,), protocol=other, **kw)
    assert [r["seed"] for r in read_rows(results)] == [22, 37]
    alike = replace(ProbeProtocol(), trials=3, epochs=2)
    run_on_stores("linear", root, results, seeds=(45,), protocol=alike, **kw)
    assert [r["seed"] for r in read_rows(results)] == [22, 37, 45]


def test_fine_tuning_another_seed_with_other_inputs_is_refused_before_any_training(tmp_path):
    from cog_pl.evaluate import Inputs, Job, get_method
    from cog_pl.evaluate.finetune import FinetuneOptions
    from cog_pl.evaluate.grid import run_grid
    from cog_pl.finetune.compare import finetune_identity

    results = tmp_path / "r.sqlite"
    inputs = Inputs(label="resnet10t", model="timm:resnet10t", transform="t", in1k_root=str(tmp_path / "none"))
    want = finetune_identity("resnet10t", None, recipe={}, epochs=3, batch_size=4, precision="32-true",
                             transform="t", benchmark=None)
    append_row(results, {"model": "resnet10t", "method": "finetune", "domain": "in1k", "shots": None, "seed": 22,
                         "test_top1": 70.0, **want})
    with pytest.raises(ValueError, match=r"row resnet10t/finetune/in1k/shots=all/seed=22 of a cell this run adds "
                                         r"rows to was made with epochs=3, this run has epochs=1; "):
        run_grid(Job(get_method("finetune"), inputs, "in1k", results, ProbeProtocol(), (22,), (None,),
                     options=FinetuneOptions(epochs=1, batch_size=4, seeds=(37,), precision="32-true")))


def test_the_quick_protocol_is_its_grid_recorded_in_its_rows_and_named_by_the_report(tmp_path, capsys):
    """Issue #39: ``cog-pl run --protocol quick``, a first try: one seed, all data and 4 shots, 10 trials x 30
    epochs unless given; its rows record it, the report names it and never averages its cells with the paper's."""
    from run_stages import probe_stage

    from cog_pl.cli.main import main
    from cog_pl.pipeline import ProbeOptions, RunConfig

    out = tmp_path / "out"
    for domain in ("cog_l1", "cog_l2"):
        write_features(out / "features" / "m" / domain, classes=3, dim=8, per_class=20, test_per_class=4)
    (tmp_path / "in21k").mkdir()
    kw = {"model": "resnet50", "random_weights": True, "in1k_root": None, "in21k_root": str(tmp_path / "in21k"),
          "out": str(out), "domains": ("cog_l1", "cog_l2"), "check": False}
    quick = RunConfig(**kw, probe=ProbeOptions(name="quick", device="cpu"))
    assert (quick.seeds, quick.shots, quick.protocol.trials, quick.protocol.epochs) == ((22,), (None, 4), 10, 30)
    assert RunConfig(**kw).seeds == (22, 37, 45, 77, 93) and RunConfig(**kw).protocol.trials == 30  # the paper's
    cfg = RunConfig(**kw, probe=ProbeOptions(name="quick", trials=2, epochs=1, device="cpu", trial_batch=1))
    assert probe_stage(cfg, out, "m") == 4  # two domains x (all, 4 shots) x seed 22
    rows = read_rows(out / "results.sqlite")
    assert {(r["shots"], r["seed"], r["protocol"]["extra"]["protocol"]) for r in rows} == {(None, 22, "quick"),
                                                                                         (4, 22, "quick")}
    # the paper's protocol after it: refused before any work, naming both protocols in words (issue 46), not the
    # seed and shot lists the user never passed
    with pytest.raises(ValueError, match=r"row m/linear/cog_l1/shots=all/seed=22 was made with protocol custom "
                                         r"\(2 trials × 1 epoch, 1 seed, protocol=quick\), trial_batch=1, this run has "
                                         r"protocol paper \(30 trials × 100 epochs, 5 seeds\), trial_batch=5; pass "
                                         r"--overwrite"):
        probe_stage(RunConfig(**kw, probe=ProbeOptions(device="cpu")), out, "m")
    assert read_rows(out / "results.sqlite") == rows
    for seed in (22, 37):  # the paper's protocol, another model, beside it
        append_row(out / "results.sqlite", _row("p", "linear", "cog_l1", seed, 50.0))
    _report(out / "results.sqlite", tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    # named from its rows: quick's grid with 2 trials x 1 epoch is not the quick protocol (10 x 30) but custom
    assert ("**Not the paper's protocol: custom (2 trials × 1 epoch, 1 seed, protocol=quick)** (m): beside published "
            "numbers") in text
    main_table = text.split("## Linear probes on all training data")[1].split("\n## ")[0]
    assert ("protocols: custom (2 trials × 1 epoch, 1 seed, protocol=quick) (m); paper (30 trials × 100 epochs, "
            "5 seeds) (p)") in main_table
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<p><strong>Not the paper's protocol: custom (2 trials × 1 epoch, 1 seed, protocol=quick)</strong>" in html
    assert "**" not in html.split("<body>")[1].split('<script type="application/json"')[0]  # rendered, not literal
    with pytest.raises(SystemExit):  # the named protocols are the CLI's choices
        main(["run", "--model", "resnet50", "--protocol", "fast"])
    assert "--protocol: invalid choice: 'fast' (choose from 'paper', 'quick')" in capsys.readouterr().err


def test_each_rows_protocol_is_named_in_words_from_what_it_records():
    """Issue 46: the paper's and quick's records by their names with their trials, epochs and seeds; any other
    record ``custom`` with its own trials and epochs (one trial, one epoch in the singular) and what else differs;
    a method's own record by its trials and epochs, epochs, or ks; a row recording nothing, ``not recorded``."""
    from cog_pl.protocol import PROTOCOLS, as_record
    from cog_pl.report.protocol_names import protocol_line, row_protocol

    paper, quick = (as_record(PROTOCOLS[n].probe_protocol()) for n in ("paper", "quick"))
    assert row_protocol({"protocol": paper}) == ("paper", "paper (30 trials × 100 epochs, 5 seeds)")
    assert row_protocol({"protocol": quick}) == ("quick", "quick (10 trials × 30 epochs, 1 seed)")
    assert row_protocol({"protocol": {**paper, "trials": 1, "epochs": 1}}) == ("custom", "custom (1 trial × 1 epoch)")
    assert row_protocol({"protocol": {**quick, "trials": 2}}) == ("custom", "custom (2 trials × 30 epochs, 1 seed, "
                                                                            "protocol=quick)")
    assert row_protocol({"protocol": {**paper, "batch_size": 256}})[1] == "custom (30 trials × 100 epochs, " \
                                                                         "batch_size=256)"
    assert row_protocol({"method": "finetune", "finetune": {"epochs": 10}}) == (None, "10 epochs")
    assert row_protocol({"method": "attentive_images", "attentive_images": {"trials": 30, "epochs": 20}}) == (
        None, "30 trials × 20 epochs")
    assert row_protocol({"method": "knn", "knn": {"ks": [10, 20]}}) == (None, "k among 10, 20")
    from cog_pl.probe.ridge import REGS
    assert row_protocol({"method": "ridge", "ridge": {"regs": list(REGS)}}) == (
        None, "L2 penalty among 2^-10, 2^-8, ..., 2^20 (16 values)")  # the default grid
    assert row_protocol({"method": "ridge", "ridge": {"regs": [100, 0.01, 1]}})[1] == "L2 penalty among 0.01, 1, 100"
    assert row_protocol({"method": "ridge", "ridge": {"regs": [1, 2, 8, 16]}})[1] == "L2 penalty among 1, 2, 8, 16"
    assert row_protocol({"model": "m", "test_top1": 1.0}) == (None, "not recorded")
    assert protocol_line([("a", "x"), ("b", "x")]) == "protocol: x"
    assert protocol_line([("a", "x"), ("b", "y"), ("c", "x")]) == "protocols: x (a, c); y (b)"


def test_results_csv_digests_the_settings_never_the_stores_creation(tmp_path):
    """The fast core of the test below: the same rows over stores made twice (another ``created`` in their meta.json,
    so another ``meta_sha256`` and row identity) give the same results.csv byte for byte; other settings another
    protocol digest."""
    from cog_pl.report.build import write_report

    files = []
    for made, trials in (("2026-12-01", 30), ("2026-12-02", 30), ("2026-12-02", 5)):
        results = tmp_path / f"{made}-{trials}.sqlite"
        features = {split: {"model": "m", "domain": "cog_l1", "weights_sha256": "ab" * 32,
                            "meta_sha256": f"digest of a meta.json made {made}"} for split in ("train", "test")}
        want = wanted(features, replace(ProbeProtocol(), trials=trials), SEARCH, "32-true")
        for seed in (22, 37):
            append_row(results, {"model": "m", "method": "linear", "domain": "cog_l1", "shots": None, "seed": seed,
                                 "test_top1": 60.0 + seed / 10, "test_top5": 90.0, **want})
        files.append(write_report(results, tmp_path / results.stem, html=False)["csv"].read_bytes())
    assert len({r["identity"] for r in (read_rows(p)[0] for p in sorted(tmp_path.glob("*.sqlite")))}) == 3
    assert files[0] == files[1] != files[2]
    same, other = (next(csv.DictReader(io.StringIO(f.decode()))) for f in files[1:])
    assert same["protocol"] != other["protocol"] and other["protocol_name"] == "custom (5 trials × 100 epochs)"
    assert same["protocol_name"] == "paper (30 trials × 100 epochs, 5 seeds)"


@pytest.mark.slow  # 2026-12-04, shared 2 cores: 51 s (two runs as processes); the core stays fast: the test above
def test_two_identical_runs_write_byte_identical_results_csv(onto, tmp_path):
    """Issue 46: the same small ``cog-pl run`` twice, into two folders (feature stores made twice, at other times):
    ``results.csv`` is the same byte for byte, its protocol column a digest of the settings, never of the stores'
    creation time; the console shows the main table, a line per other section and the files, not the whole report."""
    from cog_pl.demo.backbone import DemoCNN
    from cog_pl.demo.pretrain import save_backbone
    from cog_pl.demo.synthetic import make_demo

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=3, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    save_backbone(DemoCNN(), tmp_path / "demo_cnn.pt")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    made = []
    for name in ("a", "b"):
        done = subprocess.run([str(COG_PL), "run", "--model", "external:demo_cnn", "--checkpoint",
                               str(tmp_path / "demo_cnn.pt"), "--in21k-root", str(tmp_path / "d" / "in21k"),
                               "--benchmark", str(bench), "--out", str(tmp_path / name), "--domains", "cog_l1",
                               "cog_l5", "--no-check", "--num-workers", "0", "--seeds", "22", "--shots", "all",
                               "--trials", "2", "--epochs", "1", "--methods", "linear", "knn", "--accelerator", "cpu",
                               "--probe-device", "cpu", "--no-html"], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        made.append(done.stdout)
    metas = [json.loads((tmp_path / n / "features" / "demo_cnn" / "cog_l1" / "test" / "meta.json").read_text())
             for n in ("a", "b")]
    assert metas[0]["created"] != metas[1]["created"]  # the stores differ in when they were made
    a, b = ((tmp_path / n / "report" / "results.csv").read_bytes() for n in ("a", "b"))
    assert a == b
    lines = list(csv.DictReader(io.StringIO(a.decode())))
    assert {ln["protocol_name"] for ln in lines} == {"custom (2 trials × 1 epoch)", "k among 10, 20, 100, 200"}
    assert all(len(ln["protocol"]) == 12 for ln in lines)
    out = made[0]
    report = (tmp_path / "a" / "report" / "report.md").read_text()
    table = report.split("## Linear probes on all training data")[1].split("\n## ")[0]
    assert next(ln for ln in table.splitlines() if ln.startswith("| demo_cnn |")) in out
    assert "protocol: custom (2 trials × 1 epoch)" in out and "  - Selection optimism" in out
    assert "## " not in out and len(out.splitlines()) < 40 < len(report.splitlines())
    assert f"report: {tmp_path / 'a' / 'report' / 'report.md'}" in out
