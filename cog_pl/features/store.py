"""Feature store v1: the on-disk contract between feature extraction and the probes (docs/feature_store.md).

One directory per (model, domain, split), e.g. ``<root>/<model>/<domain>/<split>/``::

    features.npy   float16 (float32 when asked: ``dtype``), N x D, memory-mappable; a *token store* N x T x D
    labels.npy     int64, N
    index.npy      int64, N: the dataset row each feature row came from
    meta.json      {"format": "cog-pl-features", "version": 1, "model", "weights_sha256", "domain", "split",
                    "num_rows", "dim", "dtype", "num_classes", "classes", "transform", "level_file_sha256",
                    "versions", "created", ...}

A token store (a token definition, :mod:`cog_pl.models.definitions`) holds T tokens per row, its meta ``tokens``
(T) and ``token_layout`` (``{"cls": 1, "grid": [h, w]}``: the class token, then the grid cells row-major).
A store is complete if and only if ``meta.json`` exists: it is written last, inside a temporary sibling directory
(``.<name>.partial/``, which also holds ``written.npy``, the rows done, and ``identity.json``, what makes them) that
is renamed into place, so an unfinished store never looks finished. The :data:`IDENTITY_KEYS` of its meta (or of a
partial's ``identity.json``) say what made its rows: a store is skipped or resumed only when they equal the current
run's (:func:`check_identity`), never on completeness alone. Finishing is safe against a kill at any step: the
partial stays resumable until the rename, after which the store is complete (bookkeeping files a kill left in it
are ignored). Writes never produce NaN, inf or float16 overflow, and the space is reserved before the first row. A
directory holding only
``features.npy`` and ``labels.npy`` (as synthetic feature generators write) is accepted as a *plain* store, with a
synthesised meta. A train/test pair of stores is opened with :func:`cog_pl.features.pair.open_pair`.
"""

from __future__ import annotations

import errno
import glob
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

from cog_pl.errors import CogError, StoreError
from cog_pl.features.missing import missing_records, valid_rows
from cog_pl.features.paths import is_complete, partial_path  # defined below store and missing; importable here
from cog_pl.io import DISK_FULL, disk_full, write_json
from cog_pl.provenance import provenance

log = logging.getLogger(__name__)

STORE_FORMAT = "cog-pl-features"
STORE_VERSION = 1
REQUIRED_META = ("format", "version", "model", "weights_sha256", "domain", "split", "num_rows", "dim",
                 "num_classes", "classes", "transform", "level_file_sha256", "versions", "created")
#: Keys of ``expect`` that :func:`open_store` compares against a store's meta.
CHECKED_KEYS = ("model", "weights_sha256", "domain", "split", "level_file_sha256", "split_sha256", "num_classes",
                "dim", "transform")
#: Meta keys that say what made a store's rows (the model half from the extractor, the data half from the image
#: datamodule, and the features' dtype); :func:`check_identity` compares them before a store is skipped or resumed.
IDENTITY_KEYS = ("model", "arch", "feature", "definition", "trusted_checkpoint", "weights_sha256", "precision",
                 "transform", "dtype", "domain", "split", "classes", "level_file_sha256", "split_sha256", "benchmark",
                 "decode", "tokens")
#: The value of an identity key a store made before the key existed holds (it was made the one way there was).
IDENTITY_DEFAULTS = {"dtype": "float16", "decode": "pil", "trusted_checkpoint": False}
#: Files of a write in progress; a kill after the rename may leave them in a finished store, where they are ignored.
BOOKKEEPING = ("written.npy", "identity.json", "missing.npy", "missing.jsonl")
#: Feature dtypes a store may hold; float16 (the protocol's) by default.
DTYPES = ("float16", "float32")
OVERWRITE_HINT = "pass --overwrite (cog-pl extract: --data.overwrite true) to replace it"


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
    def tokens(self) -> int | None:
        """T of a token store (``[N, T, D]`` features), None for a vector store (``[N, D]``)."""
        return int(self.features.shape[1]) if self.features.ndim == 3 else None

    @property
    def num_classes(self) -> int:
        """The classes of meta.json (``num_classes``, checked against the ``classes`` list); for a plain store, its
        largest label + 1."""
        return int(self.meta["num_classes"])

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def valid(self) -> np.ndarray:
        """Bool mask of the rows that hold features: every row but meta.json's ``missing`` ones (images skipped as
        unreadable at extraction, :mod:`cog_pl.features.missing`); every reader of a store leaves those out."""
        return valid_rows(self.meta, len(self), self.path / "meta.json")


