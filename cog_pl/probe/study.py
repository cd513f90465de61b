"""A cell's Optuna study, written by one worker alone: the holder of the cell's claim (:mod:`cog_pl.results.claims`).

A study that its writer finds unfinished when it opens it (fewer finished trials than the budget, some trials made)
was left by a writer that is gone: killed, or its claim taken over. It is started over, so that a resumed grid equals
an uninterrupted one, row for row; a study that holds its budget of finished trials (its writer was killed in the
final retrain) is kept. Every failed trial says why, in the log and in its ``fail_reason`` (:func:`fail_trial`).

Proposals come from multivariate TPE with the constant liar, seeded per trial through Optuna's public API: before
each trial the study gets a sampler seeded from ``SeedSequence([seed, trial number])`` (:func:`trial_sampler`), so a
trial's proposal is a function of the seed, its number and the study's history, and a run is repeatable.
"""

from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import ExperimentalWarning
from optuna.samplers import TPESampler
from optuna.storages import BaseStorage
from optuna.trial import Trial, TrialState

from cog_pl.probe.storage import resolve_storage

log = logging.getLogger(__name__)

FAIL_REASON_ATTR = "fail_reason"  # user attribute of a failed trial: {"mark": its flag attribute, "why": the reason}
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)  # the trials TPE learns from


def open_study(storage: str | os.PathLike | BaseStorage, name: str, trials: int) -> optuna.Study:
    """The study ``name`` (maximising validation top-1) for its one writer: created, kept when it holds ``trials``
    finished trials or none at all, started over otherwise (its earlier writer is gone)."""
    storage = resolve_storage(storage)
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize", load_if_exists=True)
    made = study.get_trials(deepcopy=False)
    if made and sum(t.state == TrialState.COMPLETE for t in made) < trials:
        log.info("restarting the study %s, left unfinished by a worker that is gone", name)
        optuna.delete_study(study_name=name, storage=storage)
        study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    return study


def trial_sampler(seed: int, number: int, finished: int, startup: int) -> TPESampler:
    """The sampler of trial ``number`` of a study with ``finished`` finished trials: TPE's random startup draws (while
    ``finished < startup``) seeded from the second word of ``SeedSequence([seed, number])``, its model's draws from
    the first."""
    state = np.random.SeedSequence([seed, number]).generate_state(2, dtype=np.uint32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # multivariate and constant_liar
        return TPESampler(seed=int(state[1] if finished < startup else state[0]), multivariate=True,
                          n_startup_trials=startup, constant_liar=True)


def ask_trials(study: optuna.Study, n: int, space: dict[str, BaseDistribution], seed: int,
               startup: int) -> list[Trial]:
    """``n`` new trials with their parameters proposed, each by its own :func:`trial_sampler`."""
    made = study.get_trials(deepcopy=False)
    finished = sum(t.state in _FINISHED for t in made)
    trials = []
    for number in range(len(made), len(made) + n):
        study.sampler = trial_sampler(seed, number, finished, startup)
        trials.append(study.ask(space))
    return trials


def fail_trial(study: optuna.Study, trial: Trial, mark: str, why: str, level: int = logging.WARNING) -> None:
    """Mark a trial failed and say why, in the trial (user attributes ``mark``: True, and ``fail_reason``) and in
    the log."""
    trial.set_user_attr(FAIL_REASON_ATTR, {"mark": mark, "why": why})
    trial.set_user_attr(mark, True)
    study.tell(trial, state=TrialState.FAIL)
    log.log(level, "trial %d of study %s failed: %s", trial.number, study.study_name, why)


def tell_result(study: optuna.Study, trial: Trial, value: float, attrs: dict | None = None,
                history: list[float] = ()) -> None:
    """Report the trial's per-epoch ``history``, set its user ``attrs`` and tell its ``value``."""
    for epoch, acc in enumerate(history):
        trial.report(float(acc), epoch)
    for key, attr in (attrs or {}).items():
        trial.set_user_attr(key, attr)
    study.tell(trial, value)
