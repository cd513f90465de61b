"""Optuna studies for probe tuning: a per-trial seeded TPE sampler, worker leases and trial slots.

Many workers may share one study (SQLite or any database URL, or a journal file on a shared disk). Each worker asks
trials itself (storages: :mod:`cog_pl.probe.storage`); the storage numbers them atomically, and a trial whose slot is
past the study's budget is marked failed at once (``surplus``), so the study ends with exactly its budget of trials
between all workers. A worker stamps its running trials with its host, process id and a heartbeat; trials of a worker
that died (a dead process on this host, or a heartbeat older than ``stale_after`` seconds) are failed, so a killed study
resumes where it stopped.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import numpy as np
import optuna
from optuna.samplers import TPESampler
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, Trial, TrialState

from cog_pl.probe.storage import resolve_storage

log = logging.getLogger(__name__)


def worker_id() -> str:
    """This process as a lease holder: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"

UNSTAMPED_GRACE = 30.0  # seconds after which a running trial without a lease counts as dead
LEASE_ATTR = "lease"  # user attribute of a running trial: {"worker": "host:pid", "heartbeat": unix time}


def lease() -> dict:
    """This worker's lease on a trial, as of now (one attribute: every storage write is a transaction)."""
    return {"worker": worker_id(), "heartbeat": time.time()}


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
    """Create the study or join the existing one of that name (maximising validation top-1)."""
    return optuna.create_study(
        storage=resolve_storage(storage),
        study_name=name,
        sampler=TrialSeededTPESampler(seed, n_startup_trials),
        direction="maximize",
        load_if_exists=True,
    )


def stamp(trial: Trial) -> None:
    """Mark a running trial as held by this worker, now."""
    trial.set_user_attr(LEASE_ATTR, lease())


def held_lease(trial: FrozenTrial) -> dict:
    """A running trial's lease; studies written before the lease was one attribute kept ``worker`` and ``heartbeat``
    as two."""
    attrs = trial.user_attrs
    return attrs.get(LEASE_ATTR) or {key: attrs[key] for key in ("worker", "heartbeat") if key in attrs}


def _is_stale(trial: FrozenTrial, stale_after: float) -> bool:
    held = held_lease(trial)
    worker = str(held.get("worker", ""))
    if worker == worker_id():
        return False
    host, _, pid = worker.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    if "heartbeat" not in held:  # killed inside ask, before the lease: a live worker stamps at once
        started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        return time.time() - started > min(stale_after, UNSTAMPED_GRACE)
    return time.time() - float(held["heartbeat"]) > stale_after


def fail_stale_trials(study: optuna.Study, stale_after: float, running: list[FrozenTrial] | None = None) -> int:
    """Fail running trials whose worker is gone (among ``running``, if read already); returns how many."""
    if running is None:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    failed = 0
    for t in running:
        if _is_stale(t, stale_after):
            study._storage.set_trial_user_attr(t._trial_id, "stale", True)
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            failed += 1
    if failed:
        log.info("failed %d stale trial(s) of study %s", failed, study.study_name)
    return failed


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
