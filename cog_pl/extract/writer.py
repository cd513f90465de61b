"""A prediction writer that fills feature stores, row by row at each row's dataset index."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import BasePredictionWriter

from cog_pl.features.missing import clear_missing, mark_missing
from cog_pl.features.store import StoreError, StoreWriter

logger = logging.getLogger(__name__)


class FeatureStoreWriter(BasePredictionWriter):
    """Writes ``{"features", "label", "index"}`` predictions into the datamodule's extraction targets.

    Expects an :class:`~cog_pl.extract.datamodule.ExtractionDataModule`: its ``targets`` (one per predict
    dataloader, each with ``path``, ``rows`` and ``meta``) and ``open_writer``/``identity`` (the writer of a target,
    and the meta it finishes with, both checked against what made rows already written). Under DDP every rank writes
    its own rows; rank zero finalises each store once all ranks are done. In a single process a store is finalised
    as soon as its last row is written, so a kill never costs a finished store.
    The dataset index travels inside the batch, so the sampler's order and sharding never matter; so do the rows a
    skipping dataset could not read (``"skipped"``), which are recorded as missing (:mod:`cog_pl.features.missing`).
    """

    def __init__(self) -> None:
        super().__init__(write_interval="batch")
        self.stores: list[StoreWriter] = []
        self.finished: set[int] = set()

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        dim, model_meta = int(pl_module.feature_dim), pl_module.store_meta()
        if trainer.is_global_zero:  # creates the files once (and records what makes the rows)
            self.stores = [dm.open_writer(t, model_meta, dim, first=True) for t in dm.targets]
        trainer.strategy.barrier("feature-store-create")
        if not trainer.is_global_zero:
            self.stores = [dm.open_writer(t, model_meta, dim, first=False) for t in dm.targets]

    def write_on_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, prediction: Any,
                           batch_indices: Sequence[int] | None, batch: Any, batch_idx: int,
                           dataloader_idx: int = 0) -> None:
        rows = _np(prediction["index"])
        store = self.stores[dataloader_idx]
        if len(rows):
            store.write(rows, _np(prediction["features"]), _np(prediction["label"]), rows)
            clear_missing(store, rows)
        if "skipped" in prediction:  # images the dataset could not read (on_error="skip"), carried by the batch
            self._mark_missing(trainer.datamodule.targets[dataloader_idx], store, prediction["skipped"])
        if trainer.world_size == 1 and bool(np.all(store.written)):
            self._finish(trainer, pl_module, dataloader_idx)

    @staticmethod
    def _mark_missing(target: Any, store: StoreWriter, skipped: dict[str, Any]) -> None:
        """Record the skipped rows as missing; past the target's cap (``max_skipped``) the extraction fails."""
        count = mark_missing(store, _np(skipped["index"]), _np(skipped["label"]), skipped["path"], skipped["error"])
        cap = getattr(target, "max_missing", 0)
        if count > cap:
            raise StoreError(f"{target.path}: {count} of {target.rows} images unreadable, more than max_skipped "
                             f"allows ({cap}); the last: {skipped['path'][-1]}: {skipped['error'][-1]} (a damaged copy "
                             "or mount? `cog-pl data check --decode` lists them)")
        for path, error in zip(skipped["path"], skipped["error"]):
            logger.warning("skipped unreadable image %s: %s", path, error)

    def _finish(self, trainer: L.Trainer, pl_module: L.LightningModule, k: int) -> None:
        target = trainer.datamodule.targets[k]
        self.stores[k].finish(trainer.datamodule.identity(pl_module.store_meta(), target.meta))
        self.finished.add(k)
        logger.info("wrote %s (%d rows)", target.path, target.rows)

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.strategy.barrier("feature-store-finalize")
        if trainer.is_global_zero:
            for k in range(len(self.stores)):
                if k not in self.finished:
                    self._finish(trainer, pl_module, k)
        trainer.strategy.barrier("feature-store-done")


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
