#!/usr/bin/env python3
"""Image loading throughput: the image DataModule's loader against raw decoding of the same files.

Generates ImageNet-like JPEGs (about 500 x 375) and stores the same images in every source layout: one folder or
one tar per synset (``synsets``), timm's webdataset shards (``wds``) and Hugging Face's gzipped tars (``hf_tars``,
streamed). Per layout it times the index build (one pass, reported per 100k entries; folders: their listing), raw
reading (read + PIL decode + the protocol transform in a plain loop: the yardstick) and the DataModule's DataLoader
with 0 and N workers, and prints images/s, the ratio to raw, and the ratio of the shards' loader to the folders'
(shards must not be slower). Float32 transforms on CPU. First it prints the webdataset index's memory per image on
1M synthetic entries (built directly, no files) against a dict's.
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
from cog_pl.data.sources import ImageSource, open_source
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


def _add(tf, name: str, data: bytes) -> None:
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def make(root: Path, n_synsets: int, per_synset: int, per_shard: int = 256) -> dict[str, list[str]]:
    import json
    import random
    import tarfile

    synsets = {}
    every = []
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
        every += [(wnid, name, data) for name, data in files.items()]
    random.Random(0).shuffle(every)  # as the published copies are: shuffled across shards and tars
    (root / "wds").mkdir()
    (root / "wds" / "_info.json").write_text(json.dumps({"classes": sorted(synsets)}))
    for k in range(0, len(every), per_shard):
        with tarfile.open(root / "wds" / f"bench-train-{k // per_shard:04d}.tar", "w") as tf:
            for j, (wnid, name, data) in enumerate(every[k:k + per_shard], start=k):
                _add(tf, f"{j:08d}.jpg", data)
                _add(tf, f"{j:08d}.cls", str(sorted(synsets).index(wnid)).encode())
                _add(tf, f"{j:08d}.json", json.dumps({"filename": name}).encode())
    (root / "hf_tars").mkdir()
    for k in range(2):
        with tarfile.open(root / "hf_tars" / f"train_images_{k}.tar.gz", "w:gz") as tf:
            for wnid, name, data in every[k::2]:
                _add(tf, f"{name.rsplit('.', 1)[0]}_{wnid}.JPEG", data)
    return synsets


def open_timed(root: Path, synsets: dict[str, list[str]], cache: Path) -> tuple[ImageSource, float]:
    """The source under ``root`` and how long building its index took (its cached index removed first)."""
    for old in root.glob("*.index.json"):
        old.unlink()
    t = time.perf_counter()
    source = open_source(root, cache_dir=cache)
    for w in synsets:  # folders and per-synset tars list (index) each synset on first use
        source.list(w)
    return source, time.perf_counter() - t


class BenchDataModule(ImageDataModule):
    """The shared ImageDataModule loaders over the generated synsets."""

    domain = "bench"

    def __init__(self, source: ImageSource, synsets: dict[str, list[str]], **kw):
        super().__init__(**kw)
        self.source, self.synsets = source, synsets

    @property
    def classes(self):
        return tuple(sorted(self.synsets))

    def _rows(self, split):
        samples = [(w, n) for w in self.classes for n in self.synsets[w]]
        return self.source, samples, [0] * len(samples)


def index_memory(entries: int = 1_000_000, per_synset: int = 1300) -> None:
    """Bytes per image of the webdataset index (:class:`ImageTable`) on ``entries`` synthetic IN-21K-like names,
    built directly (no files), against the dict it replaced (measured on a tenth of them with tracemalloc)."""
    import pickle
    import tracemalloc

    from cog_pl.data.image_table import ImageTable

    wnids = [f"n{k // per_synset + 1000000:08d}" for k in range(entries)]
    names = [f"{w}_{k % per_synset * 7 + 11}.JPEG" for k, w in enumerate(wnids)]
    rng = np.random.default_rng(0)
    columns = {"shard": rng.integers(0, 2048, entries).astype(np.int32),
               "offset": rng.integers(0, 1 << 30, entries),
               "size": rng.integers(1 << 10, 1 << 20, entries).astype(np.uint32),
               "ext": np.zeros(entries, np.uint8)}
    t = time.perf_counter()
    table = ImageTable.build(wnids, names, columns)
    built = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        table.save(Path(tmp) / "t.table")
        mapped = ImageTable.load(Path(tmp) / "t.table")
        probe = [(wnids[k], names[k]) for k in rng.integers(0, entries, 20_000)]
        t = time.perf_counter()
        assert all(mapped.find(w, n) >= 0 for w, n in probe)
        lookup = (time.perf_counter() - t) / len(probe)
        pickled = len(pickle.dumps(mapped))
    sample = entries // 10
    tracemalloc.start()
    index: dict[str, dict[str, tuple]] = {}
    for k in range(sample):
        index.setdefault(wnids[k], {})[names[k]] = (int(columns["shard"][k]), int(columns["offset"][k]),
                                                    int(columns["size"][k]), "jpg")
    dict_bytes = tracemalloc.get_traced_memory()[0] / sample
    tracemalloc.stop()
    print(f"index of {entries:,} images: table {table.nbytes / entries:.1f} B/image ({table.nbytes / 2**20:.0f} MiB, "
          f"built in {built:.1f} s, {lookup * 1e6:.1f} us/lookup memory-mapped, pickled for a worker: {pickled} B); "
          f"a dict: {dict_bytes:.0f} B/image (on {sample:,})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--synsets", type=int, default=8)
    p.add_argument("--per-synset", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--index-entries", type=int, default=1_000_000, help="synthetic images for the index memory figure")
    a = p.parse_args()
    index_memory(a.index_entries)
    torch.set_num_threads(1)  # as in each DataLoader worker: one decode+transform pipeline per process
    with tempfile.TemporaryDirectory() as tmp:
        synsets = make(Path(tmp), a.synsets, a.per_synset)
        n = a.synsets * a.per_synset
        transform = build_transform(protocol_transform())
        print(f"{n} JPEGs of 500x375, protocol transform (224, float32, CPU), batch {a.batch_size}")
        print(f"{'layout':<8} {'index s/100k':>12} {'raw img/s':>10} {'dm w=0':>8} {'ratio':>6} "
              f"{f'dm w={a.workers}':>8} {'ratio':>6}")
        loader_rate = {}
        for layout in ("folder", "tar", "wds", "hf_tars"):
            source, built = open_timed(Path(tmp) / layout, synsets, Path(tmp) / "cache")
            keys = [(w, name) for w, names in synsets.items() for name in names]
            t = time.perf_counter()
            for _, data in source.stream(keys):  # random-access sources read; gzip streams each tar once
                transform(decode_image(data))
            raw = n / (time.perf_counter() - t)
            torch.set_num_threads(1)
            rates = []
            for workers in (0, a.workers):
                dm = BenchDataModule(source, synsets, batch_size=a.batch_size, num_workers=workers, pin_memory=False,
                                     shuffle_train=True)
                dm.setup()
                t = time.perf_counter()
                count = sum(len(b["index"]) for b in dm.train_dataloader())
                assert count == n
                rates.append(n / (time.perf_counter() - t))
            loader_rate[layout] = rates[1]
            print(f"{layout:<8} {built * 1e5 / n:>12.2f} {raw:>10.0f} {rates[0]:>8.0f} {rates[0] / raw:>6.2f} "
                  f"{rates[1]:>8.0f} {rates[1] / raw:>6.2f}")
        ratio = loader_rate["wds"] / loader_rate["folder"]
        print(f"shards / folders, loader with {a.workers} workers: {ratio:.2f} "
              f"({'not slower' if ratio >= 0.95 else 'SLOWER'}; 1.00 = the same)")

if __name__ == "__main__":
    main()
