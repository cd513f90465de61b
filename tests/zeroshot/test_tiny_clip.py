"""A tiny CLIP trained inside the test, on the demo's synthetic images of its seen concepts with captions from the
concepts' lemmas and WordNet hypernyms, then evaluated zero-shot through the ``zeroshot`` method on the seen concepts
and on the five levels: above chance on the seen concepts, and falling from the nearest level to the farthest (the
shape, asserted loosely). The demo's images show the motifs of a concept's WordNet ancestors (cog_pl.demo.traits), so
a caption's ancestor words are what the text side can carry over to concepts it was never trained to name."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from cog_pl import resources
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.features.store import make_meta, write_store
from cog_pl.models.registry import BackboneSpec, register_backbone, unregister_backbone
from cog_pl.results import read_rows
from cog_pl.zeroshot import names
from cog_pl.zeroshot.names import ClassName, NameScheme, hypernym_path, register_name_scheme

pytestmark = pytest.mark.slow  # the demo's ontology and images (~30 s) and the training (~20-50 s on 2 cores)

EMBED, BUCKETS = 32, 4096
MODEL = "tiny_clip_test"
SCHEME = "lemma_ancestors_test"


def _words(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) % BUCKETS for w in text.lower().replace(",", " ").replace(";", " ")
            .replace(".", " ").split()]


class TextTower(nn.Module):
    """Hashed words -> mean embedding -> projection: a text tower of the TextTower protocol."""

    embed_dim = EMBED

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(BUCKETS, 64, mode="mean")
        self.proj = nn.Linear(64, EMBED)
        nn.init.normal_(self.emb.weight, std=0.1)

    def forward(self, texts: list[str]) -> torch.Tensor:
        ids = [_words(t) for t in texts]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(0)
        return self.proj(self.emb(torch.tensor([x for i in ids for x in i]), offsets))

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        return self(list(texts))


def image_tower() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 32, 5, 2, 2), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, EMBED))


def build_text(name: str, weights: str, trust: bool = False) -> TextTower:
    """The backbone's text tower builder (its spec's ``text_tower``): the text half of the weights file."""
    tower = TextTower()
    tower.load_state_dict(torch.load(weights, weights_only=True)["text"])
    return tower.eval()


def _name(wnid: str) -> ClassName:
    """First lemma, and the names of every ancestor up WordNet's hypernyms as knowledge (ELEVATER's format)."""
    return ClassName((resources.concept_name(wnid).split(", ")[0],), " ".join(hypernym_path(wnid, 20)))


def _load(paths) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.asarray(Image.open(p).convert("RGB")) for p in paths])
                            ).permute(0, 3, 1, 2).float() / 255


@pytest.fixture
def tiny_clip():
    register_name_scheme(NameScheme(SCHEME, lambda wnids: [_name(w) for w in wnids], "test: lemma + all ancestors",
                                    "this test"), replace=True)
    register_backbone(MODEL, BackboneSpec(MODEL, MODEL, EMBED, image_size=32, group="user", seen=None,
                                          text_tower=f"{__name__}:build_text"), replace=True)
    yield
    unregister_backbone(MODEL)
    names._SCHEMES.remove(SCHEME)  # (the scheme registry has no public removal)


def test_a_tiny_clip_names_the_seen_concepts_and_less_and_less_the_far_levels(tiny_clip, tmp_path):
    from cog_pl.demo.synthetic import make_demo

    torch.manual_seed(0)
    root = tmp_path / "demo"
    bench = json.loads(make_demo(root, n_seen=10, n_per_level=5, train_per_concept=40, test_per_concept=10,
                                 image_size=32).read_text())
    seen = bench["in1k"]
    x, y = [], []
    for i, wnid in enumerate(seen):
        paths = sorted((root / "in1k" / "train" / wnid).glob("*.JPEG"))
        x.append(_load(paths))
        y += [i] * len(paths)
    x, y = torch.cat(x), torch.tensor(y)
    mean, std = x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True)
    images, text = image_tower(), TextTower()
    template = "a photo of a {c}."
    captions = [_name(w).texts([template])[0] for w in seen]
    scale = nn.Parameter(torch.tensor(2.0))
    opt = torch.optim.AdamW([*images.parameters(), *text.parameters(), scale], lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):  # CLIP's loss, the images' side: each image against every seen concept's caption
        idx = torch.randperm(len(y), generator=g)[:128]
        logits = scale.exp() * F.normalize(images((x[idx] - mean) / std), dim=-1) @ F.normalize(text(captions),
                                                                                                dim=-1).T
        loss = F.cross_entropy(logits, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    weights = tmp_path / "tiny_clip.pt"
    torch.save({"text": text.state_dict()}, weights)
    (tmp_path / "templates.json").write_text(json.dumps({"imagenet1k": [template]}))

    domains = {"in1k": {w: sorted((root / "in1k" / "val" / w).glob("*.JPEG")) for w in seen}}
    for level, wnids in bench["levels"].items():
        domains[f"cog_l{level[1]}"] = {w: [root / "in21k" / p for p in bench["test"][level] if p.startswith(w)]
                                       for w in wnids}
    results = tmp_path / "results.sqlite"
    images.eval()
    for domain, by_concept in domains.items():
        wnids = list(by_concept)
        with torch.no_grad():
            feats = [images((_load(by_concept[w]) - mean) / std).numpy() for w in wnids]
        labels = np.concatenate([[i] * len(f) for i, f in enumerate(feats)])
        for split in ("train", "test"):  # zero-shot reads the test store; the train one makes the pair
            meta = make_meta(model=MODEL, arch=MODEL, weights=str(weights), weights_sha256="tiny",
                             trusted_checkpoint=False, precision="32-true", domain=domain, split=split,
                             num_rows=len(labels), dim=EMBED, num_classes=len(wnids), classes=wnids,
                             transform={"size": 32}, level_file_sha256=None)
            write_store(tmp_path / "features" / domain / split, np.concatenate(feats), labels, None, meta)
        run_on_stores("zeroshot", tmp_path / "features" / domain, results, seeds=(0,),
                      options={"names": SCHEME, "templates": str(tmp_path / "templates.json")})
    top1 = {r["domain"]: r["test_top1"] for r in read_rows(results)}
    chance = {d: 100 / len(c) for d, c in domains.items()}
    assert top1["in1k"] > 3 * chance["in1k"], top1  # the seen concepts: named well above chance
    assert top1["cog_l1"] > top1["cog_l5"] + 10, top1  # the nearest level named better than the farthest
    assert top1["in1k"] > max(top1[f"cog_l{i}"] for i in range(1, 6)), top1
