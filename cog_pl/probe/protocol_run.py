"""The whole probe protocol of a domain: tune, retrain with the best (lr, wd), test; for every seed and shot count.

``probe`` runs one (seed, shots) cell and returns its result row; ``run_protocol`` runs the grid of a domain and
appends rows to a results file, skipping rows made with the same identity and refusing rows made with another
(:mod:`cog_pl.identity`), each cell claimed, tuned, written and released by :mod:`cog_pl.probe.cells`, in this
process or in worker processes (:mod:`cog_pl.probe.workers`). Studies are named after the cell and its rows'
identity digest, so a changed protocol, search or store never resumes a study made under other values.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from optuna.storages import BaseStorage
from torch import Tensor

from cog_pl.data.sampling import check_shots
from cog_pl.device import fits, resolve_device
from cog_pl.errors import WrongTypeError
from cog_pl.features.pair import StorePair, open_pair
from cog_pl.identity import cells_todo, features_identity, remove_stale, wanted
from cog_pl.identity import study_name as identity_study_name
from cog_pl.predictions import Predictions
from cog_pl.probe.claims import check_claims_file, worker_id
from cog_pl.probe.data import (
    ProbeData,
    final_indices,
    l2_normalize,
    load_store,
    sub_seed,
    train_labels,
    tuning_indices,
)
from cog_pl.probe.multihead import predict_heads
from cog_pl.probe.storage import opened
from cog_pl.probe.study import open_study
from cog_pl.probe.tuner import RESULT_ATTR, SearchPlan, best_trial, run_search, train_probe
from cog_pl.protocol import ProbeProtocol, as_record, check_grid
from cog_pl.provenance import versions
from cog_pl.results import FORMAT_VERSION

log = logging.getLogger(__name__)
#: The method of the rows written here (:data:`cog_pl.results.METHODS`).
METHOD = "linear"


@dataclass
class Splits:
    """Normalised train and test features of one domain, in memory (features on the probe's device, labels on the
    CPU), with the class count, model and domain of its stores (:class:`~cog_pl.features.pair.StorePair`)."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    model: str | None = None
    domain: str | None = None
    features: dict | None = None  # the stores' identity (:func:`cog_pl.identity.features_identity`)
    test_images: np.ndarray | None = None  # the dataset row of each test feature row (the test store's index)
    classes: tuple[str, ...] | None = None  # the concepts of the labels (wnids), where the stores record them

    @classmethod
    def load(cls, root: str | os.PathLike | StorePair, normalize: bool = True,
             device: torch.device | str = "cpu") -> Splits:
        """Read the train and test stores of ``root`` (a store root, opened and checked by
        :func:`~cog_pl.features.pair.open_pair`, or a pair it opened); features go to ``device``."""
        pair = root if isinstance(root, StorePair) else open_pair(root)
        (tx, ty), (sx, sy) = load_store(pair.train, device), load_store(pair.test, device)
        if normalize:
            tx, sx = l2_normalize(tx), l2_normalize(sx)
        return cls(tx, ty, sx, sy, pair.num_classes, pair.model, pair.domain, features_identity(pair),
                   pair.test_images, pair.classes)

    @classmethod
    def for_probes(cls, root: str | os.PathLike | StorePair, device: torch.device | str, protocol: ProbeProtocol,
                   plan: SearchPlan, allow_class_mismatch: bool = False) -> Splits:
        """:meth:`load` for probes on ``device``, the features placed by :func:`splits_device`
        (``allow_class_mismatch``: as :func:`~cog_pl.features.pair.open_pair`'s)."""
        pair = root if isinstance(root, StorePair) else open_pair(root, allow_class_mismatch=allow_class_mismatch)
        place = splits_device(pair, device, heads=max(plan.startup_trials, plan.trial_batch),
                              batch_size=protocol.batch_size)
        return cls.load(pair, normalize=protocol.normalize, device=place)


