"""A model's evaluation by every chosen method on every domain: the grids checked first, then run, one method after
the other.

:func:`check_methods` refuses, before any method runs, every row an earlier run made with other values, for every
(method, domain) of the run; :func:`run_methods` then runs each grid (:func:`~cog_pl.evaluate.grid.run_grid`) and,
for the methods whose grid other workers share (:attr:`~cog_pl.evaluate.method.Method.shares_grid`), waits at the
end for the cells they held. The model's rows are read once and handed down to every grid.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cog_pl.evaluate.grid import run_grid
from cog_pl.evaluate.method import Inputs, Job, Method
from cog_pl.evaluate.options import resolve_options
from cog_pl.evaluate.table import get_method
from cog_pl.protocol import ProbeProtocol

__all__ = ["Grid", "Plan", "check_methods", "evaluate_domains", "jobs_of", "run_methods", "run_on_stores"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Grid:
    """A domain and the seeds and shot settings of its cells."""

    domain: str
    seeds: tuple[int, ...]
    shots: tuple[int | None, ...]
    images: bool = True  # the domain has images (a level variant's stores are regrouped features only)


@dataclass
class Plan:
    """What every grid of a run shares: the results file, the protocol and search, where the probes run, the
    Optuna storage, the methods' options (by name), resuming, worker processes."""

    results: Path
    protocol: ProbeProtocol
    search: Any = None  # a SearchPlan
    device: str = "cpu"
    storage: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    overwrite: bool = False
    workers: int | str | None = None
    progress: bool = False


def jobs_of(method: Method, inputs: Inputs, grid: Sequence[Grid], plan: Plan, rows: Any = None) -> list[Job]:
    """``method``'s job on each domain of ``grid`` it can evaluate (a method that reads images: the domains with
    images)."""
    options = resolve_options(method, plan.options.get(method.name))
    return [Job(method, inputs, g.domain, Path(plan.results), plan.protocol, g.seeds, g.shots, plan=plan.search,
                device=plan.device, options=options, storage=plan.storage, overwrite=plan.overwrite, rows=rows,
                workers=plan.workers if method.shares_grid else None, progress=plan.progress)
            for g in grid if g.images or method.probe]


def check_methods(methods: Sequence[str], inputs: Inputs, grid: Sequence[Grid], plan: Plan,
                  rows: Any = None) -> None:
    """Refuse, before any work, a row of another identity in any of the grids (``rows``: the model's rows read
    once)."""
    for name in methods:
        for job in jobs_of(get_method(name), inputs, grid, plan, rows):
            run_grid(job, check_only=True)


def run_methods(methods: Sequence[str], inputs: Inputs, grid: Sequence[Grid], plan: Plan, *, title: str = "",
                check: bool = True, rows: Any = None) -> int:
    """Every method of ``methods`` on every domain of ``grid``, checked first (``check``); returns the rows
    written. A progress bar counts the grids' cells. ``rows``: the model's rows a caller read (else read here, once,
    for every grid)."""
    from cog_pl.progress import Progress
    from cog_pl.results import read_stored

    stored = rows if rows is not None else read_stored(plan.results, model=inputs.label)
    if check:
        check_methods(methods, inputs, grid, plan, stored)
    jobs = [job for name in methods for job in jobs_of(get_method(name), inputs, grid, plan, stored)]
    written, made = 0, {}
    total = sum(len(job.method.cells(job)) for job in jobs)
    with Progress(title or f"evaluating {inputs.label}", total, "rows", enabled=plan.progress) as bar:
        for i, job in enumerate(jobs, 1):
            log.debug("[%d/%d] %s on %s", i, len(jobs), job.method.name, job.domain)
            ticked = [0.0]

            def tick(fraction: float, ticked: list[float] = ticked) -> None:  # within a long cell
                ticked[0] += fraction
                bar.update(fraction)

            rows = run_grid(replace(job, wait=not job.method.shares_grid, tick=tick))  # shared cells: waited for below
            written += len(rows)
            made.setdefault((job.method.name, job.domain), set()).update((r["shots"], r["seed"]) for r in rows)
            bar.update(max(0.0, len(job.method.cells(job)) - ticked[0]))
        written += _wait_for_others(jobs, plan, made, stored)
    return written


