"""One cell of the probe protocol: tune (lr, wd) on a validation split of the train rows, retrain with the best on
them all, test; its result row.

:func:`probe` runs one (seed, shots) cell on :class:`Splits` (a domain's features in memory) and returns its row; the
grid of a domain (:mod:`cog_pl.evaluate.linear`, run by :func:`cog_pl.evaluate.grid.run_grid`) claims, tunes and
writes each cell. Studies are named after the cell and its rows' identity digest (:func:`study_name`), so a changed
protocol, search or store never resumes a study made under other values.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from optuna.storages import BaseStorage
from torch import Tensor

from cog_pl.device import fits, resolve_device
from cog_pl.features.pair import StorePair, open_pair, vectors_only
from cog_pl.probe.data import ProbeData, final_indices, l2_normalize, load_store, sub_seed, tuning_indices
from cog_pl.probe.multihead import predict_heads
from cog_pl.probe.storage import opened
from cog_pl.probe.study import open_study
from cog_pl.probe.tuner import (
    RESULT_ATTR,
    TEST_TOP1,
    HeadStart,
    SearchPlan,
    best_trial,
    oracle_trial,
    run_search,
    search_record,
    train_probe,
)
from cog_pl.protocol import ProbeProtocol, as_record, check_grid
from cog_pl.provenance import versions
from cog_pl.results import FORMAT_VERSION
from cog_pl.results.claims import worker_id
from cog_pl.results.identity import features_identity, wanted
from cog_pl.results.identity import study_name as identity_study_name
from cog_pl.results.predictions import Predictions

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
    features: dict | None = None  # the stores' identity (:func:`cog_pl.results.identity.features_identity`)
    test_images: np.ndarray | None = None  # the dataset row of each test feature row (the test store's index)
    classes: tuple[str, ...] | None = None  # the concepts of the labels (wnids), where the stores record them

    @classmethod
    def load(cls, root: str | os.PathLike | StorePair, normalize: bool = True,
             device: torch.device | str = "cpu") -> Splits:
        """Read the train and test stores of ``root`` (a store root, opened and checked by
        :func:`~cog_pl.features.pair.open_pair`, or a pair it opened); features go to ``device``. Token stores are
        refused (:func:`~cog_pl.features.pair.vectors_only`): the probe reads one vector per image."""
        pair = vectors_only(root if isinstance(root, StorePair) else open_pair(root), METHOD)
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
        pair = vectors_only(pair, METHOD)  # before splits_device reads the features' shape as [N, D]
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
    """Name of the study of one cell (:func:`cog_pl.results.identity.study_name`): it changes with any protocol value,
    the search, the precision the trials run with on ``device`` and the ``features``' identity."""
    want = wanted(features, protocol, plan.as_record(), plan.precision_on(device))
    return identity_study_name(model, domain, shots, seed, want)


def set_flush_denormal(enabled: bool) -> bool:
    """Flush subnormal floats to zero on the CPU: softmax tails of confident heads make BLAS crawl otherwise."""
    return bool(enabled and torch.set_flush_denormal(True))


