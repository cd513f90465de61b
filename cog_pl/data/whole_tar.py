"""IN-21K as ImageNet ships it whole: one outer tar holding one tar per synset, read in place.

``fall11_whole.tar`` (Fall 2011, uncompressed) and ``winter21_whole.tar.gz`` (Winter 2021, gzip) hold one member
``[folder/]n01440764.tar`` per synset, each the synset's images (``n01440764_10026.JPEG``; read as
:mod:`cog_pl.data.tar_index` reads a synset's tar). The root is the outer tar itself or a folder holding one: a file
named ``*_whole.tar`` / ``*_whole.tar.gz``, or any tar among whose first members is a synset's tar.

An uncompressed outer tar is read with random access: one pass over its headers and those of every inner tar finds
each image's offset in the outer file (the inner tar's data offset plus the image's offset inside it), kept in a
memory-mapped :class:`~cog_pl.data.image_table.ImageTable` (:func:`~cog_pl.data.index_cache.cached_table`). A gzip
outer tar has no random access: the index (one decompressing pass) lists each synset's images, and
:meth:`WholeTarSource.stream` decompresses the outer tar once per call, yielding the wanted images as they come;
extraction places the rows by index (:class:`~cog_pl.data.streamed.StreamedImages`) and gives each reader (loader
worker, DDP rank) whole synsets. Each reader decompresses the stream, decoding only its synsets' images.

A cut-short outer tar and an inner member that is not a tar are refused, naming the file and the member.
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.data.image_table import ImageTable
from cog_pl.data.index_cache import cached_table
from cog_pl.data.source_base import ImageSource, is_image_name
from cog_pl.data.tar_index import BLOCK, check_complete, leave_out, member_key, outside, read_range, scan_tar
from cog_pl.data.webdataset import _SHARD
from cog_pl.errors import CogError, MissingFileError, NotFoundError
from cog_pl.io import printable

WHOLE = re.compile(r".+_whole\.tar(\.gz)?")
INNER = re.compile(r"(?:.*/)?(n\d{8})\.tar")
_WNID_TAR = re.compile(r"n\d{8}\.tar")
INDEX_VERSION = 2  # 2: members named outside their tar left out (:func:`~cog_pl.data.tar_index.outside`)
_STREAM_ERRORS = (tarfile.TarError, EOFError, OSError)


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def holds_synset_tars(path: Path, look: int = 3) -> bool:
    """Whether one of a tar's (gzip or not) first ``look`` members is a synset's tar (a README may come first)."""
    try:
        with tarfile.open(path, "r|*") as tf:
            for _, info in zip(range(look), tf):
                if INNER.fullmatch(member_key(info.name)):
                    return True
    except (tarfile.TarError, EOFError, OSError):
        pass
    return False


def find_whole_tar(path: Path) -> list[Path]:
    """The outer tars ``path`` is or holds: itself when it is one, else its ``*_whole.tar[.gz]`` files, else its
    other tars that start with a synset's tar (shards and per-synset tars are not looked into)."""
    if path.is_file():
        return [path] if WHOLE.fullmatch(path.name) or holds_synset_tars(path) else []
    if not path.is_dir():
        return []
    with os.scandir(path) as it:
        files = sorted(Path(e.path) for e in it if e.is_file() and e.name.endswith((".tar", ".tar.gz", ".tgz")))
    named = [p for p in files if WHOLE.fullmatch(p.name)]
    if named:
        return named
    others = [p for p in files if not _WNID_TAR.fullmatch(p.name) and not _SHARD.fullmatch(p.name)][:8]
    return [p for p in others if holds_synset_tars(p)]


def _outer_error(tar: Path, last: str | None, err: BaseException) -> OSError:
    after = f"after member {printable(last)}" if last else "at its start"
    return OSError(f"{tar}: truncated or damaged gzip tar {after} ({err})")


def _drain(fh: Any) -> None:
    while fh.read(1 << 20):
        pass


