"""Resuming a probe grid: rows carry the identity of what made them (features, protocol, search) and a resumed
run skips only rows of the same identity; a killed grid resumes to the rows of an uninterrupted one; workers sharing
a grid make each row once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest
from test_probe_fixtures import write_features

from cog_pl.cli.main import main
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.features.store import make_meta, write_store
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import read_rows

REPO = Path(__file__).resolve().parents[2]
PROTOCOL = replace(ProbeProtocol(), trials=3, epochs=2, batch_size=64)
PLAN = SearchPlan(startup_trials=2, trial_batch=1, stale_after=2.0)  # a killed worker's claim: 2 s
GRID = {"model": "m", "domain": "cog_l3", "seeds": (22,), "shots": (None, 2)}


def _grid(root, results, storage, protocol=PROTOCOL, plan=PLAN, **kw):
    return run_on_stores("linear", root, results, storage=storage, protocol=protocol, plan=plan, device="cpu",
                         **{**GRID, **kw})


def _store_pair(root: Path, weights: str) -> Path:
    rng = np.random.default_rng(0)
    base = dict(model="m", weights_sha256=weights, domain="cog_l3", transform={"crop": 224}, num_classes=3,
                classes=["n00000001", "n00000002", "n00000003"], level_file_sha256="cd" * 32)
    for split, n in (("train", 60), ("test", 12)):
        write_store(root / split, rng.random((n, 8)).astype(np.float16), np.arange(n) % 3, None,
                    make_meta(**base, split=split), overwrite=True)
    return root


def test_rows_record_their_identity_and_a_changed_protocol_is_refused(tmp_path):
    features = write_features(tmp_path / "m" / "cog_l3", classes=3, dim=8, per_class=20, test_per_class=4)
    results, storage = tmp_path / "r.sqlite", tmp_path / "s.db"
    rows = _grid(features, results, storage)
    assert len(rows) == 2 and all(len(r["identity"]) == 64 and r["features"]["train"]["plain"] for r in rows)
    assert _grid(features, results, storage) == []  # the same inputs: skipped
    with pytest.raises(ValueError, match=r"r\.sqlite: row m/linear/cog_l3/shots=all/seed=22 was made with "
                                         r"trials=3, this run has trials=2; pass --overwrite to replace it"):
        _grid(features, results, storage, protocol=replace(PROTOCOL, trials=2))
    with pytest.raises(ValueError, match=r"was made with trial_batch=1, this run has trial_batch=2"):
        _grid(features, results, storage, plan=replace(PLAN, trial_batch=2))
    assert read_rows(results) == sorted(rows, key=lambda r: r["shots"] or 0)  # refused before any work
    again = _grid(features, results, storage, protocol=replace(PROTOCOL, trials=2), overwrite=True)
    assert len(again) == 2 and [r["protocol"]["trials"] for r in read_rows(results)] == [2, 2]


def test_rows_of_other_features_are_refused_naming_the_difference(tmp_path):
    root = _store_pair(tmp_path / "m" / "cog_l3", "ab" * 32)
    results, storage = tmp_path / "r.sqlite", tmp_path / "s.db"
    first = _grid(root, results, storage, shots=(None,))
    assert first[0]["features"]["train"]["weights_sha256"] == "ab" * 32
    _store_pair(root, "ef" * 32)  # another checkpoint's features under the same folder
    with pytest.raises(ValueError, match=r"row m/linear/cog_l3/shots=all/seed=22 was made with "
                                         r"features\.train\.weights_sha256=abab.*this run has "
                                         r"features\.train\.weights_sha256=efef.*--overwrite"):
        _grid(root, results, storage, shots=(None,))
    redone = _grid(root, results, storage, shots=(None,), overwrite=True)
    assert redone[0]["study"] != first[0]["study"]  # a study of the old features is not resumed
    assert read_rows(results)[0]["features"]["train"]["weights_sha256"] == "ef" * 32


def test_plain_features_that_changed_are_refused(tmp_path):
    features = write_features(tmp_path / "m" / "cog_l3", classes=3, dim=8, per_class=20, test_per_class=4)
    results, storage = tmp_path / "r.sqlite", tmp_path / "s.db"
    _grid(features, results, storage, shots=(None,))
    write_features(features, classes=3, dim=8, per_class=20, test_per_class=4, seed=5)
    with pytest.raises(ValueError, match="features.train.labels_sha256=.*--overwrite"):
        _grid(features, results, storage, shots=(None,))


def test_probe_protocol_refuses_in_one_line_and_overwrite_replaces(tmp_path, capsys):
    features = write_features(tmp_path / "m" / "cog_l3", classes=3, dim=8, per_class=20, test_per_class=4)
    args = ["probe", "protocol", "--features", str(features), "--results", str(tmp_path / "r.sqlite"),
            "--workdir", str(tmp_path / "w"), "--probe-device", "cpu", "--epochs", "2", "--batch-size", "64",
            "--seeds", "22", "--shots", "all"]
    assert main([*args, "--trials", "3"]) == 0
    capsys.readouterr()
    assert main([*args, "--trials", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cog-pl probe: error: {tmp_path / 'r.sqlite'}: row m/linear/cog_l3/shots=all/seed=22 was made "
                   "with trials=3, this run has trials=2; pass --overwrite to replace it"]
    assert main([*args, "--trials", "2", "--overwrite"]) == 0
    assert [r["protocol"]["trials"] for r in read_rows(tmp_path / "r.sqlite")] == [2]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}


def _protocol_cmd(features: Path, results: Path, storage: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cog_pl.cli.main", "probe", "protocol", "--features", str(features),
            "--results", str(results), "--storage", str(storage), "--probe-device", "cpu", "--threads", "1",
            "--trials", "6", "--epochs", "15", "--batch-size", "64", "--trial-batch", "2", "--stale-after", "3",
            *extra]


RESULT_KEYS = ("test_top1", "test_top5", "lr", "wd", "val_top1", "best_trial", "identity")


def _rows(results: Path) -> list[tuple]:
    return [(r["shots"], r["seed"], *(r[k] for k in RESULT_KEYS)) for r in read_rows(results)]


def _running_trials(db: Path) -> int:
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    try:
        return sum(len(optuna.load_study(study_name=name, storage=storage).get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))) for name in optuna.get_all_study_names(storage))
    finally:
        storage.remove_session()
        storage.engine.dispose()


KILLED_INSIDE_ASK = """
import os, sys
sys.path.insert(0, {tests!r})
import optuna
asked = optuna.study.Study.ask