def probe(splits: Splits, *, seed: int, shots: int | None, storage: str | os.PathLike | BaseStorage,
          model: str = "model",
          domain: str = "domain", protocol: ProbeProtocol | None = None, plan: SearchPlan | None = None,
          device: str | torch.device = "cpu", name: str | None = None,
          flush_denormal: bool = True, head_start: HeadStart | None = None) -> dict[str, Any]:
    """Tune, retrain and test one probe; returns its result row. Test data never enters tuning or sampling: each
    trial's head is also evaluated on test after it is trained, which the search never reads: the row's
    ``oracle_test_top1`` is the best trial's (what selecting on test would have reported; ``oracle_trial``: that
    trial), ``selected_test_top1`` the held-out-selected trial's (the same heads: at most the oracle; ``test_top1``
    is its retrained probe's).

    The caller is the study's one writer (it holds the cell's claim, :mod:`cog_pl.evaluate.grid`): an unfinished
    study of the cell is started over (:func:`cog_pl.probe.study.open_study`). ``storage``: a path or URL (opened
    here and closed when tuning ends) or a storage object (left open). ``head_start``: every head (trials and the final
    probe) starts from it instead of a random draw (:class:`~cog_pl.probe.tuner.HeadStart`); the row is then of its
    method, with its record as ``init`` and in the search record (so in the identity and the study's name)."""
    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    check_grid([seed], [shots])
    flushed = set_flush_denormal(flush_denormal)
    start = time.perf_counter()
    train_idx, val_idx = tuning_indices(splits.train_y, protocol.val_fraction, seed, shots)
    tuning = ProbeData(splits.train_x[train_idx], splits.train_y[train_idx], splits.train_x[val_idx],
                       splits.train_y[val_idx], splits.num_classes).to(device)
    precision = plan.precision_on(device)
    want = wanted(splits.features, protocol, search_record(plan, head_start), precision)
    name = name or identity_study_name(model, domain, shots, seed, want)
    test = (splits.test_x.to(device), splits.test_y.to(device))  # each trial's head also tested: the oracle
    with opened(storage) as study_storage:
        study = open_study(study_storage, name, protocol.trials)
        run_search(study, tuning, protocol, plan, seed, test=test, head_start=head_start)
        best, oracle = best_trial(study), oracle_trial(study)
    del tuning, test
    tuned = time.perf_counter()
    final_idx = final_indices(splits.train_y, seed, shots)
    x, y = (splits.train_x, splits.train_y) if shots is None else (splits.train_x[final_idx], splits.train_y[final_idx])
    final = ProbeData(x, y, splits.test_x, splits.test_y, splits.num_classes).to(device)  # all data: no copy
    lr, wd = best.params["lr"], best.params["wd"]
    result = train_probe(final, [lr], [wd], protocol=protocol, seeds=[sub_seed(seed, 20)],
                         perm_seed=sub_seed(seed, 21), precision=precision, on_divergence=plan.on_divergence,
                         head_start=head_start)
    rolled_back = plan.on_divergence == "rollback" and result.diverged_epoch[0] == 0  # scored 0: no state
    ranked = predict_heads(result.weight, result.bias, final.eval_x, scored=[not rolled_back])[0]
    end = time.perf_counter()
    log.info("%s: lr %.4g wd %.3g -> test top-1 %.2f", name, lr, wd, float(result.top1[0]))
    return {
        "format_version": FORMAT_VERSION, "model": model, "method": METHOD if head_start is None else head_start.method,
        "domain": domain, "shots": shots,
        "seed": seed,
        "lr": lr, "wd": wd, "best_trial": best.number, "val_top1": best.value,
        "val_top5": best.user_attrs.get(RESULT_ATTR, {}).get("val_top5"), "test_top1": float(result.top1[0]),
        "test_top5": float(result.top5[0]), "final_diverged_epoch": result.diverged_epoch[0],
        "selected_test_top1": best.user_attrs.get(RESULT_ATTR, {}).get(TEST_TOP1),
        "oracle_test_top1": oracle and oracle[1], "oracle_trial": oracle and oracle[0],
        "train_rows": len(final_idx), "tuning_rows": len(train_idx), "val_rows": len(val_idx),
        "mode": plan.mode, "precision": precision, "search": want["search"], "protocol": as_record(protocol),
        "features": want["features"], "identity": want["identity"], "study": name, "worker": worker_id(),
        "flush_denormal": flushed, "device": str(device), "seconds": round(end - start, 3),
        "tune_seconds": round(tuned - start, 3), "final_seconds": round(end - tuned, 3), "versions": versions(),
        "predictions": final_predictions(splits, ranked), **({} if head_start is None else {"init": head_start.record}),
    }


def final_predictions(splits: Splits, ranked: Tensor) -> Predictions:
    """The test predictions of a final probe on ``splits`` (stored beside its row by
    :func:`cog_pl.results.append_row`)."""
    images = np.arange(len(splits.test_y)) if splits.test_images is None else splits.test_images
    return Predictions.of(ranked, splits.test_y, images, splits.classes)
