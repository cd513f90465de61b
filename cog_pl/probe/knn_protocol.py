"""The k-NN protocol of a domain: k chosen on validation, then the final classifier on the train set, tested.

For each seed, the linear probe's own rows (:func:`cog_pl.data.sampling.tuning_indices`): the 20 % per-class
validation split and, for N shots, N rows per class of the other 80 % (the tuning sample). One pass of the
validation rows against the train features serves every shot setting and every k of the seed; the k with the best
validation top-1 is chosen (the smaller k among equals), every k's validation top-1 recorded. A k above the rows of a
cell's tuning sample lets every row vote: it is tried and recorded as k = those rows, the k that ran (the final
sample holds at least as many, so the test votes with it too). Then one pass of the
test features against the train features serves every cell: the full train set for all data, the linear probe's
final N-shot sample (:func:`cog_pl.data.sampling.final_indices`) otherwise. The test store is read only then: the
test labels never enter the choice of k. The same pass also gives every tried k's test top-1, recorded beside the
chosen k's with the best of them (``oracle_test_top1``): what choosing k on test would have reported.

Rows have ``method = "knn"``; a row's identity is the features' identity, the k-NN values (``ks``, temperature,
validation fraction, normalisation) and the precision (:func:`knn_identity`; the grid: :mod:`cog_pl.evaluate.knn`).
Under ``torch.distributed`` (``group``: ``cog-pl probe knn`` under torchrun) every rank holds a shard of the train
rows (:func:`cog_pl.probe.knn.neighbours` merges them) and rank 0 writes the rows.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cog_pl.data.sampling import final_indices, tuning_indices
from cog_pl.device import fits, resolve_device, resolve_precision
from cog_pl.features.pair import StorePair
from cog_pl.probe.data import l2_normalize, load_store
from cog_pl.probe.knn import KNNSettings, accuracy, neighbours, vote
from cog_pl.protocol import ProbeProtocol
from cog_pl.provenance import versions
from cog_pl.results import FORMAT_VERSION, row_key
from cog_pl.results.identity import digest, features_identity, format_key
from cog_pl.results.predictions import Predictions

log = logging.getLogger(__name__)
METHOD = "knn"
#: The precisions a k-NN pass runs in (``auto``: bf16-mixed where the device does it fast, :mod:`cog_pl.device`).
PRECISIONS = ("32-true", "bf16-mixed", "64-true")


def rows_digest(rows: np.ndarray | Tensor) -> str:
    """A short digest of a set of train rows (sorted int64), recorded so two methods' samples can be compared."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(rows, dtype=np.int64)).tobytes()).hexdigest()[:16]


def choose_k(val_top1: dict[int, float]) -> int:
    """The k of the best validation top-1; the smaller k among equals."""
    return min(val_top1, key=lambda k: (-val_top1[k], k))


@dataclass
class KNNData:
    """Normalised train features (all rows on the host: the validation queries) and labels, and the rows this rank
    searches (``database``, on the pass's device, starting at global row ``offset``)."""

    train_x: Tensor
    train_y: Tensor
    num_classes: int
    database: Tensor
    offset: int = 0
    group: Any = None

    @classmethod
    def place(cls, train_x: Tensor, train_y: Tensor, num_classes: int, device: torch.device | str,
              precision: str = "32-true", group: Any = None) -> KNNData:
        """The rows of this rank (all of them without ``group``; a contiguous shard under DDP) on ``device`` when
        they fit there (:func:`cog_pl.device.fits`), else on the host."""
        lo, hi = 0, len(train_x)
        if group is not None:
            import torch.distributed as dist

            g = None if group is True else group
            rank, world = dist.get_rank(g), dist.get_world_size(g)
            lo, hi = len(train_x) * rank // world, len(train_x) * (rank + 1) // world
        shard = train_x[lo:hi]
        per_value = 2 if precision.startswith("bf16") else shard.element_size()
        if not fits(shard.numel() * per_value, device, what="the k-NN train features"):
            device = "cpu"
        return cls(train_x, train_y, num_classes, shard.to(device), lo, group)

    def search(self, queries: Tensor, k: int, subsets: Sequence[Tensor | None],
               precision: str) -> list[tuple[Tensor, Tensor]]:
        return neighbours(queries, self.database, k, subsets, precision=precision, offset=self.offset,
                          group=self.group)


