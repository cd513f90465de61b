"""Several ``cog-pl probe protocol`` workers share one grid on a real PostgreSQL server (tests/pg.py) and one results
file; one (in a PID namespace of its own, as in another container, where the tests run as root) is SIGKILLed mid-way
and a resumed worker finishes with the others: the killed worker's claim is taken over once its heartbeat is older
than ``--stale-after``, each study ends with exactly its budget of finished trials, and each cell with exactly one
row."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from pg import postgres_url  # noqa: F401  (the fixture)
from test_probe_fixtures import write_features

from cog_pl.probe.storage import close_storage, resolve_storage
from cog_pl.results import read_rows, row_key
from cog_pl.results.claims import claims_path

COG_PL = Path(sys.executable).with_name("cog-pl")
TRIALS, SEEDS, SHOTS, STALE_AFTER = 10, ("22", "37"), ("2", "all"), 6
CONTAINED_PID = 1000000  # the contained worker's process id in its namespace: none has it here (pid_max 32768)


def _container() -> list[str] | None:
    """A command prefix that runs a worker in a PID namespace of its own, as another container of this host would
    (its process there: ``CONTAINED_PID``); None where it cannot be made (not root, no unshare)."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None or os.path.exists(f"/proc/{CONTAINED_PID}"):
        return None
    prefix = [unshare, "--pid", "--fork", "--kill-child", "--mount-proc"]
    return prefix if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0 else None


def _worker(features: Path, results: Path, url: str, log: Path, container: list[str] | None = None
            ) -> subprocess.Popen:
    cmd = [str(COG_PL), "probe", "protocol", "--features", str(features), "--results", str(results), "--storage", url,
           "--model", "m", "--domain", "d", "--trials", str(TRIALS), "--epochs", "1500", "--batch-size", "32",
           "--trial-batch", "2", "--seeds", *SEEDS, "--shots", *SHOTS, "--threads", "1", "--probe-device", "cpu",
           "--stale-after", str(STALE_AFTER)]
    if container:  # killing unshare kills the namespace's first process, and with it the worker
        cmd = [*container, "sh", "-c", f"echo {CONTAINED_PID - 1} > /proc/sys/kernel/ns_last_pid && {shlex.join(cmd)}"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"))


def _progress(storage, results: Path, pid: int) -> tuple[int, int]:
    """(finished trials of all studies, cells claimed by process ``pid``)."""
    try:
        trials = [t for n in optuna.get_all_study_names(storage)
                  for t in optuna.load_study(study_name=n, storage=storage).get_trials(deepcopy=False)]
        with sqlite3.connect(claims_path(results)) as con:
            held = con.execute("SELECT count(*) FROM claims WHERE host LIKE ?", (f"%:{pid}",)).fetchone()[0]
    except Exception:  # the schema, a study or the claims table may be being created
        return 0, 0
    return sum(t.state == TrialState.COMPLETE for t in trials), held


@pytest.mark.slow
def test_workers_finish_a_grid_on_postgresql_through_a_kill(postgres_url, tmp_path):  # noqa: F811
    features = write_features(tmp_path / "feats", classes=10, dim=32, per_class=60)
    results = tmp_path / "results.sqlite"
    container = _container()  # the worker to be killed runs as in another container where it can
    workers = [_worker(features, results, postgres_url, tmp_path / f"w{i}.log", container if i == 0 else None)
               for i in range(3)]
    storage = resolve_storage(postgres_url)
    try:
        deadline = time.monotonic() + 300
        while workers[0].poll() is None and time.monotonic() < deadline:
            finished, held = _progress(storage, results, CONTAINED_PID if container else workers[0].pid)
            if finished >= TRIALS // 2 and held:
                break
            time.sleep(0.05)
        assert workers[0].poll() is None, "the first worker ended before it could be killed"
        workers[0].send_signal(signal.SIGKILL)  # mid-way, while it tunes a cell
        workers[0].wait()
        workers.append(_worker(features, results, postgres_url, tmp_path / "resumed.log"))
        codes = [w.wait(timeout=600) for w in workers]
        logs = {p.name: p.read_text()[-2000:] for p in sorted(tmp_path.glob("*.log"))}
        assert codes == [-signal.SIGKILL, 0, 0, 0], logs

        rows = read_rows(results)
        assert sorted((r["shots"] or 0, r["seed"]) for r in rows) == [(0, 22), (0, 37), (2, 22), (2, 37)]
        assert len({row_key(r) for r in rows}) == len(rows) == 4
        names = optuna.get_all_study_names(storage)
        assert sorted(names) == sorted(r["study"] for r in rows)
        for row in rows:
            study = optuna.load_study(study_name=row["study"], storage=storage)
            trials = study.get_trials(deepcopy=False)
            done = [t for t in trials if t.state == TrialState.COMPLETE]
            assert len(done) == TRIALS, row["study"]  # the budget exactly, between all workers
            assert len({t.number for t in trials}) == len(trials)
            assert len({(t.params["lr"], t.params["wd"]) for t in done}) == TRIALS  # no point trained twice
            rest = [t for t in trials if t.state != TrialState.COMPLETE]
            failed = [t for t in rest if t.state == TrialState.FAIL]
            assert all(t.user_attrs.get("surplus") or t.user_attrs.get("stale") for t in failed), [
                (t.number, t.user_attrs) for t in failed]  # budget overflow or the killed worker's only
            left = [t for t in rest if t.state != TrialState.FAIL]  # the killed worker's, in a study done before
            assert all(t.state == TrialState.RUNNING and t.user_attrs.get("lease", {}).get("pid") in (  # its lease
                CONTAINED_PID, workers[0].pid, None) for t in left), [(t.number, t.state, t.user_attrs) for t in left]
            assert row["val_top1"] == study.best_value and row["best_trial"] == study.best_trial.number
        killed = CONTAINED_PID if container else workers[0].pid
        taken = [line for p in sorted(tmp_path.glob("*.log")) for line in p.read_text().splitlines()
                 if "took over the claim" in line]
        if container is None:  # its process gone from this machine: its claim taken over at once (issue 37)
            assert any(f":{killed} (its process no longer runs on this machine)" in line for line in taken), logs
            return
        assert any(f":{killed} (no heartbeat for" in line for line in taken), logs  # once it expired
        waited = [float(re.search(r"no heartbeat for (\d+) s", line)[1]) for line in taken]
        assert min(waited) >= STALE_AFTER, taken  # another container's process id says nothing here: the heartbeat
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        close_storage(storage)
