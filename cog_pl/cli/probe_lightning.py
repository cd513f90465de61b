"""``cog-pl probe fit|validate|test``: LightningCLI for ``LinearProbe`` on ``FeatureDataModule``.

    cog-pl probe fit --config linear_probe --data.features features/resnet50/in1k

The number of classes and the feature dimension are linked from the datamodule into the model; the resolved config
is saved with the run, and a fit of the final probe (``--data.stage_mode final``) prints the one line that tests it
(``cog-pl probe test --config <its config.yaml> --ckpt_path <its last.ckpt>``). ``test`` and ``validate`` refuse to
run without a checkpoint (an untrained probe scores chance). ``--optimizer``/``--lr_scheduler`` (LightningCLI's) or
other values than the protocol's are recorded as ``protocol_deviations`` (:class:`~cog_pl.probe.module.LinearProbe`).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.cli import LightningArgumentParser

from cog_pl.cli.lightning import CommandLineCLI, hand_over
from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.probe.module import LinearProbe


class ProbeCLI(CommandLineCLI):
    """LightningCLI with the data -> model links of the probe."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.feature_dim", "model.feature_dim", apply_on="instantiate")

    def fit(self, **kwargs: Any) -> None:
        """A final probe trains on all of train and has no val split by design: its fit skips validation rather
        than asking the datamodule for val batches it has none of (Lightning would warn that their total length
        is zero)."""
        if self.datamodule.stage_mode == "final" and self.trainer.limit_val_batches != 0:
            self.trainer.limit_val_batches = 0
        self.trainer.fit(**kwargs)

    def test_command(self) -> str | None:
        """The test line of a final probe; a probe fit on the tuning split is validated, not tested."""
        return super().test_command() if self.datamodule.stage_mode == "final" else None


def run(argv: list[str], prog: str = "cog-pl probe") -> ProbeCLI:
    """Run ``cog-pl probe ARGV`` (``ARGV`` starts with ``fit``, ``validate`` or ``test``); returns the CLI, whose
    ``trainer`` and ``model`` callers from Python may read."""
    return hand_over(ProbeCLI, argv, prog, model_class=LinearProbe, datamodule_class=FeatureDataModule,
                     save_config_kwargs={"overwrite": True})
