"""The results store: one row per (model, domain, shots, seed) in one SQLite file.

Format version 1: table ``rows(model, domain, shots, seed, row, updated)`` with the key as primary key (``shots`` 0
stands for all data) and ``row`` the whole result as JSON (protocol values, mode, hyper-parameters, top-1/top-5,
timings, versions). Each append is one transaction, so many processes (DDP ranks, cluster jobs) can write the same
file and a reader never sees half a row; resuming means skipping keys that exist. Tables and plots are computed from
these rows only (:mod:`cog_pl.report`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
KEY_FIELDS = ("model", "domain", "shots", "seed")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    model TEXT NOT NULL, domain TEXT NOT NULL, shots INTEGER NOT NULL, seed INTEGER NOT NULL,
    row TEXT NOT NULL, updated TEXT NOT NULL, PRIMARY KEY (model, domain, shots, seed));
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def row_key(row: dict[str, Any]) -> tuple:
    """The identity of a row: (model, domain, shots or None for all data, seed)."""
    return tuple(row[f] for f in KEY_FIELDS)


@contextlib.contextmanager
def _connect(path: str | os.PathLike) -> Iterator[sqlite3.Connection]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, timeout=120)
    try:
        try:
            con.executescript(_SCHEMA)
            con.execute("INSERT OR IGNORE INTO info VALUES ('format', ?)", (f"cog-pl-results v{FORMAT_VERSION}",))
        except sqlite3.DatabaseError as err:
            raise ValueError(f"results file {path} is not a cog-pl results database: {err}") from err
        with con:
            yield con
    finally:
        con.close()


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows (none when the file does not exist)."""
    if not Path(path).exists():
        return []
    with _connect(path) as con:
        return [json.loads(r[0]) for r in con.execute("SELECT row FROM rows ORDER BY model, domain, shots, seed")]


def has_row(path: str | os.PathLike, key: tuple) -> bool:
    """Whether the row of ``key`` exists."""
    if not Path(path).exists():
        return False
    model, domain, shots, seed = key
    with _connect(path) as con:
        cur = con.execute("SELECT 1 FROM rows WHERE model=? AND domain=? AND shots=? AND seed=?",
                          (model, domain, shots or 0, seed))
        return cur.fetchone() is not None


def append_row(path: str | os.PathLike, row: dict[str, Any]) -> None:
    """Add the row, or replace the row of the same key, in one transaction."""
    model, domain, shots, seed = row_key(row)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with _connect(path) as con:
        con.execute("INSERT OR REPLACE INTO rows VALUES (?, ?, ?, ?, ?, ?)",
                    (model, domain, shots or 0, seed, json.dumps(row, sort_keys=True), now))


def versions() -> dict[str, str]:
    """Versions of the libraries that shape a result (from package metadata, nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    from cog_pl import __version__

    out = {"cog_pl": __version__, "python": platform.python_version()}
    for name in ("torch", "optuna", "lightning", "numpy", "timm"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out
