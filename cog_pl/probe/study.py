"""Optuna studies for probe tuning: a per-trial seeded TPE sampler, worker leases and trial slots.

Many workers may share one study (SQLite or any database URL, or a journal file on a shared disk). Each worker asks
trials itself (storages: :mod:`cog_pl.probe.storage`); the storage numbers them atomically, and a trial whose slot is
past the study's budget is marked failed at once (``surplus``), so the study ends with exactly its budget of trials
between all workers. Every failed trial says why, in the log and in its ``fail_reason`` (:func:`fail_trial`).

A worker holds its running trials by a lease: its worker id (a random UUID per process, never a host name and
process id, which repeat across containers), where it runs and a heartbeat it renews. Another worker fails a
trial only when its lease has expired (no heartbeat for ``stale_after`` seconds), or at once when the holder is
provably dead: it ran under the same kernel boot and in the same PID namespace as the judge, and no process with its
id and start time exists there. Workers in other containers of one host (other PID namespaces), on other hosts, or
leases written by an older cog-pl are judged by the heartbeat alone. A trial failed while its worker still trained
it is left failed: that worker logs it and goes on (:func:`tell_result`).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.samplers import TPESampler
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, Trial, TrialState

from cog_pl.probe.storage import resolve_storage

log = logging.getLogger(__name__)


_WORKER: dict[int, str] = {}  # process id -> worker id, so that a forked child gets its own


def worker_id() -> str:
    """This process as a lease holder: a random UUID, made once per process."""
    pid = os.getpid()
    if pid not in _WORKER:
        _WORKER[pid] = uuid.uuid4().hex
    return _WORKER[pid]


UNSTAMPED_GRACE = 30.0  # seconds after which a running trial without a lease counts as dead
LEASE_ATTR = "lease"  # user attribute of a running trial: worker id, heartbeat (unix time), where the worker runs
FAIL_REASON_ATTR = "fail_reason"  # user attribute of a failed trial: {"mark": its flag attribute, "why": the reason}
WORKER_ATTR = "worker:"  # prefix of a study system attribute: a worker's lease as of when it joined the study


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` in this PID namespace (clock ticks after boot), None if there is none."""
    stat = _read(f"/proc/{pid}/stat")
    return stat.rpartition(")")[2].split()[19] if stat else None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


@functools.cache
def _place_of(pid: int) -> dict:
    return {"host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"),
            "pidns": _pid_namespace(), "pid": pid, "started": _start_time(pid)}


def _place() -> dict:
    """Where this process runs, precisely enough to tell whether another's process id means anything here."""
    return _place_of(os.getpid())


def lease() -> dict:
    """This worker's lease on a trial, as of now (one attribute: every storage write is a transaction)."""
    return {"worker": worker_id(), "heartbeat": time.time(), **_place()}


class TrialSeededTPESampler(TPESampler):
    """Multivariate TPE whose random stream is re-seeded from (seed, trial number) before every trial.

    A trial's proposal is then a function of the seed, its number and the study's history, whichever worker asks
    for it: two workers started with the same seed never propose the same startup points, and a run is repeatable.
    ``before_trial`` runs inside ``study.ask`` right after the storage creates the trial, so it also stamps the trial
    with this worker's lease: a worker killed at any later moment leaves a trial that can be recognised as its own.
    """

    def __init__(self, seed: int, n_startup_trials: int = 10) -> None:
        super().__init__(seed=seed, multivariate=True, n_startup_trials=n_startup_trials, constant_liar=True)
        self._base_seed = seed

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        state = np.random.SeedSequence([self._base_seed, trial.number]).generate_state(2, dtype=np.uint32)
        self._rng.rng.seed(int(state[0]))
        self._random_sampler._rng.rng.seed(int(state[1]))
        study._storage.set_trial_user_attr(trial._trial_id, LEASE_ATTR, lease())
        super().before_trial(study, trial)


def open_study(
    storage: str | os.PathLike | BaseStorage, name: str, seed: int, n_startup_trials: int = 10
) -> optuna.Study:
    """Create the study or join the existing one of that name (maximising validation top-1), registering this
    worker in it before it asks any trial (:func:`joined_workers`)."""
    study = optuna.create_study(
        storage=resolve_storage(storage),
        study_name=name,
        sampler=TrialSeededTPESampler(seed, n_startup_trials),
        direction="maximize",
        load_if_exists=True,
    )
    study._storage.set_study_system_attr(study._study_id, WORKER_ATTR + worker_id(), lease())
    return study


def joined_workers(study: optuna.Study) -> list[dict]:
    """The leases, as of joining, of the workers that opened the study (this cog-pl's, not older ones')."""
    attrs = study._storage.get_study_system_attrs(study._study_id)
    return [held for key, held in attrs.items() if key.startswith(WORKER_ATTR) and isinstance(held, dict)]


def held_lease(trial: FrozenTrial) -> dict:
    """A running trial's lease; studies written before the lease was one attribute kept ``worker`` and ``heartbeat``
    as two."""
    attrs = trial.user_attrs
    return attrs.get(LEASE_ATTR) or {key: attrs[key] for key in ("worker", "heartbeat") if key in attrs}


