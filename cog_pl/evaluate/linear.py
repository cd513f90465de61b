"""The tuned linear probe (method ``linear``): the paper's evaluation (App. B).

Per (seed, shots) cell, TPE over (lr, wd) on the 20 % held-out part of train, the best values retrained on the cell's
train sample and tested (:func:`cog_pl.probe.cell.probe`; the search: :mod:`cog_pl.probe.tuner`). Each cell's Optuna
study lives in the run's storage under a name holding the rows' identity, so a study made under other values is
never resumed. Worker processes share the grid (``--probe-workers``, the cluster's probe array). The heads start at
random, or, in a subclass, from a given classifier (:attr:`Linear.start`: ``linear_text_init``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cog_pl.evaluate.method import Cell, Job, Method, register_method

__all__ = ["Linear", "LinearState"]


@dataclass
class LinearState:
    """A domain's stores, their features loaded once on first use, the study storage opened once, and the heads'
    start (None: random)."""

    pair: Any
    start: Any = None  # a HeadStart's record only until the heads need it (:meth:`Linear.head_start`)
    loaded: Any = None
    study_storage: Any = None
    opened: list = field(default_factory=list)

    def splits(self, job: Job) -> Any:
        if self.loaded is None:
            from cog_pl.probe.cell import Splits

            self.loaded = Splits.for_probes(self.pair, job.device, job.protocol, job.plan)
        return self.loaded

    def storage(self, job: Job) -> Any:
        """The study storage, opened once per process (a storage object handed in stays its owner's)."""
        if self.study_storage is None:
            from cog_pl.probe.storage import resolve_storage

            self.study_storage = resolve_storage(job.storage)
            if self.study_storage is not job.storage:
                self.opened.append(self.study_storage)
        return self.study_storage


class Linear(Method):
    """The tuned linear probe."""

    name = "linear"
    label = "linear probe"
    order = 0.0
    description = "linear probe tuned with Optuna (lr, wd), retrained, tested"
    shares_grid = True
    noise_predictions = True

    def open(self, job: Job) -> LinearState:
        return LinearState(super().open(job))

    def head_start(self, job: Job, state: LinearState, record_only: bool = False) -> Any:
        """Where the heads start (a :class:`~cog_pl.probe.tuner.HeadStart`), None: at random."""
        return None

    def identity(self, job: Job, state: LinearState) -> dict[str, Any]:
        from cog_pl.probe.tuner import search_record
        from cog_pl.results.identity import features_identity, wanted

        start = self.head_start(job, state, record_only=True)
        want = wanted(features_identity(state.pair), job.protocol, search_record(job.plan, start),
                      job.plan.precision_on(job.device))
        return {k: v for k, v in want.items() if k != "identity"}

    def digest(self, values: dict[str, Any]) -> str:
        from cog_pl.results.identity import linear_digest

        return linear_digest(values)

    def worker_slots(self, job: Job, state: LinearState, cells: int) -> list[Any]:
        from cog_pl.probe.workers import grid_slots

        return grid_slots(job.workers, state.pair, job.protocol, cells, job.device, job.threads)

    def run_cell(self, job: Job, state: LinearState, cell: Cell, want: dict[str, Any]) -> dict[str, Any]:
        from cog_pl.probe.cell import probe

        if state.start is None:
            state.start = self.head_start(job, state) or False
        return probe(state.splits(job), shots=cell[0], seed=cell[1], storage=state.storage(job), model=job.model,
                     domain=job.domain, protocol=job.protocol, plan=job.plan, device=job.device,
                     head_start=state.start or None)

    def close(self, state: LinearState) -> None:
        from cog_pl.probe.storage import close_storage

        for storage in state.opened:
            close_storage(storage)
        state.opened.clear()
        state.study_storage = None


register_method(Linear())
