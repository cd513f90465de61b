"""The one grid runner: a method's cells of one domain, from the rows to make to the rows written, the same for every
method.

:func:`run_grid` opens the method's domain (:meth:`~cog_pl.evaluate.method.Method.open`), takes its identity, and
decides each cell from the results store (:func:`cog_pl.results.identity.cells_todo`): a row of the same identity is
skipped, a row of another is refused in one line before any work (``overwrite``: made again, and the method's rows of
the domain outside the grid that other values made are removed), and so is a row of another seed in a cell the run
adds to. Then every cell is claimed (:mod:`cog_pl.results.claims`), made, written and released: a cell another
worker holds is left to it, or waited for (``wait``); a worker whose claim was taken over while it worked drops its
row. The cells run in this process or, for a method whose grid workers share (:attr:`Method.shares_grid`), in worker
processes (:mod:`cog_pl.probe.workers`); a :attr:`~Method.batched` method makes all its claimed cells in one pass.
Each written row holds the method's identity values and digest, the format version and the package versions.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from cog_pl.errors import WrongTypeError
from cog_pl.evaluate.method import Cell, Job, Method
from cog_pl.evaluate.table import list_methods
from cog_pl.provenance import versions
from cog_pl.results import FORMAT_VERSION, NO_SEED, append_row, delete_row, get_row, is_seedless, read_stored
from cog_pl.results.claims import check_claims_file, claim, heartbeat, release, renew
from cog_pl.results.identity import cells_todo, differences, format_key, remove_stale

__all__ = ["CellTask", "InProcess", "make_cells", "run_grid", "want_of"]

log = logging.getLogger(__name__)

#: Claim timing of a method run without a search plan (the plan's defaults: :class:`~cog_pl.probe.tuner.SearchPlan`).
STALE_AFTER, RENEW_EVERY = 120.0, 30.0


def want_of(method: Method, job: Job, state: Any) -> dict[str, Any]:
    """The identity of the job's rows: the method's values and their digest (``identity``)."""
    values = method.identity(job, state)
    return {**values, "identity": method.digest(values)}


def _timing(job: Job) -> tuple[float, float]:
    plan = job.plan
    return (getattr(plan, "stale_after", STALE_AFTER), getattr(plan, "renew_every", RENEW_EVERY))


def finish_row(job: Job, cell: Cell, fields: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """The row written for ``cell``: the method's fields, its key, the identity, the format and package versions."""
    n, seed = cell
    row = {"format_version": FORMAT_VERSION, **fields, "model": job.model, "method": job.method.name,
           "domain": job.domain, "shots": n, "seed": seed, **want}
    if job.method.seedless:
        row["seedless"] = True
    row.setdefault("versions", versions())
    return row


