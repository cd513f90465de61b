"""LightningCLI for ``LinearProbe`` on ``FeatureDataModule``: ``python -m cog_pl.probe.cli fit --config ...``.

The number of classes and the feature dimension are linked from the datamodule into the model.
"""

from __future__ import annotations

from lightning.pytorch.cli import LightningCLI

from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.probe.module import LinearProbe


class ProbeCLI(LightningCLI):
    """LightningCLI with the data -> model links of the probe."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.feature_dim", "model.feature_dim", apply_on="instantiate")


def main(args: list[str] | None = None) -> ProbeCLI:
    """Run the CLI on ``args`` (default: ``sys.argv``)."""
    return ProbeCLI(LinearProbe, FeatureDataModule, save_config_kwargs={"overwrite": True}, args=args)


if __name__ == "__main__":
    main()