def validate(data: KNNData, seed: int, shots: Sequence[int | None], settings: KNNSettings, val_fraction: float,
             precision: str) -> dict[int | None, dict[str, Any]]:
    """For each shot setting of ``seed``: every k's validation top-1 (a k above the tuning sample's rows is tried
    as k = rows, :meth:`~cog_pl.probe.knn.KNNSettings.ks_within`), the chosen k and the rows used. Reads the train
    split only."""
    y = data.train_y.numpy()
    _, val_idx = tuning_indices(y, val_fraction, seed, None)
    tuning = {n: tuning_indices(y, val_fraction, seed, n)[0] for n in shots}
    ks = {n: settings.ks_within(len(tuning[n]), f"the tuning sample of shots={n or 'all'} seed={seed}")
          for n in shots}
    found = data.search(data.train_x[torch.from_numpy(val_idx)], max(max(k) for k in ks.values()),
                        [torch.from_numpy(tuning[n]) for n in shots], precision)
    truth = data.train_y[torch.from_numpy(val_idx)]
    out = {}
    for n, (sims, rows) in zip(shots, found):
        labels = data.train_y[rows]
        by_k = {k: accuracy(vote(sims, labels, data.num_classes, k, settings.temperature), truth)[0]
                for k in ks[n]}
        out[n] = {"val_top1_by_k": by_k, "k": choose_k(by_k), "tuning_rows": len(tuning[n]),
                  "val_rows": len(val_idx), "tuning_rows_sha256": rows_digest(tuning[n])}
    return out


def final_samples(labels: np.ndarray, cells: Sequence[tuple[int | None, int]]) -> dict[tuple, np.ndarray | None]:
    """The final classifier's train rows of each (shots, seed) cell: None (every row) for all data, else the linear
    probe's final N-shot sample."""
    return {(n, seed): None if n is None else final_indices(labels, seed, n) for n, seed in cells}


def score_test(data: KNNData, test_x: Tensor, test_y: Tensor, chosen: dict[tuple, int],
               settings: KNNSettings, precision: str,
               ranked_out: dict[tuple, Tensor] | None = None,
               tried: dict[tuple, Sequence[int]] | None = None) -> dict[tuple, dict[str, Any]]:
    """Test top-1/top-5 of each (shots, seed) cell with its chosen k, from one pass over the test features; with
    ``ranked_out``, each cell's ranked classes (the top 5 of each test image) are put there too. ``tried``: the ks
    each cell's validation tried; each one's test top-1 is recorded too (``test_top1_by_k``) and the best of them
    (``oracle_test_top1``, ``oracle_k``: the smaller k among equals): what choosing k on test would have reported,
    beside the chosen k's (``selected_test_top1``, the cell's ``test_top1``).
    The neighbours of the one pass serve every k (a smaller k's are a prefix of the largest's)."""
    samples = final_samples(data.train_y.numpy(), list(chosen))
    key = {cell: "all" if rows is None else cell for cell, rows in samples.items()}  # all data: one subset
    distinct = list(dict.fromkeys(key.values()))
    subsets = [None if d == "all" else torch.from_numpy(samples[d]) for d in distinct]
    found = dict(zip(distinct, data.search(test_x, max(settings.ks), subsets, precision)))
    out = {}
    for cell, k in chosen.items():
        sims, rows = found[key[cell]]
        ranked = vote(sims, data.train_y[rows], data.num_classes, k, settings.temperature)
        top1, top5 = accuracy(ranked, test_y)
        train = samples[cell]
        if ranked_out is not None:
            ranked_out[cell] = ranked
        out[cell] = {"test_top1": top1, "test_top5": top5,
                     "train_rows": len(data.train_y) if train is None else len(train),
                     "train_rows_sha256": rows_digest(np.arange(len(data.train_y)) if train is None else train)}
        if tried is not None:
            by_k = {j: top1 if j == k else accuracy(vote(sims, data.train_y[rows], data.num_classes, j,
                                                         settings.temperature), test_y)[0] for j in tried[cell]}
            best = choose_k(by_k)
            out[cell].update({"test_top1_by_k": {str(j): v for j, v in by_k.items()}, "oracle_test_top1": by_k[best],
                              "oracle_k": best, "selected_test_top1": top1})
    return out