@dataclass
class CellTask:
    """Claims, makes, writes and releases cells of a job: called with a cell (or, for a batched method, a tuple of
    them), returns (status, worker index, rows): ``"made"`` with the rows written, ``"done"`` when rows of this
    identity exist, ``"held"`` when another worker holds a cell. Picklable, for worker processes, where it opens the
    domain itself (:meth:`placed`)."""

    job: Job
    want: dict[str, Any]
    index: int = 0
    state: Any = None

    def placed(self, index: int, device: str) -> CellTask:
        """This task in worker process ``index`` on ``device``: its own state, opened there on first use."""
        return dataclasses.replace(self, job=dataclasses.replace(self.job, device=device), index=index, state=None)

    def __getstate__(self) -> dict[str, Any]:  # to a worker: no opened state, no rows read here, no callbacks
        return {**self.__dict__, "state": None, "job": dataclasses.replace(self.job, rows=None, show=None, tick=None)}

    def _state(self) -> Any:
        if self.state is None:
            self.state = self.job.method.open(self.job)
        return self.state

    def __call__(self, cells: Cell | tuple[Cell, ...], delay: float = 0.0) -> tuple[str, int, list[dict[str, Any]]]:
        time.sleep(delay)  # a cell another worker held: asked again later
        job, stale_after, renew_every = self.job, *_timing(self.job)
        group = tuple(cells) if self.job.method.batched else (cells,)
        held, status = {}, "done"
        try:
            for cell in group:
                claimed = claim(job.results, format_key(job.key(cell)), stale_after)
                if claimed is None:
                    status = "held"
                    continue
                made = get_row(job.results, job.key(cell))  # written meanwhile, by the cell's holder before this one?
                if made is not None and not differences(made, self.want):
                    release(claimed)
                    continue
                held[cell] = claimed
            if not held:
                return status, self.index, []
            return self._make(held, renew_every)
        finally:
            for claimed in held.values():
                release(claimed)

    def _make(self, held: dict[Cell, Any], renew_every: float) -> tuple[str, int, list[dict[str, Any]]]:
        job, written, lost = self.job, [], False
        with ExitStack() as beats:
            for claimed in held.values():
                beats.enter_context(heartbeat(claimed, renew_every))
            try:
                made = list(zip(held, job.method.run_cells(job, self._state(), list(held), self.want)))
            except Exception:
                if all(renew(c) for c in held.values()):  # a failure of its own, not of a cell taken over
                    raise
                made = []
        for cell, fields in made:
            if not renew(held[cell]):
                log.warning("%s: dropped this worker's row, its claim was taken over meanwhile", held[cell].cell)
                lost = True
                continue
            row = finish_row(job, cell, fields, self.want)
            append_row(job.results, row)
            log.info("wrote row %s", format_key(job.key(cell)))
            written.append(row)
        return ("held" if lost or len(made) < len(held) else "made"), self.index, written