def die_inside_ask(self, *args, **kwargs):  # the worker dies right after the storage made the trial
    trial = asked(self, *args, **kwargs)
    if "shots-2" in self.study_name and trial.number == 2:
        os._exit(9)
    return trial

optuna.study.Study.ask = die_inside_ask
from test_probe_resume import _grid
_grid({features!r}, {results!r}, {storage!r})
"""


def test_a_worker_killed_inside_ask_resumes_to_the_uninterrupted_rows(tmp_path):
    """The kill point the fault-injection tests found last: a trial the storage made, never told. The resumed
    worker takes the dead worker's claim over (at once: its process no longer runs on this machine) and restarts the
    cell's study, as for any other kill."""
    features = write_features(tmp_path / "m" / "cog_l3", classes=3, dim=8, per_class=20, test_per_class=4)
    expected = _grid(features, tmp_path / "whole.sqlite", tmp_path / "whole.db")
    results, storage = tmp_path / "r.sqlite", tmp_path / "s.db"
    code = KILLED_INSIDE_ASK.format(tests=str(REPO / "tests" / "probe"), features=str(features), results=str(results),
                                    storage=str(storage))
    killed = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=300)
    assert killed.returncode == 9, killed.stderr[-2000:]
    assert len(read_rows(results)) == 1 and _running_trials(storage) == 1  # the shots=2 cell's phantom trial
    start = time.monotonic()
    resumed = _grid(features, results, storage)
    assert time.monotonic() - start < 25  # restarted at once, not after a longer grace
    assert [r["shots"] for r in resumed] == [2]
    assert _rows(results) == [(r["shots"], r["seed"], *(r[k] for k in RESULT_KEYS)) for r in expected]


