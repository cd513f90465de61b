"""The demo's second representation: the same CNN learnt without labels (SimCLR-style contrastive learning).

The paper's Fig. 3 (b)-(e) sets every model against a supervised ResNet-50; the demo sets ``external:demo_cnn_ssl``
against ``external:demo_cnn`` (supervised): same architecture and images (the seen concepts' training images), no
labels. Two views of an image (random circular shift, which the images' periodic layout keeps natural, horizontal
flip, brightness and contrast, pixel noise, an erased square) are pulled together and other images pushed apart
(NT-Xent). The checkpoint ``<root>/demo_cnn_ssl.pt`` is a plain state dict of the backbone, as the supervised one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from cog_pl.demo.backbone import WIDTH, DemoCNN
from cog_pl.demo.pretrain import fit_backbone, save_backbone
from cog_pl.io import write_json

log = logging.getLogger(__name__)
ARCH = "demo_cnn_ssl"
MODEL_NAME = f"external:{ARCH}"
CHECKPOINT = f"{ARCH}.pt"


def views(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random view of each image (``[B, 3, S, S]``, normalised): shift, flip, brightness/contrast, noise, erase."""
    b, c, h, w = images.shape
    dev = images.device

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator).to(dev)

    dy, dx = (rand(b) * h).long(), (rand(b) * w).long()
    rows = (torch.arange(h, device=dev)[None] + dy[:, None]) % h
    cols = (torch.arange(w, device=dev)[None] + dx[:, None]) % w
    flip = rand(b) < 0.5
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    out = images[torch.arange(b, device=dev)[:, None, None, None], torch.arange(c, device=dev)[None, :, None, None],
                 rows[:, None, :, None], cols[:, None, None, :]]
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    contrast, bright = 0.6 + 0.8 * rand(b, 1, 1, 1), 0.8 * (rand(b, 1, 1, 1) - 0.5)
    out = (out - mean) * contrast + mean + bright + 0.1 * torch.randn(out.shape, generator=generator).to(dev)
    side = max(1, h // 3)
    top, left = (rand(b) * (h - side)).long(), (rand(b) * (w - side)).long()
    ys, xs = torch.arange(h, device=dev), torch.arange(w, device=dev)
    box = (((ys[None] >= top[:, None]) & (ys[None] < top[:, None] + side))[:, :, None]
           & ((xs[None] >= left[:, None]) & (xs[None] < left[:, None] + side))[:, None, :])
    erase = box & (rand(b) < 0.5)[:, None, None]
    return out.masked_fill(erase[:, None], 0.0)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCLR's loss: each embedding's positive is the other view of its image, the other 2B - 2 are negatives."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.T / temperature
    sim.fill_diagonal_(float("-inf"))
    n = len(z1)
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
    return F.cross_entropy(sim, target)


class ContrastivePretraining(L.LightningModule):
    """:class:`DemoCNN` and a projection head trained with :func:`nt_xent` on two :func:`views` of each image."""

    def __init__(self, width: int = WIDTH, lr: float = 2e-3, weight_decay: float = 1e-4,
                 temperature: float = 0.2, projection: int = 64) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = DemoCNN(width)
        d = self.backbone.feature_dim
        self.head = nn.Sequential(nn.Linear(d, 2 * d), nn.BatchNorm1d(2 * d), nn.ReLU(inplace=True),
                                  nn.Linear(2 * d, projection))

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        x = batch["image"]  # the labels are never read
        v1, v2 = (views(x).contiguous(memory_format=torch.channels_last) for _ in range(2))
        z1, z2 = self.head(self.backbone(v1)), self.head(self.backbone(v2))
        loss = nt_xent(z1, z2, self.hparams.temperature)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(x))
        return loss

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, self.hparams.lr,
                                                    total_steps=int(self.trainer.estimated_stepping_batches))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def pretrain_selfsup_backbone(root: str | os.PathLike, epochs: int = 4, batch_size: int = 256, lr: float = 2e-3,
                              seed: int = 0, num_workers: int = 0, width: int = WIDTH) -> Path:
    """Train ``external:demo_cnn_ssl`` on ``<root>/in1k/train`` without labels (skipped when its checkpoint
    exists); returns the checkpoint's path."""
    root = Path(root)
    out = root / CHECKPOINT
    if out.exists():
        log.info("self-supervised demo backbone exists: %s", out)
        return out
    L.seed_everything(seed, workers=True, verbose=False)
    module = ContrastivePretraining(width, lr)
    trainer, _, seconds = fit_backbone(root, module, "pretrain_ssl", epochs, batch_size, num_workers,
                                       f"pretraining {ARCH} (self-supervised)")
    save_backbone(module.backbone, out)
    write_json(root / f"{ARCH}.json", {"method": "SimCLR-style (NT-Xent), no labels", "epochs": epochs,
                                       "batch_size": batch_size, "lr": lr, "seed": seed, "width": width,
                                       "temperature": module.hparams.temperature,
                                       "feature_dim": module.backbone.feature_dim,
                                       "precision": str(trainer.precision),
                                       "train_seconds": round(seconds, 1)})
    log.info("pretrained %s (self-supervised, %d epochs, %.0f s): %s", ARCH, epochs, seconds, out)
    return out

