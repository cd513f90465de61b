#!/usr/bin/env python3
"""Image loading throughput: the image DataModule's loader against raw decoding of the same files.

Generates ImageNet-like JPEGs (about 500 x 375, one folder or one tar per synset), then times, per layout:
raw (read + PIL decode + the protocol transform in a plain loop), and the DataModule's DataLoader with 0 and N
workers. Prints images/s and the ratio to raw, side by side.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from cog_pl.data.imagenet import decode_image
from cog_pl.data.sources import SynsetSource
from cog_pl.data.transforms import build_transform, protocol_transform
from cog_pl.datamodules.images import ImageDataModule


def photo(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    h, w = 375, 500
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([np.sin(xx / rng.uniform(10, 60) + c) * np.cos(yy / rng.uniform(10, 60)) for c in range(3)], -1)
    arr = ((base + 1) * 110 + rng.normal(0, 12, (h, w, 3))).clip(0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def make(root: Path, n_synsets: int, per_synset: int) -> dict[str, list[str]]:
    import tarfile

    synsets = {}
    for s in range(n_synsets):
        wnid = f"n{s:08d}"
        files = {f"{wnid}_{k}.JPEG": photo(s * 1000 + k) for k in range(per_synset)}
        (root / "folder" / wnid).mkdir(parents=True)
        for name, data in files.items():
            (root / "folder" / wnid / name).write_bytes(data)
        (root / "tar").mkdir(exist_ok=True)
        with tarfile.open(root / "tar" / f"{wnid}.tar", "w") as tf:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        synsets[wnid] = sorted(files)
    return synsets


class BenchDataModule(ImageDataModule):
    """The shared ImageDataModule loaders over the generated synsets."""

    domain = "bench"

    def __init__(self, root: Path, synsets: dict[str, list[str]], **kw):
        super().__init__(**kw)
        self.root, self.synsets = root, synsets

    @property
    def classes(self):
        return tuple(sorted(self.synsets))

    def _rows(self, split):
        samples = [(w, n) for w in self.classes for n in self.synsets[w]]
        return SynsetSource(self.root, self.root.parent / "cache"), samples, [0] * len(samples)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--synsets", type=int, default=8)
    p.add_argument("--per-synset", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    a = p.parse_args()
    torch.set_num_threads(1)  # as in each DataLoader worker: one decode+transform pipeline per process
    with tempfile.TemporaryDirectory() as tmp:
        synsets = make(Path(tmp), a.synsets, a.per_synset)
        n = a.synsets * a.per_synset
        transform = build_transform(protocol_transform())
        print(f"{n} JPEGs of 500x375, protocol transform (224), batch {a.batch_size}")
        print(f"{'layout':<7} {'raw img/s':>10} {'dm w=0':>8} {'ratio':>6} {f'dm w={a.workers}':>8} {'ratio':>6}")
        for layout in ("folder", "tar"):
            root = Path(tmp) / layout
            source = SynsetSource(root, Path(tmp) / "cache")
            for w in synsets:  # build tar indexes outside the timings (done once per tar, then cached)
                source.list(w)
            t = time.perf_counter()
            for w, names in synsets.items():
                for name in names:
                    transform(decode_image(source.read(w, name)))
            raw = n / (time.perf_counter() - t)
            torch.set_num_threads(1)
            rates = []
            for workers in (0, a.workers):
                dm = BenchDataModule(root, synsets, batch_size=a.batch_size, num_workers=workers, pin_memory=False,
                                     shuffle_train=True)
                dm.setup()
                t = time.perf_counter()
                count = sum(len(b["index"]) for b in dm.train_dataloader())
                assert count == n
                rates.append(n / (time.perf_counter() - t))
            print(f"{layout:<7} {raw:>10.0f} {rates[0]:>8.0f} {rates[0] / raw:>6.2f} {rates[1]:>8.0f} "
                  f"{rates[1] / raw:>6.2f}")


if __name__ == "__main__":
    main()