def splits_device(pair: StorePair, device: torch.device | str, free_bytes: int | None = None,
                  heads: int = 10, batch_size: int = 1024) -> str:
    """Where :meth:`Splits.load` should put the features of ``pair`` for probes on ``device``: the GPU itself when
    the features, a probe's copies of them and its workspace for up to ``heads`` heads fit in its free memory
    (:func:`cog_pl.device.fits`; ``free_bytes`` measured when None), else the host, from where each probe moves only
    its own rows."""
    device = resolve_device(device) if device == "auto" else torch.device(device)
    if device.type != "cuda":
        return str(device)
    (n, d), m = pair.train.features.shape, len(pair.test)
    columns = heads * pair.num_classes
    needed = (4 * (n + m) * d + 4 * n * d + 2 * n * (d + 16)  # float32 splits, tuning rows, bfloat16 features
              + 20 * (d + 16) * columns  # parameters, momentum, snapshot, their bfloat16 copies
              + 12 * batch_size * columns + 4 * 8192 * columns)  # a batch's logits and gradient, an evaluation chunk
    if fits(needed, device, free_bytes, what=f"the features of {pair.root} and a probe's workspace"):
        return str(device)
    log.info("features stay in host memory; each probe moves its own rows to %s", device)
    return "cpu"


def study_name(model: str, domain: str, shots: int | None, seed: int, protocol: ProbeProtocol,
               plan: SearchPlan, device: str | torch.device = "cpu", features: dict | None = None) -> str:
    """Name of the study of one cell (:func:`cog_pl.identity.study_name`): it changes with any protocol value, the
    search, the precision the trials run with on ``device`` and the ``features``' identity."""
    want = wanted(features, protocol, plan.as_record(), plan.precision_on(device))
    return identity_study_name(model, domain, shots, seed, want)


def set_flush_denormal(enabled: bool) -> bool:
    """Flush subnormal floats to zero on the CPU: softmax tails of confident heads make BLAS crawl otherwise."""
    return bool(enabled and torch.set_flush_denormal(True))


def probe(splits: Splits, *, seed: int, shots: int | None, storage: str | os.PathLike | BaseStorage,
          model: str = "model",
          domain: str = "domain", protocol: ProbeProtocol | None = None, plan: SearchPlan | None = None,
          device: str | torch.device = "cpu", name: str | None = None,
          flush_denormal: bool = True) -> dict[str, Any]:
    """Tune, retrain and test one probe; returns its result row. Test data never enters tuning or sampling.

    The caller is the study's one writer (it holds the cell's claim, :mod:`cog_pl.probe.cells`): an unfinished
    study of the cell is started over (:func:`cog_pl.probe.study.open_study`). ``storage``: a path or URL (opened
    here and closed when tuning ends) or a storage object (left open)."""
    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    check_grid([seed], [shots])
    flushed = set_flush_denormal(flush_denormal)
    start = time.perf_counter()
    train_idx, val_idx = tuning_indices(splits.train_y, protocol.val_fraction, seed, shots)
    tuning = ProbeData(splits.train_x[train_idx], splits.train_y[train_idx], splits.train_x[val_idx],
                       splits.train_y[val_idx], splits.num_classes).to(device)
    precision = plan.precision_on(device)
    want = wanted(splits.features, protocol, plan.as_record(), precision)
    name = name or identity_study_name(model, domain, shots, seed, want)
    with opened(storage) as study_storage:
        study = open_study(study_storage, name, protocol.trials)
        run_search(study, tuning, protocol, plan, seed)
        best = best_trial(study)
    del tuning
    tuned = time.perf_counter()
    final_idx = final_indices(splits.train_y, seed, shots)
    x, y = (splits.train_x, splits.train_y) if shots is None else (splits.train_x[final_idx], splits.train_y[final_idx])
    final = ProbeData(x, y, splits.test_x, splits.test_y, splits.num_classes).to(device)  # all data: no copy
    lr, wd = best.params["lr"], best.params["wd"]
    result = train_probe(final, [lr], [wd], protocol=protocol, seeds=[sub_seed(seed, 20)],
                         perm_seed=sub_seed(seed, 21), precision=precision, on_divergence=plan.on_divergence)
    rolled_back = plan.on_divergence == "rollback" and result.diverged_epoch[0] == 0  # scored 0: no state
    ranked = predict_heads(result.weight, result.bias, final.eval_x, scored=[not rolled_back])[0]
    end = time.perf_counter()
    log.info("%s: lr %.4g wd %.3g -> test top-1 %.2f", name, lr, wd, float(result.top1[0]))
    return {
        "format_version": FORMAT_VERSION, "model": model, "method": METHOD, "domain": domain, "shots": shots,
        "seed": seed,
        "lr": lr, "wd": wd, "best_trial": best.number, "val_top1": best.value,
        "val_top5": best.user_attrs.get(RESULT_ATTR, {}).get("val_top5"), "test_top1": float(result.top1[0]),
        "test_top5": float(result.top5[0]), "final_diverged_epoch": result.diverged_epoch[0],
        "train_rows": len(final_idx), "tuning_rows": len(train_idx), "val_rows": len(val_idx),
        "mode": plan.mode, "precision": precision, "search": plan.as_record(), "protocol": as_record(protocol),
        "features": want["features"], "identity": want["identity"], "study": name, "worker": worker_id(),
        "flush_denormal": flushed, "device": str(device), "seconds": round(end - start, 3),
        "tune_seconds": round(tuned - start, 3), "final_seconds": round(end - tuned, 3), "versions": versions(),
        "predictions": final_predictions(splits, ranked),
    }