def identity_of(meta: dict[str, Any]) -> dict[str, Any]:
    """The :data:`IDENTITY_KEYS` of a store's meta (those it has), as JSON gives them back (tuples as lists)."""
    return json.loads(json.dumps({k: meta[k] for k in IDENTITY_KEYS if k in meta}))


def check_identity(path: str | os.PathLike, want: dict[str, Any]) -> None:
    """Refuse to skip or resume the store at ``path`` (finished, else an interrupted write of it) unless what made
    it equals ``want`` on every identity key ``want`` has (a key the store lacks counts as different): one line
    naming the store, each differing key with both values, and ``--overwrite``."""
    path = Path(path)
    if is_complete(path):
        try:
            have = {**IDENTITY_DEFAULTS, **identity_of(json.loads((path / "meta.json").read_text()))}
        except ValueError as err:
            raise StoreError(f"{path / 'meta.json'}: not valid JSON ({err}); {OVERWRITE_HINT}") from err
        _refuse_mismatch(path, have, want, "feature store")
    else:
        tmp = partial_path(path)
        _refuse_mismatch(tmp, _partial_identity(tmp), want, "interrupted feature store write")


def _partial_identity(tmp: Path) -> dict[str, Any] | None:
    """The identity an interrupted write recorded; ``{}`` for one from before identities that wrote rows; None when
    there is none, or nothing in it to mix with."""
    if (tmp / "identity.json").is_file():
        try:
            return {"decode": IDENTITY_DEFAULTS["decode"], **json.loads((tmp / "identity.json").read_text())}
        except ValueError as err:
            raise StoreError(f"{tmp / 'identity.json'}: not valid JSON ({err}); {OVERWRITE_HINT}") from err
    return {} if _any_written(tmp) else None


def _refuse_mismatch(where: Path, have: dict[str, Any] | None, want: dict[str, Any], what: str) -> None:
    if have is None:
        return
    diff = [f"{k}={_short(have.get(k, '<not recorded>'))} (this run: {_short(v)})"
            for k, v in identity_of(want).items() if have.get(k, "<not recorded>") != v]
    if diff:
        raise StoreError(f"{where}: {what} made with different inputs: {'; '.join(diff)}; {OVERWRITE_HINT}")


def _short(value: Any, width: int = 70) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _any_written(tmp: Path) -> bool:
    try:
        return bool(np.load(tmp / "written.npy", mmap_mode="r").any())
    except (OSError, ValueError):
        return False


