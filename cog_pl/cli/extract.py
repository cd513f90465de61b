"""``cog-pl extract``: Phase 1 through LightningCLI ``predict``, every domain and split of a model in one command.

    cog-pl extract --config resnet50 --data.in1k_root /data/in1k --data.in21k_root /data/in21k

Stores land in ``<data.out>/<model>/<domain>/<split>/``; complete ones are skipped, interrupted ones resumed, each
only when made by the same checkpoint, model, precision, transform and data (else refused, naming the difference;
``--data.overwrite true`` extracts them again). ``--data.dtype float32`` for features beyond float16's range.
``--data.decode pil|cpu|gpu|auto`` picks the decode path (:mod:`cog_pl.extract.decode`), ``--data.num_workers auto``
the loader workers from the cores available.
Any Trainer option works (``--trainer.devices 4 --trainer.strategy ddp --trainer.precision bf16-mixed``,
``--trainer.num_nodes`` on a cluster).
"""

from __future__ import annotations

import logging
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser

from cog_pl.cli.lightning import CommandLineCLI, hand_over
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.module import FeatureExtractor
from cog_pl.features.store import is_complete

logger = logging.getLogger(__name__)

TRAINER_DEFAULTS: dict[str, Any] = {"logger": False, "enable_checkpointing": False, "enable_model_summary": False}


class ExtractCLI(CommandLineCLI):
    """LightningCLI with the extractor's name and input pipeline linked into the datamodule."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("model.model_name", "data.model_name", apply_on="instantiate")
        parser.link_arguments("model.transform_config", "data.transform", apply_on="instantiate")

    def predict(self, model: FeatureExtractor, datamodule: ExtractionDataModule | None = None,
                return_predictions: bool | None = None, **kwargs: Any) -> None:
        """Run prediction without keeping the features in memory: the writer callback stores them."""
        datamodule.model_meta = model.store_meta(str(self.trainer.precision))  # existing stores are checked on it
        datamodule.device = self.trainer.strategy.root_device  # where --data.decode gpu/auto decodes batches
        datamodule.setup("predict")
        if self.trainer.is_global_zero:
            datamodule.finish_ready(datamodule.model_meta, model.feature_dim)
        if not datamodule.targets:
            logger.info("nothing to extract: all %d stores under %s are complete", len(datamodule.skipped),
                        datamodule.out / datamodule.model_name)
        else:
            self.trainer.predict(model, datamodule=datamodule, return_predictions=False, **kwargs)
        if self.trainer.is_global_zero:
            _summary(datamodule)


def _summary(dm: ExtractionDataModule) -> None:
    rows = [(str(t.path), t.rows, "extracted" if is_complete(t.path) else "INCOMPLETE")
            for t in dm.targets + dm.ready]
    rows += [(str(p), None, "already complete") for p in dm.skipped]
    width = max((len(r[0]) for r in rows), default=10)
    print(f"\n{'feature store':<{width}}  {'rows':>9}  status")
    for path, n, status in sorted(rows):
        print(f"{path:<{width}}  {'' if n is None else n:>9}  {status}")


def run(argv: list[str], prog: str = "cog-pl extract") -> ExtractCLI:
    """Run ``cog-pl extract ARGV``: LightningCLI ``predict`` (the only subcommand) on ``ARGV``."""
    return hand_over(ExtractCLI, ["predict", *argv], prog, model_class=FeatureExtractor,
                     datamodule_class=ExtractionDataModule, trainer_defaults=TRAINER_DEFAULTS,
                     save_config_callback=None, seed_everything_default=False)
