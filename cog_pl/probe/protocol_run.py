"""The whole probe protocol of a domain: tune, retrain with the best (lr, wd), test; for every seed and shot count.

``probe`` runs one (seed, shots) cell and returns its result row; ``run_protocol`` runs the grid of a domain and
appends rows to a results file, skipping rows made with the same identity and refusing rows made with another
(:mod:`cog_pl.probe.resume`: the rules for resuming, restarting orphaned studies and claiming a cell's final step).
Studies are named after the cell and a hash of the protocol values, search plan and features, so a changed protocol
or store never resumes a study made under other values.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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
from cog_pl.features.pair import StorePair, open_pair
from cog_pl.predictions import Predictions
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
from cog_pl.probe.resume import (
    cells_todo,
    claim_expired,
    claim_lease,
    differences,
    features_identity,
    format_key,
    renewing,
    restart_orphaned_study,
    row_identity,
    wanted,
)
from cog_pl.probe.storage import opened
from cog_pl.probe.study import open_study, worker_id
from cog_pl.probe.tuner import RESULT_ATTR, SearchPlan, best_trial, run_search, train_probe
from cog_pl.protocol import ProbeProtocol, as_record, check_grid
from cog_pl.provenance import versions
from cog_pl.results import FORMAT_VERSION, append_row, claim_row, release_claim, renew_claim

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
    features: dict | None = None  # the stores' identity (:func:`cog_pl.probe.resume.features_identity`)
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
                   plan: SearchPlan) -> Splits:
        """:meth:`load` for probes on ``device``, the features placed by :func:`splits_device`."""
        pair = root if isinstance(root, StorePair) else open_pair(root)
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
    """Name of the study of one cell; the hash changes with any protocol value, the search mode, the precision the
    trials run with on ``device`` (a study never mixes precisions) and the ``features``' identity (a study of other
    stores is never resumed)."""
    values = {"protocol": as_record(protocol), "mode": plan.mode, "startup": plan.startup_trials,
              "batch": plan.trial_batch}
    precision = plan.precision_on(device)
    if precision != "32-true":  # float32 studies keep the names they had before the option existed
        values["precision"] = precision
    if features is not None:
        values["features"] = features
    digest = hashlib.sha1(json.dumps(values, sort_keys=True).encode()).hexdigest()[:10]
    return f"{model}/{domain}/shots-{shots or 'all'}/seed-{seed}/{digest}"


def set_flush_denormal(enabled: bool) -> bool:
    """Flush subnormal floats to zero on the CPU: softmax tails of confident heads make BLAS crawl otherwise."""
    return bool(enabled and torch.set_flush_denormal(True))


def probe(splits: Splits, *, seed: int, shots: int | None, storage: str | os.PathLike | BaseStorage,
          model: str = "model",
          domain: str = "domain", protocol: ProbeProtocol | None = None, plan: SearchPlan | None = None,
          device: str | torch.device = "cpu", name: str | None = None, flush_denormal: bool = True,
          before_final: Callable[[], bool] | None = None,
          on_epoch_end: Callable[[int], None] | None = None) -> dict[str, Any] | None:
    """Tune, retrain and test one probe; returns its result row. Test data never enters tuning or sampling.

    ``storage``: a path or URL (opened here and closed when tuning ends) or a storage object (left open).
    ``before_final``: asked once tuning ends; when it returns False the final retrain is another worker's and None
    is returned. ``on_epoch_end``: called after each epoch of the final retrain (with its number)."""
    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    check_grid([seed], [shots])
    flushed = set_flush_denormal(flush_denormal)
    start = time.perf_counter()
    train_idx, val_idx = tuning_indices(splits.train_y, protocol.val_fraction, seed, shots)
    tuning = ProbeData(splits.train_x[train_idx], splits.train_y[train_idx], splits.train_x[val_idx],
                       splits.train_y[val_idx], splits.num_classes).to(device)
    name = name or study_name(model, domain, shots, seed, protocol, plan, device, splits.features)
    with opened(storage) as study_storage:
        restart_orphaned_study(study_storage, name, protocol.trials, plan.stale_after)
        study = open_study(study_storage, name, seed, plan.startup_trials)
        run_search(study, tuning, protocol, plan, seed)
        best = best_trial(study)
    del tuning
    tuned = time.perf_counter()
    if before_final is not None and not before_final():
        return None
    final_idx = final_indices(splits.train_y, seed, shots)
    x, y = (splits.train_x, splits.train_y) if shots is None else (splits.train_x[final_idx], splits.train_y[final_idx])
    final = ProbeData(x, y, splits.test_x, splits.test_y, splits.num_classes).to(device)  # all data: no copy
    lr, wd = best.params["lr"], best.params["wd"]
    precision = plan.precision_on(device)
    result = train_probe(final, [lr], [wd], protocol=protocol, seeds=[sub_seed(seed, 20)],
                         perm_seed=sub_seed(seed, 21), precision=precision, on_divergence=plan.on_divergence,
                         on_epoch_end=on_epoch_end)
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
        **row_identity(splits.features, protocol, plan.as_record(), precision), "study": name, "worker": worker_id(),
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
              overwrite: bool = False) -> list[tuple[int | None, int]]:
    """The (shots, seed) cells of the grid whose row is missing or, with ``overwrite``, made with another identity;
    a row of another identity, or a shot count some class cannot fill (:func:`~cog_pl.data.sampling.check_shots`), is
    refused otherwise (before any work), naming the row and the values that differ."""
    want = wanted(features_identity(pair), protocol, plan.as_record(), plan.precision_on(device))
    todo = cells_todo(results, model=model, method=METHOD, domain=domain, seeds=seeds, shots=shots, want=want,
                      overwrite=overwrite)  # the results file first: one that cannot take rows is named before all
    check_shots(train_labels(pair), protocol.val_fraction, shots)
    return todo


def grid_values(protocol: ProbeProtocol | None, plan: SearchPlan | None, seeds: tuple[int, ...] | None,
                shots: tuple[int | None, ...] | None) -> tuple[ProbeProtocol, SearchPlan, tuple, tuple]:
    """A grid's protocol, search plan, seeds and shot settings, the protocol's where not given (All and each N),
    checked."""
    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    seeds = protocol.seeds if seeds is None else seeds
    shots = (None, *protocol.shots) if shots is None else shots
    check_grid(seeds, shots)
    return protocol, plan, seeds, shots


def run_protocol(root: str | os.PathLike, results: str | os.PathLike, *, model: str | None = None,
                 domain: str | None = None,
                 storage: str | os.PathLike | BaseStorage, protocol: ProbeProtocol | None = None,
                 plan: SearchPlan | None = None,
                 seeds: tuple[int, ...] | None = None, shots: tuple[int | None, ...] | None = None,
                 device: str | torch.device = "cpu", overwrite: bool = False,
                 allow_class_mismatch: bool = False, claim_cells: bool = False,
                 wait: bool = True) -> list[dict[str, Any]]:
    """Every (shots, seed) cell of a domain (All and each N of the protocol by default), rows appended as they end;
    returns the rows this worker wrote (``allow_class_mismatch``: as :func:`~cog_pl.features.pair.open_pair`'s).

    ``model`` and ``domain`` default to the stores' (their meta, else the folder names). A row made with the same
    identity is skipped, one made with another is refused (``overwrite``: made again and replaced); see
    :mod:`cog_pl.probe.resume` for the rules of resuming. Several workers may run the same grid on one storage and
    one results file: they tune the studies together and each row's final retrain runs once; a worker returns when
    every row of the grid is written (by any of them). With ``claim_cells`` a worker claims each cell before tuning
    it (the claim renewed every ``plan.heartbeat_every`` seconds), so every cell is tuned by one worker alone and the
    rows equal a one-worker run's however many workers share the grid (the SLURM launcher's probe tasks,
    :mod:`cog_pl.cluster`). ``wait=False`` returns once every cell left is held by another worker instead of when
    every row is written, so that a worker goes on to another grid meanwhile (and comes back with ``wait=True``).
    """
    protocol, plan, seeds, shots = grid_values(protocol, plan, seeds, shots)
    pair = open_pair(root, allow_class_mismatch=allow_class_mismatch)
    model, domain = pair.names(model, domain)
    todo = grid_todo(pair, results, model=model, domain=domain, protocol=protocol, plan=plan, seeds=seeds,
                     shots=shots, device=device, overwrite=overwrite)
    if not todo:
        return []
    splits = Splits.for_probes(pair, device, protocol, plan)
    want = wanted(splits.features, protocol, plan.as_record(), plan.precision_on(device))
    rows = []
    with opened(storage) as grid_storage:  # opened once for the whole grid
        while todo:
            waiting = []
            for n, seed in todo:
                key = (model, METHOD, domain, n, seed)
                status, row = _cell(splits, results, key, want, storage=grid_storage, protocol=protocol, plan=plan,
                                    device=device, claim_first=claim_cells)
                if row is not None:
                    rows.append(row)
                elif status == "held":
                    waiting.append((n, seed))
            if waiting and not wait:
                log.info("%d row(s) left to the workers making them", len(waiting))
                break
            if waiting:  # rows another worker is making: wait for them, take over a claim whose worker is gone
                log.info("waiting for %d row(s) another worker is making", len(waiting))
                time.sleep(1.0)
            todo = waiting
    return rows


def _cell(splits: Splits, results: str | os.PathLike, key: tuple, want: dict[str, Any], *,
          storage: BaseStorage, protocol: ProbeProtocol, plan: SearchPlan,
          device: str | torch.device, claim_first: bool = False) -> tuple[str, dict[str, Any] | None]:
    """One cell of a grid: ``("done", None)`` when its row exists (made meanwhile by another worker), ``("held",
    None)`` when another worker is making it, ``("claimed", row)`` when this worker made and appended it. The cell
    is claimed before its final retrain, or with ``claim_first`` before it is tuned (renewed by a heartbeat)."""
    model, _, domain, n, seed = key
    lease = claim_lease()
    status = []

    def claim() -> bool:
        status.append(claim_row(results, key, lambda row: not differences(row, want), lease,
                                lambda held: claim_expired(held, plan.stale_after)))
        return status[-1] == "claimed"

    if claim_first:
        if not claim():
            return status[-1], None
    elif claim_row(results, key, lambda row: not differences(row, want), None, None) == "done":
        return "done", None
    last = [time.monotonic()]

    def renew(epoch: int) -> None:
        if time.monotonic() - last[0] > plan.heartbeat_every:
            last[0] = time.monotonic()
            renew_claim(results, key, claim_lease())

    heartbeat = (renewing(lambda: renew_claim(results, key, claim_lease()), plan.heartbeat_every) if claim_first
                 else contextlib.nullcontext())
    try:
        with heartbeat:
            row = probe(splits, seed=seed, shots=n, storage=storage, model=model, domain=domain, protocol=protocol,
                        plan=plan, device=device, before_final=None if claim_first else claim,
                        on_epoch_end=None if claim_first else renew)
        if row is not None:
            append_row(results, row)  # ends the claim in the same transaction
            log.info("wrote row %s", format_key(key))
    except BaseException:
        if status and status[-1] == "claimed":
            release_claim(results, key, lease["worker"])
        raise
    return status[-1], row
