"""Pretrain the demo backbone on the miniature benchmark's seen concepts with a Lightning ``Trainer`` on CPU.

The checkpoint ``<root>/demo_cnn.pt`` is a plain state dict of :class:`~cog_pl.demo.backbone.DemoCNN` (the
feature extractor, no classifier), written atomically, so that ``build_backbone("external:demo_cnn",
checkpoint=...)`` loads it as any other backbone. Training resumes from ``<root>/pretrain/last.ckpt``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from cog_pl.benchmark import Benchmark
from cog_pl.callbacks.progress import StageProgress
from cog_pl.console import filter_known_warnings
from cog_pl.data.transforms import TransformConfig
from cog_pl.datamodules import ImageNetDataModule
from cog_pl.demo.backbone import ARCH, WIDTH, DemoCNN
from cog_pl.demo.synthetic import BENCHMARK_FILE
from cog_pl.io import atomic_open, write_json

log = logging.getLogger(__name__)
CHECKPOINT = "demo_cnn.pt"


class FlipClassifierTraining(L.LightningModule):
    """A classifier's training and test steps on the demo's images: cross-entropy of :meth:`logits`, random horizontal
    flips in training, channels-last images, loss and top-1 logged per stage (the demo's backbones' pretraining)."""

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _step(self, batch: dict, stage: str) -> torch.Tensor:
        images = batch["image"].contiguous(memory_format=torch.channels_last)
        if stage == "train":
            flip = torch.rand(len(images), device=images.device) < 0.5
            images = torch.where(flip[:, None, None, None], images.flip(3), images)
        logits = self.logits(images)
        loss = nn.functional.cross_entropy(logits, batch["label"])
        top1 = (logits.argmax(1) == batch["label"]).float().mean()
        self.log_dict({f"{stage}/loss": loss, f"{stage}/top1": top1}, prog_bar=stage == "train",
                      batch_size=len(images))
        return loss

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._step(batch, "test")


class DemoPretraining(FlipClassifierTraining):
    """Supervised training of :class:`DemoCNN` plus a linear classifier (random horizontal flips)."""

    def __init__(self, num_classes: int, width: int = WIDTH, lr: float = 0.1, weight_decay: float = 5e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = DemoCNN(width)
        self.head = nn.Linear(self.backbone.feature_dim, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(images))

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        return self(images)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, nesterov=True,
                              weight_decay=self.hparams.weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, self.hparams.lr,
                                                    total_steps=int(self.trainer.estimated_stepping_batches))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def demo_transform(image_size: int) -> TransformConfig:
    """The demo images' input pipeline: no resizing beyond their size, ImageNet normalisation."""
    return TransformConfig(crop=image_size, resize=image_size)


def fit_backbone(root: Path, module: L.LightningModule, work: str, epochs: int, batch_size: int, num_workers: int,
                 desc: str) -> tuple[L.Trainer, ImageNetDataModule, float]:
    """Fit ``module`` on ``<root>/in1k/train`` (all the seen concepts of the pretraining benchmark, images decoded
    once) on the CPU in float32 (bf16 autocast made the demo CNN 3-4x slower on a 2-core AMX CPU), resuming from
    ``<root>/<work>/last.ckpt``; returns the trainer, the data and the seconds it took. The module's convolutions run
    channels-last (its steps convert their images): about a fifth less time a step on CPU."""
    bench = Benchmark.load(root / BENCHMARK_FILE)
    size = int(bench.meta.get("settings", {}).get("image_size", 32))
    dm = ImageNetDataModule(in1k_root=str(root / "in1k"), benchmark=str(root / BENCHMARK_FILE),
                            transform=demo_transform(size), batch_size=batch_size, num_workers=num_workers,
                            pin_memory=False, cache_images=True)
    last = root / work / "last.ckpt"
    filter_known_warnings()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, default_root_dir=root / work,
                        logger=False, enable_progress_bar=False, enable_model_summary=False, deterministic=True,
                        callbacks=[ModelCheckpoint(root / work, save_last=True, save_top_k=0), StageProgress(desc)])
    module.to(memory_format=torch.channels_last)
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=dm, ckpt_path=str(last) if last.exists() else None)
    return trainer, dm, time.perf_counter() - t0


def save_backbone(backbone: nn.Module, out: Path) -> None:
    """The backbone's state dict (contiguous tensors), written atomically: what ``build_backbone(...,
    checkpoint=out)`` loads."""
    backbone.to(memory_format=torch.contiguous_format)
    with atomic_open(out, "wb") as fh:
        torch.save(backbone.state_dict(), fh)


def pretrain_demo_backbone(root: str | os.PathLike, epochs: int = 8, batch_size: int = 128, lr: float = 0.1,
                           seed: int = 0, num_workers: int = 0, width: int = WIDTH) -> Path:
    """Train the demo backbone on ``<root>/in1k/train`` (skipped when the checkpoint exists); returns its path."""
    root = Path(root)
    out = root / CHECKPOINT
    if out.exists():
        log.info("demo backbone exists: %s", out)
        return out
    L.seed_everything(seed, workers=True, verbose=False)
    module = DemoPretraining(len(Benchmark.load(root / BENCHMARK_FILE).in1k), width, lr)
    trainer, dm, seconds = fit_backbone(root, module, "pretrain", epochs, batch_size, num_workers,
                                        f"pretraining {ARCH} (supervised)")
    seen = trainer.test(module, datamodule=dm, verbose=False)[0]
    save_backbone(module.backbone, out)
    write_json(root / "demo_cnn.json", {"epochs": epochs, "batch_size": batch_size, "lr": lr, "seed": seed,
                                        "width": width, "feature_dim": module.backbone.feature_dim,
                                        "seen_test_top1": seen.get("test/top1"), "train_seconds": round(seconds, 1)})
    log.info("pretrained %s (supervised, %d epochs, %.0f s): seen-concept test top-1 %.3f, %s", ARCH, epochs, seconds,
             seen.get("test/top1", 0), out)
    return out
