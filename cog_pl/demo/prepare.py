"""Everything the demo pipeline needs, made once: the miniature benchmark and the pretrained demo backbones."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from cog_pl.data.roots import write_data_file
from cog_pl.data.transforms import TransformConfig
from cog_pl.demo.backbone import ARCH, MODEL_NAME
from cog_pl.demo.clip import ARCH as CLIP_ARCH
from cog_pl.demo.clip import MODEL_NAME as CLIP_MODEL
from cog_pl.demo.clip import pretrain_demo_clip
from cog_pl.demo.domains import write_comparable
from cog_pl.demo.pretrain import pretrain_demo_backbone
from cog_pl.demo.selfsup import ARCH as SSL_ARCH
from cog_pl.demo.selfsup import MODEL_NAME as SSL_MODEL
from cog_pl.demo.selfsup import pretrain_selfsup_backbone
from cog_pl.demo.synthetic import make_demo
from cog_pl.wordnet.ontology import Ontology

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoAssets:
    """Paths of a prepared demo and how to read its images with its backbones.

    ``benchmark`` is the one the demo evaluates (comparable domains, :mod:`cog_pl.demo.domains`);
    ``pretrain_benchmark`` holds every seen concept, which both backbones were trained on.
    ``checkpoint`` is the supervised ``external:demo_cnn``, the baseline; ``ssl_checkpoint`` the self-supervised
    ``external:demo_cnn_ssl`` (None when not made); ``clip_checkpoint`` the tiny CLIP ``external:demo_clip``
    (:mod:`cog_pl.demo.clip`; None when not made). ``seconds``: what each step of this call took.
    """

    root: Path
    in1k_root: Path
    in21k_root: Path
    benchmark: Path
    checkpoint: Path
    image_size: int
    model: str = MODEL_NAME
    pretrain_benchmark: Path | None = None
    ssl_checkpoint: Path | None = None
    ssl_model: str = SSL_MODEL
    clip_checkpoint: Path | None = None
    clip_model: str = CLIP_MODEL
    seconds: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def transform(self) -> TransformConfig:
        """The input pipeline to extract demo features with (the images' own size, ImageNet normalisation)."""
        return TransformConfig(crop=self.image_size, resize=self.image_size)


def prepare(root: str | os.PathLike, n_seen: int = 50, n_per_level: int = 15, train_per_concept: int = 80,
            test_per_concept: int = 20, image_size: int = 32, seed: int = 0, epochs: int = 8,
            onto: Ontology | None = None, ssl_epochs: int = 0, clip_epochs: int = 0) -> DemoAssets:
    """Generate the miniature benchmark and pretrain its backbone under ``root`` (and, with ``ssl_epochs``, the
    self-supervised one; with ``clip_epochs``, the tiny CLIP); done parts are skipped."""
    root = Path(root)
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    bench = make_demo(root, n_seen, n_per_level, train_per_concept, test_per_concept, image_size, seed, onto=onto)
    evaluated = write_comparable(root, seed)
    write_data_file(root, benchmark=evaluated.name, image_size=image_size,
                    about="the cog-pl demo's miniature ImageNet: give this folder to cog-pl run --data and cog-pl data "
                          "check --data")
    seconds["generate the benchmark"] = time.perf_counter() - t
    t = time.perf_counter()
    ckpt = pretrain_demo_backbone(root, epochs=epochs, seed=seed)
    seconds[f"pretrain {ARCH} (supervised)"] = time.perf_counter() - t
    ssl = None
    if ssl_epochs:
        t = time.perf_counter()
        ssl = pretrain_selfsup_backbone(root, epochs=ssl_epochs, seed=seed)
        seconds[f"pretrain {SSL_ARCH} (self-supervised)"] = time.perf_counter() - t
    clip = None
    if clip_epochs:
        t = time.perf_counter()
        clip = pretrain_demo_clip(root, epochs=clip_epochs, seed=seed)
        seconds[f"pretrain {CLIP_ARCH} (image-text)"] = time.perf_counter() - t
    return DemoAssets(root, root / "in1k", root / "in21k", evaluated, ckpt, image_size,
                      pretrain_benchmark=bench, ssl_checkpoint=ssl, clip_checkpoint=clip, seconds=seconds)
