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


FORMAT = f"cog-pl-results v{FORMAT_VERSION}"


@contextlib.contextmanager
def _connect(path: str | os.PathLike, write: bool = False) -> Iterator[sqlite3.Connection | None]:
    """A connection to a results file whose format row says it is ours, in this version. Readers open the file
    read-only and get None for an empty file; a writer creates the tables in a new or empty file. Both refuse a
    database of something else (an Optuna study given as results, say) and another format version."""
    path = Path(path)
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, timeout=120)
    else:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=120)
    try:
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if write and not tables:
                # one transaction, idempotent: a writer racing this one sees no tables or all of them with the format
                con.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} "
                                  f"INSERT OR IGNORE INTO info VALUES ('format', '{FORMAT}'); COMMIT;")
                tables = {"rows", "info"}
            if not tables:
                yield None
                return
            found = con.execute("SELECT value FROM info WHERE key='format'").fetchone() if "info" in tables else None
        except sqlite3.DatabaseError as err:
            raise ValueError(f"results file {path} is not a cog-pl results database: {err}") from err
        if found is None or "rows" not in tables:
            raise ValueError(f"results file {path} is not a cog-pl results database (an SQLite file without its "
                             f"tables: {', '.join(sorted(tables)) or 'none'})")
        if found[0] != FORMAT:
            raise ValueError(f"results file {path} is in format {found[0]!r}; this cog-pl reads and writes {FORMAT!r}")
        with con:
            yield con
    finally:
        con.close()


def check_results_file(path: str | os.PathLike) -> None:
    """Refuse, before any work, a results file that exists but is not a results database of this format."""
    if Path(path).exists():
        with _connect(path):
            pass


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows (none when the file does not exist)."""
    if not Path(path).exists():
        return []
    with _connect(path) as con:
        if con is None:
            return []
        return [json.loads(r[0]) for r in con.execute("SELECT row FROM rows ORDER BY model, domain, shots, seed")]


def has_row(path: str | os.PathLike, key: tuple) -> bool:
    """Whether the row of ``key`` exists."""
    if not Path(path).exists():
        return False
    model, domain, shots, seed = key
    with _connect(path) as con:
        if con is None:
            return False
        cur = con.execute("SELECT 1 FROM rows WHERE model=? AND domain=? AND shots=? AND seed=?",
                          (model, domain, shots or 0, seed))
        return cur.fetchone() is not None


def append_row(path: str | os.PathLike, row: dict[str, Any]) -> None:
    """Add the row, or replace the row of the same key, in one transaction."""
    model, domain, shots, seed = row_key(row)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with _connect(path, write=True) as con:
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
