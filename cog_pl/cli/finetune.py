"""``cog-pl finetune fit|test``: LightningCLI for ``FineTuneClassifier`` on a domain's images.

    cog-pl finetune fit --config resnet50 --data.level cog_l3 \\
        --data.in21k_root /data/in21k
    cog-pl finetune test --config resnet50 --data.level cog_l3 \\
        --data.in21k_root /data/in21k --ckpt_path last --results results.sqlite

``data`` is any image DataModule (``CoGLevelDataModule`` or ``ImageNetDataModule``) by ``class_path``. The number of
classes is linked from the datamodule; ``test`` with ``--results`` adds a result row (method ``finetune``) that
``cog-pl report`` sets against the linear probe of the same model and domain.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.utilities.model_helpers import is_overridden

from cog_pl.cli.lightning import CommandLineCLI, hand_over
from cog_pl.datamodules.images import ImageDataModule
from cog_pl.finetune.module import FineTuneClassifier, no_val_split
from cog_pl.finetune.rows import result_row


class ResultRowCallback(L.Callback):
    """After ``test``, add the fine-tuned model's row to a results store."""

    def __init__(self, results: str | None = None, seed: int = 0) -> None:
        self.results, self.seed, self.start = results, seed, time.perf_counter()

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.results or not trainer.is_global_zero:
            return
        from cog_pl.results import append_row

        append_row(self.results, result_row(trainer, pl_module, self.seed, time.perf_counter() - self.start))


class FineTuneCLI(CommandLineCLI):
    """LightningCLI with the class count linked from the datamodule and ``--results`` for ``test``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.add_argument("--results", default=None, help="results store to add the test row to")

    def fit(self, **kwargs: Any) -> None:
        if is_overridden("val_dataloader", kwargs.get("datamodule")):  # a datamodule of the user's with a val split
            self.trainer.fit(**kwargs)
            return
        with no_val_split():
            self.trainer.fit(**kwargs)

    def before_test(self) -> None:
        results = self.config[self.subcommand].get("results")
        seed = self.config[self.subcommand].get("seed_everything") or 0
        self.trainer.callbacks.append(ResultRowCallback(results, int(seed)))


def run(argv: list[str], prog: str = "cog-pl finetune") -> FineTuneCLI:
    """Run ``cog-pl finetune ARGV`` (``ARGV`` starts with ``fit`` or ``test``)."""
    return hand_over(FineTuneCLI, argv, prog, model_class=FineTuneClassifier, datamodule_class=ImageDataModule,
                     subclass_mode_data=True, save_config_kwargs={"overwrite": True})