def scan_plain(tar: Path) -> ImageTable:
    """One pass over an uncompressed outer tar and its inner tars: each image's absolute offset and size."""
    size = os.path.getsize(tar)
    inner: list[str] = []
    wnids, names, offsets, sizes, owner, strays = [], [], [], [], [], []
    end, last = 0, None
    try:
        with tarfile.open(tar, "r:") as tf:
            for info in tf:
                end, last = info.offset_data + -(-info.size // BLOCK) * BLOCK, info.name
                m = INNER.fullmatch(member_key(info.name))
                if not (info.isfile() and m):
                    continue
                if outside(info.name):
                    strays.append(info.name)
                    continue
                if info.offset_data + info.size > size:
                    raise OSError(f"{tar}: truncated, {info.offset_data + info.size - size} bytes missing (member "
                                  f"{printable(info.name)} ends at byte {info.offset_data + info.size}, the file "
                                  f"has {size})")
                label = f"{tar}: member {printable(info.name)}"
                try:
                    members = scan_tar(tar, info.offset_data, info.size, label)
                except OSError as err:
                    raise OSError(str(err).replace(": not a readable uncompressed", " is not a readable")) from err
                for name, (offset, length) in members.items():
                    if is_image_name(name):
                        wnids.append(m.group(1))
                        names.append(name)
                        offsets.append(info.offset_data + offset)
                        sizes.append(length)
                        owner.append(len(inner))
                inner.append(info.name)
    except (tarfile.TarError, EOFError) as err:
        if last is not None:
            check_complete(tar, end, last)
        raise OSError(f"{tar}: not a readable uncompressed tar ({err})") from err
    check_complete(tar, end, last)
    leave_out(str(tar), strays)
    return _table(tar, inner, wnids, names, {"inner": np.asarray(owner, np.int32),
                                             "offset": np.asarray(offsets, np.int64),
                                             "size": np.asarray(sizes, np.uint32)})


def _inner_names(tar: Path, outer: tarfile.TarFile, info: tarfile.TarInfo) -> list[str]:
    """The member keys of an inner tar read from a stream; a bad inner tar or a cut-short outer one named."""
    fh = outer.extractfile(info)
    try:
        with tarfile.open(fileobj=fh, mode="r|") as inner:
            files = [i.name for i in inner if i.isfile()]
        leave_out(f"{tar}: member {printable(info.name)}", [n for n in files if outside(n)])
        return [member_key(n) for n in files if not outside(n)]
    except (tarfile.TarError, EOFError, OSError) as err:
        try:
            _drain(fh)  # the member's bytes all there: the inner tar itself is bad
        except _STREAM_ERRORS:
            raise _outer_error(tar, info.name, err) from err
        raise OSError(f"{tar}: member {printable(info.name)} is not a readable tar ({err})") from err


def _strip(keys: list[str]) -> tuple[str, list[str]]:
    """``(folder, names)``: keys all in one folder are read from it (:func:`~cog_pl.data.tar_index.scan_tar`)."""
    tops = {k.split("/", 1)[0] if "/" in k else None for k in keys}
    if len(tops) == 1 and None not in tops:
        top = tops.pop() + "/"
        return top, [k[len(top):] for k in keys]
    return "", keys


def scan_gzip(tar: Path) -> ImageTable:
    """One decompressing pass over a gzip outer tar: each synset's images, in the order they are stored."""
    inner: list[str] = []
    prefixes: list[str] = []
    wnids, names, owner, order, strays = [], [], [], [], []
    last = None
    try:
        with tarfile.open(tar, "r|gz") as tf:
            for info in tf:
                last = info.name
                m = INNER.fullmatch(member_key(info.name))
                if not (info.isfile() and m):
                    continue
                if outside(info.name):
                    strays.append(info.name)
                    continue
                prefix, keys = _strip(_inner_names(tar, tf, info))
                for name in keys:
                    if is_image_name(name):
                        wnids.append(m.group(1))
                        names.append(name)
                        owner.append(len(inner))
                        order.append(len(order))
                inner.append(info.name)
                prefixes.append(prefix)
    except OSError:
        raise
    except (tarfile.TarError, EOFError) as err:
        raise _outer_error(tar, last, err) from err
    leave_out(str(tar), strays)
    table = _table(tar, inner, wnids, names, {"inner": np.asarray(owner, np.int32),
                                              "order": np.asarray(order, np.int64)})
    table.meta["prefixes"] = prefixes
    return table


def _table(tar: Path, inner: list[str], wnids: list[str], names: list[str], columns: dict) -> ImageTable:
    seen: dict[str, str] = {}
    for member in inner:
        wnid = INNER.fullmatch(member_key(member)).group(1)
        if wnid in seen:
            raise CogError(f"{tar}: members {printable(seen[wnid])} and {printable(member)} are both synset {wnid}")
        seen[wnid] = member
    return ImageTable.build(wnids, names, columns, {"inner": inner})


class WholeTarSource(ImageSource):
    """IN-21K's ``*_whole.tar[.gz]``: ``root`` the outer tar or a folder holding one."""

    name = "whole_tar"  # registered by cog_pl.data.sources

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 split: str | None = None) -> None:
        path = Path(root)
        found = find_whole_tar(path)
        if not found:
            raise MissingFileError(f"{path}: no IN-21K whole tar (*_whole.tar[.gz], one tar per synset inside)")
        if len(found) > 1:
            raise CogError(f"{path} holds {len(found)} whole tars ({', '.join(p.name for p in found)}); give the "
                           "one to read as the root")
        self.tar = found[0]
        super().__init__(self.tar.parent, cache_dir, split)
        self.random_access = not is_gzip(self.tar)
        scan = scan_plain if self.random_access else scan_gzip
        self.table = cached_table(self.tar, "whole", INDEX_VERSION, [self.tar], lambda: scan(self.tar), cache_dir)
        self.inner: list[str] = self.table.meta["inner"]

    @classmethod
    def detect(cls, root: Path) -> bool:
        return bool(find_whole_tar(root))

    def synsets(self) -> list[str]:
        return list(self.table.wnids)

    def has(self, wnid: str) -> bool:
        return self.table.has(wnid)

    def list(self, wnid: str) -> list[str]:
        if not self.table.has(wnid):
            raise MissingFileError(f"synset {wnid} is missing from {self.tar} (no {wnid}.tar inside)")
        return self.table.names(wnid)

    def _row(self, wnid: str, filename: str) -> int:
        row = self.table.find(wnid, filename)
        if row < 0:
            raise NotFoundError(f"{wnid}/{printable(filename)} is not in {self.tar}")
        return row

    def where(self, wnid: str, filename: str) -> str:
        row = self.table.find(wnid, filename)
        inner = self.inner[int(self.table.columns["inner"][row])] if row >= 0 else f"{wnid}.tar"
        return printable(f"{self.tar}:{inner}:{filename}")

    def entry(self, wnid: str, filename: str) -> str:
        row, cols = self._row(wnid, filename), self.table.columns
        inner = self.inner[int(cols["inner"][row])]
        return f"{inner}:{int(cols['offset'][row])}:{int(cols['size'][row])}" if self.random_access else inner

    def read(self, wnid: str, filename: str) -> bytes:
        if self.random_access:
            row, cols = self._row(wnid, filename), self.table.columns
            return read_range(self.tar, int(cols["offset"][row]), int(cols["size"][row]),
                              what=f"{self.tar} image {printable(wnid + '/' + filename)}")
        return self.read_streaming(wnid, filename, self.tar)

    def stream_units(self, keys: Sequence[tuple[str, str]]) -> list[list[int]]:
        if self.random_access:
            return super().stream_units(keys)
        units: dict[int, list[int]] = {}
        for i, (wnid, name) in enumerate(keys):
            units.setdefault(int(self.table.columns["inner"][self._row(wnid, name)]), []).append(i)
        return [units[n] for n in sorted(units)]

    def stream(self, keys: Sequence[tuple[str, str]]) -> Iterator[tuple[int, bytes | OSError]]:
        if self.random_access:
            yield from super().stream(keys)
            return
        wanted: dict[str, dict[str, int]] = {}  # inner member -> {image member key: position}
        prefixes = self.table.meta["prefixes"]
        for i, (wnid, name) in enumerate(keys):
            n = int(self.table.columns["inner"][self._row(wnid, name)])
            wanted.setdefault(self.inner[n], {})[prefixes[n] + name] = i
        last = None
        try:
            with tarfile.open(self.tar, "r|gz") as tf:
                for info in tf:
                    last = info.name
                    left = wanted.get(info.name)
                    if not left:
                        continue
                    with tarfile.open(fileobj=tf.extractfile(info), mode="r|") as inner:
                        for member in inner:
                            i = None if outside(member.name) else left.pop(member_key(member.name), None)
                            if i is not None:
                                yield i, inner.extractfile(member).read()
                                if not left:
                                    break
                    for member, i in left.items():
                        yield i, OSError(f"{self.tar}: {printable(info.name)}:{printable(member)} is listed in its "
                                         "index but not in the tar (changed since indexed?)")
                    del wanted[info.name]
                    if not wanted:
                        break
        except _STREAM_ERRORS as err:
            raise _outer_error(self.tar, last, err) from err
        for member, left in wanted.items():
            for name, i in left.items():
                yield i, OSError(f"{self.tar}: {printable(member)}:{printable(name)} is listed in its index but not "
                                 "in the tar (changed since indexed?)")
