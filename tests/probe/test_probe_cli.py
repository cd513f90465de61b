"""``cog-pl probe tune``: progress on stderr, one JSON result as the last stdout line; the same seed repeats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
from test_probe_fixtures import write_features

from cog_pl.cli.main import main as cog_pl_main
from cog_pl.results import read_rows

REPO = Path(__file__).resolve().parents[2]


def main(argv):
    """``cog-pl probe ARGV``."""
    return cog_pl_main(["probe", *argv])


def test_tune_prints_a_json_result_last(tmp_path, capsys):
    features = write_features(tmp_path / "m" / "cog_l2")
    args = ["tune", "--features", str(features), "--trials", "4", "--epochs", "3", "--shots", "8",
            "--workdir", str(tmp_path / "w"), "--probe-device", "cpu"]
    assert main(args) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"test_top1", "test_top5", "lr", "wd", "seconds"} <= set(row)
    assert (row["model"], row["domain"], row["shots"], row["mode"]) == ("m", "cog_l2", 8, "fast")
    assert row["protocol"]["trials"] == 4 and row["protocol"]["epochs"] == 3
    assert (tmp_path / "w" / "optuna.db").exists()


def test_tune_as_a_process_repeats_with_the_same_seed(tmp_path):
    features = write_features(tmp_path / "f")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rows = []
    # the console script's module (cog_pl.cli.main:entry), twice
    for i, command in enumerate((["cog_pl.cli.main", "probe", "tune"], ["cog_pl.cli.main", "probe", "tune"])):
        out = subprocess.run([sys.executable, "-m", *command, "--features", str(features),
                              "--trials", "4", "--epochs", "2", "--exact", "--workdir", str(tmp_path / f"w{i}"),
                              "--results", str(tmp_path / "rows.sqlite")],
                             env=env, check=True, capture_output=True, text=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        assert "val top-1" in out.stderr  # progress
        assert "setup plugin" not in out.stderr  # and nothing of the database libraries' imports
    assert rows[0]["mode"] == "exact"
    assert [r["test_top1"] for r in rows] == [rows[0]["test_top1"]] * 2 and rows[0]["lr"] == rows[1]["lr"]
    assert len(read_rows(tmp_path / "rows.sqlite")) == 1  # same key: replaced, not duplicated
    # everything the process wrote is there, in the study file alone (the write-ahead log folded back)
    for i in range(2):
        assert not (tmp_path / f"w{i}" / "optuna.db-wal").exists()
        study = optuna.load_study(study_name=rows[i]["study"], storage=f"sqlite:///{tmp_path / f'w{i}' / 'optuna.db'}")
        assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 4


def test_search_options_default_to_the_search_plan():
    import argparse

    from cog_pl.cli.probe import _plan, add_subcommands
    from cog_pl.probe.tuner import SearchPlan

    parser = argparse.ArgumentParser()
    add_subcommands(parser)
    assert _plan(parser.parse_args(["tune", "--features", "f"])) == SearchPlan()
    assert _plan(parser.parse_args(["tune", "--features", "f", "--exact"])) == SearchPlan(mode="exact")
    given = _plan(parser.parse_args(["protocol", "--features", "f", "--model", "m", "--domain", "d", "--results",
                                     "r", "--trial-batch", "3", "--stale-after", "9", "--probe-precision", "32-true"]))
    assert given == SearchPlan(trial_batch=3, stale_after=9.0, precision="32-true")
    help_text = " ".join(parser._subparsers._group_actions[0].choices["tune"].format_help().split())
    assert f"default {SearchPlan().trial_batch})" in help_text and f"default {SearchPlan().stale_after:g})" in help_text


def test_a_bad_results_file_is_refused_before_tuning(tmp_path, capsys):
    features = write_features(tmp_path / "f")
    foreign = tmp_path / "optuna.db"
    optuna.create_study(storage=f"sqlite:///{foreign}")  # an Optuna study given as the results file
    args = ["tune", "--features", str(features), "--trials", "2", "--epochs", "1", "--workdir", str(tmp_path / "w"),
            "--results", str(foreign)]
    assert main(args) == 2
    assert f"results file {foreign} is not a cog-pl results database" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # refused before any study was opened or trial trained
