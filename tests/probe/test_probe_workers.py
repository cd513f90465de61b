"""Real processes on real storages: a killed ``probe tune`` resumes to the trials of an uninterrupted one; two tune
workers of one study take turns (one writer per study)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from test_probe_fixtures import write_features

REPO = Path(__file__).resolve().parents[2]
TRIALS = 30


def tune_cmd(features: Path, storage: Path, epochs: int) -> list[str]:
    """Batches of 2 trials after the 10 of TPE's startup (not the default 5), so that a poll of the study sees it
    between 10 and 30 trials even on a loaded machine (the default's four batches can all end between two polls)."""
    return [sys.executable, "-m", "cog_pl.cli.main", "probe", "tune", "--features", str(features), "--trials",
            str(TRIALS), "--epochs", str(epochs), "--batch-size", "64", "--storage", str(storage), "--study-name",
            "shared", "--threads", "1", "--probe-device", "cpu", "--stale-after", "60", "--trial-batch", "2",
            "--workdir", str(storage.parent / "w")]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


@pytest.mark.slow
def test_killed_study_resumes(tmp_path):
    features = write_features(tmp_path / "feats", classes=10, dim=32, per_class=80)
    db = tmp_path / "study.db"
    proc = subprocess.Popen(tune_cmd(features, db, epochs=60), env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    url = f"sqlite:///{db}"
    deadline = time.monotonic() + 120
    before: dict[int, float] = {}
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            before = {t.number: t.value for t in complete(optuna.load_study(study_name="shared", storage=url))}
        except Exception:  # the study (or its tables) may not exist yet
            before = {}
        if len(before) >= 10:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the worker finished before it could be killed"
    killed = optuna.load_study(study_name="shared", storage=url)
    assert 10 <= len(complete(killed)) < TRIALS

    out = subprocess.run(tune_cmd(features, db, epochs=60), env=env(), stdout=subprocess.PIPE, check=True, text=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    study = optuna.load_study(study_name="shared", storage=url)
    done = complete(study)
    assert len(done) == TRIALS
    assert before == {t.number: t.value for t in done if t.number in before}
    assert not study.get_trials(states=(TrialState.RUNNING,))
    assert row["lr"] == study.best_params["lr"] and row["val_top1"] == study.best_value


@pytest.mark.slow
@pytest.mark.parametrize("name", ["study.log", "study.db"])  # a journal file; SQLite in write-ahead-log mode
def test_two_tune_workers_of_one_study_take_turns(tmp_path, name):
    """One writer per study: the second ``probe tune`` waits for the first's claim, finds the study tuned and only
    retrains; both print the same row, and the study holds exactly its budget of trials."""
    features = write_features(tmp_path / "feats", classes=10, dim=32, per_class=80)
    path = tmp_path / name
    procs = [subprocess.Popen(tune_cmd(features, path, epochs=20), env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs, logs = zip(*(p.communicate(timeout=300) for p in procs))
    assert [p.returncode for p in procs] == [0, 0], [log[-2000:] for log in logs]
    rows = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    storage = f"sqlite:///{path}" if name.endswith(".db") else optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(path)))
    study = optuna.load_study(study_name="shared", storage=storage)
    assert len(complete(study)) == len(study.trials) == TRIALS
    assert rows[0]["lr"] == rows[1]["lr"] and rows[0]["test_top1"] == rows[1]["test_top1"]
