"""An unfinished feature store: rows land at their dataset index in memory-mapped files, a bitmap says which are done.

Layout while extracting, inside the store directory (which has no ``meta.json`` yet, so it never looks finished):

    .partial/features.f16   float16 memmap, N x D
    .partial/labels.i64     int64 memmap, N
    .partial/done.u8        uint8 memmap, N (1 = row written and flushed)
    .partial/shape.json     {"rows": N, "dim": D}

Every process (DDP rank) writes its rows in place; the duplicates that a distributed sampler pads with write the
same values twice, which is harmless. Rows are flushed before their done bits are set, so a kill loses at most the
rows of the batches in flight, and a resumed run extracts exactly the rows whose bit is 0. ``finalize`` checks that
every row is done and writes the store files, ``meta.json`` last and atomically.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.io import atomic_open, write_json

PARTIAL = ".partial"


class PartialStore:
    """Memory-mapped, resumable output of one (model, domain, split)."""

    def __init__(self, path: str | Path, rows: int, dim: int):
        self.path = Path(path)
        self.rows, self.dim = int(rows), int(dim)
        part = self.path / PARTIAL
        shape = part / "shape.json"
        if shape.exists():
            old = json.loads(shape.read_text())
            if (old["rows"], old["dim"]) != (self.rows, self.dim):
                raise ValueError(f"unfinished store {self.path} was started with {old['rows']} rows x {old['dim']} "
                                 f"dims, not {self.rows} x {self.dim}; delete {part} to start over")
        else:
            self.create(part)
        self.features = np.memmap(part / "features.f16", np.float16, "r+", shape=(self.rows, self.dim))
        self.labels = np.memmap(part / "labels.i64", np.int64, "r+", shape=(self.rows,))
        self.done = np.memmap(part / "done.u8", np.uint8, "r+", shape=(self.rows,))

    def create(self, part: Path) -> None:
        """Allocate the files (sparse) and then ``shape.json``, so a half-created partial store is recreated."""
        part.mkdir(parents=True, exist_ok=True)
        for name, dtype, shape in (("features.f16", np.float16, (self.rows, self.dim)),
                                   ("labels.i64", np.int64, (self.rows,)), ("done.u8", np.uint8, (self.rows,))):
            with open(part / name, "wb") as fh:
                fh.truncate(int(np.prod(shape)) * np.dtype(dtype).itemsize)
        write_json(part / "shape.json", {"rows": self.rows, "dim": self.dim})

    def write(self, index: np.ndarray, features: np.ndarray, labels: np.ndarray) -> None:
        """Write rows at their dataset indices and mark them done once they are on disk."""
        index = np.asarray(index, dtype=np.int64)
        if index.size == 0:
            return
        if index.min() < 0 or index.max() >= self.rows:
            raise IndexError(f"row index out of range 0..{self.rows - 1} for {self.path}")
        self.features[index] = features.astype(np.float16)
        self.labels[index] = labels
        self.features.flush()
        self.labels.flush()
        self.done[index] = 1
        self.done.flush()

    def remaining(self) -> np.ndarray:
        """Dataset indices not yet written."""
        return np.flatnonzero(np.asarray(self.done) == 0)

    def finalize(self, meta: Mapping[str, Any]) -> None:
        """Write ``features.npy``, ``labels.npy``, ``index.npy`` and, last, ``meta.json``; remove the partial files."""
        left = self.remaining()
        if left.size:
            raise RuntimeError(f"{self.path}: {left.size} of {self.rows} rows were never written "
                               f"(e.g. indices {left[:5].tolist()}); run the extraction again to resume")
        for name, arr in (("features.npy", self.features), ("labels.npy", self.labels),
                          ("index.npy", np.arange(self.rows, dtype=np.int64))):
            with atomic_open(self.path / name, "wb") as fh:
                np.save(fh, np.asarray(arr))
        write_json(self.path / "meta.json", {**meta, "num_rows": self.rows, "dim": self.dim})
        shutil.rmtree(self.path / PARTIAL, ignore_errors=True)


def is_complete(path: str | Path) -> bool:
    """A store is complete when its ``meta.json`` exists (it is written last)."""
    return (Path(path) / "meta.json").is_file()


def done_rows(path: str | Path, rows: int) -> np.ndarray:
    """Boolean mask of the rows already extracted into an unfinished store (all False when none)."""
    done = Path(path) / PARTIAL / "done.u8"
    if is_complete(path):
        return np.ones(rows, dtype=bool)
    if not done.exists() or os.path.getsize(done) != rows:
        return np.zeros(rows, dtype=bool)
    return np.fromfile(done, dtype=np.uint8).astype(bool)
