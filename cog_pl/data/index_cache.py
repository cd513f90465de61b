"""One cached index per data file: built in one pass, reused while the file's size and mtime stay the same.

Every indexed source (:mod:`cog_pl.data.webdataset`, :mod:`cog_pl.data.hf_tars`, :mod:`cog_pl.data.flat_val`)
keeps what its pass over a file found (member offsets, labels, names) as JSON: ``{"format": "cog-pl-index", "kind",
"version", "stamp": [[name, size, mtime_ns], ...], "entries": ...}``. ``stamp`` lists the files the entries were
read from; the index is rebuilt as soon as one of them changes size or mtime (or the kind's ``version`` moves on).
It is written beside the data (``<file>.<kind>.index.json``) when that folder is writable, else under
``<cache_dir>/index/`` (``cache_dir``: given, else :func:`~cog_pl.data.tar_index.default_cache_dir`); with an
explicit ``cache_dir`` that folder is tried first.

An index of millions of images is kept as an :class:`~cog_pl.data.image_table.ImageTable` instead
(:func:`cached_table`: ``<file>.<kind>.table``, the same places and the same stamp, in the table's meta), which the
processes reading it memory-map and share.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cog_pl.data.image_table import ImageTable
from cog_pl.data.tar_index import default_cache_dir
from cog_pl.io import write_json

log = logging.getLogger(__name__)
INDEX_FORMAT = "cog-pl-index"


def stamp(paths: Sequence[Path]) -> list[list[Any]]:
    """``[name, size, mtime_ns]`` of each file: what invalidates an index built from them."""
    out = []
    for p in paths:
        st = p.stat()
        out.append([p.name, st.st_size, st.st_mtime_ns])
    return out


def _locations(anchor: Path, kind: str, cache_dir: Path | None, suffix: str = "index.json") -> list[Path]:
    digest = hashlib.sha256(str(anchor.resolve()).encode()).hexdigest()[:16]
    cached = (cache_dir or default_cache_dir()) / "index" / f"{anchor.name}-{kind}-{digest}.{suffix}"
    beside = anchor.with_name(f"{anchor.name}.{kind}.{suffix}")
    return [cached, beside] if cache_dir is not None else [beside, cached]


def cached_index(anchor: Path, kind: str, version: int, inputs: Sequence[Path], build: Callable[[], Any],
                 cache_dir: str | os.PathLike | None = None) -> Any:
    """The entries of the index of ``anchor`` (a file, or a folder for an index of its listing): loaded when its
    stamp matches ``inputs``, else ``build()`` (the one pass), cached and returned."""
    want = stamp(inputs)
    where = _locations(anchor, kind, Path(cache_dir) if cache_dir is not None else None)
    for path in where:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (data.get("format"), data.get("kind"), data.get("version"), data.get("stamp")) == (
                INDEX_FORMAT, kind, version, want):
            return data["entries"]
    entries = build()
    record = {"format": INDEX_FORMAT, "kind": kind, "version": version, "stamp": want, "entries": entries}
    for path in where:
        try:
            write_json(path, record, indent=None)
            log.debug("indexed %s (%s) -> %s", anchor, kind, path)
            break
        except OSError:
            continue
    else:
        log.warning("could not cache the %s index of %s anywhere; it will be rebuilt next time", kind, anchor)
    return entries


def cached_table(anchor: Path, kind: str, version: int, inputs: Sequence[Path], build: Callable[[], ImageTable],
                 cache_dir: str | os.PathLike | None = None) -> ImageTable:
    """:func:`cached_index` for an :class:`ImageTable`: the saved table of ``anchor``, memory-mapped, when its stamp
    matches ``inputs``, else ``build()`` saved (then mapped from where it was saved) and returned."""
    want = {"format": INDEX_FORMAT, "kind": kind, "version": version, "stamp": stamp(inputs)}
    where = _locations(anchor, kind, Path(cache_dir) if cache_dir is not None else None, "table")
    for path in where:
        try:
            table = ImageTable.load(path)
        except (OSError, ValueError, KeyError):
            continue
        if {k: table.meta.get(k) for k in want} == want:
            return table
    table = build()
    table.meta.update(want)
    for path in where:
        try:
            table.save(path)
            log.debug("indexed %s (%s, %d images) -> %s", anchor, kind, len(table), path)
            return ImageTable.load(path)
        except OSError:
            continue
    log.warning("could not cache the %s index of %s anywhere; it will be rebuilt next time", kind, anchor)
    return table


def entries_sha256(entries: Any) -> str:
    """A content hash of an index's entries (canonical JSON), recorded in the stores made from it."""
    text = json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