def final_predictions(splits: Splits, ranked: Tensor) -> Predictions:
    """The test predictions of a final probe on ``splits`` (stored beside its row by
    :func:`cog_pl.results.append_row`)."""
    images = np.arange(len(splits.test_y)) if splits.test_images is None else splits.test_images
    return Predictions.of(ranked, splits.test_y, images, splits.classes)


def grid_todo(pair: StorePair, results: str | os.PathLike, *, model: str, domain: str, protocol: ProbeProtocol,
              plan: SearchPlan, seeds: tuple[int, ...], shots: tuple[int | None, ...], device: str | torch.device,
              overwrite: bool = False, announce: bool = True) -> list[tuple[int | None, int]]:
    """The (shots, seed) cells of the grid whose row is missing or, with ``overwrite``, made with another identity
    (:func:`~cog_pl.identity.cells_todo`); a row of another identity, or a shot count some class cannot fill
    (:func:`~cog_pl.data.sampling.check_shots`), is refused otherwise, before any work."""
    want = wanted(features_identity(pair), protocol, plan.as_record(), plan.precision_on(device))
    todo = cells_todo(results, model=model, method=METHOD, domain=domain, seeds=seeds, shots=shots, want=want,
                      overwrite=overwrite, announce=announce)  # the results file first: named before all
    check_shots(train_labels(pair), protocol.val_fraction, shots)
    return todo


def run_protocol(root: str | os.PathLike, results: str | os.PathLike, *, model: str | None = None,
                 domain: str | None = None, storage: str | os.PathLike | BaseStorage,
                 protocol: ProbeProtocol | None = None, plan: SearchPlan | None = None,
                 seeds: tuple[int, ...] | None = None, shots: tuple[int | None, ...] | None = None,
                 device: str | torch.device = "cpu", overwrite: bool = False, allow_class_mismatch: bool = False,
                 wait: bool = True, workers: int | str | None = None, threads: int = 0,
                 progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every (shots, seed) cell of a domain (All and each N of the protocol by default), rows appended as they end;
    returns the rows this run wrote, one ``progress`` line each (default: the log). ``model`` and ``domain`` default
    to the stores'; ``allow_class_mismatch``: as :func:`~cog_pl.features.pair.open_pair`'s.

    A row made with the same identity is skipped, one made with another is refused before any work (``overwrite``:
    made again). ``workers``: None runs the cells here, a count or ``"auto"`` in processes of ``threads`` torch
    threads (:func:`cog_pl.probe.workers.plan_workers`). Runs on any number of machines may share the storage and
    results file: each cell is claimed (:mod:`cog_pl.probe.cells`) and the rows equal a one-worker run's. A run
    returns when every row is written, waiting for cells others hold; ``wait=False`` leaves those to them."""
    from cog_pl.probe.cells import CellMaker, InProcess, make_cells
    from cog_pl.probe.workers import grid_slots, make_cell, worker_pool

    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    seeds, shots = protocol.grid(seeds, shots)
    pair = open_pair(root, allow_class_mismatch=allow_class_mismatch)
    model, domain = pair.names(model, domain)
    todo = grid_todo(pair, results, model=model, domain=domain, protocol=protocol, plan=plan, seeds=seeds,
                     shots=shots, device=device, overwrite=overwrite)
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
