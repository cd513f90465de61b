#!/usr/bin/env python3
"""What training the attentive probe on images (method ``attentive_images``: the frozen backbone run on every
augmented batch of every epoch) costs against training the same bank of heads on stored features (the backbone run
once, on the un-augmented images).

One training pass of ``--heads`` heads (``cog_pl.models.poolers.PoolerBank``, ``cog_pl.finetune.attentive_images.
BankAdamW``) for ``--epochs`` epochs, as one search batch of a cell trains, on synthetic images of ``--size`` pixels
through the demo's CNN (random weights: the weights change nothing in the time): on images, each batch augmented
(``cog_pl.finetune.module.augment``, RandomResizedCrop (0.08, 1) bicubic + flip) then the backbone, then the heads;
on stored features, the backbone once over the train images, then the heads on its features. Also timed: the images
pass without augmentation (the augmentation's share). Plain loops, no Lightning (its per-step overhead is the same
for both and would hide the ratio at this size).

    python benchmarks/bench_attentive_images.py [--images 240 --classes 6 --size 32 --batch 32 --epochs 20 --heads 5]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from cog_pl.finetune.attentive_images import BankAdamW
from cog_pl.finetune.module import augment
from cog_pl.models import build_backbone
from cog_pl.models.poolers import POOLER_PRESETS, PoolerBank


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="external:demo_cnn")
    p.add_argument("--preset", default="ep", help="a pooler preset whose heads split the model's width")
    for name, value in (("images", 240), ("classes", 6), ("size", 32), ("batch", 32), ("epochs", 20), ("heads", 5),
                        ("threads", 1)):
        p.add_argument(f"--{name}", type=int, default=value)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    x, y = torch.randn(a.images, 3, a.size, a.size), torch.arange(a.images) % a.classes
    backbone = build_backbone(a.model)
    net = backbone.model.eval().requires_grad_(False)
    steps = a.epochs * (a.images // a.batch)

    def train(tokens) -> float:
        bank = PoolerBank(backbone.spec.feature_dim, a.classes, POOLER_PRESETS[a.preset], a.heads)
        opt = BankAdamW(bank.parameters(), [1e-3] * a.heads, [1e-2] * a.heads, steps // 4, steps)
        g = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        for _ in range(a.epochs):
            perm = torch.randperm(a.images, generator=g)
            for i in range(0, a.images - a.batch + 1, a.batch):
                idx = perm[i:i + a.batch]
                loss = sum(F.cross_entropy(logits, y[idx]) for logits in bank(tokens(idx, g)))
                opt.zero_grad()
                loss.backward()
                opt.step()
        return time.perf_counter() - start

    @torch.no_grad()
    def on_images(idx, g):
        return net(augment(x[idx], (0.08, 1.0), generator=g, mode="bicubic"))[:, None]

    @torch.no_grad()
    def unaugmented(idx, g):
        return net(x[idx])[:, None]

    images = train(on_images)
    plain = train(unaugmented)
    start = time.perf_counter()
    with torch.no_grad():
        stored = torch.cat([net(x[i:i + a.batch]) for i in range(0, a.images, a.batch)])[:, None]
    extraction = time.perf_counter() - start
    heads = train(lambda idx, g: stored[idx])
    print(f"on images (augmented): {images:.2f} s; without augmentation {plain:.2f} s")
    print(f"on stored features: extraction {extraction:.2f} s + heads {heads:.2f} s = {extraction + heads:.2f} s")
    print(f"ratio: {images / (extraction + heads):.1f} x")


if __name__ == "__main__":
    main()