def tidy(path: str | os.PathLike) -> None:
    """Remove what a kill inside :meth:`StoreWriter.finish` may have left of a finished store: bookkeeping files in
    it and temporary files of an atomic write in it (``.*.tmp``), the replaced store set aside beside it
    (``.<name>.old.*``)."""
    path = Path(path)
    for name in BOOKKEEPING:
        (path / name).unlink(missing_ok=True)
    for junk in path.glob(".*.tmp"):
        junk.unlink(missing_ok=True)
    for stale in path.parent.glob(f".{glob.escape(path.name)}.old.*"):
        shutil.rmtree(stale, ignore_errors=True)


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
    ``expect``.

    Args:
        path: the store's folder (``features/<model>/<domain>/<split>``).
        expect: meta values the store must hold (keys of :data:`CHECKED_KEYS`); a plain store cannot be verified
            and only logs a warning.

    Returns:
        The :class:`FeatureStore`, its features and labels memory-mapped.

    Raises:
        StoreError: no store there, an incomplete one, or one that differs from ``expect``.

    Example:
        >>> store = open_store("features/resnet50/cog_l3/train")  # doctest: +SKIP
        >>> store.features.shape, store.meta["model"]  # doctest: +SKIP
        ((1000000, 2048), 'resnet50')
    """
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
    ndim = 3 if meta.get("format") == STORE_FORMAT and meta.get("tokens") is not None else 2
    if features.ndim != ndim or not np.issubdtype(features.dtype, np.floating):
        raise StoreError(f"{path}: features.npy is {features.dtype} {features.shape}, expected a float "
                         f"{'N x T x D' if ndim == 3 else 'N x D'} array")
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
    said = (meta["num_rows"], meta["tokens"], meta["dim"]) if ndim == 3 else (meta["num_rows"], meta["dim"])
    if said != features.shape:
        raise StoreError(f"{path}: meta.json says {' x '.join(map(str, said))}, features.npy is "
                         f"{' x '.join(map(str, features.shape))}")
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
        raise CogError(f"cannot check feature store key(s) {', '.join(sorted(unknown))}; known: "
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

    ``identity`` (a meta, of which :data:`IDENTITY_KEYS` count, and ``dtype``) is recorded in the temporary directory
    when it is created: resuming a write made with another identity, or finishing with a meta of another, is refused.
    ``tokens``: T of a token store, whose features are ``[num_rows, tokens, dim]``.
    The files' space is reserved at once (``posix_fallocate``), so a full disk fails here, naming the bytes needed,
    instead of killing a later write through the memory map with SIGBUS.
    """

    def __init__(self, path: str | os.PathLike, num_rows: int, dim: int, overwrite: bool = False,
                 fresh: bool = False, identity: dict[str, Any] | None = None, dtype: str = "float16",
                 tokens: int | None = None) -> None:
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise StoreError(f"{self.path} already exists; pass overwrite=True to replace it")
        if dtype not in DTYPES:
            raise StoreError(f"{self.path}: feature dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        self.tmp = partial_path(self.path)
        self.identity = {**identity_of(identity or {}), "dtype": dtype}
        if fresh:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            _refuse_mismatch(self.tmp, _partial_identity(self.tmp), self.identity, "interrupted feature store write")
        created = not self.tmp.exists()
        arrays, shape = {}, (num_rows, dim) if tokens is None else (num_rows, int(tokens), dim)
        try:
            self.tmp.mkdir(parents=True, exist_ok=True)
            if not (self.tmp / "identity.json").exists():
                write_json(self.tmp / "identity.json", self.identity)  # before any row: a partial never lacks it
            for name, kind, rows in (("features", dtype, shape), ("labels", np.int64, (num_rows,)),
                                     ("index", np.int64, (num_rows,)), ("written", np.bool_, (num_rows,))):
                file = self.tmp / f"{name}.npy"
                arrays[name] = np.lib.format.open_memmap(file, "r+" if file.exists() else "w+", kind, rows)
        except OSError as err:
            if err.errno not in DISK_FULL:
                raise
            arrays.clear()
            if created:
                shutil.rmtree(self.tmp, ignore_errors=True)
            width = dim * (tokens or 1) * np.dtype(dtype).itemsize
            raise disk_full(self.path, num_rows * (width + 17), err) from err
        self.features, self.labels, self.index, self.written = arrays.values()
        if self.features.shape != shape or self.written.shape != (num_rows,):
            raise StoreError(f"{self.tmp} holds a {self.features.shape} write in progress, not {shape}")
        self.overwrite = overwrite
        self._reserve(created)

    def _reserve(self, created: bool) -> None:
        """Allocate the arrays' blocks now (sparse files would fail at the first write that finds the disk full);
        where the file system cannot (EOPNOTSUPP, EINVAL), check the free space instead."""
        files = [self.tmp / f"{n}.npy" for n in ("features", "labels", "index", "written")]
        need = sum(max(0, f.stat().st_size - f.stat().st_blocks * 512) for f in files)
        if not need:
            return
        try:
            if not hasattr(os, "posix_fallocate"):
                raise OSError(errno.EOPNOTSUPP, "posix_fallocate unavailable")
            for f in files:
                fd = os.open(f, os.O_RDWR)
                try:
                    os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
                finally:
                    os.close(fd)
            return
        except OSError as err:
            if err.errno not in (*DISK_FULL, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            if err.errno not in DISK_FULL and shutil.disk_usage(self.tmp).free >= need:
                return
            error = disk_full(self.path, need, err if err.errno in DISK_FULL else None)
        del self.features, self.labels, self.index, self.written
        if created:
            shutil.rmtree(self.tmp, ignore_errors=True)  # nothing written yet: leave nothing half-made
        raise error

    def write(self, rows: np.ndarray, features: np.ndarray, labels: np.ndarray, index: np.ndarray | None = None
              ) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self.features[rows] = self._checked(rows, np.asarray(features))
        self.labels[rows] = labels
        self.index[rows] = rows if index is None else index
        for arr in (self.features, self.labels, self.index):
            arr.flush()  # rows reach the file before their written flags: a kill never marks a lost row done
        self.written[rows] = True
        self.written.flush()

    def _checked(self, rows: np.ndarray, features: np.ndarray) -> np.ndarray:
        """``features`` in the store's dtype; a batch with NaN or inf, or values beyond the dtype's range (which would
        become inf), is refused whole, naming the first such row."""
        flat = features.reshape(len(features), -1)
        bad = np.flatnonzero(~np.isfinite(flat).all(axis=1))
        if len(bad):
            raise StoreError(f"{self.path}: row {rows[bad[0]]} has NaN or inf features ({len(bad)} row(s) of this "
                             "batch); nothing of it was written")
        with np.errstate(over="ignore"):  # an overflow is refused below, naming the row
            cast = flat.astype(self.features.dtype)
        over = np.flatnonzero(~np.isfinite(cast).all(axis=1))
        if len(over):
            peak = float(np.abs(flat[over]).max())
            limit = float(np.finfo(self.features.dtype).max)
            raise StoreError(f"{self.path}: row {rows[over[0]]} has a feature of magnitude {peak:g}, beyond "
                             f"{self.features.dtype}'s range ({limit:g}); write a float32 store (cog-pl extract "
                             "--data.dtype float32, cog-pl features import --dtype float32)")
        return cast.reshape(features.shape)

    def finish(self, meta: dict[str, Any]) -> Path:
        """Check every row was written and ``meta`` has the write's identity; then, each step leaving either a
        resumable partial or a complete store: fsync the arrays, write meta.json into the partial directory, rename
        it into place, remove the bookkeeping files (:data:`BOOKKEEPING`)."""
        for arr in (self.features, self.labels, self.index, self.written):
            arr.flush()
        missing = np.flatnonzero(~np.asarray(self.written))
        if len(missing):
            raise StoreError(f"{self.path}: {len(missing)} row(s) never written, e.g. row {missing[0]}")
        n, d = self.features.shape[0], self.features.shape[-1]
        meta = {**meta, "num_rows": int(n), "dim": int(d), "dtype": str(self.features.dtype)}
        if self.features.ndim == 3:  # a token store
            meta["tokens"] = int(self.features.shape[1])
        skipped = missing_records(self.tmp)  # rows whose image was unreadable (cog_pl.features.missing)
        if skipped:
            meta["missing"] = skipped
        lacking = [k for k in REQUIRED_META if k not in meta]
        if lacking:
            raise StoreError(f"{self.path}: meta lacks {', '.join(lacking)}")
        have = identity_of(meta)
        diff = [f"{k}={_short(have.get(k))} (rows: {_short(v)})" for k, v in self.identity.items() if have.get(k) != v]
        if diff:
            raise StoreError(f"{self.path}: the meta to finish with differs from what wrote the rows: "
                             + "; ".join(diff))
        del self.features, self.labels, self.index, self.written
        for name in ("features.npy", "labels.npy", "index.npy"):
            with open(self.tmp / name, "rb") as fh:
                os.fsync(fh.fileno())
        write_json(self.tmp / "meta.json", meta)
        _fsync_dir(self.tmp)
        _swap_in(self.tmp, self.path, self.overwrite)
        tidy(self.path)
        log.info("wrote feature store %s (%d x %d)", self.path, n, d)
        return self.path

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def written_rows(path: str | os.PathLike, num_rows: int) -> np.ndarray:
    """Which rows an interrupted :class:`StoreWriter` already wrote (all when the store is complete)."""
    path = Path(path)
    if is_complete(path):
        return np.ones(num_rows, dtype=bool)
    flags = partial_path(path) / "written.npy"
    if not flags.exists():
        return np.zeros(num_rows, dtype=bool)
    done = np.load(flags, mmap_mode="r")
    return np.asarray(done) if done.shape == (num_rows,) else np.zeros(num_rows, dtype=bool)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    _fsync_dir(path.parent)


#: Consecutive rows of a store: features (n x D), labels (n) and dataset index (n, or None: the row numbers).
Chunk = tuple[np.ndarray, np.ndarray, np.ndarray | None]


def write_chunks(path: str | os.PathLike, num_rows: int, dim: int, chunks: Iterable[Chunk], meta: dict[str, Any],
                 overwrite: bool = False, dtype: str = "float16", tokens: int | None = None) -> Path:
    """Write a complete store of ``num_rows`` rows from consecutive ``chunks``, atomically (temporary directory +
    rename); ``tokens``: T of a token store (chunks of ``n x T x D``). Every row is written, so a stale write in
    progress at ``path`` (a killed earlier one) is discarded; on any error the temporary directory is removed."""
    try:
        writer = StoreWriter(path, num_rows, dim, overwrite, fresh=True, identity=meta, dtype=dtype, tokens=tokens)
        start = 0
        for features, labels, index in chunks:
            if start + len(labels) > num_rows:
                raise StoreError(f"{path}: more than {num_rows} rows given")
            writer.write(np.arange(start, start + len(labels)), features, labels, index)
            start += len(labels)
        return writer.finish(meta)
    except BaseException:
        shutil.rmtree(partial_path(path), ignore_errors=True)
        raise


def write_store(path: str | os.PathLike, features: np.ndarray, labels: np.ndarray, index: np.ndarray | None,
                meta: dict[str, Any], overwrite: bool = False, chunk: int = 65536, dtype: str = "float16") -> Path:
    """Write a complete store atomically (temporary directory + rename); ``meta`` as for :func:`make_meta`;
    ``dtype`` of the features, float16 or float32; ``features`` ``N x D``, or ``N x T x D`` for a token store."""
    features, labels = np.asarray(features), np.asarray(labels)
    if features.ndim not in (2, 3) or len(features) != len(labels):
        raise StoreError(f"{path}: features {features.shape} and labels {labels.shape} do not match")
    if index is not None and len(index) != len(labels):
        raise StoreError(f"{path}: index has {len(index)} rows, labels {len(labels)}")
    index = None if index is None else np.asarray(index)
    chunks = ((features[a:a + chunk], labels[a:a + chunk], None if index is None else index[a:a + chunk])
              for a in range(0, len(labels), chunk))
    tokens = features.shape[1] if features.ndim == 3 else None
    return write_chunks(path, len(labels), features.shape[-1], chunks, meta, overwrite, dtype, tokens)


def check_finite(store: FeatureStore, chunk: int = 1 << 16) -> None:
    """Refuse a store with NaN or infinite features (a store written before writes refused them), naming the file,
    the number of such rows and the first; reads the features in chunks of ``chunk`` rows."""
    bad, first = 0, None
    for start in range(0, len(store), chunk):
        block = np.asarray(store.features[start:start + chunk])
        rows = np.flatnonzero(~np.isfinite(block.reshape(len(block), -1)).all(axis=1))
        if len(rows) and first is None:
            first = start + int(rows[0])
        bad += len(rows)
    if bad:
        raise StoreError(f"{store.path / 'features.npy'}: {bad} row(s) hold NaN or infinite values (first: row "
                         f"{first})")
