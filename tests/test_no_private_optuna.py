"""The package reaches Optuna through its public API only: no private attribute of a study, trial, sampler or
storage (they change between Optuna releases without notice)."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cog_pl"
#: Private attributes of Optuna's objects that code reaching into them would use.
PRIVATE = re.compile(r"\.(_rng|_random_sampler|_storage|_study_id|_trial_id|_backend|_get_trials|_cached_frozen_trial"
                     r"|_thread_local|_directions|_engine|_scoped_session|_cache|_sampler|_pruner|_n_startup_trials)\b")


def test_the_package_uses_no_private_optuna_attribute():
    found = [f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if PRIVATE.search(line)]
    assert not found, "private Optuna attributes used:\n" + "\n".join(found)


def test_the_check_sees_what_it_looks_for():
    assert PRIVATE.search("study._storage.set_trial_user_attr(trial._trial_id, 'x', 1)")
    assert PRIVATE.search("self._rng.rng.seed(1)") and not PRIVATE.search("self.rng.seed(1)")
