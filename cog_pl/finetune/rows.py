"""The result row of a fine-tuned model (method ``finetune``), written by ``cog-pl finetune test`` and by the
fine-tuning method (:func:`~cog_pl.finetune.compare.finetune_domain`)."""

from __future__ import annotations

import lightning as L

from cog_pl.finetune.module import FineTuneClassifier
from cog_pl.provenance import versions
from cog_pl.results.predictions import Predictions

#: The ``method`` of a fine-tuned model's rows.
METHOD = "finetune"


def result_row(trainer: L.Trainer, pl_module: FineTuneClassifier, seed: int, seconds: float) -> dict:
    """The result row of a fine-tuned model after ``trainer.test``: model name, method ``finetune``, the test
    accuracy (top-5 only where measured: 5 classes or more), the recipe and how it ran, and the test predictions
    (stored beside the row by :func:`cog_pl.results.append_row`)."""
    metrics, dm = trainer.callback_metrics, trainer.datamodule
    row = {"model": pl_module.backbone.spec.name, "domain": dm.domain, "shots": None, "seed": seed,
           "method": METHOD, "test_top1": 100 * float(metrics["test/top1"]),
           "recipe": {k: v for k, v in pl_module.hparams.items() if k != "checkpoint"},
           "checkpoint": pl_module.hparams.get("checkpoint"), "epochs": trainer.max_epochs,
           "batch_size": dm.batch_size, "precision": str(trainer.precision), "devices": trainer.num_devices,
           "accelerator": trainer.strategy.root_device.type, "seconds": round(seconds, 2),
           "versions": versions()}
    if "test/top5" in metrics:
        row["test_top5"] = 100 * float(metrics["test/top5"])
    tested = pl_module.test_predictions()
    if tested is not None:
        row["predictions"] = Predictions.of(*tested, classes=list(dm.classes))
    return row
