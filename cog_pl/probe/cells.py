"""The cells of a probe grid as every worker makes them: claim, tune, write, release; in this process or in a pool.

The cell is the unit of ownership (:mod:`cog_pl.results.claims`). A :class:`CellMaker` claims a cell whose row was
missing, looks whether the row was written meanwhile (a previous holder writes its row before it releases the claim),
tunes the cell's study as its one writer (:func:`cog_pl.probe.cell.probe`, which starts over a study its
previous writer left unfinished), appends the row and releases the claim; a heartbeat renews the claim meanwhile. A
worker whose claim was taken over while it worked (silent past ``stale_after``) drops its row and any error of its
study: the new holder makes it. :func:`make_cells` is the one grid loop: it hands the cells, largest first, to an
executor (:class:`InProcess`, or the worker processes of :mod:`cog_pl.probe.workers`) and asks again for a cell
another worker holds.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass
from typing import Any

from optuna.storages import BaseStorage

from cog_pl.probe.cell import METHOD, Splits, probe
from cog_pl.probe.tuner import HeadStart, SearchPlan, search_record
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import append_row, get_row
from cog_pl.results.claims import claim, heartbeat, release, renew
from cog_pl.results.identity import differences, format_key, wanted

log = logging.getLogger(__name__)


@dataclass
class CellMaker:
    """Makes cells of a domain's grid on the stores at ``root`` (a folder or an opened pair): called with a (shots,
    seed) cell, returns (``"made"``, row), (``"done"``, None) when a row of this run's identity exists, or
    (``"held"``, None) while another worker holds the cell, each with the maker's ``index`` among the workers."""

    root: Any
    results: str | os.PathLike
    model: str
    domain: str
    storage: str | os.PathLike | BaseStorage
    protocol: ProbeProtocol
    plan: SearchPlan
    device: str
    index: int = 0
    allow_class_mismatch: bool = False
    head_start: HeadStart | None = None  # the heads' start (:func:`cog_pl.probe.cell.probe`); None: random, ``linear``

    @functools.cached_property
    def splits(self) -> Splits:  # loaded where the maker runs: in this process or in a worker's
        return Splits.for_probes(self.root, self.device, self.protocol, self.plan, self.allow_class_mismatch)

    @functools.cached_property
    def want(self) -> dict[str, Any]:  # the identity of this run's rows
        return wanted(self.splits.features, self.protocol, search_record(self.plan, self.head_start),
                      self.plan.precision_on(self.device))

    def __call__(self, cell: tuple[int | None, int], delay: float = 0.0) -> tuple[str, int, dict[str, Any] | None]:
        time.sleep(delay)  # a cell another worker held: asked again a second later
        key = (self.model, METHOD if self.head_start is None else self.head_start.method, self.domain, *cell)
        held = claim(self.results, format_key(key), self.plan.stale_after)
        if held is None:
            return "held", self.index, None
        try:
            made = get_row(self.results, key)  # written meanwhile, by the cell's holder before this one?
            if made is not None and not differences(made, self.want):
                return "done", self.index, None
            with heartbeat(held, self.plan.renew_every):
                try:
                    row = probe(self.splits, shots=cell[0], seed=cell[1], storage=self.storage, model=self.model,
                                domain=self.domain, protocol=self.protocol, plan=self.plan, device=self.device,
                                head_start=self.head_start)
                except Exception:
                    if renew(held):  # a failure of its own, not of a study the new holder started over
                        raise
                    row = None
            if row is None or not renew(held):
                log.warning("%s: dropped this worker's row, its claim was taken over meanwhile", held.cell)
                return "held", self.index, None
            append_row(self.results, row)
            log.info("wrote row %s", held.cell)
            return "made", self.index, row
        finally:
            release(held)


class InProcess(Executor):
    """Runs each task in this process as it is submitted: the executor of a one-worker grid."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as err:
            future.set_exception(err)
        return future


def make_cells(pool: Executor, task: Callable, todo: list[tuple[int | None, int]], *, workers: int = 1,
               wait_held: bool = True, show: Callable[[str], None] = log.info) -> list[dict[str, Any]]:
    """Make the cells of ``todo`` with ``task`` (a :class:`CellMaker`, or one in each of ``workers`` processes of
    ``pool``), one cell per worker at a time; returns the rows made, one ``show`` line each. A cell another worker
    holds is asked again until its row exists (``wait_held=False``: left to that worker)."""
    order = sorted(todo, key=lambda c: (c[0] is not None, -(c[0] or 0), c[1]))  # all data, then most shots first
    backlog, pending, rows, started = deque((cell, 0.0) for cell in order), {}, [], time.monotonic()
    while backlog or pending:
        while backlog and len(pending) < workers:
            cell, delay = backlog.popleft()
            pending[pool.submit(task, cell, delay)] = cell, delay
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            cell, retried = pending.pop(future)
            status, worker, row = future.result()
            if status == "held" and not retried:
                log.info("shots=%s seed=%s: another worker is making this row", cell[0] or "all", cell[1])
            if status == "held" and wait_held:
                backlog.append((cell, 1.0))
            elif row is not None:
                rows.append(row)
                who = f"worker {worker}: " if workers > 1 else ""
                show(f"[{len(rows)}/{len(todo)}] {who}shots={row['shots'] or 'all'} seed={row['seed']} -> test top-1 "
                     f"{row['test_top1']:.2f} ({row['seconds']:.1f} s; {time.monotonic() - started:.0f} s in all)")
    return rows
