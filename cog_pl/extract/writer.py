"""A prediction writer that fills feature stores, row by row at each row's dataset index."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import BasePredictionWriter

from cog_pl.features.store import StoreWriter

logger = logging.getLogger(__name__)


class FeatureStoreWriter(BasePredictionWriter):
    """Writes ``{"features", "label", "index"}`` predictions into the datamodule's extraction targets.

    Expects ``trainer.datamodule.targets``: one target per predict dataloader, each with ``path``, ``rows`` and
    ``meta``. Under DDP every rank writes its own rows; rank zero finalises each store once all ranks are done. In a
    single process a store is finalised as soon as its last row is written, so a kill never costs a finished store.
    The dataset index travels inside the batch, so the sampler's order and sharding never matter.
    """

    def __init__(self) -> None:
        super().__init__(write_interval="batch")
        self.stores: list[StoreWriter] = []
        self.finished: set[int] = set()

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        targets = trainer.datamodule.targets
        dim = int(pl_module.feature_dim)
        if trainer.is_global_zero:
            self.stores = [StoreWriter(t.path, t.rows, dim) for t in targets]  # creates the files once
        trainer.strategy.barrier("feature-store-create")
        if not trainer.is_global_zero:
            self.stores = [StoreWriter(t.path, t.rows, dim) for t in targets]

    def write_on_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, prediction: Any,
                           batch_indices: Sequence[int] | None, batch: Any, batch_idx: int,
                           dataloader_idx: int = 0) -> None:
        rows = _np(prediction["index"])
        store = self.stores[dataloader_idx]
        store.write(rows, _np(prediction["features"]), _np(prediction["label"]), rows)
        if trainer.world_size == 1 and bool(np.all(store.written)):
            self._finish(trainer, pl_module, dataloader_idx)

    def _finish(self, trainer: L.Trainer, pl_module: L.LightningModule, k: int) -> None:
        target = trainer.datamodule.targets[k]
        self.stores[k].finish({**pl_module.store_meta(), **target.meta})
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