class InProcess(Executor):
    """Runs each task in this process as it is submitted: the executor of a one-worker grid."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as err:
            future.set_exception(err)
        return future


def _order(cells: Iterable[Cell]) -> list[Cell]:
    """All data first, then the most shots: the largest cells start first."""
    return sorted(cells, key=lambda c: (c[0] is not None, -(c[0] or 0), c[1]))


def _line(row: dict[str, Any], done: int, todo: int, worker: str, started: float) -> str:
    seed = "none" if row["seed"] == NO_SEED else row["seed"]
    took = f"{row['seconds']:.1f} s; " if isinstance(row.get("seconds"), (int, float)) else ""
    return (f"[{done}/{todo}] {worker}shots={row['shots'] or 'all'} seed={seed} -> test top-1 {row['test_top1']:.2f} "
            f"({took}{time.monotonic() - started:.0f} s in all)")


def make_cells(pool: Executor, task: Callable, todo: list[Cell], *, workers: int = 1, batched: bool = False,
               wait_held: bool = True, show: Callable[[str], None] = log.info) -> list[dict[str, Any]]:
    """Make the cells of ``todo`` with ``task`` (a :class:`CellTask`, or one in each of ``workers`` processes of
    ``pool``), one cell per worker at a time (``batched``: all of them in one call); returns the rows made, one
    ``show`` line each. A cell another worker holds is asked again until its row exists (``wait_held=False``: left
    to that worker)."""
    order = _order(todo)
    units = [tuple(order)] if batched and order else order
    backlog, pending, rows, started = deque((u, 0.0) for u in units), {}, [], time.monotonic()
    while backlog or pending:
        while backlog and len(pending) < workers:
            unit, delay = backlog.popleft()
            pending[pool.submit(task, unit, delay)] = unit, delay
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            unit, retried = pending.pop(future)
            status, worker, made = future.result()
            for row in made:
                rows.append(row)
                show(_line(row, len(rows), len(todo), f"worker {worker}: " if workers > 1 else "", started))
            if status == "held":
                have = {(r["shots"], r["seed"]) for r in made}
                left = [c for c in (unit if batched else (unit,)) if c not in have]
                job = task.job if isinstance(task, CellTask) else None
                where = f"{job.model}/{job.method.name}/{job.domain} " if job else ""
                for c in left if not retried else ():
                    log.info("%sshots=%s seed=%s: another worker is making this row", where, c[0] or "all", c[1])
                if wait_held and left:
                    backlog.append(((tuple(left) if batched else left[0]), 1.0))
    return rows


def _legacy_seedless(job: Job, want: dict[str, Any]) -> list[Cell]:
    """A seedless method's cells whose row exists under a seed key (written before seedless rows) with this
    identity: made, not to be made again."""
    found = read_stored(job.results, model=job.model, method=job.method.name, domain=job.domain, reuse=job.rows)
    by_cell: dict[int | None, list[dict]] = {}
    for r in (s.values for s in found):
        by_cell.setdefault(r.get("shots"), []).append(r)
    kept = []
    for n, rows in by_cell.items():
        if any(r["seed"] == NO_SEED for r in rows):
            continue
        if any(is_seedless(r) and not differences(r, want) for r in rows):
            kept.append((n, NO_SEED))
    return kept


def run_grid(job: Job, *, check_only: bool = False) -> list[Any]:
    """Run ``job``'s grid: the rows written (``check_only``: refuse what must be refused, and return the cells to
    make, without making any)."""
    method = job.method
    list_methods()  # the table loaded: a refusal names the methods that would take the stores
    state = method.open(job)
    try:
        want = want_of(method, job, state)
        cells = method.cells(job)
        seeds = tuple(dict.fromkeys(s for _, s in cells))
        shots = tuple(dict.fromkeys(n for n, _ in cells))
        old = [] if job.overwrite or not method.seedless else _legacy_seedless(job, want)
        todo = cells_todo(job.results, model=job.model, method=method.name, domain=job.domain, seeds=seeds,
                          shots=shots, want=want, overwrite=job.overwrite, compare=differences,
                          announce=not check_only, rows=job.rows)
        todo = [c for c in todo if c in cells and c not in old]
        method.check(job, state, cells)
        if check_only:
            return todo
        if job.overwrite:  # the rows of other values this grid would not make again
            remove_stale(job.results, model=job.model, method=method.name, domain=job.domain, seeds=seeds,
                         shots=shots, want=want, compare=differences)
            if method.seedless:  # and a seedless row keyed by a seed (written before seedless rows)
                for r in read_stored(job.results, model=job.model, method=method.name, domain=job.domain):
                    if r.values["seed"] != NO_SEED and is_seedless(r.values):
                        delete_row(job.results, r.key)
        if not todo:
            return []
        if method.shares_grid and job.workers is not None and not isinstance(job.storage, (str, os.PathLike)):
            raise WrongTypeError(f"worker processes open the storage themselves: pass its path or URL, not "
                                 f"{job.storage!r}")
        check_claims_file(job.results)  # a claims file that cannot hold claims is named before any work
        return _make(job, state, want, todo)
    finally:
        method.close(state)


def _make(job: Job, state: Any, want: dict[str, Any], todo: list[Cell]) -> list[dict[str, Any]]:
    method, show = job.method, job.show or log.info
    slots = []
    if method.shares_grid and job.workers is not None:
        slots = method.worker_slots(job, state, len(todo))
    loop = {"wait_held": job.wait, "show": show, "workers": max(1, len(slots)), "batched": method.batched}
    if len(slots) > 1:
        from cog_pl.probe.workers import worker_pool

        show(f"grid {job.model}/{method.name}/{job.domain}: {len(todo)} cells on {len(slots)} workers "
             f"({slots[0].threads} thread(s) each, {slots[0].device})")
        with worker_pool(CellTask(job, want), slots) as pool:
            return make_cells(pool, _worker_task, todo, **loop)
    return make_cells(InProcess(), CellTask(job, want, state=state), todo, **loop)


def _worker_task(cells: Any, delay: float = 0.0) -> tuple[str, int, list[dict[str, Any]]]:
    """A worker process's task: its :class:`CellTask` (:func:`cog_pl.probe.workers.make_cell`)."""
    from cog_pl.probe.workers import make_cell

    return make_cell(cells, delay)