@pytest.mark.slow
def test_a_killed_probe_protocol_resumes_to_the_rows_of_an_uninterrupted_run(tmp_path):
    features = write_features(tmp_path / "m" / "cog_l3", classes=6, dim=16, per_class=60, test_per_class=10)
    grid = ("--seeds", "22", "37", "--shots", "all", "2", "4")
    subprocess.run(_protocol_cmd(features, tmp_path / "whole.sqlite", tmp_path / "whole.db", *grid), env=_env(),
                   check=True, capture_output=True, timeout=600)
    expected = _rows(tmp_path / "whole.sqlite")
    assert len(expected) == 6

    for attempt in range(3):  # until the kill lands inside a trial (not between two, nor in a final retrain)
        results, db = tmp_path / f"killed{attempt}.sqlite", tmp_path / f"killed{attempt}.db"
        proc = subprocess.Popen(_protocol_cmd(features, results, db, *grid), env=_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and read_rows(results) and _running_trials(db):  # a row written, a trial running
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, "the grid finished before it could be killed"
        if _running_trials(db):
            break
    # a trial left running: resuming its study as it is would ask other trials than an uninterrupted run
    assert 1 <= len(read_rows(results)) < 6 and _running_trials(db)
    subprocess.run(_protocol_cmd(features, results, db, *grid), env=_env(), check=True,
                   capture_output=True, timeout=600)
    assert _rows(results) == expected


@pytest.mark.slow
def test_two_workers_on_one_grid_make_each_row_once(tmp_path):
    features = write_features(tmp_path / "m" / "cog_l3", classes=6, dim=16, per_class=60, test_per_class=10)
    grid = ("--seeds", "22", "37", "45", "--shots", "all", "2", "4")
    results, storage = tmp_path / "r.sqlite", tmp_path / "s.db"
    procs = [subprocess.Popen(_protocol_cmd(features, results, storage, *grid), env=_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    writes = [line for _, err in outs for line in err.splitlines() if line.startswith("wrote row ")]
    assert len(writes) == len(set(writes)) == 9  # each row's final retrain and write ran once, in one worker
    assert sum(json.loads(out.strip().splitlines()[-1])["rows_written"] for out, _ in outs) == 9
    rows = read_rows(results)
    assert len(rows) == 9 and len({r["worker"] for r in rows}) <= 2


def test_the_run_probe_stage_refuses_other_rows_before_any_probe_and_overwrite_replaces(tmp_path):
    from run_stages import probe_stage

    from cog_pl.pipeline import ProbeOptions, RunConfig

    out = tmp_path / "out"
    for domain in ("cog_l1", "cog_l2"):
        write_features(out / "features" / "m" / domain, classes=3, dim=8, per_class=20, test_per_class=4)
    (tmp_path / "in21k").mkdir()

    def config(trials: int, domains=("cog_l1", "cog_l2"), **kw) -> RunConfig:
        return RunConfig(model="resnet50", random_weights=True, in1k_root=None, in21k_root=str(tmp_path / "in21k"),
                         out=str(out), domains=domains, seeds=(22,), shots=(None,), check=False,
                         probe=ProbeOptions(trials=trials, epochs=2, device="cpu", trial_batch=1), **kw)

    assert probe_stage(config(3, domains=("cog_l2",)), out, "m") == 1
    first = read_rows(out / "results.sqlite")
    with pytest.raises(ValueError, match="row m/linear/cog_l2/shots=all/seed=22 was made with trials=3, this run "
                                         "has trials=2; pass --overwrite"):
        probe_stage(config(2), out, "m")
    assert read_rows(out / "results.sqlite") == first  # refused before cog_l1, which comes first, was probed
    assert probe_stage(config(2, overwrite=True), out, "m") == 2
    assert [r["protocol"]["trials"] for r in read_rows(out / "results.sqlite")] == [2, 2]


def test_probe_tune_refuses_a_results_row_made_with_other_inputs_and_overwrite_replaces(tmp_path, capsys):
    features = write_features(tmp_path / "m" / "cog_l3", classes=3, dim=8, per_class=20, test_per_class=4)
    results = tmp_path / "r.sqlite"
    args = ["probe", "tune", "--features", str(features), "--results", str(results), "--workdir", str(tmp_path / "w"),
            "--probe-device", "cpu", "--epochs", "2", "--batch-size", "64", "--seed", "22"]
    assert main([*args, "--trials", "3"]) == 0
    first = read_rows(results)
    capsys.readouterr()
    assert main([*args, "--trials", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cog-pl probe: error: {results}: row m/linear/cog_l3/shots=all/seed=22 was made with trials=3, "
                   "this run has trials=2; pass --overwrite to replace it"]
    assert read_rows(results) == first  # refused before any work
    assert main([*args, "--trials", "2", "--overwrite"]) == 0
    assert [r["protocol"]["trials"] for r in read_rows(results)] == [2]
