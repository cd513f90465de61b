"""Cell claims: which worker makes which cell of a probe grid, in a small SQLite file beside the results.

The cell is the unit of ownership. ``<results>.claims`` (``results.sqlite`` -> ``results.sqlite.claims``) holds table
``claims(cell, worker, host, heartbeat)``, one row per cell being made. A claim is one ``BEGIN IMMEDIATE`` transaction
that takes a cell that is free, already this worker's, or whose heartbeat is older than ``stale_after`` seconds (its
worker is gone, or so slow it counts as gone): that is the whole rule, on one machine or many sharing the file. The
holder's :func:`heartbeat` thread renews the claim; the holder alone writes the cell's study and row, and releases
the claim after its row is written (or when it fails). ``host`` (host name and process id) only says, in messages,
where the holder ran.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_SCHEMA = ("CREATE TABLE IF NOT EXISTS claims (cell TEXT PRIMARY KEY, worker TEXT NOT NULL, host TEXT NOT NULL, "
           "heartbeat REAL NOT NULL)")
_WORKER: dict[int, str] = {}  # process id -> worker id, so that a forked child gets its own


def worker_id() -> str:
    """This process as a claim holder: a random UUID, made once per process (a host name and process id repeat
    across containers)."""
    return _WORKER.setdefault(os.getpid(), uuid.uuid4().hex)


def claims_path(results: str | os.PathLike) -> Path:
    """The claims file of a results file: ``<results>.claims`` beside it."""
    results = Path(results)
    return results.with_name(results.name + ".claims")


@dataclass(frozen=True)
class Claim:
    """A cell held by this worker; ``taken_over``: it was another worker's, whose heartbeat had expired."""

    path: Path
    cell: str
    worker: str
    taken_over: bool = False


@contextlib.contextmanager
def _transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction on the claims file (created where missing): the reads and writes of the
    block as one, with no other claimer in between; committed when the block ends, rolled back on an error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path, timeout=120, isolation_level=None)) as con:
        con.execute(_SCHEMA)
        con.execute("BEGIN IMMEDIATE")
        with con:
            yield con


def claim(results: str | os.PathLike, cell: str, stale_after: float, worker: str | None = None) -> Claim | None:
    """Take ``cell`` for ``worker`` (default: this process, :func:`worker_id`) in one transaction, when it is free,
    already the worker's, or its holder's heartbeat is older than ``stale_after`` seconds; None while another worker
    holds it."""
    path, me, now = claims_path(results), worker or worker_id(), time.time()
    with _transaction(path) as con:
        held = con.execute("SELECT worker, host, heartbeat FROM claims WHERE cell=?", (cell,)).fetchone()
        if held is not None and held[0] != me and now - held[2] <= stale_after:
            return None
        con.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                    (cell, me, f"{socket.gethostname()}:{os.getpid()}", now))
    taken = held is not None and held[0] != me
    if taken:
        log.warning("%s: took over the claim of worker %s on %s (no heartbeat for %.0f s, more than %g s)", cell,
                    held[0][:8], held[1], now - held[2], stale_after)
    return Claim(path, cell, me, taken)


def renew(held: Claim) -> bool:
    """Renew the claim's heartbeat; False when another worker took it over meanwhile."""
    with _transaction(held.path) as con:
        cur = con.execute("UPDATE claims SET heartbeat=? WHERE cell=? AND worker=?",
                          (time.time(), held.cell, held.worker))
    return cur.rowcount == 1


def release(held: Claim) -> None:
    """Drop the claim (one another worker took over is left alone)."""
    with _transaction(held.path) as con:
        con.execute("DELETE FROM claims WHERE cell=? AND worker=?", (held.cell, held.worker))


@contextlib.contextmanager
def heartbeat(held: Claim, every: float) -> Iterator[None]:
    """Renew the claim every ``every`` seconds on a thread while the block runs, until another worker takes it over
    (a renewal that fails, a busy file say, is logged and retried)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            try:
                if not renew(held):
                    log.warning("%s: another worker took over this worker's claim", held.cell)
                    return
            except sqlite3.Error as err:
                log.warning("could not renew the claim on %s (%s); retrying in %.0f s", held.cell, err, every)

    thread = threading.Thread(target=beat, name="claim-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
