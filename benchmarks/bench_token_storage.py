#!/usr/bin/env python3
"""Token stores (issue 40): their size per image and per level, and what extracting one costs against the class token.

1. Storage: bytes per image of a float16 token store (``T x D x 2``, plus 16 bytes of label and index) for each grid
   (1x1, 2x2, 4x4: the class token and the pooled cells; full: the class token and the 14 x 14 patches of a /16 ViT
   at 224 px) at ViT-S/B/L widths (384, 768, 1024), beside the class-token vector store (``cls``); and per domain,
   with the real image counts: IN-1K's 1,281,167 train and 50,000 val images, and each CoG level's train images
   (every image of a concept in the fall11 counts, less its 50 test images, at most 1300: ``cog_pl.data.splits``)
   and test images (the package's split files). Pure arithmetic on the package data: no download.
2. Extraction cost per image on this CPU: a random-init ViT (``--model``, default ``vit_small_patch16_224``) through
   ``cog_pl.models.features`` for ``cls`` and each token grid, forward (float32, ``torch.inference_mode``) plus the
   float16 write into a :class:`~cog_pl.features.store.StoreWriter` on local disk; the ratio to ``cls``.

    OMP_NUM_THREADS=1 python benchmarks/bench_token_storage.py [--model NAME] [--images 16] [--batch 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from cog_pl import resources
from cog_pl.resources import LEVELS

WIDTHS = {"ViT-S": 384, "ViT-B": 768, "ViT-L": 1024}
GRIDS = {"cls": 1, "tokens1x1": 2, "tokens2x2": 5, "tokens4x4": 17, "tokens_full": 1 + 14 * 14}
IN1K = (1_281_167, 50_000)  # the official train and val images (docs/protocol.md)
ROW_EXTRA = 16  # labels.npy and index.npy: two int64 per row


def level_counts() -> dict[str, tuple[int, int]]:
    """(train, test) images of each official level: a concept's fall11 images less its test images, at most the
    protocol's 1300 (``cog_pl.data.splits``); test from the package's split files."""
    counts, out = resources.fall11_image_counts(), {}
    levels = resources.official_levels()
    for i, level in enumerate(LEVELS, 1):
        test = resources.official_test_split(level)
        per_test: dict[str, int] = {}
        for path in test:
            wnid = path.split("/", 1)[0]
            per_test[wnid] = per_test.get(wnid, 0) + 1
        train = sum(min(counts[w] - per_test.get(w, 0), 1300) for w in levels[level])
        out[f"cog_l{i}"] = (train, len(test))
    return out


def storage_table() -> None:
    domains = {"in1k": IN1K, **level_counts()}
    print("Storage, float16 (bytes per image = T x D x 2 + 16; GB = 1e9 bytes)")
    print("| grid | T | " + " | ".join(f"{k} (D={d}) per image" for k, d in WIDTHS.items()) + " |")
    print("|---|---|" + "---|" * len(WIDTHS))
    for grid, t in GRIDS.items():
        cells = [f"{(t * d * 2 + ROW_EXTRA) / 1024:.1f} KiB" for d in WIDTHS.values()]
        print(f"| {grid} | {t} | " + " | ".join(cells) + " |")
    for width, d in WIDTHS.items():
        print(f"\nPer domain (train + test images), {width} (D={d}), GB:")
        print("| domain | images (train + test) | " + " | ".join(GRIDS) + " |")
        print("|---|---|" + "---|" * len(GRIDS))
        total = np.zeros(len(GRIDS))
        for name, (train, test) in domains.items():
            row = np.array([(train + test) * (t * d * 2 + ROW_EXTRA) / 1e9 for t in GRIDS.values()])
            total += row
            print(f"| {name} | {train:,} + {test:,} | " + " | ".join(f"{v:,.1f}" for v in row) + " |")
        print("| all six | | " + " | ".join(f"{v:,.1f}" for v in total) + " |")


def extraction_cost(model: str, images: int, batch: int, rounds: int) -> None:
    import timm
    import torch

    from cog_pl.features.store import StoreWriter
    from cog_pl.models.features import feature_module

    torch.manual_seed(0)
    net = timm.create_model(model, num_classes=0).eval()
    size = net.patch_embed.img_size[0]
    x = torch.randn(batch, 3, size, size)
    print(f"\nExtraction per image, {model} (random weights) at {size} px, float32 forward on CPU "
          f"({torch.get_num_threads()} thread(s)), float16 store, batch {batch}, {images} images, best of {rounds} "
          "interleaved rounds:")
    print("| definition | T x D | ms per image (forward + write) | ratio to cls | of which the write, ms |")
    print("|---|---|---|---|---|")
    best: dict[str, float] = {}
    writes: dict[str, float] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    outs: dict[str, np.ndarray] = {}
    modules = {name: feature_module(net, name) for name in GRIDS}
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        for name, module in modules.items():  # warm-up, each definition's shape and one batch of its features
            outs[name] = module(x).float().numpy()
            shapes[name] = outs[name].shape[1:]
        for _ in range(rounds):  # the definitions interleaved, the fastest round of each: a shared CPU's noise
            for name, module in modules.items():
                shape = shapes[name]
                writer = StoreWriter(Path(tmp) / name, images, shape[-1], fresh=True,
                                     tokens=shape[0] if len(shape) == 2 else None)
                start = time.perf_counter()
                for a in range(0, images, batch):
                    rows = np.arange(a, min(a + batch, images))
                    writer.write(rows, module(x[:len(rows)]).float().numpy(), np.zeros(len(rows), dtype=np.int64))
                best[name] = min(best.get(name, float("inf")), (time.perf_counter() - start) * 1000 / images)
                writer.abort()
                writer = StoreWriter(Path(tmp) / name, images, shape[-1], fresh=True,
                                     tokens=shape[0] if len(shape) == 2 else None)
                start = time.perf_counter()  # the store's part alone: the same rows written, no forward
                for a in range(0, images, batch):
                    rows = np.arange(a, min(a + batch, images))
                    writer.write(rows, outs[name][:len(rows)], np.zeros(len(rows), dtype=np.int64))
                writes[name] = min(writes.get(name, float("inf")), (time.perf_counter() - start) * 1000 / images)
                writer.abort()
    for name, ms in best.items():
        print(f"| {name} | {' x '.join(map(str, shapes[name]))} | {ms:.1f} | {ms / best['cls']:.2f} | "
              f"{writes[name]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--storage-only", action="store_true")
    args = parser.parse_args()
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    storage_table()
    if not args.storage_only:
        extraction_cost(args.model, args.images, args.batch, args.rounds)


if __name__ == "__main__":
    main()
