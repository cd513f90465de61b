"""Feature store v1: the on-disk contract between feature extraction and the probes (docs/feature_store.md).

One directory per (model, domain, split), e.g. ``<root>/<model>/<domain>/<split>/``::

    features.npy   float16, N x D, memory-mappable
    labels.npy     int64, N
    index.npy      int64, N: the dataset row each feature row came from
    meta.json      {"format": "cog-pl-features", "version": 1, "model", "weights_sha256", "domain", "split",
                    "num_rows", "dim", "num_classes", "classes", "transform", "level_file_sha256", "versions",
                    "created", ...}

A store is complete if and only if ``meta.json`` exists: it is written last, inside a temporary sibling directory
that is renamed into place, so an unfinished store never looks finished. A directory holding only
``features.npy`` and ``labels.npy`` (as synthetic feature generators write) is accepted as a *plain* store, with a
synthesised meta. A train/test pair of stores is opened with :func:`cog_pl.features.pair.open_pair`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.io import write_json
from cog_pl.provenance import provenance

log = logging.getLogger(__name__)

STORE_FORMAT = "cog-pl-features"
STORE_VERSION = 1
REQUIRED_META = ("format", "version", "model", "weights_sha256", "domain", "split", "num_rows", "dim",
                 "num_classes", "classes", "transform", "level_file_sha256", "versions", "created")
#: Keys of ``expect`` that :func:`open_store` compares against a store's meta.
CHECKED_KEYS = ("model", "weights_sha256", "domain", "split", "level_file_sha256", "split_sha256", "num_classes",
                "dim", "transform")


class StoreError(ValueError):
    """A feature store that is missing, incomplete, damaged or not the one asked for; the message says why."""


@dataclass(frozen=True)
class FeatureStore:
    """An opened store: memory-mapped arrays and its metadata."""

    path: Path
    features: np.ndarray
    labels: np.ndarray
    index: np.ndarray
    meta: dict[str, Any]

    @property
    def plain(self) -> bool:
        return self.meta.get("format") != STORE_FORMAT

    @property
    def num_classes(self) -> int:
        """The classes of meta.json (``num_classes``, checked against the ``classes`` list); for a plain store, its
        largest label + 1."""
        return int(self.meta["num_classes"])

    def __len__(self) -> int:
        return len(self.labels)


def is_complete(path: str | os.PathLike) -> bool:
    """True when ``path`` is a finished v1 store (its ``meta.json`` exists)."""
    return (Path(path) / "meta.json").is_file()


def _load(path: Path, name: str) -> np.ndarray:
    if not (path / name).is_file():
        raise StoreError(f"{path / name}: no such file (a store holds features.npy and labels.npy, a v1 store also "
                         "index.npy and meta.json)")
    try:
        return np.load(path / name, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise StoreError(f"{path / name}: not a readable .npy file, truncated or corrupt ({err})") from err


def open_store(path: str | os.PathLike, expect: dict[str, Any] | None = None) -> FeatureStore:
    """Open a store (v1 or plain) memory-mapped; refuse with the reason when it is incomplete or differs from
    ``expect`` (keys of :data:`CHECKED_KEYS`; a plain store cannot be verified and only logs a warning)."""
    path = Path(path)
    if not path.is_dir():
        raise StoreError(f"no feature store at {path}")
    if is_complete(path):
        try:
            meta = json.loads((path / "meta.json").read_text())
        except ValueError as err:
            raise StoreError(f"{path / 'meta.json'}: not valid JSON ({err})") from err
        if meta.get("format") != STORE_FORMAT:
            raise StoreError(f"{path}: meta.json format is {meta.get('format')!r}, expected {STORE_FORMAT!r}")
        if meta.get("version") != STORE_VERSION:
            raise StoreError(f"{path}: store version {meta.get('version')}, this cog_pl reads version "
                             f"{STORE_VERSION}")
        features, labels, index = (_load(path, f"{n}.npy") for n in ("features", "labels", "index"))
    elif (path / "index.npy").exists():
        raise StoreError(f"{path}: incomplete feature store (no meta.json: unfinished or interrupted write)")
    elif (path / "features.npy").exists() or (path / "labels.npy").exists():
        features, labels = _load(path, "features.npy"), _load(path, "labels.npy")
        index = np.arange(len(labels), dtype=np.int64)
        meta = {"format": "plain", "split": path.name, "num_rows": len(labels),
                "dim": int(features.shape[1]) if features.ndim == 2 else None}
    else:
        raise StoreError(f"{path}: not a feature store (no features.npy, labels.npy, meta.json)")
    high = _validate(path, features, labels, index, meta)
    if meta["format"] != STORE_FORMAT:
        meta["num_classes"] = high + 1  # a plain store records no classes: its largest label + 1
    if expect:
        _compare(path, meta, expect)
    return FeatureStore(path, features, labels, index, meta)


def _validate(path: Path, features: np.ndarray, labels: np.ndarray, index: np.ndarray, meta: dict) -> int:
    """Refuse a store whose arrays or meta are inconsistent; returns its largest label (-1 when it has none)."""
    if features.ndim != 2 or not np.issubdtype(features.dtype, np.floating):
        raise StoreError(f"{path}: features.npy is {features.dtype} {features.shape}, expected a float N x D array")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise StoreError(f"{path}: labels.npy is {labels.dtype} {labels.shape}, expected an integer vector")
    if not len(features) == len(labels) == len(index):
        raise StoreError(f"{path}: row counts differ: features {len(features)}, labels {len(labels)}, "
                         f"index {len(index)}")
    low, high = (int(labels.min()), int(labels.max())) if len(labels) else (0, -1)
    if meta.get("format") != STORE_FORMAT:
        if low < 0:
            raise StoreError(f"{path / 'labels.npy'}: negative labels (classes are numbered from 0)")
        return high
    if (meta["num_rows"], meta["dim"]) != features.shape:
        raise StoreError(f"{path}: meta.json says {meta['num_rows']} x {meta['dim']}, features.npy is "
                         f"{features.shape[0]} x {features.shape[1]}")
    classes = meta.get("classes")
    if classes is not None and len(classes) != meta["num_classes"]:
        raise StoreError(f"{path / 'meta.json'}: num_classes is {meta['num_classes']} but classes lists "
                         f"{len(classes)}")
    if low < 0 or high >= meta["num_classes"]:
        raise StoreError(f"{path}: labels.npy holds labels {low}..{high}, outside 0..{meta['num_classes'] - 1} "
                         "(the classes of meta.json)")
    return high


def _compare(path: Path, meta: dict, expect: dict) -> None:
    unknown = set(expect) - set(CHECKED_KEYS)
    if unknown:
        raise ValueError(f"cannot check feature store key(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(CHECKED_KEYS)}")
    for key, want in expect.items():
        if want is None:
            continue
        if key not in meta:
            log.warning("%s: cannot verify %s=%r (the store does not record it)", path, key, want)
        elif meta[key] != want:
            raise StoreError(f"{path}: store was made with {key}={meta[key]!r}, but {want!r} was requested")


def make_meta(**fields: Any) -> dict[str, Any]:
    """A v1 meta dict: format, version, software versions and creation time (:func:`cog_pl.provenance.provenance`,
    no library imported) filled in; ``fields`` win."""
    return {"format": STORE_FORMAT, "version": STORE_VERSION, **provenance(), **fields}


class StoreWriter:
    """Streams rows into a store in a temporary directory; :meth:`finish` writes meta.json and renames it in.

    Rows may be written in any order, by position (``write(rows, features, labels, index)``), so DDP ranks can
    each open the same writer (same ``path`` and ``num_rows``: the temporary directory name is derived from
    ``path``) and fill their rows: rank 0 opens it first (creating the files), the others after a barrier; one rank
    calls :meth:`finish` after a final barrier. Reopening resumes an interrupted write, unless ``fresh``: then a
    write in progress (of any shape) is discarded and the store starts over.
    """

    def __init__(self, path: str | os.PathLike, num_rows: int, dim: int, overwrite: bool = False,
                 fresh: bool = False) -> None:
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise StoreError(f"{self.path} already exists; pass overwrite=True to replace it")
        self.tmp = self.path.parent / f".{self.path.name}.partial"
        if fresh:
            shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        mode = "r+" if (self.tmp / "features.npy").exists() else "w+"
        open_ = np.lib.format.open_memmap
        self.features = open_(self.tmp / "features.npy", mode, np.float16, (num_rows, dim))
        self.labels = open_(self.tmp / "labels.npy", mode, np.int64, (num_rows,))
        self.index = open_(self.tmp / "index.npy", mode, np.int64, (num_rows,))
        self.written = open_(self.tmp / "written.npy", mode, np.bool_, (num_rows,))
        if self.features.shape != (num_rows, dim):
            raise StoreError(f"{self.tmp} holds a {self.features.shape} write in progress, not {(num_rows, dim)}")
        self.overwrite = overwrite

    def write(self, rows: np.ndarray, features: np.ndarray, labels: np.ndarray, index: np.ndarray | None = None
              ) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self.features[rows] = np.asarray(features, dtype=np.float16)
        self.labels[rows] = labels
        self.index[rows] = rows if index is None else index
        for arr in (self.features, self.labels, self.index):
            arr.flush()  # rows reach the file before their written flags: a kill never marks a lost row done
        self.written[rows] = True
        self.written.flush()

    def finish(self, meta: dict[str, Any]) -> Path:
        """Check every row was written, flush, write meta.json last and rename the directory into place."""
        for arr in (self.features, self.labels, self.index, self.written):
            arr.flush()
        missing = np.flatnonzero(~np.asarray(self.written))
        if len(missing):
            raise StoreError(f"{self.path}: {len(missing)} row(s) never written, e.g. row {missing[0]}")
        n, d = self.features.shape
        meta = {**meta, "num_rows": int(n), "dim": int(d)}
        lacking = [k for k in REQUIRED_META if k not in meta]
        if lacking:
            raise StoreError(f"{self.path}: meta lacks {', '.join(lacking)}")
        del self.features, self.labels, self.index, self.written
        (self.tmp / "written.npy").unlink()
        for name in ("features.npy", "labels.npy", "index.npy"):
            with open(self.tmp / name, "rb") as fh:
                os.fsync(fh.fileno())
        write_json(self.tmp / "meta.json", meta)
        _swap_in(self.tmp, self.path, self.overwrite)
        log.info("wrote feature store %s (%d x %d)", self.path, n, d)
        return self.path

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def written_rows(path: str | os.PathLike, num_rows: int) -> np.ndarray:
    """Which rows an interrupted :class:`StoreWriter` already wrote (all when the store is complete)."""
    path = Path(path)
    if is_complete(path):
        return np.ones(num_rows, dtype=bool)
    flags = path.parent / f".{path.name}.partial" / "written.npy"
    if not flags.exists():
        return np.zeros(num_rows, dtype=bool)
    done = np.load(flags, mmap_mode="r")
    return np.asarray(done) if done.shape == (num_rows,) else np.zeros(num_rows, dtype=bool)


def _swap_in(tmp: Path, path: Path, overwrite: bool) -> None:
    if path.exists():
        if not overwrite:
            raise StoreError(f"{path} appeared while writing; not replaced")
        trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
        os.replace(path, trash / "store")
        os.replace(tmp, path)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, path)


#: Consecutive rows of a store: features (n x D), labels (n) and dataset index (n, or None: the row numbers).
Chunk = tuple[np.ndarray, np.ndarray, np.ndarray | None]


def write_chunks(path: str | os.PathLike, num_rows: int, dim: int, chunks: Iterable[Chunk], meta: dict[str, Any],
                 overwrite: bool = False) -> Path:
    """Write a complete store of ``num_rows`` rows from consecutive ``chunks``, atomically (temporary directory +
    rename). Every row is written, so a stale write in progress at ``path`` (a killed earlier one) is discarded;
    on any error the temporary directory is removed."""
    writer = StoreWriter(path, num_rows, dim, overwrite, fresh=True)
    try:
        start = 0
        for features, labels, index in chunks:
            if start + len(labels) > num_rows:
                raise StoreError(f"{path}: more than {num_rows} rows given")
            writer.write(np.arange(start, start + len(labels)), features, labels, index)
            start += len(labels)
        return writer.finish(meta)
    except BaseException:
        with contextlib.suppress(Exception):
            writer.abort()
        raise


def write_store(path: str | os.PathLike, features: np.ndarray, labels: np.ndarray, index: np.ndarray | None,
                meta: dict[str, Any], overwrite: bool = False, chunk: int = 65536) -> Path:
    """Write a complete store atomically (temporary directory + rename); ``meta`` as for :func:`make_meta`."""
    features, labels = np.asarray(features), np.asarray(labels)
    if features.ndim != 2 or len(features) != len(labels):
        raise StoreError(f"{path}: features {features.shape} and labels {labels.shape} do not match")
    if index is not None and len(index) != len(labels):
        raise StoreError(f"{path}: index has {len(index)} rows, labels {len(labels)}")
    index = None if index is None else np.asarray(index)
    chunks = ((features[a:a + chunk], labels[a:a + chunk], None if index is None else index[a:a + chunk])
              for a in range(0, len(labels), chunk))
    return write_chunks(path, len(labels), features.shape[1], chunks, meta, overwrite)
