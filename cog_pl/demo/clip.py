"""The demo's tiny CLIP: ``demo_clip`` (:mod:`cog_pl.models.arch.demo_clip`) trained on the seen concepts' images and
captions, for ``cog-pl demo --zeroshot``.

The captions are the prompts the demo's zero-shot evaluation reads: the name scheme :data:`NAMES` (defined in
:mod:`cog_pl.zeroshot.names`, so that a later run on the demo's outputs finds it without importing the demo: a
concept's first lemma, then as knowledge every ancestor up WordNet's hypernyms, the concept's own lemma first, as
``tests/zeroshot/test_tiny_clip.py`` trains on; the demo's images show the motifs of a concept's ancestors,
:mod:`cog_pl.demo.traits`, so the ancestor words are what the text side carries to concepts it never named) in the
template set :data:`TEMPLATES` (OpenAI's 7). The loss is CLIP's image side against every seen concept's caption: an
image's logits are its cosine similarity (times a learned scale) to each concept's text embedding, the mean of its
L2-normalised template embeddings renormalised, as the zero-shot classifier is built
(:func:`cog_pl.zeroshot.zeroshot_classifier`), with cross-entropy on its concept.

The checkpoint ``<root>/demo_clip.pt`` holds ``{"state_dict": <image tower>, "text": <text tower>}`` (written
atomically, skipped when present); training resumes from ``<root>/pretrain_clip/last.ckpt``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import torch
from torch import nn

from cog_pl.benchmark import Benchmark
from cog_pl.demo.pretrain import FlipClassifierTraining, fit_backbone
from cog_pl.demo.synthetic import BENCHMARK_FILE
from cog_pl.io import atomic_open, write_json
from cog_pl.models.arch.demo_clip import IMAGE_KEY, TEXT_KEY, DemoCLIPImage, HashedText
from cog_pl.zeroshot import get_templates
from cog_pl.zeroshot.names import get_name_scheme

log = logging.getLogger(__name__)

__all__ = ["ARCH", "CHECKPOINT", "MODEL_NAME", "NAMES", "TEMPLATES", "DemoCLIPPretraining", "pretrain_demo_clip"]

ARCH = "demo_clip"
MODEL_NAME = f"external:{ARCH}"
CHECKPOINT = "demo_clip.pt"
#: The demo's name scheme: first lemma + every WordNet ancestor as knowledge (what demo_clip was trained to read).
NAMES = "demo_ancestors"
#: The template set of its captions and of its zero-shot evaluation.
TEMPLATES = "openai7"


def captions(wnids: Sequence[str]) -> list[list[str]]:
    """Each concept's prompts: the :data:`TEMPLATES` with the :data:`NAMES` names (the zero-shot evaluation's)."""
    templates = list(get_templates(TEMPLATES).templates)
    return [name.texts(templates) for name in get_name_scheme(NAMES).build(list(wnids))]


class DemoCLIPPretraining(FlipClassifierTraining):
    """CLIP's image-side loss for :class:`DemoCLIPImage` and :class:`HashedText` against every seen concept's
    prompts (random horizontal flips); ``captions[c]``: concept ``c``'s prompts, as many for every concept."""

    def __init__(self, captions: list[list[str]], lr: float = 3e-3, weight_decay: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.image = DemoCLIPImage()
        self.text = HashedText()
        self.logit_scale = nn.Parameter(torch.tensor(2.0))
        self.per_class = len(captions[0])
        ids, offsets = self.text.tokenize([t for texts in captions for t in texts])
        self.register_buffer("ids", ids, persistent=False)
        self.register_buffer("offsets", offsets, persistent=False)

    def classes(self) -> torch.Tensor:
        """The concepts' text embeddings [C, E]: mean of the normalised prompt embeddings, renormalised."""
        emb = nn.functional.normalize(self.text.embed(self.ids, self.offsets), dim=-1)
        return nn.functional.normalize(emb.view(-1, self.per_class, emb.shape[-1]).mean(1), dim=-1)

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        """Each image's scaled cosine with every concept's text embedding."""
        return self.logit_scale.exp() * nn.functional.normalize(self.image(images), dim=-1) @ self.classes().T

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


def pretrain_demo_clip(root: str | os.PathLike, epochs: int = 6, seed: int = 0, batch_size: int = 128,
                       lr: float = 3e-3, num_workers: int = 0) -> Path:
    """Train ``demo_clip`` on ``<root>/in1k/train`` with the seen concepts' captions (skipped when the checkpoint
    exists); returns the path of ``<root>/demo_clip.pt``."""
    root = Path(root)
    out = root / CHECKPOINT
    if out.exists():
        log.info("demo CLIP exists: %s", out)
        return out
    L.seed_everything(seed, workers=True, verbose=False)
    module = DemoCLIPPretraining(captions(Benchmark.load(root / BENCHMARK_FILE).in1k), lr)
    trainer, dm, seconds = fit_backbone(root, module, "pretrain_clip", epochs, batch_size, num_workers,
                                        f"pretraining {ARCH} (image-text)")
    seen = trainer.test(module, datamodule=dm, verbose=False)[0]
    module.to(memory_format=torch.contiguous_format)
    with atomic_open(out, "wb") as fh:
        torch.save({IMAGE_KEY: module.image.state_dict(), TEXT_KEY: module.text.state_dict()}, fh)
    write_json(root / "demo_clip.json", {"epochs": epochs, "batch_size": batch_size, "lr": lr, "seed": seed,
                                         "names": NAMES, "templates": TEMPLATES,
                                         "seen_test_top1": seen.get("test/top1"), "train_seconds": round(seconds, 1)})
    log.info("pretrained %s (%d epochs, %.0f s): seen-concept zero-shot test top-1 %.3f, %s", ARCH, epochs, seconds,
             seen.get("test/top1", 0), out)
    return out
