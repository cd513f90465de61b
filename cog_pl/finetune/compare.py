"""Fine-tune a backbone on each domain and add the rows beside its probes' (paper App. C.2), in one call."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch

from cog_pl.finetune.cli import FINETUNE_SUFFIX
from cog_pl.finetune.module import FineTuneClassifier
from cog_pl.results import append_row, has_row, versions

logger = logging.getLogger(__name__)


def finetune_domains(model: str, checkpoint: str | None, results: str, domains: Sequence[str], *,
                     in1k_root: str | None, in21k_root: str | None, benchmark: str | None = None,
                     transform: Any = None, epochs: int = 10, seed: int = 22, batch_size: int = 128,
                     recipe: dict[str, Any] | None = None, progress: bool = False) -> list[dict[str, Any]]:
    """One fine-tuning run per domain (train split -> test split); rows that exist are skipped."""
    from cog_pl.datamodules.images import CoGLevelDataModule, ImageNetDataModule

    rows = []
    for domain in domains:
        name = FineTuneClassifier(model, 2, checkpoint).backbone.spec.name
        key = (name + FINETUNE_SUFFIX, domain, None, seed)
        if has_row(results, key):
            logger.info("skip fine-tuning %s on %s: row exists", name, domain)
            continue
        common = {"transform": transform, "batch_size": batch_size, "num_workers": 0, "benchmark": benchmark}
        dm = (ImageNetDataModule(root=in1k_root, **common) if domain == "in1k"
              else CoGLevelDataModule(level=domain, root=in21k_root, **common))
        L.seed_everything(seed, verbose=False)
        net = FineTuneClassifier(model, dm.num_classes, checkpoint, **(recipe or {}))
        start = time.perf_counter()
        trainer = L.Trainer(max_epochs=epochs, accelerator="cpu" if not torch.cuda.is_available() else "auto",
                            devices=1, logger=False, enable_checkpointing=False, enable_model_summary=False,
                            enable_progress_bar=progress)
        trainer.fit(net, datamodule=dm)
        metrics = trainer.test(net, datamodule=dm, verbose=False)[0]
        row = {"model": key[0], "domain": domain, "shots": None, "seed": seed, "method": "finetune",
               "test_top1": 100 * metrics["test/top1"], "test_top5": 100 * metrics.get("test/top5", 0.0),
               "recipe": {k: v for k, v in net.hparams.items() if k != "checkpoint"}, "epochs": epochs,
               "checkpoint": checkpoint, "seconds": round(time.perf_counter() - start, 2), "versions": versions()}
        append_row(results, row)
        rows.append(row)
        logger.info("fine-tuned %s on %s: test top-1 %.2f", name, domain, row["test_top1"])
    return rows
