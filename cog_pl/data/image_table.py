"""A compact index of images by ``(wnid, filename)``: sorted arrays searched by bisection, memory-mapped from disk.

IN-21K Winter 2021 has some 13M images; a Python dict from each name to its location costs several GB in every
loader process. An :class:`ImageTable` keeps the same mapping in a few flat arrays instead: the names sorted by
``(wnid, filename)`` and concatenated into one byte string (``blob``) with their end offsets (``ends``), each wnid's
row range (``starts``), and one integer column per field (``offset``, ``size``, a shard number ...). A lookup
bisects the wnid's rows (about 11 steps for 1,300 images). Memory: the name's bytes plus 8 bytes of ``ends`` plus
the columns, some 40 bytes per image, measured by ``benchmarks/bench_data_images.py``.

Saved as one file (:meth:`ImageTable.save`: written to a temporary name, renamed into place) and opened with
:func:`numpy.memmap` (:meth:`ImageTable.load`), so the processes that read it (DataLoader workers, DDP ranks) share
the operating system's page cache rather than each holding a copy; a pickled loaded table carries only its path.
Layout: ``COGPLTAB``, the JSON header's length (8 bytes, little endian), the JSON header (``{"meta", "wnids",
"arrays": {name: [dtype, shape, offset]}}``), then each array at a 64-byte aligned offset.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.errors import CogError

MAGIC = b"COGPLTAB"
ALIGN = 64


def _encode(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


class ImageTable:
    """Rows of images sorted by ``(wnid, filename)``; ``columns[name][row]`` the fields of a row; ``meta``: JSON."""

    def __init__(self, wnids: Sequence[str], starts: np.ndarray, blob: np.ndarray, ends: np.ndarray,
                 columns: dict[str, np.ndarray], meta: dict[str, Any] | None = None,
                 path: Path | None = None) -> None:
        self.wnids = list(wnids)
        self.starts, self.blob, self.ends, self.columns = starts, blob, ends, columns
        self.meta = meta or {}
        self.path = path
        self._where = {w: k for k, w in enumerate(self.wnids)}
        # plain buffers for the bisection: indexing them gives Python ints and bytes, not numpy scalars
        self._blob = memoryview(np.ascontiguousarray(blob)).cast("B") if len(blob) else memoryview(b"")
        self._ends = memoryview(np.ascontiguousarray(ends, np.int64)).cast("B").cast("q")

    @classmethod
    def build(cls, wnids: Sequence[str], names: Sequence[str], columns: dict[str, Any],
              meta: dict[str, Any] | None = None) -> ImageTable:
        """The table of rows ``(wnids[i], names[i])`` with ``columns[c][i]``, sorted; a ``(wnid, name)`` twice is
        kept twice (:meth:`duplicates` finds it)."""
        keys = np.array([_encode(f"{w}\0{n}") for w, n in zip(wnids, names)] or [b""])[: len(names)]
        order = np.argsort(keys, kind="stable") if len(names) else np.zeros(0, np.int64)
        encoded = [_encode(names[i]) for i in order]
        ends = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=ends[1:])
        blob = np.frombuffer(b"".join(encoded), np.uint8)
        sorted_wnids = [wnids[i] for i in order]
        unique, starts = [], []
        for row, w in enumerate(sorted_wnids):
            if not unique or unique[-1] != w:
                unique.append(w)
                starts.append(row)
        starts.append(len(sorted_wnids))
        cols = {c: np.asarray(v)[order] for c, v in columns.items()}
        return cls(unique, np.asarray(starts, np.int64), blob, ends, cols, meta)

    def __len__(self) -> int:
        return len(self.ends) - 1

    def has(self, wnid: str) -> bool:
        return wnid in self._where

    def rows(self, wnid: str) -> range:
        """The rows of ``wnid`` (empty when absent)."""
        k = self._where.get(wnid)
        return range(0) if k is None else range(int(self.starts[k]), int(self.starts[k + 1]))

    def name(self, row: int) -> str:
        return self._raw(row).decode("utf-8", "surrogateescape")

    def _raw(self, row: int) -> bytes:
        return self._blob[self._ends[row]:self._ends[row + 1]].tobytes()

    def names(self, wnid: str) -> list[str]:
        """The filenames of ``wnid``, sorted as ``str`` (the order a folder's listing is sorted in)."""
        return sorted(self.name(r) for r in self.rows(wnid))

    def find(self, wnid: str, filename: str) -> int:
        """The row of ``(wnid, filename)``, or -1."""
        rows, key = self.rows(wnid), _encode(filename)
        lo, hi = rows.start, rows.stop
        while lo < hi:
            mid = (lo + hi) // 2
            if self._raw(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < rows.stop and self._raw(lo) == key else -1

    def duplicates(self) -> list[tuple[int, int]]:
        """Pairs of adjacent rows with one ``(wnid, filename)``: one image found twice."""
        out = []
        for k in range(len(self.wnids)):
            for r in range(int(self.starts[k]) + 1, int(self.starts[k + 1])):
                if self._raw(r) == self._raw(r - 1):
                    out.append((r - 1, r))
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (the whole table but its small header)."""
        return sum(a.nbytes for a in (self.starts, self.blob, self.ends, *self.columns.values()))

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"starts": self.starts, "blob": self.blob, "ends": self.ends,
                **{f"col:{c}": v for c, v in self.columns.items()}}

    def save(self, path: str | os.PathLike) -> None:
        """Write the table to ``path`` atomically (a temporary file renamed into place)."""
        path = Path(path)
        arrays = {k: np.ascontiguousarray(v) for k, v in self._arrays().items()}
        layout, at = {}, 0
        for k, v in arrays.items():
            layout[k] = [v.dtype.str, list(v.shape), at]
            at += -(-v.nbytes // ALIGN) * ALIGN
        header = json.dumps({"meta": self.meta, "wnids": self.wnids, "arrays": layout},
                            ensure_ascii=False).encode("utf-8", "surrogateescape")
        base = -(-(len(MAGIC) + 8 + len(header)) // ALIGN) * ALIGN
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(MAGIC + struct.pack("<Q", len(header)) + header)
                for k, v in arrays.items():
                    fh.seek(base + layout[k][2])
                    fh.write(v.tobytes())
                fh.truncate(base + at)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ImageTable:
        """The table saved at ``path``, its arrays memory-mapped read-only; ``ValueError`` when it is not one."""
        path = Path(path)
        with open(path, "rb") as fh:
            head = fh.read(len(MAGIC) + 8)
            if len(head) < len(MAGIC) + 8 or head[:len(MAGIC)] != MAGIC:
                raise CogError(f"{path}: not an image table")
            (length,) = struct.unpack("<Q", head[len(MAGIC):])
            header = json.loads(fh.read(length).decode("utf-8", "surrogateescape"))
        base = -(-(len(MAGIC) + 8 + length) // ALIGN) * ALIGN
        arrays = {}
        for k, (dtype, shape, at) in header["arrays"].items():
            count = int(np.prod(shape))
            arrays[k] = (np.memmap(path, dtype=np.dtype(dtype), mode="r", offset=base + at, shape=tuple(shape))
                         if count else np.zeros(shape, np.dtype(dtype)))
        columns = {k[4:]: v for k, v in arrays.items() if k.startswith("col:")}
        return cls(header["wnids"], arrays["starts"], arrays["blob"], arrays["ends"], columns, header["meta"], path)

    def __reduce__(self) -> tuple:
        if self.path is not None:  # a loaded table travels as its path: the receiver maps the same file
            return ImageTable.load, (self.path,)
        return ImageTable, (self.wnids, self.starts, self.blob, self.ends, self.columns, self.meta)