def provably_dead(held: dict) -> bool:
    """Whether the lease's holder ran where its process id can be checked from here (same kernel boot, same PID
    namespace) and no process of that id and start time exists."""
    here = _place()
    if any(not held.get(key) or held[key] != here[key] for key in ("host", "boot", "pidns")):
        return False
    if not str(held.get("pid", "")).isdigit() or not held.get("started"):
        return False
    pid = int(held["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive, unless its id was reused since
        pass
    started = _start_time(pid)  # None where /proc hides it: not provable
    return started is not None and started != held["started"]


def _stale_reason(trial: FrozenTrial, stale_after: float, others_dead: Callable[[], bool]) -> str | None:
    """Why a running trial's worker counts as gone (None while it may live)."""
    held = held_lease(trial)
    if held.get("worker") == worker_id():
        return None
    if "heartbeat" not in held:  # killed inside ask, between the trial's creation and its lease
        started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        age = time.time() - started
        if age > min(stale_after, UNSTAMPED_GRACE):
            return f"it has no lease {age:.0f} s after it started (its worker was killed while asking for it)"
        return "it has no lease and every other worker of the study is gone" if others_dead() else None
    silent = time.time() - float(held["heartbeat"])
    if silent > stale_after:
        return f"its worker's lease expired (no heartbeat for {silent:.0f} s, more than {stale_after:g} s)"
    if provably_dead(held):
        return f"its worker, process {held.get('pid')} on this host, is gone"
    return None


def fail_trial(study: optuna.Study, trial: Trial | FrozenTrial, mark: str, why: str,
               level: int = logging.WARNING) -> bool:
    """Mark a trial failed and say why, in the trial (user attributes ``mark``: True, and ``fail_reason``) and in
    the log; False where it was finished meanwhile (by its worker, or another worker failed it). A trial this
    worker asked is told failed through the study (its sampler hears of it); another worker's is set in the
    storage."""
    try:
        study._storage.set_trial_user_attr(trial._trial_id, FAIL_REASON_ATTR, {"mark": mark, "why": why})
        study._storage.set_trial_user_attr(trial._trial_id, mark, True)
        if isinstance(trial, Trial):
            study.tell(trial, state=TrialState.FAIL)
        else:
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    except (UpdateFinishedTrialError, ValueError):  # finished meanwhile ("Cannot tell a ... trial": a ValueError)
        if study._storage.get_trial(trial._trial_id).state == TrialState.RUNNING:
            raise
        return False
    log.log(level, "trial %d of study %s failed: %s", trial.number, study.study_name, why)
    return True


def _others_dead(study: optuna.Study) -> Callable[[], bool]:
    """Whether every other worker that joined the study is provably dead (asked once, when needed): then a trial
    without a lease is a dead worker's, since a worker joins before it asks. False when none joined (an older
    cog-pl's study): such a trial waits for :data:`UNSTAMPED_GRACE`."""
    @functools.cache
    def answer() -> bool:
        others = [held for held in joined_workers(study) if held.get("worker") != worker_id()]
        return bool(others) and all(provably_dead(held) for held in others)
    return answer


def fail_stale_trials(study: optuna.Study, stale_after: float, running: list[FrozenTrial] | None = None) -> int:
    """Fail running trials whose worker is gone (among ``running``, if read already); returns how many."""
    if running is None:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    failed, others_dead = 0, _others_dead(study)
    for t in running:
        why = _stale_reason(t, stale_after, others_dead)
        if why is not None:
            failed += fail_trial(study, t, "stale", why)
    return failed


def still_running(study: optuna.Study, trial: Trial) -> bool:
    """Whether the trial is still running; one that another worker failed (its lease expired) is logged."""
    state = study._storage.get_trial(trial._trial_id).state
    if state != TrialState.RUNNING:
        log.warning("trial %d of study %s was marked %s by another worker (its lease expired); its result is "
                    "dropped", trial.number, study.study_name, state.name)
    return state == TrialState.RUNNING


def tell_result(study: optuna.Study, trial: Trial, value: float, attrs: dict | None = None,
                history: list[float] = ()) -> bool:
    """Report the trial's per-epoch ``history``, set its user ``attrs`` and tell its ``value``; a trial finished by
    someone else meanwhile is left as it is and logged (returns False)."""
    if not still_running(study, trial):
        return False
    try:
        for epoch, acc in enumerate(history):
            trial.report(float(acc), epoch)
        for key, attr in (attrs or {}).items():
            trial.set_user_attr(key, attr)
        study.tell(trial, value)
    except (UpdateFinishedTrialError, ValueError):  # failed by another worker between the check and the writes
        if still_running(study, trial):  # ("Cannot tell a FAIL trial" is a ValueError): anything else is raised
            raise
        return False
    return True


def stamp(trial: Trial) -> bool:
    """Renew this worker's lease on a running trial; False where another worker has finished it (logged when its
    result is told: :func:`tell_result`)."""
    try:
        trial.set_user_attr(LEASE_ATTR, lease())
    except UpdateFinishedTrialError:
        return False
    return True


def progress(study: optuna.Study, stale_after: float) -> tuple[int, int]:
    """(complete, running) trials of the study, after failing the stale ones: one read of the storage."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    running = [t for t in trials if t.state == TrialState.RUNNING]
    stale = fail_stale_trials(study, stale_after, running)
    return len(trials) - len(running), len(running) - stale


def past_budget(study: optuna.Study, trial: Trial, budget: int) -> bool:
    """Whether the trial's place in the study's budget (its number minus the failed trials numbered before it) is
    at or past ``budget``."""
    if trial.number < budget:  # the place is at most the number: no need to read the failed trials
        return False
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    return trial.number - sum(t.number < trial.number for t in failed) >= budget
