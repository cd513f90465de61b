"""``cog-pl extract``: Phase 1 through LightningCLI ``predict``, every domain and split of a model in one command.

    cog-pl extract --config configs/extract/resnet50.yaml --data.in1k_root /data/in1k --data.in21k_root /data/in21k

Stores land in ``<data.out>/<model>/<domain>/<split>/``; complete ones are skipped, interrupted ones resumed.
Any Trainer option works (``--trainer.devices 4 --trainer.strategy ddp --trainer.precision bf16-mixed``,
``--trainer.num_nodes`` on a cluster).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

logger = logging.getLogger(__name__)

TRAINER_DEFAULTS: dict[str, Any] = {"logger": False, "enable_checkpointing": False, "enable_model_summary": False}


def _cli_class():
    """The LightningCLI subclass, built on first use (importing Lightning costs seconds every ``cog-pl`` call)."""
    from lightning.pytorch.cli import LightningCLI

    class ExtractCLI(LightningCLI):
        """LightningCLI with the extractor's name and input pipeline linked into the datamodule."""

        add_arguments_to_parser = _link
        predict = _predict

    return ExtractCLI


def _link(self, parser) -> None:
    parser.link_arguments("model.model_name", "data.model_name", apply_on="instantiate")
    parser.link_arguments("model.transform_config", "data.transform", apply_on="instantiate")


def _predict(self, model, datamodule=None, return_predictions=None, **kwargs: Any) -> None:
    """Run prediction without keeping the features in memory: the writer callback stores them."""
    datamodule.setup("predict")
    if self.trainer.is_global_zero:
        datamodule.finish_ready(model.store_meta(str(self.trainer.precision)), model.feature_dim)
    if not datamodule.targets:
        logger.info("nothing to extract: all %d stores under %s are complete", len(datamodule.skipped),
                    datamodule.out / datamodule.model_name)
    else:
        self.trainer.predict(model, datamodule=datamodule, return_predictions=False, **kwargs)
    if self.trainer.is_global_zero:
        _summary(datamodule)


def _summary(dm) -> None:
    from cog_pl.features.store import is_complete

    rows = [(str(t.path), t.rows, "extracted" if is_complete(t.path) else "INCOMPLETE")
            for t in dm.targets + dm.ready]
    rows += [(str(p), None, "already complete") for p in dm.skipped]
    width = max((len(r[0]) for r in rows), default=10)
    print(f"\n{'feature store':<{width}}  {'rows':>9}  status")
    for path, n, status in sorted(rows):
        print(f"{path:<{width}}  {'' if n is None else n:>9}  {status}")


def run(argv: list[str]) -> int:
    from cog_pl.extract.datamodule import ExtractionDataModule
    from cog_pl.extract.module import FeatureExtractor

    _cli_class()(FeatureExtractor, ExtractionDataModule, args=["predict", *argv], trainer_defaults=TRAINER_DEFAULTS,
                 save_config_callback=None, seed_everything_default=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("extract", add_help=False, help="extract frozen features of a model for IN-1K and L1..L5",
                   description=__doc__)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
