"""Webdataset shards in timm's layout, read in place: IN-1K (``timm/imagenet-1k-wds``) and IN-21K Winter 2021
(``timm/imagenet-w21-wds``).

A root holds uncompressed shards named ``<prefix>[-<split>]-<number>.tar`` (``imagenet1k-train-0000.tar``,
``imagenet1k-validation-00.tar``) and optionally ``_info.json``. A sample is the members sharing a key (the member
path up to the first dot of its base name): the image (``jpg``, ``jpeg``, ``png`` or ``webp``), an integer ``cls``
(required) and an optional ``json`` whose ``filename`` is the original file name. Images are matched to the CoG
splits by that name (without ``json``: the key plus ``.JPEG``), so a pre-shuffled copy gives the same rows as the
folders. The wnid of a sample is ``_info.json``'s ``classes`` (or ``wnids``) at ``cls`` when it has that list, else
IN-1K's sorted wnids at ``cls`` for ``imagenet1k`` shards, else the ``n########`` prefix of the original name.

Each shard is indexed in one pass over its headers (reading only the small ``cls`` and ``json`` members) and the
index cached (:mod:`cog_pl.data.index_cache`); the shards' indexes are then merged into one memory-mapped
:class:`~cog_pl.data.image_table.ImageTable` (``<root>.wds-<split>.table``, rebuilt when a shard or ``_info.json``
changes), some 40 bytes per image shared by every process that reads it, where a dict would cost hundreds.
A shard cut short or a sample without ``cls`` or without an image is refused naming the shard and the sample, an
image in two shards naming both. An image stored in another format than its original
name says (``n01_1.JPEG`` as ``png``: the copy re-encoded it) is reported by :meth:`WebDatasetSource.altered`.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl import resources
from cog_pl.data.image_table import ImageTable
from cog_pl.data.index_cache import cached_index, cached_table
from cog_pl.data.source_base import ImageSource
from cog_pl.data.tar_index import BLOCK, check_complete, read_range
from cog_pl.errors import CogError, MissingFileError, NotFoundError
from cog_pl.io import printable

_SHARD = re.compile(r"(?P<prefix>.+?)(?:-(?P<split>train|validation|val|test))?-(?P<num>\d+)\.tar")
_WNID = re.compile(r"n\d{8}")
IMAGE_EXTS = {"jpg": "jpeg", "jpeg": "jpeg", "png": "png", "webp": "webp"}
SPLIT_OF_SHARD = {"train": "train", "validation": "test", "val": "test", "test": "heldout", None: None}
INDEX_VERSION = 1
TABLE_VERSION = 1


def shards(root: Path, split: str | None = None) -> list[Path]:
    """The shards under ``root`` in name order; with ``split``, those of IN-1K's ``"train"`` or ``"test"``."""
    out = []
    for p in sorted(root.iterdir()):
        m = _SHARD.fullmatch(p.name)
        if m and p.is_file() and (split is None or SPLIT_OF_SHARD[m["split"]] == split):
            out.append(p)
    return out


