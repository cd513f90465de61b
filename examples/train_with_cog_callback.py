#!/usr/bin/env python3
"""Train a small CNN on the demo benchmark's seen concepts and watch CoG accuracy with CoGEvaluationCallback.

    python examples/train_with_cog_callback.py --out cog_example [--devices 2] [--epochs 6] [--every 1]

Prepares the demo benchmark (no downloads) under ``<out>/data``, trains with a real Lightning Trainer, logs
``cog/in1k/top1``, ``cog/l1/top1`` .. ``cog/l5/top1`` every ``--every`` epochs (and after the last) to ``<out>/logs``
(CSV), keeps the checkpoint of the best ``cog/l5/top1`` under ``<out>/best`` and stops when it has not improved for
``--patience`` evaluations (the recipe of docs/lightning.md), and plots the curves to ``<out>/cog_curves.png``.
Epochs are counted from 0 everywhere: the console, ``metrics.csv`` and the plot.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch import nn

from cog_pl.callbacks import CoGEvaluationCallback


class Classifier(L.LightningModule):
    """Any LightningModule: the callback only needs its ``backbone`` attribute (images -> features)."""

    def __init__(self, num_classes: int, width: int = 24, lr: float = 0.1) -> None:
        super().__init__()
        from cog_pl.demo.backbone import DemoCNN

        self.backbone = DemoCNN(width)
        with torch.no_grad():
            dim = self.backbone(torch.zeros(1, 3, 32, 32)).shape[1]
        self.head = nn.Linear(dim, num_classes)
        self.lr = lr

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.head(self.backbone(batch["image"])), batch["label"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9, weight_decay=5e-4)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("cog_example"))
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--seen", type=int, default=30)
    p.add_argument("--per-level", type=int, default=10)
    p.add_argument("--every", type=int, default=1, help="evaluate every this many epochs")
    p.add_argument("--patience", type=int, default=3, help="evaluations without improvement before stopping")
    a = p.parse_args()

    from cog_pl.data.transforms import TransformConfig
    from cog_pl.datamodules.images import ImageNetDataModule
    from cog_pl.demo.synthetic import make_demo

    bench = make_demo(a.out / "data", n_seen=a.seen, n_per_level=a.per_level, train_per_concept=60,
                      test_per_concept=20, image_size=32)
    transform = TransformConfig(crop=32, resize=32)
    data = ImageNetDataModule(in1k_root=str(a.out / "data" / "in1k"), benchmark=str(bench), transform=transform,
                              batch_size=64, num_workers=0)
    cog = CoGEvaluationCallback(in1k_root=str(a.out / "data" / "in1k"), in21k_root=str(a.out / "data" / "in21k"),
                                benchmark=str(bench), transform=transform, concepts=a.per_level, train_images=30,
                                test_images=10, every_n_epochs=a.every)
    # Monitoring a CoG key (docs/lightning.md): checked at the training epoch's end, on the callback's epochs
    best = ModelCheckpoint(dirpath=a.out / "best", monitor="cog/l5/top1", mode="max", every_n_epochs=a.every,
                           save_on_train_epoch_end=True)
    stop = EarlyStopping(monitor="cog/l5/top1", mode="max", patience=a.patience, check_on_train_epoch_end=True,
                         strict=False)
    model = Classifier(data.num_classes)
    trainer = L.Trainer(max_epochs=a.epochs, accelerator="cpu", devices=a.devices,
                        strategy="ddp" if a.devices > 1 else "auto", callbacks=[cog, best, stop],
                        logger=L.pytorch.loggers.CSVLogger(a.out, name="logs"))
    trainer.fit(model, datamodule=data)
    if trainer.is_global_zero:
        plot(cog.history, a.out / "cog_curves.png")


def plot(history: list[dict], out: Path) -> Any:
    """The curves of ``cog.history`` against its epochs, counted from 0 as Lightning, the console and the CSV count
    them; saved to ``out``; returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8), dpi=110)
    for key in [k for k in history[0] if k.startswith("cog/") and k.endswith("top1")]:
        ax.plot([h["epoch"] for h in history], [h[key] for h in history], marker="o", label=key[4:-5])
    ax.set_xlabel("epoch (from 0, as the console and metrics.csv)")
    ax.set_ylabel("probe top-1 (fraction)")
    ax.set_title("Concept generalization during training")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    print(f"curves: {out}")
    return fig


if __name__ == "__main__":
    main()
