"""``FineTuneClassifier``: the backbone unfrozen with a new linear head (the paper's App. C.2 comparison).

A standard recipe, every part configurable: SGD (momentum, nesterov) or AdamW; linear warm-up then cosine decay,
stepped per optimisation step; label smoothing; a smaller learning rate for the backbone than for the new head;
batch-level augmentation (random resized crop and horizontal flip, per sample, on the already decoded tensors, so
the image datamodules are shared with extraction). The whole backbone trains, BatchNorm statistics included (the
registry builds backbones frozen and in eval mode, for extraction). ``channels_last`` runs the convolutions in NHWC
memory format (faster on GPUs and on CPUs with oneDNN); mixed precision comes from the Trainer's ``precision``.
Metrics ``val/*`` and ``test/*`` (``loss``, ``top1``, ``top5`` as fractions; validation runs on loaders the user gives,
``trainer.fit(model, train, val)``: the image datamodules have train and test splits only); the test pass also keeps
each image's top 5 classes (:meth:`FineTuneClassifier.test_predictions`), stored beside the result row. A diverging
run stops with :class:`DivergedError`, naming the epoch, the step and the learning rates: a training loss that is not
finite, or an epoch's mean training loss above :data:`DIVERGED_FACTOR` times a uniform guess's (``ln C``), which no run
that learns reaches (a wrong number is worse than a crash: a diverged model tests at chance, with a test loss of 1e11).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from cog_pl.errors import CogError, DivergedError
from cog_pl.metrics import topk_first
from cog_pl.models import build_backbone
from cog_pl.models.module import BackboneModule


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Multiplier of the base learning rate: linear warm-up over ``warmup`` steps, then cosine to 0 at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def augment(images: torch.Tensor, scale: tuple[float, float] = (0.35, 1.0), flip: bool = True,
            generator: torch.Generator | None = None, mode: str = "bilinear") -> torch.Tensor:
    """Random resized crop (aspect 3/4..4/3) and horizontal flip, drawn per sample, output size unchanged
    (``mode``: the crop's resampling, ``"bilinear"`` or ``"bicubic"``, antialiased)."""
    b, _, h, w = images.shape
    out = torch.empty_like(images)
    for i in range(b):
        area = h * w * torch.empty(1).uniform_(*scale, generator=generator).item()
        ratio = math.exp(torch.empty(1).uniform_(math.log(3 / 4), math.log(4 / 3), generator=generator).item())
        ch = max(1, min(h, round(math.sqrt(area / ratio))))
        cw = max(1, min(w, round(math.sqrt(area * ratio))))
        top = int(torch.randint(0, h - ch + 1, (1,), generator=generator))
        left = int(torch.randint(0, w - cw + 1, (1,), generator=generator))
        crop = images[i: i + 1, :, top: top + ch, left: left + cw]
        crop = F.interpolate(crop, size=(h, w), mode=mode, align_corners=False, antialias=True)
        if flip and torch.rand(1, generator=generator).item() < 0.5:
            crop = crop.flip(-1)
        out[i] = crop[0]
    return out


#: Lightning's notice for a ``validation_step`` without validation data: the image datamodules have no val split by
#: design (the paper fine-tunes on the whole train split), so the package's own fits silence it (:func:`no_val_split`).
NO_VAL_NOTICE = r"You defined a `validation_step` but have no `val_dataloader`"


@contextlib.contextmanager
def no_val_split() -> Iterator[None]:
    """A fit on data without a val split, by design: Lightning's notice about it (:data:`NO_VAL_NOTICE`) is silenced
    within, and nothing else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=NO_VAL_NOTICE)
        yield


#: An epoch's mean training loss above this many times ``ln(num_classes)`` (a uniform guess's) stops the run.
DIVERGED_FACTOR = 10.0


class FineTuneClassifier(BackboneModule):
    """Fine-tune a registry backbone (``model``, optionally from ``checkpoint``) with a new head of ``num_classes``.

    Args:
        model: a backbone name (:func:`~cog_pl.models.list_backbones`, ``timm:<name>``, ...).
        num_classes: the domain's concepts: the size of the new head.
        checkpoint: the pretrained weights to start from (the authors' layout for paper models); random otherwise.
        optimizer: ``"sgd"`` (Nesterov momentum) or ``"adamw"``.
        lr: the head's learning rate, at the peak of the schedule (linear warm-up, then cosine to 0).
        backbone_lr_scale: the backbone's learning rate as a fraction of ``lr``.
        weight_decay: the optimizer's weight decay.
        momentum: SGD's momentum.
        warmup_epochs: the linear warm-up, in epochs.
        label_smoothing: the cross-entropy's label smoothing.
        augment: random resized crops and horizontal flips of the training images.
        crop_scale: the crops' area range, as fractions of the image.
        prefix: overrides the checkpoint's key prefix (:func:`~cog_pl.models.build_backbone`).
        channels_last: run convolutions in NHWC memory format.
        trust_checkpoint: read a checkpoint that safe loading refuses: its code runs.
        key_map: regex -> replacement renames of the checkpoint's keys (:func:`~cog_pl.models.build_backbone`).
        in_order: map the checkpoint's tensors by position (same architecture, other names).

    Example:
        >>> import lightning as L
        >>> from cog_pl import CoGLevelDataModule, FineTuneClassifier
        >>> data = CoGLevelDataModule("cog_l3", "/data/in21k", transform="resnet50")  # doctest: +SKIP
        >>> model = FineTuneClassifier("resnet50", len(data.classes), "resnet50-19c8e357.pth")  # doctest: +SKIP
        >>> L.Trainer(max_epochs=30, precision="bf16-mixed").fit(model, data)  # doctest: +SKIP
    """

    def __init__(self, model: str = "resnet50", num_classes: int = 1000, checkpoint: str | None = None,
                 optimizer: str = "sgd", lr: float = 0.01, backbone_lr_scale: float = 0.1,
                 weight_decay: float = 1e-4, momentum: float = 0.9, warmup_epochs: float = 1.0,
                 label_smoothing: float = 0.1, augment: bool = True, crop_scale: tuple[float, float] = (0.35, 1.0),
                 prefix: str | None = None, channels_last: bool = False, trust_checkpoint: bool = False,
                 key_map: dict[str, str] | None = None, in_order: bool = False) -> None:
        super().__init__()
        if optimizer not in ("sgd", "adamw"):
            raise CogError(f"optimizer={optimizer!r}; expected 'sgd' or 'adamw'")
        if not 0 < crop_scale[0] <= crop_scale[1] <= 1:
            raise CogError(f"crop_scale={tuple(crop_scale)!r}; expected 0 < min <= max <= 1")
        self.save_hyperparameters()
        self.set_backbone(build_backbone(model, checkpoint, prefix, key_map, in_order, trust_checkpoint),
                          channels_last)
        self.net.requires_grad_(True).train()  # built for extraction: frozen, in eval mode
        self.head = nn.Linear(self.backbone.spec.feature_dim, num_classes)
        nn.init.zeros_(self.head.bias)
        self._epoch_loss, self._epoch_rows = torch.zeros(()), 0
        self.metrics = nn.ModuleDict({f"{stage}_{k}": MulticlassAccuracy(num_classes, top_k=k, average="micro")
                                      for stage in ("val", "test") for k in (1, 5) if k <= num_classes})

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x = augment(batch["image"], tuple(self.hparams.crop_scale)) if self.hparams.augment else batch["image"]
        loss = F.cross_entropy(self(x), batch["label"], label_smoothing=self.hparams.label_smoothing)
        if not torch.isfinite(loss):
            self._diverged(f"the training loss is {loss.item()}")
        self._epoch_loss += loss.detach().float() * len(x)
        self._epoch_rows += len(x)
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=len(x), sync_dist=True)
        return loss

    def on_train_epoch_start(self) -> None:
        self._epoch_loss, self._epoch_rows = torch.zeros((), device=self.device), 0

    def on_train_epoch_end(self) -> None:
        total = self.trainer.strategy.reduce(self._epoch_loss, reduce_op="sum")
        rows = self.trainer.strategy.reduce(torch.tensor(float(self._epoch_rows), device=self.device), reduce_op="sum")
        mean, bound = float(total / rows.clamp(min=1)), DIVERGED_FACTOR * math.log(max(2, self.hparams.num_classes))
        if mean > bound:
            self._diverged(f"the epoch's mean training loss is {mean:.4g}, above {DIVERGED_FACTOR:g} x ln(classes) "
                           f"= {bound:.3g}")

    def _diverged(self, what: str) -> None:
        lrs = ", ".join(f"{g['lr']:.3g}" for g in self.trainer.optimizers[0].param_groups)
        raise DivergedError(f"FineTuneClassifier: {what} at epoch {self.current_epoch}, step {self.global_step} "
                            f"(learning rates {lrs}: backbone, head): the run diverged; lower --model.lr or lengthen "
                            "--model.warmup_epochs (configs/finetune/resnet50_small.yaml is a ResNet-50 recipe for "
                            "small images)")

    def _evaluate(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        logits = self(batch["image"])
        self.log(f"{stage}/loss", F.cross_entropy(logits, batch["label"]), batch_size=len(logits), sync_dist=True)
        for k in (1, 5):
            key = f"{stage}_{k}"
            if key in self.metrics:
                self.metrics[key](logits, batch["label"])
                self.log(f"{stage}/top{k}", self.metrics[key], batch_size=len(logits))
        return logits

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_test_epoch_start(self) -> None:
        self._tested: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits = self._evaluate(batch, "test")
        ranked = topk_first(logits.detach().float(), min(5, logits.shape[1]))[1]  # argmax's rule: lower class first
        self._tested.append((ranked, batch["label"].detach(), batch["index"].detach()))

    def on_test_epoch_end(self) -> None:
        tested = getattr(self, "_tested", [])
        self._predictions = None
        if not tested:
            return
        parts = [torch.cat([t[i] for t in tested]) for i in range(3)]
        if self.trainer.world_size > 1:  # every rank's images (a distributed sampler pads with repeats)
            parts = [p.flatten(0, 1) for p in (self.all_gather(p) for p in parts)]
        ranked, labels, index = (p.cpu() for p in parts)
        index, first = np.unique(index.numpy(), return_index=True)  # in image order, each image once
        self._predictions = (ranked[first], labels[first], torch.from_numpy(index))

    def test_predictions(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """After ``trainer.test``: each test image's top 5 classes, its label and its dataset row, in row order."""
        return getattr(self, "_predictions", None)

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        groups = [{"params": self.net.parameters(), "lr": hp.lr * hp.backbone_lr_scale},
                  {"params": self.head.parameters(), "lr": hp.lr}]
        if hp.optimizer == "sgd":
            opt = torch.optim.SGD(groups, lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay,
                                  nesterov=hp.momentum > 0)
        else:
            opt = torch.optim.AdamW(groups, lr=hp.lr, weight_decay=hp.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        if not math.isfinite(self.trainer.num_training_batches):  # a run set by max_steps: the loader is not set up
            self.trainer.fit_loop.setup_data()  # what estimated_stepping_batches does for a run set by max_epochs
        batches = self.trainer.num_training_batches
        per_epoch = math.ceil(batches / self.trainer.accumulate_grad_batches) if math.isfinite(batches) else total
        steps_per_epoch = max(1, per_epoch)  # right also when the run is set by max_steps (max_epochs is -1 then)
        warmup = int(hp.warmup_epochs * steps_per_epoch)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: warmup_cosine(step, total, warmup))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
