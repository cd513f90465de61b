"""``StageProgress``: a Lightning Trainer's batches shown by :class:`cog_pl.progress.Progress` (a bar with an ETA on a
terminal, plain lines in a log), in place of Lightning's own bar, which redraws with carriage returns everywhere.

It sits in the progress floor (below the stages that train: extraction, fine-tuning, the demo's pretraining);
``cog_pl.callbacks.progress`` re-exports it."""

from __future__ import annotations

import math
from typing import Any

import lightning as L

from cog_pl.progress import Progress


def _batches(counts: Any) -> int:
    counts = counts if isinstance(counts, (list, tuple)) else [counts]
    return int(sum(c for c in counts if math.isfinite(c)))


class StageProgress(L.Callback):
    """Progress over every predict batch (all dataloaders) or every training batch of every epoch, on rank zero."""

    def __init__(self, desc: str, terminal: bool | None = None, interval: float = 30.0) -> None:
        self.desc, self.terminal, self.interval = desc, terminal, interval
        self.progress: Progress | None = None

    def _open(self, trainer: L.Trainer, total: int) -> None:
        self.progress = Progress(self.desc, total, "batches", terminal=self.terminal, interval=self.interval,
                                 enabled=trainer.is_global_zero)

    def _step(self) -> None:
        if self.progress is not None:
            self.progress.update(1)

    def _close(self) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._open(trainer, _batches(trainer.num_predict_batches))

    def on_predict_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        self._step()

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        per_epoch = _batches(trainer.num_training_batches)
        epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else 1
        total = min(per_epoch * epochs, trainer.max_steps) if trainer.max_steps > 0 else per_epoch * epochs
        self._open(trainer, total)
        self.progress.update(trainer.fit_loop.epoch_loop.batch_progress.total.completed)  # a resumed fit

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        self._step()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._close()
