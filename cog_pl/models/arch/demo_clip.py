"""The demo's tiny CLIP (``demo_clip``, :data:`cog_pl.models.zoo.DEMO_MODELS`): the demo CNN's trunk with a
projection to a joint embedding (the image tower, :class:`DemoCLIPImage`), and a hashed bag-of-words text tower
(:class:`HashedText`: words hashed with ``zlib.crc32`` into buckets, a mean embedding, a projection), as the tiny CLIP
of ``tests/zeroshot/test_tiny_clip.py``. :func:`cog_pl.demo.clip.pretrain_demo_clip` trains both.

Its weights file holds both halves: ``{"state_dict": <image tower>, "text": <text tower>}``. ``build_backbone``
reads the image half as any user's file (the ``state_dict`` container; the ``text`` entry beside it is dropped and
logged) and :func:`build_text_tower` (the spec's ``text_tower``) the text half.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from cog_pl.errors import CheckpointError
from cog_pl.models.arch.demo_cnn import WIDTH, DemoCNN

__all__ = ["BUCKETS", "EMBED", "IMAGE_KEY", "TEXT_KEY", "DemoCLIPImage", "HashedText", "build_text_tower",
           "hash_words"]

EMBED = 64  # the joint embedding's width
BUCKETS = 4096  # hashed word buckets of the text tower
TEXT_WIDTH = 64  # the word embeddings' width
IMAGE_KEY, TEXT_KEY = "state_dict", "text"  # the two halves of the weights file
_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")


def hash_words(text: str, buckets: int = BUCKETS) -> list[int]:
    """The bucket of each word of ``text`` (lower-cased; ``_`` and punctuation separate words): ``zlib.crc32`` of
    its UTF-8 bytes modulo ``buckets``, the same on every machine and Python (no salted ``hash``)."""
    return [zlib.crc32(w.encode()) % buckets for w in _WORD.findall(text.lower())]


class HashedText(nn.Module):
    """Hashed words -> mean word embedding -> linear projection: ``encode_text(texts)`` -> (N, ``embed_dim``)."""

    def __init__(self, embed_dim: int = EMBED, buckets: int = BUCKETS, width: int = TEXT_WIDTH) -> None:
        super().__init__()
        self.embed_dim, self.buckets = embed_dim, buckets
        self.emb = nn.EmbeddingBag(buckets, width, mode="mean")
        self.proj = nn.Linear(width, embed_dim)
        nn.init.normal_(self.emb.weight, std=0.1)

    def tokenize(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """The flat bucket ids of ``texts`` and each text's offset into them (``nn.EmbeddingBag``'s input)."""
        ids = [hash_words(t, self.buckets) for t in texts]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]], dtype=torch.long).cumsum(0)
        return torch.tensor([x for i in ids for x in i], dtype=torch.long), offsets

    def embed(self, ids: Tensor, offsets: Tensor) -> Tensor:
        return self.proj(self.emb(ids, offsets))

    def forward(self, texts: Sequence[str]) -> Tensor:
        ids, offsets = self.tokenize(texts)
        device = self.proj.weight.device
        return self.embed(ids.to(device), offsets.to(device))

    def encode_text(self, texts: Sequence[str]) -> Tensor:
        """The texts' embeddings (N, ``embed_dim``), float32, not normalised."""
        with torch.no_grad():
            return self(list(texts)).float()


class DemoCLIPImage(nn.Module):
    """The image tower: :class:`~cog_pl.models.arch.demo_cnn.DemoCNN` then a linear projection to the joint
    embedding, ``[B, 3, S, S] -> [B, embed_dim]`` (the features both the probes and zero-shot read)."""

    def __init__(self, width: int = WIDTH, embed_dim: int = EMBED) -> None:
        super().__init__()
        self.trunk = DemoCNN(width)
        self.proj = nn.Linear(self.trunk.feature_dim, embed_dim)
        self.feature_dim = embed_dim

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(self.trunk(images))


def build_text_tower(name: str, weights: str | None, trust: bool = False) -> HashedText:
    """The text tower of ``demo_clip`` (its spec's ``text_tower``): the ``text`` half of ``weights``, or random
    weights from seed 0 when ``weights`` is None; frozen, in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tower = HashedText()
    if weights is not None:
        obj = torch.load(weights, map_location="cpu", weights_only=not trust)
        if not isinstance(obj, dict) or not isinstance(obj.get(TEXT_KEY), dict):
            raise CheckpointError(f"checkpoint {weights} has no text tower: {name}'s file holds it under "
                                  f"[{TEXT_KEY!r}] beside its image tower under [{IMAGE_KEY!r}] (cog-pl demo "
                                  "--zeroshot makes it)")
        try:
            tower.load_state_dict(obj[TEXT_KEY])
        except RuntimeError as err:
            raise CheckpointError(f"checkpoint {weights}: its text tower does not fit {name}'s: "
                                  f"{str(err).splitlines()[0]}") from err
    return tower.requires_grad_(False).eval()
