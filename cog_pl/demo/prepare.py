"""Everything the demo pipeline needs, made once: the miniature benchmark and the pretrained demo backbone."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cog_pl.data.transforms import TransformConfig
from cog_pl.demo.backbone import MODEL_NAME
from cog_pl.demo.pretrain import pretrain_demo_backbone
from cog_pl.demo.synthetic import make_demo
from cog_pl.wordnet.ontology import Ontology

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoAssets:
    """Paths of a prepared demo and how to read its images with its backbone."""

    root: Path
    in1k_root: Path
    in21k_root: Path
    benchmark: Path
    checkpoint: Path
    image_size: int
    model: str = MODEL_NAME

    @property
    def transform(self) -> TransformConfig:
        """The input pipeline to extract demo features with (the images' own size, ImageNet normalisation)."""
        return TransformConfig(crop=self.image_size, resize=self.image_size)


def prepare(root: str | os.PathLike, n_seen: int = 50, n_per_level: int = 15, train_per_concept: int = 80,
            test_per_concept: int = 20, image_size: int = 32, seed: int = 0, epochs: int = 12,
            onto: Ontology | None = None) -> DemoAssets:
    """Generate the miniature benchmark and pretrain its backbone under ``root``; done parts are skipped."""
    root = Path(root)
    bench = make_demo(root, n_seen, n_per_level, train_per_concept, test_per_concept, image_size, seed, onto=onto)
    ckpt = pretrain_demo_backbone(root, epochs=epochs, seed=seed)
    return DemoAssets(root, root / "in1k", root / "in21k", bench, ckpt, image_size)
