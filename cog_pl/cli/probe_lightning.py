"""``cog-pl probe fit|validate|test``: LightningCLI for ``LinearProbe`` on ``FeatureDataModule``.

    cog-pl probe fit --config linear_probe --data.features features/resnet50/in1k

The number of classes and the feature dimension are linked from the datamodule into the model; the resolved config
is saved with the run.
"""

from __future__ import annotations

from lightning.pytorch.cli import LightningArgumentParser

from cog_pl.cli.lightning import CommandLineCLI, hand_over
from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.probe.module import LinearProbe


class ProbeCLI(CommandLineCLI):
    """LightningCLI with the data -> model links of the probe."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.feature_dim", "model.feature_dim", apply_on="instantiate")


def run(argv: list[str], prog: str = "cog-pl probe") -> ProbeCLI:
    """Run ``cog-pl probe ARGV`` (``ARGV`` starts with ``fit``, ``validate`` or ``test``); returns the CLI, whose
    ``trainer`` and ``model`` callers from Python may read."""
    return hand_over(ProbeCLI, argv, prog, model_class=LinearProbe, datamodule_class=FeatureDataModule,
                     save_config_kwargs={"overwrite": True})
