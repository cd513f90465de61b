"""``LinearProbe``: the protocol's classifier as a LightningModule (normalise, one linear layer, cross-entropy).

SGD with momentum and the per-epoch cosine rule of ``cog_pl.probe.schedule`` (a ``LambdaLR`` stepped after every
epoch). Top-1 and top-5 are logged as ``"{stage}/top1"`` and ``"{stage}/top5"``. A batch whose loss is not finite is
skipped and stops the fit (the published loop's early stop); ``diverged_epoch`` records when.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from cog_pl.probe.schedule import cosine_factor
from cog_pl.protocol import ProbeProtocol

_DEFAULTS = ProbeProtocol()


class LinearProbe(L.LightningModule):
    """Linear classifier on L2-normalised features, trained as the probe protocol prescribes."""

    def __init__(
        self,
        num_classes: int,
        feature_dim: int,
        lr: float = 1.0,
        weight_decay: float = 0.0,
        momentum: float = _DEFAULTS.momentum,
        epochs: int | None = None,
        normalize: bool = _DEFAULTS.normalize,
    ) -> None:
        """``epochs`` is the E of the cosine rule; by default the trainer's ``max_epochs``."""
        super().__init__()
        self.save_hyperparameters()
        self.linear = torch.nn.Linear(feature_dim, num_classes)
        self.diverged_epoch: int | None = None
        self.metrics = torch.nn.ModuleDict({
            f"{stage}_top{k}": MulticlassAccuracy(num_classes, top_k=min(k, num_classes), average="micro")
            for stage in ("train", "val", "test") for k in (1, 5)
        })

    def forward(self, x: Tensor) -> Tensor:
        x = x.float()
        return self.linear(F.normalize(x, dim=1) if self.hparams.normalize else x)

    def _schedule_epochs(self) -> int:
        epochs = self.hparams.epochs or (self.trainer.max_epochs if self._trainer is not None else None)
        if not epochs or epochs < 0:
            raise ValueError("LinearProbe needs epochs, or a trainer with max_epochs")
        return int(epochs)

    def _step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits.float(), y)
        for k in (1, 5):
            metric = self.metrics[f"{stage}_top{k}"]
            metric(logits, y)
            self.log(f"{stage}/top{k}", metric, on_step=False, on_epoch=True, prog_bar=k == 1)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor | None:
        loss = self._step(batch, "train")
        if not torch.isfinite(loss):
            if self.diverged_epoch is None:
                self.diverged_epoch = self.current_epoch
            self.trainer.should_stop = True
            return None  # skip the update, as the published loop does
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum,
                              weight_decay=self.hparams.weight_decay)
        epochs = self._schedule_epochs()
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: cosine_factor(epoch, epochs))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
