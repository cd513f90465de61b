"""The whole probe protocol of a domain: tune, retrain with the best (lr, wd), test; for every seed and shot count.

``probe`` runs one (seed, shots) cell and returns its result row (:mod:`cog_pl.probe.cell`, whose names are
importable from here too); ``run_protocol`` runs the grid of a domain and
appends rows to a results file, skipping rows made with the same identity and refusing rows made with another
(:mod:`cog_pl.results.identity`), each cell claimed, tuned, written and released by :mod:`cog_pl.probe.cells`, in this
process or in worker processes (:mod:`cog_pl.probe.workers`). Studies are named after the cell and its rows'
identity digest, so a changed protocol, search or store never resumes a study made under other values.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

import torch
from optuna.storages import BaseStorage

from cog_pl.data.sampling import check_shots
from cog_pl.errors import WrongTypeError
from cog_pl.features.pair import StorePair, open_pair, vectors_only
from cog_pl.probe.cell import METHOD, Splits, final_predictions, probe, set_flush_denormal, splits_device, study_name
from cog_pl.probe.cells import CellMaker, InProcess, make_cells
from cog_pl.probe.data import train_labels
from cog_pl.probe.storage import opened
from cog_pl.probe.tuner import SearchPlan
from cog_pl.probe.workers import grid_slots, make_cell, worker_pool
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import StoredRows
from cog_pl.results.claims import check_claims_file
from cog_pl.results.identity import cells_todo, features_identity, remove_stale, wanted

__all__ = ["METHOD", "Splits", "final_predictions", "grid_todo", "probe", "run_protocol", "set_flush_denormal",
           "splits_device", "study_name"]
log = logging.getLogger(__name__)


def grid_todo(pair: StorePair, results: str | os.PathLike, *, model: str, domain: str, protocol: ProbeProtocol,
              plan: SearchPlan, seeds: tuple[int, ...], shots: tuple[int | None, ...], device: str | torch.device,
              overwrite: bool = False, announce: bool = True,
              rows: StoredRows | None = None) -> list[tuple[int | None, int]]:
    """The (shots, seed) cells of the grid whose row is missing or, with ``overwrite``, made with another identity
    (:func:`~cog_pl.results.identity.cells_todo`, ``rows``: the rows read once by the caller, if any); a row of another
    identity, or a shot count some class cannot fill (:func:`~cog_pl.data.sampling.check_shots`), is refused
    otherwise, before any work."""
    want = wanted(features_identity(pair), protocol, plan.as_record(), plan.precision_on(device))
    todo = cells_todo(results, model=model, method=METHOD, domain=domain, seeds=seeds, shots=shots, want=want,
                      overwrite=overwrite, announce=announce, rows=rows)  # the results file first: named before all
    check_shots(train_labels(pair), protocol.val_fraction, shots)
    return todo


def run_protocol(root: str | os.PathLike, results: str | os.PathLike, *, model: str | None = None,
                 domain: str | None = None, storage: str | os.PathLike | BaseStorage,
                 protocol: ProbeProtocol | None = None, plan: SearchPlan | None = None,
                 seeds: tuple[int, ...] | None = None, shots: tuple[int | None, ...] | None = None,
                 device: str | torch.device = "cpu", overwrite: bool = False, allow_class_mismatch: bool = False,
                 wait: bool = True, workers: int | str | None = None, threads: int = 0,
                 progress: Callable[[str], None] | None = None, rows: StoredRows | None = None) -> list[dict[str, Any]]:
    """Every (shots, seed) cell of a domain (All and each N of the protocol by default), rows appended as they end;
    returns the rows this run wrote, one ``progress`` line each (default: the log). ``model`` and ``domain`` default
    to the stores'; ``allow_class_mismatch``: as :func:`~cog_pl.features.pair.open_pair`'s.

    A row made with the same identity is skipped, one made with another is refused before any work (``overwrite``:
    made again). ``workers``: None runs the cells here, a count or ``"auto"`` in processes of ``threads`` torch
    threads (:func:`cog_pl.probe.workers.plan_workers`). Runs on any number of machines may share the storage and
    results file: each cell is claimed (:mod:`cog_pl.probe.cells`) and the rows equal a one-worker run's. A run
    returns when every row is written, waiting for cells others hold; ``wait=False`` leaves those to them.
    ``rows``: the stored rows a caller read once (:func:`cog_pl.results.read_stored`), where it runs many grids; a
    cell whose row another worker wrote since is found so when it is claimed."""
    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    seeds, shots = protocol.grid(seeds, shots)
    pair = vectors_only(open_pair(root, allow_class_mismatch=allow_class_mismatch), "linear")
    model, domain = pair.names(model, domain)
    todo = grid_todo(pair, results, model=model, domain=domain, protocol=protocol, plan=plan, seeds=seeds,
                     shots=shots, device=device, overwrite=overwrite, rows=rows)
    if todo:  # a claims file that cannot hold claims is named before any work
        check_claims_file(results)
    if overwrite:  # the rows of other settings this grid would not make again
        remove_stale(results, model=model, method=METHOD, domain=domain, seeds=seeds, shots=shots,
                     want=wanted(features_identity(pair), protocol, plan.as_record(), plan.precision_on(device)))
    slots = [] if workers is None or not todo else grid_slots(workers, pair, protocol, len(todo), device, threads)
    loop = {"wait_held": wait, "show": progress or log.info, "workers": max(1, len(slots))}
    cells = functools.partial(CellMaker, results=results, model=model, domain=domain, protocol=protocol, plan=plan,
                              device=str(device), allow_class_mismatch=allow_class_mismatch)
    if len(slots) > 1:
        if not isinstance(storage, (str, os.PathLike)):
            raise WrongTypeError(f"worker processes open the storage themselves: pass its path or URL, not {storage!r}")
        loop["show"](f"probe grid {model}/{domain}: {len(todo)} cells on {len(slots)} workers "
                     f"({slots[0].threads} thread(s) each, {slots[0].device})")
        with worker_pool(cells(root=str(root), storage=str(storage)), slots) as pool:
            return make_cells(pool, make_cell, todo, **loop)
    if not todo:
        return []
    with opened(storage) as grid_storage:  # opened once for the whole grid
        return make_cells(InProcess(), cells(root=pair, storage=grid_storage), todo, **loop)
