"""Helpers for the source tests: ImageNet as users hold it, built at test time from real image bytes.

Layouts: IN-1K's flat ``val/`` with the devkit (``ILSVRC2012_validation_ground_truth.txt`` + ``meta.mat`` written
with scipy) or Kaggle's ``LOC_val_solution.csv``; timm's webdataset shards (IN-1K, and IN-21K Winter 2021 without
splits, pre-shuffled); Hugging Face's gzipped tars; IN-21K's whole tar (one tar per synset inside). Each is built
from the same images as a folder-per-synset copy, so extractions from both must be equal row for row. Images mix RGB,
grayscale and CMYK JPEGs, PNG and WebP.

Import from test modules: ``from conftest_sources import ...``.
"""

from __future__ import annotations

import csv
import io
import json
import random
import tarfile
from pathlib import Path

import lightning as L
import numpy as np
import torch
from conftest_data import jpeg_bytes, write_synset
from PIL import Image

from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.module import FeatureExtractor
from cog_pl.features.store import open_store

MODEL = "timm:resnet10t"
KINDS = ("jpeg", "gray", "cmyk", "png", "webp")


def image_bytes(kind: str, seed: int) -> bytes:
    """Real encoded bytes: an RGB, grayscale or CMYK JPEG, a PNG or a WebP (lossless), ``corrupt`` not an image."""
    if kind == "jpeg":
        return jpeg_bytes(seed)
    if kind == "corrupt":
        return b"not an image at all" * 8
    rng = np.random.default_rng(seed)
    mode, fmt = {"gray": ("L", "JPEG"), "cmyk": ("CMYK", "JPEG"), "png": ("RGB", "PNG"), "webp": ("RGB", "WEBP")}[kind]
    channels = {"L": 1, "CMYK": 4, "RGB": 3}[mode]
    pixels = rng.integers(0, 255, (30, 40, channels), dtype=np.uint8)
    img = Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return buf.getvalue()


