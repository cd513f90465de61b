"""k-NN everywhere the linear probe is: ``cog-pl probe knn`` (its row the last line), ``cog-pl run --methods linear
knn`` (rows of both methods, refusals before any probe), and the report (k-NN beside the linear probe per level)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from run_stages import probe_stage
from test_probe_fixtures import write_features

from cog_pl.cli.main import build_parser, main
from cog_pl.pipeline import ProbeOptions, RunConfig
from cog_pl.protocol import DOMAINS
from cog_pl.report.build import write_report
from cog_pl.results import append_row, read_rows


def test_probe_knn_prints_its_row_as_the_last_line_and_stores_it(tmp_path, capsys):
    root = write_features(tmp_path / "m" / "cog_l4", classes=4, dim=8, per_class=30, test_per_class=5)
    results = tmp_path / "r.sqlite"
    code = main(["probe", "knn", "--features", str(root), "--shots", "2", "--seed", "37", "--probe-device", "cpu",
                 "--probe-precision", "32-true", "--results", str(results)])
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and row["method"] == "knn" and (row["model"], row["domain"]) == ("m", "cog_l4")
    assert (row["shots"], row["seed"], row["train_rows"], row["precision"]) == (2, 37, 8, "32-true")
    # 2 shots of 4 classes: 8 tuning rows, so every k of the default ks runs, and is recorded, as k 8
    assert row["k"] == row["tuning_rows"] == 8 and row["val_top1_by_k"].keys() == {"8"}
    assert 0 <= row["test_top1"] <= row["test_top5"] <= 100
    assert read_rows(results) == [row]
    assert main(["probe", "knn", "--features", str(root), "--ks", "20", "10"]) == 2
    assert "ks must be increasing and distinct" in capsys.readouterr().err


def test_a_k_above_the_tuning_rows_is_recorded_as_the_k_that_ran(tmp_path):
    """Through the installed command: with 320 tuning rows, ``--ks 1000`` lets every row vote, which is k 320; the
    row records that (and says so on stderr), never k 1000."""
    import subprocess

    from bad_input_cases import COG_PL

    root = write_features(tmp_path / "m" / "cog_l2", classes=10, dim=8, per_class=40, test_per_class=4)
    results = tmp_path / "r.sqlite"
    out = subprocess.run([str(COG_PL), "probe", "knn", "--features", str(root), "--ks", "10", "1000", "--probe-device",
                          "cpu", "--results", str(results)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["tuning_rows"] == 320 and set(row["val_top1_by_k"]) == {"10", "320"} and row["k"] in (10, 320)
    assert row["knn"]["ks"] == [10, 1000] and read_rows(results) == [row]  # what was asked, beside what ran
    assert "the tuning sample of shots=all seed=22 holds 320 rows: k 1000 run as k 320 (every row votes)" in out.stderr


def test_a_test_label_the_train_split_never_has_runs_only_when_asked(tmp_path, capsys, caplog):
    root = write_features(tmp_path / "m" / "cog_l2", classes=4, dim=8, per_class=30, test_per_class=5)
    labels = np.load(root / "test" / "labels.npy")
    labels[:3] = 15  # train 0..3, three test rows of label 15
    np.save(root / "test" / "labels.npy", labels)
    results = tmp_path / "r.sqlite"
    argv = ["probe", "knn", "--features", str(root), "--probe-device", "cpu", "--results", str(results)]
    assert main(argv) == 2 and not results.exists()
    assert "the train store has 4 classes (labels 0..3), the test store 16" in capsys.readouterr().err
    with caplog.at_level("WARNING", logger="cog_pl.features.pair"):
        assert main([*argv, "--allow-class-mismatch"]) == 0
    (row,) = read_rows(results)
    assert row["test_top1"] <= 100 * 17 / 20  # the three rows of label 15 are errors, as the warning says
    assert "3 test row(s) have labels the train split never has (15)" in caplog.text


def _config(tmp_path, methods, **kw):
    args = build_parser().parse_args(["run", "--model", "resnet50", "--in21k-root", str(tmp_path), "--domains",
                                      "cog_l1", "cog_l2", "--seeds", "22", "--shots", "all", "2",
                                      "--trials", "2", "--epochs", "2", "--probe-device", "cpu",
                                      "--probe-precision", "32-true", "--out", str(tmp_path / "out"),
                                      *(["--methods", *methods] if methods else [])])
    from cog_pl.cli.run import _config
    from cog_pl.pipeline import ExtractOptions

    return _config(args, ExtractOptions(), args.methods, model=args.model[0], checkpoint=None, in1k_root=None,
                   in21k_root=args.in21k_root, out=args.out, domains=tuple(args.domains), benchmark=None, check=False,
                   overwrite=False, random_weights=True, **kw)  # the probes of stores written here


def test_run_methods_linear_knn_writes_rows_of_both_methods_on_every_domain(tmp_path):
    assert _config(tmp_path, None).methods == ("linear",)
    cfg = _config(tmp_path, ["linear", "knn"])
    assert cfg.methods == ("linear", "knn")
    out = tmp_path / "out"
    for i, domain in enumerate(cfg.domains):
        write_features(out / "features" / "m" / domain, classes=4, dim=8, per_class=25, test_per_class=5, seed=i)
    assert probe_stage(cfg, out, "m") == 2 * 2 * 2  # methods x domains x shot settings
    rows = read_rows(out / "results.sqlite")
    assert sorted((r["method"], r["domain"], r["shots"] or 0) for r in rows) == sorted(
        (m, d, s) for m in ("linear", "knn") for d in cfg.domains for s in (0, 2))
    assert probe_stage(cfg, out, "m") == 0  # resumed: nothing to do
    other = replace(cfg, probe=ProbeOptions(trials=2, epochs=2, device="cpu", precision="bf16-mixed"))
    with pytest.raises(ValueError, match="row m/linear/cog_l1/shots=all/seed=22 was made with precision=32-true"):
        probe_stage(other, out, "m")  # refused before any probe: no k-NN row replaced either
    assert read_rows(out / "results.sqlite") == rows
    with pytest.raises(ValueError,
                       match="methods: unknown method.s. svm; choose from linear, linear_text_init, zeroshot, "
                             "attentive, mlp, finetune, attentive_images, ridge, knn"):
        _config(tmp_path, ["linear", "svm"])
    with pytest.raises(ValueError):
        RunConfig(model="m", in1k_root=None, in21k_root=str(tmp_path), domains=("cog_l1",), methods=())


def test_the_report_sets_knn_beside_the_linear_probe_on_every_level(tmp_path):
    results = tmp_path / "r.sqlite"
    for method, base in (("linear", 60.0), ("knn", 50.0)):
        for i, domain in enumerate(DOMAINS):
            for shots in (None, 2):
                for seed in (22, 37):
                    top1 = base - 5 * i - (10 if shots else 0) + (seed == 37)
                    append_row(results, {"model": "dino", "method": method, "domain": domain, "shots": shots,
                                         "seed": seed, "test_top1": top1, "test_top5": top1 + 20})
    files = write_report(results, tmp_path / "report")
    text = files["markdown"].read_text()
    assert "## k-NN beside linear probe: test top-1 (%) on all data" in text
    assert "| model | method | IN-1K | L1 | L2 | L3 | L4 | L5 |" in text
    assert "| dino | linear probe | 60.50 ± 0.71 | 55.50 ± 0.71 | 50.50 ± 0.71 | 45.50 ± 0.71 | 40.50 ± 0.71 | " \
           "35.50 ± 0.71 |" in text
    assert "| dino | k-NN | 50.50 ± 0.71 | 45.50 ± 0.71 | 40.50 ± 0.71 | 35.50 ± 0.71 | 30.50 ± 0.71 | " \
           "25.50 ± 0.71 |" in text
    assert "| dino (k-NN) | 40.50 | 50.50 |" in text and "| dino | 50.50 | 60.50 |" in text  # few-shot, per level
    assert text.count("| dino (k-NN) |") == len(DOMAINS)
    csv = files["csv"].read_text()
    assert "dino,knn,cog_l5,All,25.5000" in csv and "dino,linear,cog_l5,All,35.5000" in csv
    assert files["methods"].stat().st_size > 1000 and files["few_shot"].stat().st_size > 1000
