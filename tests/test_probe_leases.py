"""Trial leases: a trial is failed when its lease expired or its holder is provably dead here, never on a host name
and process id alone (workers in other containers of one host); a trial failed under a live worker is dropped by it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import replace

import optuna
import pytest
import torch
from optuna.trial import TrialState
from test_probe_fixtures import write_features
from test_probe_workers import TRIALS, env, tune_cmd

from cog_pl.probe.data import ProbeData
from cog_pl.probe.study import WORKER_ATTR, fail_stale_trials, lease, open_study, tell_result, worker_id
from cog_pl.probe.tuner import SearchPlan, run_batch, search_space
from cog_pl.protocol import ProbeProtocol

PROTOCOL = replace(ProbeProtocol(), trials=8, epochs=2, batch_size=32)


def _dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(gone.stdout)


def _running(study, *leases) -> list[int]:
    """One running trial per lease (None: as if killed inside ask, before its lease)."""
    ids = []
    for held in leases:
        trial_id = study._storage.create_new_trial(study._study_id)
        if held is not None:
            study._storage.set_trial_user_attr(trial_id, "lease", held)
        ids.append(trial_id)
    return ids


def _states(study) -> dict[int, TrialState]:
    return {t._trial_id: t.state for t in study.get_trials()}


def test_a_fresh_lease_is_kept_though_its_host_and_pid_name_a_dead_process_here(tmp_path):
    """Another container on this host (another PID namespace) runs a worker whose process id is free here."""
    study = open_study(tmp_path / "s.db", "s", seed=1)
    dead, now = _dead_pid(), time.time()
    other_container = {**lease(), "worker": "5b0c6a35e0c84b1c9d3c6c3f0f7a1e11", "pidns": "pid:[4026599999]",
                       "pid": dead, "heartbeat": now}
    older_cog_pl = {"worker": f"{socket.gethostname()}:{dead}", "heartbeat": now}  # host:pid, as leases once were
    ids = _running(study, other_container, older_cog_pl)
    assert fail_stale_trials(study, stale_after=600) == 0
    assert [_states(study)[i] for i in ids] == [TrialState.RUNNING] * 2


def test_an_expired_lease_is_failed_and_our_own_never(tmp_path):
    study = open_study(tmp_path / "s.db", "s", seed=1)
    old = time.time() - 700
    ids = _running(study, {**lease(), "worker": "elsewhere", "pidns": "pid:[1]", "heartbeat": old},
                   {"worker": "host-b:12", "heartbeat": old}, {**lease(), "heartbeat": old})
    assert fail_stale_trials(study, stale_after=600) == 2
    states = _states(study)
    assert [states[i] for i in ids] == [TrialState.FAIL, TrialState.FAIL, TrialState.RUNNING]
    attrs = study._storage.get_trial(ids[0]).user_attrs
    assert attrs["stale"] is True and attrs["fail_reason"]["mark"] == "stale"  # the trial says why it failed
    assert re.fullmatch(r"its worker's lease expired \(no heartbeat for 70\d s, more than 600 s\)",
                        attrs["fail_reason"]["why"])


def test_a_trial_failed_for_a_gone_worker_is_said_in_the_log(tmp_path):
    """Through the installed command: the study a killed worker left is started over, and the log says which trial
    failed and why (it once failed trials without a word)."""
    from bad_input_cases import COG_PL

    features = write_features(tmp_path / "f", classes=3, dim=4, per_class=10, test_per_class=2)
    db = tmp_path / "s.db"
    dead = _dead_pid()
    study = open_study(db, "shared", seed=22)
    _running(study, {**lease(), "worker": "gone", "pid": dead, "started": "1", "heartbeat": time.time()})
    del study
    out = subprocess.run([str(COG_PL), "probe", "tune", "--features", str(features), "--storage", str(db),
                          "--study-name", "shared", "--trials", "2", "--epochs", "1", "--probe-device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"trial 0 of study shared failed: its worker, process {dead} on this host, is gone" in out.stderr
    assert "restarting the study shared, left unfinished by a worker that is gone" in out.stderr


def test_a_holder_provably_dead_in_this_pid_namespace_is_failed_at_once(tmp_path):
    """Same boot, same PID namespace: a process id that is gone, or reused by a later process, proves death."""
    study = open_study(tmp_path / "s.db", "s", seed=1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        alive = {**lease(), "worker": "w-alive", "pid": sleeper.pid,
                 "started": open(f"/proc/{sleeper.pid}/stat").read().rpartition(")")[2].split()[19]}
        gone = {**lease(), "worker": "w-gone", "pid": _dead_pid()}
        reused = {**alive, "worker": "w-reused", "started": "1"}  # the id now belongs to a later process
        ids = _running(study, alive, gone, reused, None)
        assert fail_stale_trials(study, stale_after=600) == 2
        states = _states(study)
        assert [states[i] for i in ids] == [TrialState.RUNNING, TrialState.FAIL, TrialState.FAIL, TrialState.RUNNING]
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 39 s (spawned processes); the lease rules stay fast
def test_worker_ids_are_unique_per_process():
    code = "from cog_pl.probe.study import worker_id; print(worker_id())"
    others = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
              for _ in range(2)}
    assert len(others | {worker_id()}) == 3 and worker_id() == lease()["worker"]
    assert str(os.getpid()) not in worker_id()


def test_a_trial_finished_by_another_worker_is_dropped_at_tell_without_a_crash(tmp_path, caplog):
    study = open_study(tmp_path / "s.db", "s", seed=1)
    space = search_space(PROTOCOL)
    failed, completed, mine = (study.ask(space) for _ in range(3))
    study._storage.set_trial_state_values(failed._trial_id, TrialState.FAIL)  # its lease judged expired elsewhere
    study._storage.set_trial_state_values(completed._trial_id, TrialState.COMPLETE, [12.5])
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g), torch.arange(64) % 4
    data = ProbeData(x, y, x[:16], y[:16], 4)
    with caplog.at_level("WARNING", logger="cog_pl.probe.study"):
        run_batch(study, [failed, completed, mine], data, PROTOCOL, SearchPlan(), seed=1)
    states = {t.number: (t.state, t.value) for t in study.get_trials()}
    assert states[failed.number] == (TrialState.FAIL, None)
    assert states[completed.number] == (TrialState.COMPLETE, 12.5)  # its first result kept
    assert states[mine.number][0] == TrialState.COMPLETE
    assert "marked FAIL by another worker" in caplog.text and "marked COMPLETE by another worker" in caplog.text
    assert tell_result(study, completed, 1.0) is False
    assert optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}").best_value != 1.0


@pytest.mark.slow
def test_a_worker_in_another_pid_namespace_keeps_its_trials(tmp_path):
    """Two workers of one study on one host, one in its own PID namespace (as in another container) whose process id
    does not exist here: neither fails the other's live trials, both finish (cog-pl once failed them by host and
    process id, and the other worker crashed at ``tell``)."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare(1) to start a worker in its own PID namespace")
    probe_ns = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe_ns.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {probe_ns.stderr.decode().strip()}")
    features = write_features(tmp_path / "feats", classes=10, dim=32, per_class=80)
    db = tmp_path / "study.db"
    cmd = shlex.join(tune_cmd(features, db, epochs=30))
    # the contained worker becomes process 1000000 there, an id no process has here (pid_max is 32768 here)
    assert not os.path.exists("/proc/1000000")
    contained = [unshare, "--pid", "--fork", "--mount-proc", "sh", "-c",
                 f"echo 999999 > /proc/sys/kernel/ns_last_pid && {cmd}"]
    procs = [subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for argv in (contained, tune_cmd(features, db, epochs=30))]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    study = optuna.load_study(study_name="shared", storage=f"sqlite:///{db}")
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == TRIALS
    pids = {t.user_attrs["lease"]["pid"] for t in done}
    assert 1000000 in pids and len(pids) == 2, pids  # both trained trials, the contained one as process 1000000
    assert not [t.number for t in study.trials if t.user_attrs.get("stale")]


