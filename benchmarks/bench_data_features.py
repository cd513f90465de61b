#!/usr/bin/env python3
"""Feature batches: FeatureDataModule against a plain in-memory tensor loop, and the memory of a large store.

1. Throughput: one training epoch (shuffled, batch 1024, L2-normalised float32 batches) from the FeatureDataModule,
   against the simplest possible loop over the same features held as a float32 tensor (``x[perm[i:i+bs]]``), and
   against a ``TensorDataset`` + ``DataLoader`` (per-sample indexing and collation) for reference.
2. Memory: write a store of ``--gb`` GB, then in a fresh process open it, read its labels and a few rows, and
   report the resident memory before and after.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from cog_pl.datamodules import FeatureDataModule
from cog_pl.features.store import StoreWriter, make_meta

RSS_PROBE = """
import sys, numpy as np
def rss(key='RssAnon'):
    return int(next(l for l in open('/proc/self/status') if l.startswith(key + ':')).split()[1]) / 1024
from cog_pl.features.store import open_store
before = rss()
s = open_store(sys.argv[1])
n_classes = int(s.labels.max()) + 1
rows = np.sort(np.random.default_rng(0).choice(len(s), 1024, replace=False))
x = np.asarray(s.features[rows], dtype=np.float32)
print(f"{s.features.nbytes / 2**30:.2f} {before:.0f} {rss():.0f} {len(s)} {rss('RssFile'):.0f}")
"""


def plain_store(root: Path, n: int, d: int, classes: int) -> None:
    rng = np.random.default_rng(0)
    for split, rows in (("train", n), ("test", n // 10)):
        (root / split).mkdir(parents=True)
        np.save(root / split / "features.npy", rng.normal(size=(rows, d)).astype(np.float16))
        np.save(root / split / "labels.npy", rng.integers(0, classes, rows))


def epoch_rates(root: Path, bs: int) -> tuple[float, float, float, int]:
    dm = FeatureDataModule(str(root), stage_mode="final", batch_size=bs, device="cpu")
    dm.setup()
    n = len(dm.train_idx)
    x32 = torch.nn.functional.normalize(torch.from_numpy(np.load(root / "train" / "features.npy")).float(), dim=1)
    y = torch.from_numpy(np.load(root / "train" / "labels.npy"))

    def timed(fn) -> float:
        fn()  # warm-up
        t = time.perf_counter()
        fn()
        return n / (time.perf_counter() - t)

    def datamodule():
        for xb, _ in dm.train_dataloader():
            xb.sum()

    def plain():
        perm = torch.randperm(n)
        for i in range(0, n, bs):
            b = perm[i:i + bs]
            x32[b].sum(), y[b]

    loader = DataLoader(TensorDataset(x32, y), batch_size=bs, shuffle=True)

    def collated():
        for xb, _ in loader:
            xb.sum()

    return timed(datamodule), timed(plain), timed(collated), n


def big_store(path: Path, gb: float, d: int = 2048) -> None:
    n = int(gb * 2**30 / (2 * d))
    w = StoreWriter(path, n, d)
    rng = np.random.default_rng(0)
    block = rng.normal(size=(65536, d)).astype(np.float16)
    for s in range(0, n, 65536):
        rows = np.arange(s, min(s + 65536, n))
        w.write(rows, block[: len(rows)], rows % 1000)
    w.finish(make_meta(model="bench", weights_sha256=None, domain="cog_l1", split="train", num_classes=1000,
                       classes=[f"n{i:08d}" for i in range(1000)], transform=None, level_file_sha256=None))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--gb", type=float, default=4.0, help="size of the store for the memory check")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        plain_store(Path(tmp) / "f", a.rows, a.dim, 1000)
        dm, plain, collated, n = epoch_rates(Path(tmp) / "f", a.batch_size)
        print(f"train epoch, {n} x {a.dim}, batch {a.batch_size} (rows/s):")
        print(f"  FeatureDataModule {dm:>12,.0f}   plain tensor loop {plain:>12,.0f}   ratio {dm / plain:.2f}"
              f"   TensorDataset+DataLoader {collated:>10,.0f} ({dm / collated:.0f}x slower than the datamodule)")
        t = time.perf_counter()
        big_store(Path(tmp) / "big", a.gb)
        written = time.perf_counter() - t
        out = subprocess.run([sys.executable, "-c", RSS_PROBE, str(Path(tmp) / "big")], check=True,
                             capture_output=True, text=True).stdout.split()
        size, before, after, rows, mapped = float(out[0]), float(out[1]), float(out[2]), int(out[3]), float(out[4])
        print(f"store of {size:.2f} GB ({rows:,} x 2048 float16, written in {written:.0f} s): private resident "
              f"memory {before:.0f} MB before open, {after:.0f} MB after open + labels.max() + 1024 random rows "
              f"(+{after - before:.0f} MB); file pages mapped {mapped:.0f} MB (page cache, reclaimable)")


if __name__ == "__main__":
    main()
