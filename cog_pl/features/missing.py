"""Rows of a feature store whose image could not be read (``on_error="skip"``): recorded, listed, left out.

While a :class:`~cog_pl.features.store.StoreWriter` fills its partial directory, :func:`mark_missing` gives a
skipped row zero features, its label and its written flag (so the store can finish) and records it in
``missing.npy`` (a row mask shared by DDP ranks, like ``written.npy``) and ``missing.jsonl`` (one ``{"row", "path",
"error"}`` line per row, each appended in one write). The rows travel with the batch that skipped them, so every rank
records its own. Finishing lists them in meta.json as ``"missing": [{"row", "path", "error"}, ...]``
(:func:`missing_records`; absent when no row is missing), and :func:`valid_rows` (``FeatureStore.valid``) is what every
reader of a store leaves them out by.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.errors import CogError
from cog_pl.features.paths import partial_path

MASK, LOG = "missing.npy", "missing.jsonl"


def _mask(tmp: Path, num_rows: int, create: bool) -> np.ndarray | None:
    path = tmp / MASK
    if not path.exists():
        if not create:
            return None
        return np.lib.format.open_memmap(path, "w+", np.bool_, (num_rows,))
    return np.lib.format.open_memmap(path, "r+")


def mark_missing(writer: Any, rows: np.ndarray, labels: np.ndarray, paths: Sequence[str],
                 errors: Sequence[str]) -> int:
    """Record ``rows`` of ``writer`` (a StoreWriter) as missing: their path and error first, then zero features and
    their labels; returns how many rows of the store are missing now."""
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return 0
    lines = "".join(json.dumps({"row": int(r), "path": p, "error": e}) + "\n" for r, p, e in zip(rows, paths, errors))
    fd = os.open(writer.tmp / LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, lines.encode())
    finally:
        os.close(fd)
    mask = _mask(writer.tmp, len(writer.written), create=True)
    mask[rows] = True
    mask.flush()
    writer.write(rows, np.zeros((len(rows), *writer.features.shape[1:]), dtype=np.float32), labels, rows)
    return int(np.count_nonzero(mask))


def clear_missing(writer: Any, rows: np.ndarray) -> None:
    """Rows written with features after all (a resumed write read them this time): no longer missing."""
    mask = _mask(writer.tmp, len(writer.written), create=False)
    if mask is not None and len(rows) and mask[np.asarray(rows, dtype=np.int64)].any():
        mask[np.asarray(rows, dtype=np.int64)] = False
        mask.flush()


def missing_rows(path: str | os.PathLike, num_rows: int) -> np.ndarray:
    """Bool mask of the rows an interrupted write of the store at ``path`` recorded as missing (none without one)."""
    mask = partial_path(path) / MASK
    if not mask.exists():
        return np.zeros(num_rows, dtype=bool)
    rows = np.load(mask, mmap_mode="r")
    return np.asarray(rows) if rows.shape == (num_rows,) else np.zeros(num_rows, dtype=bool)


def missing_records(tmp: str | os.PathLike) -> list[dict[str, Any]]:
    """The missing rows of the write in progress in ``tmp``, sorted, each with its path and error (the last one
    recorded; a line a kill cut short is ignored)."""
    tmp = Path(tmp)
    if not (tmp / MASK).exists():
        return []
    rows = np.flatnonzero(np.load(tmp / MASK, mmap_mode="r"))
    found: dict[int, dict[str, Any]] = {}
    if (tmp / LOG).exists():
        for line in (tmp / LOG).read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            found[int(record["row"])] = record
    return [found.get(int(r), {"row": int(r), "path": None, "error": None}) for r in rows]


def valid_rows(meta: dict[str, Any], num_rows: int, where: str | os.PathLike = "") -> np.ndarray:
    """Bool mask of the rows holding features: all but meta.json's ``missing`` rows; ``ValueError`` naming ``where``
    when one lies outside the store."""
    valid = np.ones(num_rows, dtype=bool)
    rows = [m.get("row") for m in meta.get("missing") or ()]
    bad = [r for r in rows if not (isinstance(r, int) and 0 <= r < num_rows)]
    if bad:
        raise CogError(f"{where}: meta.json lists missing row {bad[0]!r}, outside 0..{num_rows - 1}")
    valid[rows] = False
    return valid