@pytest.mark.slow
def test_leases_are_renewed_within_a_short_stale_after(tmp_path):
    """``--stale-after`` below the heartbeat interval: the worker renews its leases often enough anyway, so a judge
    polling all along never fails its trials."""
    features = write_features(tmp_path / "feats", classes=10, dim=32, per_class=80)
    db = tmp_path / "study.db"
    cmd = [sys.executable, "-m", "cog_pl.cli.probe", "tune", "--features", str(features), "--trials", "6",
           "--epochs", "5000", "--batch-size", "32", "--storage", str(db), "--study-name", "s", "--threads", "1",
           "--probe-device", "cpu", "--stale-after", "1"]
    worker = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    failed, polls = 0, 0
    try:
        while worker.poll() is None:
            time.sleep(0.2)
            try:
                study = optuna.load_study(study_name="s", storage=f"sqlite:///{db}")
            except Exception:  # not created yet
                continue
            failed += fail_stale_trials(study, stale_after=1.0)
            polls += 1
        assert worker.wait() == 0, worker.stderr.read()[-2000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{db}")
    seconds = [t.user_attrs["result"]["batch_seconds"] for t in study.get_trials(states=(TrialState.COMPLETE,))]
    assert max(seconds) > 2, "the batch should outlast the stale limit twice over"
    assert failed == 0 and polls > 10 and len(seconds) == 6


def _joined(study, held: dict) -> None:
    """Register a worker in the study as :func:`open_study` does before it asks a trial."""
    study._storage.set_study_system_attr(study._study_id, WORKER_ATTR + held["worker"], held)


def test_a_trial_without_lease_is_failed_at_once_when_every_other_worker_of_its_study_is_provably_dead(tmp_path):
    """A worker killed between a trial's creation and its lease (inside ``study.ask``) leaves a running trial with
    no holder; a worker joins a study before asking, so when every other worker that joined is provably dead here the
    trial is theirs, and the resumed study restarts at once instead of joining a study with a phantom trial."""
    study = open_study(tmp_path / "s.db", "s", seed=1)  # this worker joined
    _joined(study, {**lease(), "worker": "w-gone", "pid": _dead_pid()})
    (orphan,) = _running(study, None)
    assert fail_stale_trials(study, stale_after=600) == 1 and _states(study)[orphan] == TrialState.FAIL

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        _joined(study, {**lease(), "worker": "w-alive", "pid": sleeper.pid,
                        "started": open(f"/proc/{sleeper.pid}/stat").read().rpartition(")")[2].split()[19]})
        (asking,) = _running(study, None)  # perhaps the live worker's, inside its ask
        assert fail_stale_trials(study, stale_after=600) == 0 and _states(study)[asking] == TrialState.RUNNING
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_trial_without_lease_in_a_study_no_worker_joined_waits_for_the_grace(tmp_path):
    """Studies of an older cog-pl record no joined workers: nothing proves the trial's worker dead but time."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    (orphan,) = _running(study, None)
    assert fail_stale_trials(study, stale_after=600) == 0 and _states(study)[orphan] == TrialState.RUNNING