def _wait_for_others(jobs: Sequence[Job], plan: Plan, made: Mapping[tuple, set], stored: Any) -> int:
    """The cells of shared grids that other workers held: waited for (the rows read again), and made here where
    their claims expired."""
    written = 0
    for job in jobs:
        if not job.method.shares_grid:
            continue
        have = {(r.shots, r.seed) for r in stored.select(method=job.method.name, domain=job.domain)}
        mine = made.get((job.method.name, job.domain), set())
        if not plan.overwrite and all(c in have or c in mine for c in job.method.cells(job)):
            continue  # every cell's row was there or made here: no other worker's to wait for
        written += len(run_grid(replace(job, rows=None, wait=True)))  # (taking over expired claims)
    return written


def run_on_stores(method: str, root: str | Path, results: str | Path, *, model: str | None = None,
                  domain: str | None = None, protocol: ProbeProtocol | None = None, plan: Any = None,
                  seeds: Sequence[int] | None = None, shots: Sequence[int | None] | None = None,
                  device: str = "cpu", storage: Any = None, options: Any = None, overwrite: bool = False,
                  workers: int | str | None = None, threads: int = 0, wait: bool = True,
                  allow_class_mismatch: bool = False, show: Any = None, check_only: bool = False) -> list[Any]:
    """One method's grid on the train/test stores at ``root`` (``cog-pl probe protocol``, a user's own stores):
    ``model`` and ``domain`` default to the stores' (their meta, else the folders' names), the grid to the
    protocol's (All and each N, its seeds), the Optuna storage to ``optuna.db`` beside ``results``. Returns the rows
    written (``check_only``: the cells to make)."""
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.tuner import SearchPlan

    m = get_method(method)
    protocol = protocol or ProbeProtocol()
    seeds, shots = protocol.grid(seeds, shots)
    model, domain = open_pair(root, allow_class_mismatch=allow_class_mismatch).names(model, domain)
    job = Job(m, Inputs(label=model), domain, Path(results), protocol, seeds, shots, plan=plan or SearchPlan(),
              device=str(device), options=resolve_options(m, options),
              storage=storage if storage is not None else str(Path(results).parent / "optuna.db"),
              overwrite=overwrite, workers=workers, threads=threads, wait=wait,
              allow_class_mismatch=allow_class_mismatch, show=show, at=Path(root))
    return run_grid(job, check_only=check_only)


def evaluate_domains(method: str, inputs: Inputs, domains: Sequence[str], results: str | Path, *,
                     seeds: Sequence[int] = (22,), shots: Sequence[int | None] = (None,), options: Any = None,
                     protocol: ProbeProtocol | None = None, plan: Any = None, device: str = "cpu",
                     storage: str | None = None, overwrite: bool = False, progress: bool = False) -> list[Any]:
    """One method on ``domains`` of ``inputs`` (a label's stores, or for a method that reads images the network and
    the data roots), every domain's grid checked before the first runs; returns the rows written. What ``cog-pl
    run`` does for one method, from Python (fine-tuning a model's domains, say)."""
    from cog_pl.probe.tuner import SearchPlan

    m = get_method(method)
    grid = [Grid(d, tuple(seeds), tuple(shots)) for d in domains]
    plan = Plan(Path(results), protocol or ProbeProtocol(), plan or SearchPlan(), device, storage,
                {method: options} if options is not None else {}, overwrite, None, progress)
    jobs = jobs_of(m, inputs, grid, plan)
    for job in jobs:
        run_grid(job, check_only=True)
    return [row for job in jobs for row in run_grid(job)]
