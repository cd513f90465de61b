"""A prediction writer that fills feature stores, row by row at each row's dataset index."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from cog_pl.errors import StoreError
from cog_pl.extract.stores import ExtractionPlan
from cog_pl.features.missing import clear_missing, mark_missing
from cog_pl.features.store import StoreWriter

logger = logging.getLogger(__name__)


class FeatureStoreWriter(BasePredictionWriter):
    """Writes ``{"features", "label", "index"}`` predictions into the stores of the datamodule's plan.

    Expects an :class:`~cog_pl.extract.datamodule.ExtractionDataModule`, whose ``plan``
    (:class:`~cog_pl.extract.stores.ExtractionPlan`, made at its ``setup``) it is handed and follows without deciding
    anything: it settles the plan on rank zero (finishes the stores it says are ready), opens the writers of its
    ``targets`` (one per predict dataloader) and finishes each with its ``meta``. Under DDP every rank writes
    its own rows; rank zero finalises each store once all ranks are done. In a single process a store is finalised
    as soon as its last row is written, so a kill never costs a finished store.
    The dataset index travels inside the batch, so the sampler's order and sharding never matter; so do the rows a
    skipping dataset could not read (``"skipped"``), which are recorded as missing (:mod:`cog_pl.features.missing`).

    Rows are written by one background thread, in batch order, so the device never waits on the disk: on CUDA a
    batch's features are copied into pinned host memory without blocking and the thread waits for the copy. An error
    of the thread (a full disk, too many unreadable images) is raised in the Trainer's thread at the next batch or at
    the end.
    """

    def __init__(self) -> None:
        super().__init__(write_interval="batch")
        self.plan: ExtractionPlan | None = None
        self.stores: list[StoreWriter] = []
        self.finished: set[int] = set()
        self.jobs: _Jobs | None = None
        self._limit: int | float | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """After the datamodule's ``setup``: take its plan, settle it (rank zero: finalise the stores an interrupted
        run wrote completely), and skip the prediction loop when no store has rows left (Lightning would warn about
        an empty list of loaders)."""
        if stage != "predict":
            return
        dm = trainer.datamodule
        self.plan = plan = dm.plan
        if trainer.is_global_zero:
            plan.settle(int(pl_module.feature_dim))
        if not plan.targets:
            logger.info("nothing to extract: all %d stores under %s are complete", len(plan.stores),
                        dm.out / dm.model_name)
            self._limit, trainer.limit_predict_batches = trainer.limit_predict_batches, 0
            trainer.predict_loop.max_batches = []  # a Trainer that predicted before: no batch left from that run

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._limit is not None:  # the Trainer as it was, for a later predict with other data
            trainer.limit_predict_batches, self._limit = self._limit, None

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.predict_loop.return_predictions = False  # the features are written, not also kept in memory
        plan, dim = self.plan, int(pl_module.feature_dim)
        self.jobs = _Jobs()
        if trainer.is_global_zero:  # creates the files once (and records what makes the rows)
            self.stores = [plan.writer(t, dim, first=True) for t in plan.targets]
        trainer.strategy.barrier("feature-store-create")
        if not trainer.is_global_zero:
            self.stores = [plan.writer(t, dim, first=False) for t in plan.targets]

    def write_on_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, prediction: Any,
                           batch_indices: Sequence[int] | None, batch: Any, batch_idx: int,
                           dataloader_idx: int = 0) -> None:
        features, labels, index = (_to_host(prediction[k]) for k in ("features", "label", "index"))
        ready = None
        if prediction["features"].device.type == "cuda":  # the thread waits for the copies, the Trainer does not
            ready = torch.cuda.Event()
            ready.record()
        self.jobs.submit(self._write, trainer, dataloader_idx, index, features, labels, ready,
                         prediction.get("skipped"))

    def _write(self, trainer: L.Trainer, dataloader_idx: int, index: Any, features: Any, labels: Any,
               ready: Any, skipped: dict[str, Any] | None) -> None:
        if ready is not None:
            ready.synchronize()
        prediction = {"index": index, "features": features, "label": labels}
        if skipped is not None:
            prediction["skipped"] = skipped
        rows = _np(prediction["index"])
        store = self.stores[dataloader_idx]
        if len(rows):
            store.write(rows, _np(prediction["features"]), _np(prediction["label"]), rows)
            clear_missing(store, rows)
        if "skipped" in prediction:  # images the dataset could not read (on_error="skip"), carried by the batch
            self._mark_missing(self.plan.targets[dataloader_idx], store, prediction["skipped"])
        if trainer.world_size == 1 and bool(np.all(store.written)):
            self._finish(trainer, dataloader_idx)

    @staticmethod
    def _mark_missing(target: Any, store: StoreWriter, skipped: dict[str, Any]) -> None:
        """Record the skipped rows as missing; past the target's cap (``max_skipped``) the extraction fails."""
        count = mark_missing(store, _np(skipped["index"]), _np(skipped["label"]), skipped["path"], skipped["error"])
        cap = target.max_missing
        if count > cap:
            raise StoreError(f"{target.path}: {count} of {target.rows} images unreadable, more than max_skipped "
                             f"allows ({cap}); the last: {skipped['path'][-1]}: {skipped['error'][-1]} (a damaged copy "
                             "or mount? `cog-pl data check --decode` lists them)")
        for path, error in zip(skipped["path"], skipped["error"]):
            logger.warning("skipped unreadable image %s: %s", path, error)

    def _finish(self, trainer: L.Trainer, k: int) -> None:
        target = self.plan.targets[k]
        self.stores[k].finish(dict(target.meta))
        self.finished.add(k)
        logger.debug("finished %s (%d rows)", target.path, target.rows)  # the store logs its own write

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.jobs is not None:
            self.jobs.join()
        trainer.strategy.barrier("feature-store-finalize")
        if trainer.is_global_zero:
            for k in range(len(self.stores)):
                if k not in self.finished:
                    self._finish(trainer, k)
        trainer.strategy.barrier("feature-store-done")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if self.jobs is not None:  # the rows queued before the failure are written: a resumed run skips them
            self.jobs.join(raise_error=False)


class _Jobs:
    """One thread running jobs in submission order; its first error is raised by :meth:`submit` or :meth:`join`."""

    def __init__(self, depth: int = 8) -> None:
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="feature-store-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (job := self.queue.get()) is not None:
            if self.error is None:
                try:
                    job[0](*job[1:])
                except BaseException as err:  # raised in the Trainer's thread
                    self.error = err

    def submit(self, *job: Any) -> None:
        self._raise()
        self.queue.put(job)

    def join(self, raise_error: bool = True) -> None:
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()
        if raise_error:
            self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def _to_host(x: Any) -> Any:
    """A device tensor copied into pinned host memory without blocking (a host tensor as it is)."""
    if not isinstance(x, torch.Tensor) or x.device.type != "cuda":
        return x.detach() if isinstance(x, torch.Tensor) else x
    host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
    return host.copy_(x.detach(), non_blocking=True)


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