def _split_key(member: str) -> tuple[str, str]:
    """``(key, extension)`` of a member path, webdataset's rule: the extension starts at the base name's first dot."""
    folder, _, base = member.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def scan_shard(shard: Path) -> list[list[Any]]:
    """One pass over a shard: ``[key, image extension, offset, size, cls, original filename or None]`` per
    sample, in shard order; refuses a cut-short shard or a sample without ``cls`` or image, naming shard and key."""
    samples: dict[str, dict[str, Any]] = {}
    end, last = 0, None
    try:
        with tarfile.open(shard, "r:") as tf:
            for info in tf:
                end, last = info.offset_data + -(-info.size // BLOCK) * BLOCK, info.name
                if not info.isfile():
                    continue
                key, ext = _split_key(info.name)
                sample = samples.setdefault(key, {})
                if ext in IMAGE_EXTS:
                    sample["image"] = (ext, info.offset_data, info.size)
                elif ext in ("cls", "json"):
                    sample[ext] = tf.extractfile(info).read()
    except (tarfile.TarError, EOFError) as err:
        if last is not None:
            check_complete(shard, end, last)
        raise OSError(f"{shard}: not a readable uncompressed tar ({err})") from err
    check_complete(shard, end, last)
    out = []
    for key, s in samples.items():
        if "image" not in s:
            raise CogError(f"{shard}: sample {key} has no image member (jpg, png or webp)")
        if "cls" not in s:
            raise CogError(f"{shard}: sample {key} has no cls member, so its image {key}.{s['image'][0]} has "
                           "no label")
        try:
            cls = int(s["cls"].decode().strip())
        except ValueError:
            raise CogError(f"{shard}: sample {key}: cls {s['cls'][:20]!r} is not an integer") from None
        filename = None
        if "json" in s:
            try:
                filename = json.loads(s["json"]).get("filename")
            except (ValueError, AttributeError):
                raise CogError(f"{shard}: sample {key}: its json member is not a JSON object") from None
        out.append([key, *s["image"], cls, filename])
    return out


class WebDatasetSource(ImageSource):
    """timm's webdataset shards under ``root``; ``split`` picks IN-1K's train or validation shards."""

    name = "wds"  # registered by cog_pl.data.sources
    holds_splits = True

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 split: str | None = None) -> None:
        super().__init__(root, cache_dir, split)
        self.shards = shards(self.root, split)
        if not self.shards:
            raise MissingFileError(f"{self.root}: no webdataset shards (<prefix>[-<split>]-<number>.tar)"
                                   + (f" of split {split}" if split else ""))
        info = self.root / "_info.json"
        inputs = [*self.shards, *([info] if info.is_file() else [])]
        self.table = cached_table(self.root, f"wds-{split or 'all'}", TABLE_VERSION, inputs, self._build, cache_dir)
        self.exts: list[str] = self.table.meta["exts"]

    def _build(self) -> ImageTable:
        """The index of every shard (each scanned once and cached, :func:`scan_shard`) as one table: wnid and
        original name of each image, with its shard, offset, size and format."""
        classes = self._classes()
        wnids, names, shard, offsets, sizes, exts = [], [], [], [], [], []
        kinds: dict[str, int] = {}
        for n, path in enumerate(self.shards):
            entries = cached_index(path, "wds", INDEX_VERSION, [path], lambda s=path: scan_shard(s), self.cache_dir)
            for key, ext, offset, size, cls, filename in entries:
                name = filename or f"{key.rsplit('/', 1)[-1]}.JPEG"
                wnids.append(self._wnid(classes, cls, name, path, key))
                names.append(name)
                shard.append(n)
                offsets.append(offset)
                sizes.append(size)
                exts.append(kinds.setdefault(ext, len(kinds)))
        table = ImageTable.build(wnids, names, {"shard": np.asarray(shard, np.int32),
                                                "offset": np.asarray(offsets, np.int64),
                                                "size": np.asarray(sizes, np.uint32),
                                                "ext": np.asarray(exts, np.uint8)}, {"exts": list(kinds)})
        for a, b in table.duplicates()[:1]:
            first, second = sorted(int(table.columns["shard"][r]) for r in (a, b))
            wnid = next(w for k, w in enumerate(table.wnids) if table.starts[k] <= a < table.starts[k + 1])
            raise CogError(f"{self.shards[second]}: holds {wnid}/{printable(table.name(a))}, which "
                           f"{self.shards[first].name} holds too")
        return table

    def _at(self, wnid: str, filename: str) -> tuple[int, int, int, str]:
        """``(shard number, offset, size, image extension)`` of an image; ``KeyError`` naming it when absent."""
        row = self.table.find(wnid, filename)
        if row < 0:
            raise NotFoundError(f"{wnid}/{printable(filename)} is in no shard under {self.root}")
        c = self.table.columns
        return int(c["shard"][row]), int(c["offset"][row]), int(c["size"][row]), self.exts[int(c["ext"][row])]

    @classmethod
    def detect(cls, root: Path) -> bool:
        with os.scandir(root) as it:
            return any(_SHARD.fullmatch(e.name) and e.is_file() for e in it)

    def _classes(self) -> list[str] | None:
        info = self.root / "_info.json"
        if info.is_file():
            try:
                data = json.loads(info.read_text())
            except ValueError as err:
                raise CogError(f"{info}: not valid JSON ({err})") from err
            for key in ("classes", "wnids"):
                if isinstance(data.get(key), list):
                    return [str(w) for w in data[key]]
        if _SHARD.fullmatch(self.shards[0].name)["prefix"].startswith("imagenet1k"):
            return sorted(resources.in1k_wnids())
        return None

    @staticmethod
    def _wnid(classes: list[str] | None, cls: int, name: str, shard: Path, key: str) -> str:
        if classes is not None:
            if not 0 <= cls < len(classes):
                raise CogError(f"{shard}: sample {key}: cls {cls} is outside the {len(classes)} classes")
            return classes[cls]
        m = _WNID.match(name)
        if not m:
            raise CogError(f"{shard}: sample {key}: no wnid for cls {cls} (no class list in _info.json and the "
                           f"original name {printable(name)!r} does not start with one)")
        return m.group(0)

    def synsets(self) -> list[str]:
        return list(self.table.wnids)

    def has(self, wnid: str) -> bool:
        return self.table.has(wnid)

    def list(self, wnid: str) -> list[str]:
        if not self.table.has(wnid):
            raise MissingFileError(f"synset {wnid} is in no shard under {self.root}")
        return self.table.names(wnid)

    def read(self, wnid: str, filename: str) -> bytes:
        n, offset, size, _ext = self._at(wnid, filename)
        return read_range(self.shards[n], offset, size, what=f"{self.shards[n]} image {printable(filename)}")

    def where(self, wnid: str, filename: str) -> str:
        row = self.table.find(wnid, filename)
        n = int(self.table.columns["shard"][row]) if row >= 0 else None
        return printable(f"{self.shards[n] if n is not None else self.root}:{wnid}/{filename}")

    def entry(self, wnid: str, filename: str) -> str:
        n, offset, size, ext = self._at(wnid, filename)
        return f"{self.shards[n].name}:{offset}:{size}:{ext}"

    def altered(self) -> dict[tuple[str, str], str]:
        out = {}
        shard, code = self.table.columns["shard"], self.table.columns["ext"]
        for k, wnid in enumerate(self.table.wnids):
            for row in range(int(self.table.starts[k]), int(self.table.starts[k + 1])):
                name, ext = self.table.name(row), self.exts[int(code[row])]
                original = IMAGE_EXTS.get(name.rsplit(".", 1)[-1].lower())
                if original is not None and IMAGE_EXTS[ext] != original:
                    out[wnid, name] = f"stored as {ext} in {self.shards[int(shard[row])].name}, the original is " \
                                      f"{original}"
        return out
