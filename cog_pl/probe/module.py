"""``LinearProbe``: the protocol's classifier as a LightningModule (normalise, one linear layer, cross-entropy).

SGD with momentum and the per-epoch cosine rule of ``cog_pl.probe.schedule`` (a ``LambdaLR`` stepped after every
epoch). Top-1 and top-5 are logged as ``"{stage}/top1"`` and ``"{stage}/top5"`` (fractions). A batch whose loss is not
finite is skipped and stops the fit (the published loop's early stop); ``diverged_epoch`` records when.

A probe that departs from the protocol (:class:`~cog_pl.protocol.ProbeProtocol`: another optimizer or schedule, as
LightningCLI's ``--optimizer``/``--lr_scheduler`` put in place, other momentum, epochs, batch size or no
normalisation) says so: ``protocol_deviations`` (``{what: "this run's (protocol: ...)"}``) is logged once as a
warning, written to the loggers' hyperparameters and into checkpoints (restored with them), and its count is logged
beside the accuracies as ``"{stage}/protocol_deviations"`` (0 for a probe of the protocol).
"""

from __future__ import annotations

import logging

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from cog_pl.errors import CogError
from cog_pl.probe.schedule import cosine_factor
from cog_pl.protocol import ProbeProtocol

_DEFAULTS = ProbeProtocol()
log = logging.getLogger(__name__)
_WARNED: set[tuple] = set()  # deviations already warned about in this process (an Optuna study fits many probes)


class LinearProbe(L.LightningModule):
    """Linear classifier on L2-normalised features, trained as the probe protocol prescribes (SGD with momentum, the
    per-epoch cosine rule of :mod:`cog_pl.probe.schedule`); logs ``{stage}/top1`` and ``{stage}/top5``.

    Args:
        num_classes: the domain's concepts (``FeatureDataModule.num_classes``).
        feature_dim: the features' size (``FeatureDataModule.feature_dim``).
        lr: the learning rate, the value a trial of the search tunes.
        weight_decay: the weight decay, the other tuned value.
        momentum: SGD's momentum (the protocol's).
        epochs: the E of the cosine rule; by default the Trainer's ``max_epochs``.
        normalize: L2-normalise the features before the layer (the protocol does).

    Example:
        >>> import lightning as L
        >>> from cog_pl import FeatureDataModule, LinearProbe
        >>> data = FeatureDataModule("features/resnet50/cog_l3", stage_mode="final")  # doctest: +SKIP
        >>> probe = LinearProbe(data.num_classes, data.feature_dim, lr=1.0, weight_decay=1e-6)  # doctest: +SKIP
        >>> L.Trainer(max_epochs=100).fit(probe, data)  # doctest: +SKIP
    """

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
        super().__init__()
        self.save_hyperparameters()
        self.linear = torch.nn.Linear(feature_dim, num_classes)
        self.diverged_epoch: int | None = None
        self.protocol_deviations: dict[str, str] = {}
        self._scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
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
            raise CogError("LinearProbe needs epochs, or a trainer with max_epochs")
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
        if stage != "train":
            self.log(f"{stage}/protocol_deviations", float(len(self.protocol_deviations)), on_step=False,
                     on_epoch=True, sync_dist=True, reduce_fx="max")
        return loss

    def deviations(self) -> dict[str, str]:
        """How this fit departs from the probe protocol (empty: it follows it); needs the Trainer's optimizers."""
        p, hp, out = _DEFAULTS, self.hparams, {}
        optimizers = self.trainer.optimizers
        opt = optimizers[0] if len(optimizers) == 1 else None
        if opt is None or type(opt) is not torch.optim.SGD or opt.defaults.get("nesterov"):
            names = ", ".join(type(o).__name__ for o in optimizers) or "none"
            out["optimizer"] = f"{names} (protocol: SGD, momentum {p.momentum})"
        elif opt.defaults.get("momentum") != p.momentum:
            out["momentum"] = f"{opt.defaults.get('momentum')} (protocol: {p.momentum})"
        schedulers = [c.scheduler for c in self.trainer.lr_scheduler_configs]
        if schedulers != [self._scheduler] or self._scheduler is None:
            names = ", ".join(type(s).__name__ for s in schedulers) or "none"
            out["lr_scheduler"] = f"{names} (protocol: the cosine rule per epoch)"
        if self._schedule_epochs() != p.epochs:
            out["epochs"] = f"{self._schedule_epochs()} (protocol: {p.epochs})"
        if bool(hp.normalize) != p.normalize:
            out["normalize"] = f"{hp.normalize} (protocol: {p.normalize})"
        batch = getattr(self.trainer.datamodule, "batch_size", None)
        if batch is not None and batch != p.batch_size:
            out["batch_size"] = f"{batch} (protocol: {p.batch_size})"
        return out

    def on_fit_start(self) -> None:
        self.protocol_deviations = self.deviations()
        if not self.protocol_deviations:
            return
        for lg in self.loggers:
            lg.log_hyperparams({"protocol_deviations": self.protocol_deviations})
        key = tuple(sorted(self.protocol_deviations.items()))
        if key not in _WARNED and self.trainer.is_global_zero:
            _WARNED.add(key)
            log.warning("LinearProbe departs from the probe protocol: %s (recorded as protocol_deviations)",
                        "; ".join(f"{k} {v}" for k, v in self.protocol_deviations.items()))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["protocol_deviations"] = dict(self.protocol_deviations)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.protocol_deviations = dict(checkpoint.get("protocol_deviations", {}))

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
        self._scheduler = sched  # the protocol's; another in its place is a deviation
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
