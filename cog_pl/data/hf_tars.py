"""Hugging Face's ``ILSVRC/imagenet-1k`` tars, streamed in place: ``train_images_{0..4}.tar.gz`` and
``val_images.tar.gz`` (in the root or its ``data/`` folder).

Members are named ``<original stem>_<wnid>.<ext>`` (``n01440764_10026_n01440764.JPEG``,
``ILSVRC2012_val_00000001_n01751748.JPEG``): the wnid is the last ``_`` word of the stem and the image keeps its
original name (``ILSVRC2012_val_00000001.JPEG``), so the rows are those of the folder layout.

Gzip has no random access, so the source is read by streaming: the index (one pass per tar, cached,
:mod:`cog_pl.data.index_cache`) lists each tar's members in order, and :meth:`HFTarSource.stream` decompresses each
tar once, yielding the wanted images as they come; extraction places the rows by their index
(:class:`~cog_pl.data.streamed.StreamedImages`). Nothing is unpacked to disk. :meth:`HFTarSource.read` of one image
works but decompresses its tar up to it (logged once): fine for a few images, never for a split.
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from cog_pl.data.index_cache import cached_index
from cog_pl.data.source_base import ImageSource, is_image_name
from cog_pl.data.tar_index import leave_out, outside
from cog_pl.errors import CogError, MissingFileError
from cog_pl.io import printable

_WNID = re.compile(r"n\d{8}")
PATTERNS = {"train": re.compile(r"train_images_\d+\.tar\.gz"), "test": re.compile(r"val_images\.tar\.gz")}
INDEX_VERSION = 2  # 2: members named outside the tar left out (:func:`~cog_pl.data.tar_index.outside`)


def hf_tars(root: Path, split: str | None = None) -> list[Path]:
    """The tars of ``split`` (``"train"``, ``"test"``; None: both) under ``root`` or ``root/data``, in name order."""
    out = []
    for folder in (root, root / "data"):
        if folder.is_dir():
            for p in sorted(folder.iterdir()):
                if any(pat.fullmatch(p.name) for s, pat in PATTERNS.items() if split in (None, s)):
                    out.append(p)
    return out


def original_name(tar: Path, member: str) -> tuple[str, str]:
    """``(wnid, original file name)`` of a member; refuses a name without a trailing wnid, naming tar and member."""
    base = member.rsplit("/", 1)[-1]
    stem, dot, ext = base.rpartition(".")
    head, _, wnid = stem.rpartition("_")
    if not (dot and head and _WNID.fullmatch(wnid)):
        raise CogError(f"{tar}: member {printable(member)} is not named <name>_<wnid>.<ext>")
    return wnid, f"{head}.{ext}"


def scan_hf_tar(tar: Path) -> list[list[str]]:
    """One streaming pass: ``[member, wnid, original name]`` of each image member, in tar order; a cut-short or
    damaged tar is refused naming it and the last member read."""
    out: list[list[str]] = []
    strays: list[str] = []
    last = None
    try:
        with tarfile.open(tar, "r|gz") as tf:
            for info in tf:
                if info.isfile() and is_image_name(info.name) and outside(info.name):
                    strays.append(info.name)
                elif info.isfile() and is_image_name(info.name):
                    out.append([info.name, *original_name(tar, info.name)])
                last = info.name
    except (tarfile.TarError, EOFError, OSError) as err:
        after = f"after member {printable(last)}" if last else "at its start"
        raise OSError(f"{tar}: truncated or damaged gzip tar {after} ({err})") from err
    leave_out(str(tar), strays)
    return out


class HFTarSource(ImageSource):
    """Hugging Face's gzipped tars under ``root`` (or ``root/data``); ``split`` picks train or val."""

    name = "hf_tars"  # registered by cog_pl.data.sources
    random_access = False
    holds_splits = True

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 split: str | None = None) -> None:
        super().__init__(root, cache_dir, split)
        self.tars = hf_tars(self.root, split)
        if not self.tars:
            raise MissingFileError(f"{self.root}: no Hugging Face imagenet-1k tars (train_images_*.tar.gz, "
                                   "val_images.tar.gz)" + (f" of split {split}" if split else ""))
        self._images: dict[str, dict[str, tuple[int, str]]] = {}
        for n, tar in enumerate(self.tars):
            for member, wnid, name in cached_index(tar, "hf", INDEX_VERSION, [tar], lambda t=tar: scan_hf_tar(t),
                                                   cache_dir):
                table = self._images.setdefault(wnid, {})
                if name in table:
                    raise CogError(f"{tar}: member {printable(member)} is {wnid}/{printable(name)}, which "
                                   f"{self.tars[table[name][0]].name} holds too")
                table[name] = (n, member)

    @classmethod
    def detect(cls, root: Path) -> bool:
        return bool(hf_tars(root))

    def synsets(self) -> list[str]:
        return sorted(self._images)

    def has(self, wnid: str) -> bool:
        return wnid in self._images

    def list(self, wnid: str) -> list[str]:
        if wnid not in self._images:
            raise MissingFileError(f"synset {wnid} is in no tar under {self.root}")
        return sorted(self._images[wnid])

    def where(self, wnid: str, filename: str) -> str:
        n, member = self._images.get(wnid, {}).get(filename, (None, f"{wnid}/{filename}"))
        return printable(f"{self.tars[n] if n is not None else self.root}:{member}")

    def entry(self, wnid: str, filename: str) -> str:
        n, member = self._images[wnid][filename]
        return f"{self.tars[n].name}:{member}"

    def read(self, wnid: str, filename: str) -> bytes:
        return self.read_streaming(wnid, filename, self.root)

    def stream_units(self, keys: Sequence[tuple[str, str]]) -> list[list[int]]:
        units: dict[int, list[int]] = {}
        for i, (wnid, name) in enumerate(keys):
            units.setdefault(self._images[wnid][name][0], []).append(i)
        return [units[n] for n in sorted(units)]

    def stream(self, keys: Sequence[tuple[str, str]]) -> Iterator[tuple[int, bytes | OSError]]:
        wanted: dict[int, dict[str, int]] = {}
        for i, (wnid, name) in enumerate(keys):
            n, member = self._images[wnid][name]
            wanted.setdefault(n, {})[member] = i
        for n in sorted(wanted):
            left, last = dict(wanted[n]), None
            try:
                with tarfile.open(self.tars[n], "r|gz") as tf:
                    for info in tf:
                        last = info.name
                        if info.name in left:
                            i = left.pop(info.name)
                            yield i, tf.extractfile(info).read()
                            if not left:
                                break
            except (tarfile.TarError, EOFError, OSError) as err:
                after = f"after member {printable(last)}" if last else "at its start"
                raise OSError(f"{self.tars[n]}: truncated or damaged gzip tar {after} ({err})") from err
            for member, i in left.items():
                yield i, OSError(f"{self.tars[n]}: member {printable(member)} is listed in its index but not in "
                                 "the tar (changed since indexed?)")