def add_member(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def in1k_images(wnids: tuple[str, ...], n_train: int = 3, n_val: int = 4,
                bad: tuple[str, ...] = ()) -> dict[str, dict[str, dict[str, bytes]]]:
    """``{split: {wnid: {filename: bytes}}}`` for IN-1K: val images numbered as the official release
    (``ILSVRC2012_val_{k:08d}.JPEG``, classes interleaved), every kind of image among them; ``bad`` names files
    whose bytes are corrupt."""
    out: dict[str, dict[str, dict[str, bytes]]] = {"train": {}, "test": {}}
    k = 0
    for i, wnid in enumerate(wnids):
        out["train"][wnid] = {f"{wnid}_{j}.JPEG": image_bytes(KINDS[(i + j) % len(KINDS)], 100 * i + j)
                              for j in range(n_train)}
    for _ in range(n_val):
        for wnid in wnids:
            k += 1
            out["test"].setdefault(wnid, {})[f"ILSVRC2012_val_{k:08d}.JPEG"] = image_bytes(KINDS[k % len(KINDS)],
                                                                                           10_000 + k)
    for split in out.values():
        for files in split.values():
            for name in files:
                if name in bad:
                    files[name] = image_bytes("corrupt", 0)
    return out


def write_folders(root: Path, images: dict[str, dict[str, dict[str, bytes]]]) -> Path:
    """IN-1K as sorted folders: ``train/<wnid>/`` and ``val/<wnid>/``."""
    for split, sub in (("train", "train"), ("test", "val")):
        for wnid, files in images[split].items():
            write_synset(root / sub, wnid, files, "folder")
    return root


def write_flat_val(root: Path, images: dict[str, dict[str, dict[str, bytes]]], labels: str = "devkit",
                   drop: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> Path:
    """IN-1K with the official flat ``val/`` labelled by the devkit (``labels="devkit"``, ``meta.mat`` by scipy,
    IDs in an order other than the wnids') or Kaggle's CSV; ``drop``: val files left out (still labelled);
    ``extra``: files put in ``val/`` that no label lists."""
    for wnid, files in images["train"].items():
        write_synset(root / "train", wnid, files, "folder")
    (root / "val").mkdir(parents=True)
    label = {name: wnid for wnid, files in images["test"].items() for name in files}
    for name, wnid in label.items():
        if name not in drop:
            (root / "val" / name).write_bytes(images["test"][wnid][name])
    for name in extra:
        (root / "val" / name).write_bytes(image_bytes("jpeg", 7))
    order = sorted(label)
    if labels == "devkit":
        from scipy.io import savemat

        wnids = sorted(images["test"], reverse=True) + ["n99999999"]  # ILSVRC2012_ID k+1 is wnids[k]
        table = np.array([(k + 1, w) for k, w in enumerate(wnids)], dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O")])
        data = root / "ILSVRC2012_devkit_t12" / "data"
        data.mkdir(parents=True)
        savemat(str(data / "meta.mat"), {"synsets": table})
        (data / "ILSVRC2012_validation_ground_truth.txt").write_text(
            "".join(f"{wnids.index(label[n]) + 1}\n" for n in order))
    else:
        with open(root / "LOC_val_solution.csv", "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["ImageId", "PredictionString"])
            for n in order:
                writer.writerow([n.rsplit(".", 1)[0], f"{label[n]} 1 2 30 20 {label[n]} 3 4 10 10"])
    return root


def write_shards(root: Path, prefix: str, samples: list[tuple[str, str, bytes, str, int | None]], per_shard: int = 5,
                 seed: int = 0, with_json: bool = True) -> list[Path]:
    """Webdataset shards in timm's layout: ``(key, image ext, bytes, original filename, cls)`` samples shuffled
    into ``<prefix>-{0000..}.tar``; ``cls=None`` leaves the member out."""
    root.mkdir(parents=True, exist_ok=True)
    samples = list(samples)
    random.Random(seed).shuffle(samples)
    paths = []
    for n in range(0, len(samples), per_shard):
        path = root / f"{prefix}-{n // per_shard:04d}.tar"
        with tarfile.open(path, "w") as tf:
            for key, ext, data, filename, cls in samples[n:n + per_shard]:
                add_member(tf, f"{key}.{ext}", data)
                if cls is not None:
                    add_member(tf, f"{key}.cls", str(cls).encode())
                if with_json:
                    add_member(tf, f"{key}.json", json.dumps({"filename": filename, "label": cls}).encode())
        paths.append(path)
    return paths


def in1k_shards(root: Path, images: dict[str, dict[str, dict[str, bytes]]]) -> Path:
    """``imagenet1k-train-*.tar`` and ``imagenet1k-validation-*.tar`` (cls: index in the sorted IN-1K wnids)."""
    classes = sorted(images["train"])
    for split, name in (("train", "train"), ("test", "validation")):
        samples = [(f"s{split}{k:05d}", "jpg", data, fn, classes.index(w))
                   for k, (w, fn, data) in enumerate((w, fn, d) for w, files in images[split].items()
                                                     for fn, d in files.items())]
        write_shards(root, f"imagenet1k-{name}", samples, seed=len(samples))
    (root / "_info.json").write_text(json.dumps({"name": "imagenet-1k", "splits": {}}))
    return root


def w21_shards(folders: Path, root: Path, drop: tuple[str, ...] = (), reencode: dict[str, str] | None = None,
               per_shard: int = 7) -> Path:
    """IN-21K Winter 2021 as ``imagenet-w21-wds``: every image of a folder-per-synset copy in pre-shuffled shards,
    with no class list (the wnid comes from the original name); ``drop`` leaves images (``wnid/filename``) out,
    ``reencode`` stores some as ``png`` or ``webp``."""
    reencode = reencode or {}
    samples = []
    for k, path in enumerate(sorted(folders.glob("n*/*"))):
        key = f"{path.parent.name}/{path.name}"
        if key in drop:
            continue
        ext = reencode.get(key, "jpg")
        data = path.read_bytes()
        if ext != "jpg":
            buf = io.BytesIO()
            with Image.open(io.BytesIO(data)) as img:
                img.convert("RGB").save(buf, format=ext.upper())
            data = buf.getvalue()
        samples.append((f"{k:08d}", ext, data, path.name, 7 * k % 11))
    write_shards(root, "imagenet-w21-train", samples, per_shard=per_shard)
    return root


def hf_tars(root: Path, images: dict[str, dict[str, dict[str, bytes]]], train_tars: int = 2) -> Path:
    """Hugging Face's ``ILSVRC/imagenet-1k`` layout: ``data/train_images_{k}.tar.gz`` and ``data/val_images.tar.gz``,
    members ``<stem>_<wnid>.<ext>``, in no particular order."""
    data = root / "data"
    data.mkdir(parents=True)
    for split, names in (("train", [f"train_images_{k}.tar.gz" for k in range(train_tars)]),
                         ("test", ["val_images.tar.gz"])):
        members = [(f"{fn.rsplit('.', 1)[0]}_{w}.{fn.rsplit('.', 1)[1]}", d) for w, files in images[split].items()
                   for fn, d in files.items()]
        random.Random(1).shuffle(members)
        for k, name in enumerate(names):
            with tarfile.open(data / name, "w:gz") as tf:
                for member, d in members[k::len(names)]:
                    add_member(tf, member, d)
    return root


def whole_tar(folders: Path, path: Path, inner_folder: bool = False) -> Path:
    """IN-21K as one outer tar (``fall11_whole.tar``; gzip when ``path`` ends in ``.gz``, as ``winter21_whole.tar.gz``)
    holding one tar per synset of a folder-per-synset copy, in no sorted order; ``inner_folder``: the synset tars
    under ``winter21_whole/`` and their images under ``<wnid>/``, as ``tar cf`` of folders makes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    synsets = sorted(p for p in folders.iterdir() if p.is_dir())
    random.Random(2).shuffle(synsets)
    with tarfile.open(path, "w:gz" if path.name.endswith(".gz") else "w") as outer:
        add_member(outer, "README.txt", b"ImageNet whole release\n")
        for folder in synsets:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as inner:
                for image in sorted(folder.iterdir(), reverse=True):
                    add_member(inner, f"{folder.name}/{image.name}" if inner_folder else image.name,
                               image.read_bytes())
            add_member(outer, f"winter21_whole/{folder.name}.tar" if inner_folder else f"{folder.name}.tar",
                       buf.getvalue())
    return path


def extract(out: Path, domains: tuple[str, ...], in1k_root: Path | None = None, in21k_root: Path | None = None,
            num_workers: int = 0, **kw) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray, dict]]:
    """Extract ``domains`` with a seeded random resnet10t on CPU (``num_workers`` loader workers); ``{(domain,
    split): (features, labels, index, meta)}`` of the stores written."""
    torch.manual_seed(0)
    model = FeatureExtractor(MODEL, random_weights=True)
    dm = ExtractionDataModule(out=str(out), model_name="m", in1k_root=str(in1k_root) if in1k_root else None,
                              in21k_root=str(in21k_root) if in21k_root else None, domains=domains,
                              transform=model.transform_config, batch_size=4, num_workers=num_workers, **kw)
    L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
              enable_model_summary=False).predict(model, datamodule=dm, return_predictions=False)
    stores = {}
    for d in domains:
        for s in ("train", "test"):
            st = open_store(out / "m" / d / s)
            stores[d, s] = (np.asarray(st.features), np.asarray(st.labels), np.asarray(st.index), st.meta)
    return stores


def assert_same_stores(a: dict, b: dict) -> None:
    """Equal row for row: labels and row index exactly, features to float16's rounding (the same image in another
    batch composition may round one value to the neighbouring float16 on some CPUs' kernels; another image differs
    everywhere)."""
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(np.asarray(a[key][0], np.float32), np.asarray(b[key][0], np.float32), rtol=2e-3,
                                   atol=1e-6, err_msg=str(key))
        for x, y in zip(a[key][1:3], b[key][1:3]):
            np.testing.assert_array_equal(x, y, err_msg=str(key))
        assert len(a[key][0]) > 0
