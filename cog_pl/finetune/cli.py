"""``cog-pl finetune fit|test``: LightningCLI for ``FineTuneClassifier`` on a domain's images.

    cog-pl finetune fit --config configs/finetune/resnet50.yaml --data.level cog_l3 --data.root /data/in21k
    cog-pl finetune test --config configs/finetune/resnet50.yaml --data.level cog_l3 --data.root /data/in21k \\
        --ckpt_path last --results results.sqlite

The number of classes is linked from the datamodule; ``test`` with ``--results`` adds a result row
(model ``<name>@finetune``) that ``cog-pl report`` sets against the linear probe of the same model and domain.
"""

from __future__ import annotations

import sys
import time

import lightning as L
from lightning.pytorch.cli import LightningCLI

from cog_pl.finetune.module import FineTuneClassifier

FINETUNE_SUFFIX = "@finetune"


def result_row(trainer: L.Trainer, pl_module: FineTuneClassifier, seed: int, seconds: float) -> dict:
    """The result row of a fine-tuned model after ``trainer.test``: model ``<name>@finetune``, the test accuracy
    (top-5 only where measured: 5 classes or more), the recipe and how it ran."""
    from cog_pl.results import versions

    metrics, dm = trainer.callback_metrics, trainer.datamodule
    row = {"model": pl_module.backbone.spec.name + FINETUNE_SUFFIX, "domain": dm.domain, "shots": None, "seed": seed,
           "method": "finetune", "test_top1": 100 * float(metrics["test/top1"]),
           "recipe": {k: v for k, v in pl_module.hparams.items() if k != "checkpoint"},
           "checkpoint": pl_module.hparams.get("checkpoint"), "epochs": trainer.max_epochs,
           "batch_size": dm.batch_size, "precision": str(trainer.precision), "seconds": round(seconds, 2),
           "versions": versions()}
    if "test/top5" in metrics:
        row["test_top5"] = 100 * float(metrics["test/top5"])
    return row


class ResultRowCallback(L.Callback):
    """After ``test``, add the fine-tuned model's row to a results store."""

    def __init__(self, results: str | None = None, seed: int = 0) -> None:
        self.results, self.seed, self.start = results, seed, time.perf_counter()

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.results or not trainer.is_global_zero:
            return
        from cog_pl.results import append_row

        append_row(self.results, result_row(trainer, pl_module, self.seed, time.perf_counter() - self.start))


class FineTuneCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.add_argument("--results", default=None, help="results store to add the test row to")

    def before_test(self) -> None:
        results = self.config[self.subcommand].get("results")
        seed = self.config[self.subcommand].get("seed_everything") or 0
        self.trainer.callbacks.append(ResultRowCallback(results, int(seed)))


def run(argv: list[str]) -> int:
    """``data`` is any image DataModule (``CoGLevelDataModule`` or ``ImageNetDataModule``) by ``class_path``."""
    from cog_pl.datamodules.images import ImageDataModule

    FineTuneCLI(FineTuneClassifier, ImageDataModule, args=argv, subclass_mode_data=True,
                save_config_kwargs={"overwrite": True})
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
