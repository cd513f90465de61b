"""A user's DDP training script with ``CoGEvaluationCallback`` and the monitoring recipe of docs/lightning.md (run by
tests/callbacks/test_cog_callback_lifecycle.py with ``--devices 2`` on gloo).

Every rank configures Python logging at INFO with its rank in each line (``LOCAL_RANK``, set in the processes
Lightning starts; the first is rank 0), as a cluster script does, so that a line the callback printed on every rank
would show once per rank. The fit evaluates every 2 epochs; an ``EarlyStopping``
on the training loss asks to stop at once, and ``min_epochs=3`` lets the fit stop after epoch 2: the end-of-fit
evaluation then runs in ``on_train_end``, on every rank together. ``ModelCheckpoint`` and a second
``EarlyStopping`` watch ``cog/l5/top1`` as documented. Each rank writes ``report_rank<R>.json``.

    python tests/cog_callback_ddp.py --devices 2 --bench DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

# before Lightning is imported: it then logs through the root logger too instead of a handler of its own
logging.basicConfig(level=logging.INFO, format=f"[rank {os.environ.get('LOCAL_RANK', '0')}] %(name)s: %(message)s")

import lightning as L  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint  # noqa: E402
from torch import nn  # noqa: E402

from cog_pl.callbacks import CoGEvaluationCallback  # noqa: E402
from cog_pl.datamodules.images import ImageNetDataModule  # noqa: E402

KEY = "cog/l5/top1"


class Net(L.LightningModule):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten())
        self.head = nn.Linear(8, num_classes)

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.head(self.backbone(batch["image"])), batch["label"])
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--bench", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    bench = a.bench
    data = ImageNetDataModule(in1k_root=str(bench / "in1k"), benchmark=str(bench / "benchmark.json"), transform=32,
                              batch_size=8, num_workers=0)
    cog = CoGEvaluationCallback(in1k_root=str(bench / "in1k"), in21k_root=str(bench / "in21k"),
                                benchmark=str(bench / "benchmark.json"), transform=32, domains=("l1", "l5"),
                                concepts=3, train_images=10, test_images=4, epochs=5, every_n_epochs=2)
    stop_now = EarlyStopping(monitor="train_loss", mode="min", stopping_threshold=1e9, check_on_train_epoch_end=True)
    on_cog = EarlyStopping(monitor=KEY, mode="max", patience=5, check_on_train_epoch_end=True, strict=False)
    best = ModelCheckpoint(dirpath=a.out / "best", monitor=KEY, mode="max", every_n_epochs=2,
                           save_on_train_epoch_end=True)
    trainer = L.Trainer(max_epochs=10, min_epochs=3, accelerator="cpu", devices=a.devices, strategy="ddp",
                        callbacks=[best, on_cog, cog, stop_now], logger=L.pytorch.loggers.CSVLogger(a.out, name="logs"),
                        enable_progress_bar=False, enable_model_summary=False)
    torch.manual_seed(0)
    trainer.fit(Net(data.num_classes), train_dataloaders=data.train_dataloader())
    report = {"rank": trainer.global_rank, "world_size": trainer.world_size, "history": cog.history,
              "current_epoch": trainer.current_epoch,
              "callback_metric": float(trainer.callback_metrics[KEY]) if KEY in trainer.callback_metrics else None,
              "best_model_score": float(best.best_model_score) if best.best_model_score is not None else None}
    (a.out / f"report_rank{trainer.global_rank}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
