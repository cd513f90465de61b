"""The whole probe protocol of a domain: tune, retrain with the best (lr, wd), test; for every seed and shot count.

``probe`` runs one (seed, shots) cell and returns its result row; ``run_protocol`` runs the grid of a domain and
appends rows to a results file, skipping rows that exist. Studies are named after the cell and a hash of the
protocol values and search plan, so a changed protocol never resumes a study made under other values.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
from optuna.storages import BaseStorage
from torch import Tensor

from cog_pl.device import fits, resolve_device
from cog_pl.features.pair import StorePair, open_pair
from cog_pl.probe.data import ProbeData, final_indices, l2_normalize, load_store, sub_seed, tuning_indices
from cog_pl.probe.storage import opened
from cog_pl.probe.study import open_study
from cog_pl.probe.tuner import RESULT_ATTR, SearchPlan, best_trial, run_search, train_probe
from cog_pl.protocol import ProbeProtocol, as_record
from cog_pl.provenance import versions
from cog_pl.results import FORMAT_VERSION, append_row, read_rows, row_key

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

    @classmethod
    def load(cls, root: str | os.PathLike | StorePair, normalize: bool = True,
             device: torch.device | str = "cpu") -> Splits:
        """Read the train and test stores of ``root`` (a store root, opened and checked by
        :func:`~cog_pl.features.pair.open_pair`, or a pair it opened); features go to ``device``."""
        pair = root if isinstance(root, StorePair) else open_pair(root)
        (tx, ty), (sx, sy) = load_store(pair.train, device), load_store(pair.test, device)
        if normalize:
            tx, sx = l2_normalize(tx), l2_normalize(sx)
        return cls(tx, ty, sx, sy, pair.num_classes, pair.model, pair.domain)

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
               plan: SearchPlan, device: str | torch.device = "cpu") -> str:
    """Name of the study of one cell; the hash changes with any protocol value, the search mode or the precision the
    trials run with on ``device``, so a study never mixes precisions."""
    values = {"protocol": as_record(protocol), "mode": plan.mode, "startup": plan.startup_trials,
              "batch": plan.trial_batch}
    precision = plan.precision_on(device)
    if precision != "32-true":  # float32 studies keep the names they had before the option existed
        values["precision"] = precision
    digest = hashlib.sha1(json.dumps(values, sort_keys=True).encode()).hexdigest()[:10]
    return f"{model}/{domain}/shots-{shots or 'all'}/seed-{seed}/{digest}"


def set_flush_denormal(enabled: bool) -> bool:
    """Flush subnormal floats to zero on the CPU: softmax tails of confident heads make BLAS crawl otherwise."""
    return bool(enabled and torch.set_flush_denormal(True))


def probe(splits: Splits, *, seed: int, shots: int | None, storage: str | os.PathLike | BaseStorage,
          model: str = "model",
          domain: str = "domain", protocol: ProbeProtocol | None = None, plan: SearchPlan | None = None,
          device: str | torch.device = "cpu", name: str | None = None, flush_denormal: bool = True) -> dict[str, Any]:
    """Tune, retrain and test one probe; returns its result row. Test data never enters tuning or sampling.

    ``storage``: a path or URL (opened here and closed when tuning ends) or a storage object (left open)."""
    protocol, plan = protocol or ProbeProtocol(), plan or SearchPlan()
    flushed = set_flush_denormal(flush_denormal)
    start = time.perf_counter()
    train_idx, val_idx = tuning_indices(splits.train_y, protocol.val_fraction, seed, shots)
    tuning = ProbeData(splits.train_x[train_idx], splits.train_y[train_idx], splits.train_x[val_idx],
                       splits.train_y[val_idx], splits.num_classes).to(device)
    name = name or study_name(model, domain, shots, seed, protocol, plan, device)
    with opened(storage) as study_storage:
        study = open_study(study_storage, name, seed, plan.startup_trials)
        run_search(study, tuning, protocol, plan, seed)
        best = best_trial(study)
    del tuning
    tuned = time.perf_counter()
    final_idx = final_indices(splits.train_y, seed, shots)
    x, y = (splits.train_x, splits.train_y) if shots is None else (splits.train_x[final_idx], splits.train_y[final_idx])
    final = ProbeData(x, y, splits.test_x, splits.test_y, splits.num_classes).to(device)  # all data: no copy
    lr, wd = best.params["lr"], best.params["wd"]
    precision = plan.precision_on(device)
    result = train_probe(final, [lr], [wd], protocol=protocol, seeds=[sub_seed(seed, 20)],
                         perm_seed=sub_seed(seed, 21), precision=precision)
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
        "study": name,
        "flush_denormal": flushed, "device": str(device), "seconds": round(end - start, 3),
        "tune_seconds": round(tuned - start, 3), "final_seconds": round(end - tuned, 3), "versions": versions(),
    }


def run_protocol(root: str | os.PathLike, results: str | os.PathLike, *, model: str | None = None,
                 domain: str | None = None,
                 storage: str | os.PathLike | BaseStorage, protocol: ProbeProtocol | None = None,
                 plan: SearchPlan | None = None,
                 seeds: tuple[int, ...] | None = None, shots: tuple[int | None, ...] | None = None,
                 device: str | torch.device = "cpu", restart_unfinished: bool = False) -> list[dict[str, Any]]:
    """Every (shots, seed) cell of a domain (All and each N of the protocol by default), rows appended as they end.

    ``model`` and ``domain`` default to the stores' (their meta, else the folder names).
    ``restart_unfinished``: a cell whose study exists but whose row does not (a single worker killed mid-cell) is
    tuned again from an empty study, so the resumed run ends with exactly the rows of an uninterrupted one. Leave it
    off when several workers share the studies: they resume each other's studies instead.
    """
    protocol = protocol or ProbeProtocol()
    seeds = protocol.seeds if seeds is None else seeds
    shots = (None, *protocol.shots) if shots is None else shots
    done = {row_key(r) for r in read_rows(results)}
    plan = plan or SearchPlan()
    splits = Splits.for_probes(root, device, protocol, plan)
    model = model or splits.model
    domain = domain or splits.domain
    rows = []
    with opened(storage) as grid_storage:  # opened once for the whole grid
        for n in shots:
            for seed in seeds:
                if (model, METHOD, domain, n, seed) in done:
                    log.info("skip %s %s shots=%s seed=%s: row exists", model, domain, n, seed)
                    continue
                if restart_unfinished:
                    _drop_study(grid_storage, study_name(model, domain, n, seed, protocol, plan, device))
                row = probe(splits, seed=seed, shots=n, storage=grid_storage, model=model, domain=domain,
                            protocol=protocol, plan=plan, device=device)
                append_row(results, row)
                rows.append(row)
    return rows


def _drop_study(storage: BaseStorage, name: str) -> None:
    import optuna

    try:
        optuna.delete_study(study_name=name, storage=storage)
        log.info("restarting the unfinished study %s", name)
    except KeyError:
        pass