def knn_identity(features: dict | None, settings: KNNSettings, protocol: ProbeProtocol, precision: str) -> dict:
    """The values a k-NN row's numbers depend on (``knn``, ``precision``, ``features``) and their digest
    (``identity``)."""
    values = {"knn": {**settings.as_record(), "val_fraction": protocol.val_fraction,
                      "normalize": protocol.normalize}, "precision": precision, "features": features}
    return {**values, "identity": digest(values)}


def knn_rows(pair: StorePair, cells: Sequence[tuple[int | None, int]], *, model: str, domain: str,
             protocol: ProbeProtocol, settings: KNNSettings, device: torch.device | str, precision: str,
             group: Any = None) -> list[dict[str, Any]]:
    """The result rows of ``cells`` ((shots, seed) pairs) on the stores of ``pair``: validation passes (one per
    seed), then the test store is read and one test pass serves every cell."""
    start = time.perf_counter()
    x, y = load_store(pair.train, "cpu")
    x = l2_normalize(x) if protocol.normalize else x
    data = KNNData.place(x, y, pair.num_classes, device, precision, group)
    chosen: dict[tuple, dict[str, Any]] = {}
    for seed in dict.fromkeys(s for _, s in cells):
        shots = [n for n, s in cells if s == seed]
        for n, result in validate(data, seed, shots, settings, protocol.val_fraction, precision).items():
            chosen[n, seed] = result
    validated = time.perf_counter()
    test_x, test_y = load_store(pair.test, "cpu")  # read only now: the choice of k is made
    test_x = l2_normalize(test_x) if protocol.normalize else test_x
    ranked: dict[tuple, Tensor] = {}
    tested = score_test(data, test_x, test_y, {c: r["k"] for c, r in chosen.items()}, settings, precision, ranked,
                        tried={c: list(r["val_top1_by_k"]) for c, r in chosen.items()})
    end = time.perf_counter()
    ident = knn_identity(features_identity(pair), settings, protocol, precision)
    world = 1
    if group is not None:
        import torch.distributed as dist

        world = dist.get_world_size(None if group is True else group)
    rows = []
    for n, seed in cells:
        val = chosen[n, seed]
        rows.append({
            "format_version": FORMAT_VERSION, "model": model, "method": METHOD, "domain": domain, "shots": n,
            "seed": seed, "k": val["k"], "val_top1": val["val_top1_by_k"][val["k"]],
            "val_top1_by_k": {str(k): v for k, v in val["val_top1_by_k"].items()},
            **{k: v for k, v in val.items() if k not in ("k", "val_top1_by_k")}, **tested[n, seed],
            **ident, "device": str(data.database.device), "world_size": world,
            "seconds": round(end - start, 3), "validation_seconds": round(validated - start, 3),
            "test_seconds": round(end - validated, 3), "cells_in_pass": len(cells), "versions": versions(),
            "predictions": Predictions.of(ranked[n, seed], test_y, pair.test_images, pair.classes)})
        log.info("%s: k=%d (val top-1 %.2f) -> test top-1 %.2f", format_key(row_key(rows[-1])), val["k"],
                 rows[-1]["val_top1"], rows[-1]["test_top1"])
    return rows


def resolve_knn_precision(precision: str | None, device: torch.device | str) -> str:
    """``auto`` (None) is bf16-mixed on a GPU that does bfloat16 products fast (:func:`cog_pl.device.resolve_precision`,
    whose product returns float32 similarities there), and 32-true on the host: a CPU's bfloat16 product returns
    bfloat16 similarities, whose ties make the exact tie-breaking slower than the float32 pass and move top-5 sets
    (``benchmarks/bench_knn.py``)."""
    if (precision or "auto") == "auto" and resolve_device(device).type != "cuda":
        return "32-true"
    return resolve_precision(precision or "auto", device, PRECISIONS)


def launched_group(device: torch.device) -> Any:
    """The default process group when this process was started by ``torchrun`` (``WORLD_SIZE`` > 1; initialised
    here with NCCL on CUDA, gloo on the host, when not yet), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return True
