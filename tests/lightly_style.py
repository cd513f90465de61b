"""A third-party training script as lightly writes them, with ``CoGEvaluationCallback`` plugged in (run by
tests/callbacks/test_lightning_users.py, once per Lightning package and process count).

The module follows lightly's ``benchmarks/imagenet/resnet50/simclr.py``: its own ``backbone`` attribute, a projection
head and an online classifier, its own ``self.log`` keys (``train_loss`` with ``sync_dist``), plus what many users
add: a frozen submodule in eval mode (a teacher) and a frozen BatchNorm inside the backbone. It trains for
``--epochs`` with a CSV logger, ``ModelCheckpoint(monitor="cog/l5/top1")`` and one keeping ``last.ckpt``, then a
fresh Trainer and callback resume from ``last.ckpt`` for one more epoch. Rank zero writes ``report.json``: the
callback's history before and after the resume, the modes every training step saw, and every warning raised
(another rank: ``report_rank<N>.json``).

    python tests/lightly_style.py --package pytorch_lightning --devices 2 --bench DIR --out DIR
"""

from __future__ import annotations

import argparse
import importlib
import json
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cog_pl.callbacks import CoGEvaluationCallback
from cog_pl.datamodules.images import ImageNetDataModule


def ntxent(z: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """lightly's NTXentLoss on the two halves of ``z`` (one process's batch)."""
    z = F.normalize(z, dim=1)
    n = len(z) // 2
    sim = z @ z.T / temperature
    sim.fill_diagonal_(float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
    return F.cross_entropy(sim, target)


def make_module(pl):
    class SimCLR(pl.LightningModule):
        def __init__(self, num_classes: int) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3),
                                          nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.backbone[1].requires_grad_(False).eval()  # a frozen BatchNorm, kept in eval mode
            self.projection_head = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8))
            self.teacher = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).requires_grad_(False).eval()
            self.online_classifier = nn.Linear(16, num_classes)
            self.modes_seen: list[dict[str, bool]] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.backbone(x)

        def training_step(self, batch, batch_idx):
            images, targets = batch["image"], batch["label"]
            views = [images, images.flip(-1)]
            features = self.forward(torch.cat(views)).flatten(start_dim=1)
            loss = ntxent(self.projection_head(features))
            self.log("train_loss", loss, prog_bar=True, sync_dist=True, batch_size=len(targets))
            cls_loss = F.cross_entropy(self.online_classifier(features.detach()), targets.repeat(len(views)))
            self.log("train_online_cls_loss", cls_loss, sync_dist=True, batch_size=len(targets))
            self.modes_seen.append({name: m.training for name, m in self.named_modules()})
            return loss + cls_loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    return SimCLR


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--package", choices=["lightning", "pytorch_lightning"], required=True)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--bench", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    pl = importlib.import_module("lightning.pytorch" if a.package == "lightning" else a.package)
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = run(pl, a)
    report["warnings"] = sorted({str(w.message) for w in caught})
    rank = report.pop("rank")
    (a.out / ("report.json" if rank == 0 else f"report_rank{rank}.json")).write_text(json.dumps(report, indent=1))


def run(pl, a: argparse.Namespace) -> dict:
    bench = a.bench
    data = ImageNetDataModule(in1k_root=str(bench / "in1k"), benchmark=str(bench / "benchmark.json"), transform=32,
                              batch_size=8, num_workers=0)

    def callback() -> CoGEvaluationCallback:
        return CoGEvaluationCallback(in1k_root=str(bench / "in1k"), in21k_root=str(bench / "in21k"),
                                     benchmark=str(bench / "benchmark.json"), transform=32, concepts=3,
                                     train_images=10, test_images=4, epochs=5)

    def trainer(epochs: int, cog: CoGEvaluationCallback, ckpt_dir: str):
        best = pl.callbacks.ModelCheckpoint(dirpath=a.out / "best", monitor="cog/l5/top1", mode="max")
        latest = pl.callbacks.ModelCheckpoint(dirpath=a.out / ckpt_dir, save_last=True)  # every epoch's end
        return pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=a.devices,
                          strategy="ddp" if a.devices > 1 else "auto", callbacks=[cog, best, latest],
                          logger=pl.loggers.CSVLogger(a.out, name="logs"), log_every_n_steps=1,
                          enable_progress_bar=False, enable_model_summary=False)

    model_class = make_module(pl)
    torch.manual_seed(0)
    model = model_class(data.num_classes)
    initial = {name: m.training for name, m in model.named_modules()}
    first = callback()
    t1 = trainer(a.epochs, first, "ckpt")
    t1.fit(model, train_dataloaders=data.train_dataloader())
    after_fit = {name: m.training for name, m in model.named_modules()}
    resumed = callback()
    t2 = trainer(a.epochs + 1, resumed, "ckpt")
    model2 = model_class(data.num_classes)
    t2.fit(model2, train_dataloaders=data.train_dataloader(), ckpt_path=str(a.out / "ckpt" / "last.ckpt"))
    return {
        "rank": t1.global_rank, "world_size": t1.world_size, "trainer": type(t1).__module__,
        "history": first.history, "resumed_history": resumed.history,
        "callback_metrics": sorted(t2.callback_metrics),
        "modes_initial": initial, "modes_after_fit": after_fit,
        "steps": len(model.modes_seen) + len(model2.modes_seen),
        "steps_with_other_modes": sum(m != initial for m in model.modes_seen + model2.modes_seen),
        "best_model_score": float(t1.checkpoint_callbacks[0].best_model_score),
    }


if __name__ == "__main__":
    main()
