"""Real processes on real storages: a killed study resumes; two workers share one study (journal file or SQLite)."""

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
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from test_probe_fixtures import write_features

REPO = Path(__file__).resolve().parents[1]
TRIALS = 30


def tune_cmd(features: Path, storage: Path, epochs: int) -> list[str]:
    return [sys.executable, "-m", "cog_pl.cli.probe", "tune", "--features", str(features), "--trials", str(TRIALS),
            "--epochs", str(epochs), "--batch-size", "64", "--storage", str(storage), "--study-name", "shared",
            "--threads", "1", "--probe-device", "cpu", "--stale-after", "60"]


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
def test_two_workers_share_one_study(tmp_path, name):
    features = write_features(tmp_path / "feats", classes=10, dim=32, per_class=80)
    path = tmp_path / name
    procs = [subprocess.Popen(tune_cmd(features, path, epochs=150), env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs, logs = zip(*(p.communicate(timeout=300) for p in procs))
    assert [p.returncode for p in procs] == [0, 0]
    rows = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    storage = JournalStorage(JournalFileBackend(str(path))) if name.endswith(".log") else f"sqlite:///{path}"
    study = optuna.load_study(study_name="shared", storage=storage)
    done = complete(study)
    assert len(done) == TRIALS
    assert len({(t.params["lr"], t.params["wd"]) for t in done}) == TRIALS  # no point proposed twice
    workers = {t.user_attrs["lease"]["worker"] for t in done}
    assert len(workers) == 2, "both workers should have trained trials"
    extra = [t for t in study.trials if t.state != TrialState.COMPLETE]
    assert all(t.user_attrs.get("surplus") for t in extra)  # only budget overflow, failed at once, never trained
    for t in extra:  # each said why, in the log and in the trial
        assert t.user_attrs["fail_reason"]["mark"] == "surplus"
        assert (f"trial {t.number} of study shared failed: not run: past the study's budget of {TRIALS} trials"
                in "".join(logs)), t.number
    assert rows[0]["lr"] == rows[1]["lr"] and rows[0]["test_top1"] == rows[1]["test_top1"]
