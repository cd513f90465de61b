"""The results store: one row per (model, method, domain, shots, seed) in one SQLite file.

Format version 2: table ``rows(model, method, domain, shots, seed, row, updated)`` with the key as primary key
(``shots`` 0 stands for all data) and ``row`` the whole result as JSON (protocol values, mode, hyper-parameters,
top-1/top-5, timings, versions). ``method`` is how the backbone was evaluated: any method's name, which the store does
not check against a list (the methods, their labels and report order: :mod:`cog_pl.evaluate`). A level variant stays a
domain of its own (``cog_l3@wup``, :func:`cog_pl.protocol.variant_domain`). Each append is one transaction, so many
processes (DDP ranks, cluster jobs) can write the same file and a reader never sees half a row; resuming means skipping
keys that exist (when made with the same identity: :mod:`cog_pl.results.identity`). Tables and plots are computed from
these rows only (:mod:`cog_pl.report`) and the test predictions kept beside them: a row's ``predictions`` is the record
(path, digest) of its file under ``<stem>.predictions/`` (:mod:`cog_pl.results.predictions`); rows made before
predictions were kept have none and stay valid.

Rows are read as plain dicts (:func:`read_rows`) or as frozen rows (:class:`StoredRow`) of one scope, a model's say
(:func:`read_stored`, found by the table's key, the rest of the file not read), which a run reads once and hands down
to its passes over the model's domains (:class:`StoredRows`). Which worker makes which row is not kept here but in a
claims file beside this one (:mod:`cog_pl.results.claims`).
Table ``info(key, value)`` holds ``format`` and what the rows were made with that the report needs besides them
(:func:`read_info`, :func:`write_info`; ``cog-pl run`` records the similarity source of the concept analyses and the
feature stores' root: :mod:`cog_pl.report.concepts`).

A method that draws nothing at random (zero-shot) makes one row per (model, method, domain, shots) cell whatever a
run's seeds: its key seed is :data:`NO_SEED` and the row says ``seedless: true`` (:func:`is_seedless`; rows written
before this rule took the run's first seed and say ``seed_is_key: true``, read as seedless too). A reader counts
such a cell's rows once (:func:`one_per_seedless_cell`).

A version-1 file (key ``(model, domain, shots, seed)``, a development format no release wrote) is refused, as is any
other format, naming the file and its format; it is never changed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cog_pl.errors import CogError, WrongTypeError
from cog_pl.provenance import created

FORMAT_VERSION = 2
#: The method of a row that names none (rows written by hand or before format 2): the linear probe's.
DEFAULT_METHOD = "linear"
KEY_FIELDS = ("model", "method", "domain", "shots", "seed")
#: The key seed of a row that draws nothing at random (:func:`is_seedless`): one row per cell, whatever the seeds.
NO_SEED = -1
_KEY_MATCH = "model=? AND method=? AND domain=? AND shots=? AND seed=?"
_ROWS = """(
    model TEXT NOT NULL, method TEXT NOT NULL, domain TEXT NOT NULL, shots INTEGER NOT NULL, seed INTEGER NOT NULL,
    row TEXT NOT NULL, updated TEXT NOT NULL, PRIMARY KEY (model, method, domain, shots, seed))"""
_SCHEMA = (f"CREATE TABLE IF NOT EXISTS rows {_ROWS}; "
           "CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);")
FORMAT = f"cog-pl-results v{FORMAT_VERSION}"
#: A development format no release wrote: refused with a note saying so.
_V1 = "cog-pl-results v1"


def method_of(row: dict[str, Any]) -> str:
    """The row's method (:data:`DEFAULT_METHOD` where it names none). Any method's rows are kept, registered here or
    not (a plugin's rows stay readable where it is not installed): the store keeps no list of methods. A name that is
    not an identifier (``"k nn"``, a number) is a program's mistake and refused by name."""
    method = row.get("method") or DEFAULT_METHOD
    if not isinstance(method, str) or not method.isidentifier():
        raise WrongTypeError(f"result row of {row.get('model')!r} on {row.get('domain')!r} has method {method!r}; "
                             "a method's name is a Python identifier (cog_pl.evaluate)")
    return method


def row_key(row: dict[str, Any]) -> tuple:
    """The identity of a row: (model, method, domain, shots or None for all data, seed)."""
    return row["model"], method_of(row), row["domain"], row["shots"], row["seed"]


def is_seedless(row: Mapping[str, Any]) -> bool:
    """Whether a row's numbers depend on no seed: ``seedless: true`` (key seed :data:`NO_SEED`), or ``seed_is_key:
    true`` (a zero-shot row written before seedless rows, which took its run's first seed as key seed)."""
    return bool(row.get("seedless") or row.get("seed_is_key"))


def one_per_seedless_cell(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with each seedless cell (model, method, domain, shots and identity) counted once: the row of key seed
    :data:`NO_SEED` where there is one, else the one of lowest seed (older files, where a run with another first seed
    added an identical row). Other rows are kept, in their order."""
    chosen: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        if is_seedless(row):
            cell = (*row_key(row)[:4], row.get("identity"))
            old = chosen.get(cell)
            if old is None or (old["seed"] != NO_SEED and (row["seed"] == NO_SEED or row["seed"] < old["seed"])):
                chosen[cell] = row
    kept = {id(r) for r in chosen.values()}
    return [r for r in rows if not is_seedless(r) or id(r) in kept]


def _open(path: Path, write: bool) -> sqlite3.Connection:
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        return sqlite3.connect(path, timeout=120)
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=120)


@contextlib.contextmanager
def _connect(path: str | os.PathLike, write: bool = False) -> Iterator[sqlite3.Connection | None]:
    """A connection to a results file whose format row says it is ours, in this version. Readers open the file
    read-only and get None for an empty file; a writer creates the tables in a new or empty file. Both refuse a
    database of something else (an Optuna study given as results, say) and another format version (version 1
    included), leaving it as it was; a folder given as the file is refused by name."""
    path = Path(path)
    if path.is_dir():
        raise CogError(f"results file {path} is a folder; give a file path (e.g. {path / 'results.sqlite'})")
    con = _open(path, write)
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
            raise CogError(f"results file {path} is not a cog-pl results database: {err}") from err
        if found is None or "rows" not in tables:
            raise CogError(f"results file {path} is not a cog-pl results database (an SQLite file without its "
                           f"tables: {', '.join(sorted(tables)) or 'none'})")
        if found[0] != FORMAT:
            note = " (a development format no release wrote; make its rows again)" if found[0] == _V1 else ""
            raise CogError(f"results file {path} is in format {found[0]!r}; this cog-pl reads and writes "
                           f"{FORMAT!r}{note}")
        with con:
            yield con
    finally:
        con.close()


def check_results_file(path: str | os.PathLike) -> None:
    """Refuse, before any work, a results file that exists but is not a results database of this format."""
    if Path(path).exists():
        with _connect(path):
            pass


#: The key fields a read can be narrowed to (:func:`read_rows`, :func:`read_stored`): a prefix of the table's key.
SCOPE_FIELDS = ("model", "method", "domain")


def read_rows(path: str | os.PathLike, *, model: str | None = None, method: str | None = None,
              domain: str | None = None) -> list[dict[str, Any]]:
    """All rows (none when the file does not exist), each with its ``method``, in key order; ``model``, ``method``,
    ``domain``: only the rows of those (found by the table's key, the rest of the file not read)."""
    if not Path(path).exists():
        return []
    scope = {"model": model, "method": method, "domain": domain}
    where = [f"{k}=?" for k in SCOPE_FIELDS if scope[k] is not None]
    with _connect(path) as con:
        if con is None:
            return []
        cur = con.execute("SELECT row FROM rows" + (f" WHERE {' AND '.join(where)}" if where else "")
                          + " ORDER BY model, method, domain, shots, seed",
                          [v for v in scope.values() if v is not None])
        return [json.loads(r[0]) for r in cur]


def count_rows(path: str | os.PathLike) -> int:
    """How many rows the file holds (0 when it does not exist), none of them read."""
    if not Path(path).exists():
        return 0
    with _connect(path) as con:
        return 0 if con is None else con.execute("SELECT COUNT(*) FROM rows").fetchone()[0]


@dataclass(frozen=True)
class StoredRow:
    """One row as read from a results file: its key fields and the whole row, read-only (``values``: the stored
    JSON, nested values as parsed)."""

    model: str
    method: str
    domain: str
    shots: int | None
    seed: int
    values: Mapping[str, Any]

    @classmethod
    def of(cls, row: dict[str, Any]) -> StoredRow:
        model, method, domain, shots, seed = row_key(row)
        return cls(model, method, domain, shots, seed, MappingProxyType(row))

    @property
    def key(self) -> tuple:
        """The row's key, as :func:`row_key` makes it."""
        return self.model, self.method, self.domain, self.shots, self.seed


@dataclass(frozen=True)
class StoredRows:
    """The rows of one scope of a results file, read at once (:func:`read_stored`): what ``cog-pl run`` reads once
    for a model and hands down to the check, run and wait passes over its domains instead of reading the file
    again. ``model``, ``method``, ``domain``: the scope that was read (None: any)."""

    path: Path
    rows: tuple[StoredRow, ...]
    model: str | None = None
    method: str | None = None
    domain: str | None = None

    def __iter__(self) -> Iterator[StoredRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    @functools.cached_property
    def _by_key(self) -> dict[tuple, StoredRow]:
        return {r.key: r for r in self.rows}

    def get(self, key: tuple) -> StoredRow | None:
        """The row of ``key`` (as :func:`row_key` makes it), None where there was none."""
        return self._by_key.get(key)

    def covers(self, path: str | os.PathLike, *, model: str | None = None, method: str | None = None,
               domain: str | None = None) -> bool:
        """Whether these rows are of ``path`` and hold every row of that scope it had when read."""
        asked = {"model": model, "method": method, "domain": domain}
        return (Path(path).resolve() == Path(self.path).resolve()
                and all(getattr(self, k) in (None, asked[k]) for k in SCOPE_FIELDS))

    def select(self, *, model: str | None = None, method: str | None = None,
               domain: str | None = None) -> StoredRows:
        """The rows of a narrower scope."""
        asked = {"model": model, "method": method, "domain": domain}
        scope = {k: asked[k] if asked[k] is not None else getattr(self, k) for k in SCOPE_FIELDS}
        rows = tuple(r for r in self.rows if all(v is None or getattr(r, k) == v for k, v in scope.items()))
        return StoredRows(self.path, rows, **scope)


def read_stored(path: str | os.PathLike, *, model: str | None = None, method: str | None = None,
                domain: str | None = None, reuse: StoredRows | None = None) -> StoredRows:
    """The rows of ``path`` of ``model``, ``method`` and ``domain`` (None: any), as frozen rows
    (:class:`StoredRow`). ``reuse``: rows read before (by a caller that hands them down); where they are of ``path``
    and hold this scope (:meth:`StoredRows.covers`) they are narrowed to it and the file is not read."""
    scope = {"model": model, "method": method, "domain": domain}
    if reuse is not None and reuse.covers(path, **scope):
        return reuse.select(**scope)
    return StoredRows(Path(path), tuple(StoredRow.of(r) for r in read_rows(path, **scope)), **scope)


def row_times(path: str | os.PathLike) -> dict[tuple, str]:
    """When each row was last written (UTC, ISO 8601 to the second), by its key (:func:`row_key`); what tells a
    cell's newest rows from older ones (:func:`cog_pl.report.protocols.split_protocols`)."""
    if not Path(path).exists():
        return {}
    with _connect(path) as con:
        if con is None:
            return {}
        cur = con.execute("SELECT model, method, domain, shots, seed, updated FROM rows")
        return {(model, method, domain, shots or None, seed): updated
                for model, method, domain, shots, seed, updated in cur}


def get_row(path: str | os.PathLike, key: tuple) -> dict[str, Any] | None:
    """The row of ``key`` (as :func:`row_key` makes it), None where there is none."""
    if len(key) != len(KEY_FIELDS):
        raise CogError(f"a result key is ({', '.join(KEY_FIELDS)}); got {key!r}")
    if not Path(path).exists():
        return None
    model, method, domain, shots, seed = key
    with _connect(path) as con:
        found = con.execute(f"SELECT row FROM rows WHERE {_KEY_MATCH}",
                            (model, method, domain, shots or 0, seed)).fetchone() if con is not None else None
    return None if found is None else json.loads(found[0])


def has_row(path: str | os.PathLike, key: tuple) -> bool:
    """Whether the row of ``key`` (as :func:`row_key` makes it) exists."""
    return get_row(path, key) is not None


def append_row(path: str | os.PathLike, row: dict[str, Any]) -> None:
    """Add the row, or replace the row of the same key, in one transaction; the stored row names its method. A row
    holding its test predictions (a :class:`cog_pl.results.predictions.Predictions` under ``predictions``) has them
    written beside the file first, and their record (path, digest) takes their place, in the stored row and in
    ``row``."""
    model, method, domain, shots, seed = row_key(row)
    if row.get("predictions") is not None and not isinstance(row["predictions"], dict):
        from cog_pl.results.predictions import write_row_predictions

        row["predictions"] = write_row_predictions(path, {**row, "method": method})["predictions"]
    with _connect(path, write=True) as con:
        con.execute("INSERT OR REPLACE INTO rows VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (model, method, domain, shots or 0, seed, json.dumps({**row, "method": method}, sort_keys=True),
                     created()))


def delete_row(path: str | os.PathLike, key: tuple) -> bool:
    """Remove the row of ``key`` (as :func:`row_key` makes it) in one transaction; returns whether there was one."""
    if not Path(path).exists():
        return False
    model, method, domain, shots, seed = key
    with _connect(path, write=True) as con:
        cur = con.execute(f"DELETE FROM rows WHERE {_KEY_MATCH}", (model, method, domain, shots or 0, seed))
        return cur.rowcount > 0


def read_info(path: str | os.PathLike, key: str) -> Any:
    """The value recorded under ``key`` in the file's ``info`` table (JSON), None where there is none (or no file)."""
    if not Path(path).exists():
        return None
    with _connect(path) as con:
        found = con.execute("SELECT value FROM info WHERE key=?", (key,)).fetchone() if con is not None else None
    return None if found is None else json.loads(found[0])


def write_info(path: str | os.PathLike, key: str, value: Any) -> None:
    """Record ``value`` (JSON) under ``key`` in the file's ``info`` table, in one transaction (``format`` is this
    module's own)."""
    if key == "format":
        raise ValueError("the results file's info key 'format' is written by cog_pl.results alone")
    with _connect(path, write=True) as con:
        con.execute("INSERT OR REPLACE INTO info VALUES (?, ?)", (key, json.dumps(value, sort_keys=True)))
