"""Cell claims: which worker makes which cell of a probe grid, in a small SQLite file beside the results.

The cell is the unit of ownership. ``<results>.claims`` (``results.sqlite`` -> ``results.sqlite.claims``) holds table
``claims(cell, worker, host, heartbeat)``, one row per cell being made, and (format 2) table
``holders(cell, worker, machine, pid, started)``: the process that took each claim. A claim is one
``BEGIN IMMEDIATE`` transaction that takes a cell that is free, already this worker's, or whose holder is gone: its
heartbeat is older than ``stale_after`` seconds (the worker is gone, or so slow it counts as gone), or its holder
ran on this machine and its process no longer runs (killed: a resume takes over at once, :func:`running`). That is
the whole rule, on one machine or many sharing the file. The holder's :func:`heartbeat` thread renews the claim; the
holder alone writes the cell's study and row, and releases the claim after its row is written (or when it fails).
``host`` (host name and process id) says, in messages, where the holder ran.

A machine (:func:`this_machine`) is a host name, a boot of its kernel and a PID namespace: only there does a process
id name one process. A claim of another machine (another host, another container, a claims file of format 1 without
``holders``, a claim an older cog_pl took) waits for its heartbeat to go stale, as before. A process is named by its
id and its start time (``/proc/<pid>/stat`` field 22, clock ticks after boot), so that a new process that reuses the
id of a dead holder is not taken for it. Where ``/proc`` is missing (not Linux) no holder is recorded.
"""

from __future__ import annotations

import contextlib
import functools
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

from cog_pl.errors import ClaimsFileError, ClaimsFileUnusable

log = logging.getLogger(__name__)

_SCHEMA = ("CREATE TABLE IF NOT EXISTS claims (cell TEXT PRIMARY KEY, worker TEXT NOT NULL, host TEXT NOT NULL, "
           "heartbeat REAL NOT NULL); "
           "CREATE TABLE IF NOT EXISTS holders (cell TEXT PRIMARY KEY, worker TEXT NOT NULL, machine TEXT NOT NULL, "
           "pid INTEGER NOT NULL, started TEXT NOT NULL)")
_WORKER: dict[int, str] = {}  # process id -> worker id, so that a forked child gets its own
#: The claims file's format (``PRAGMA user_version``): 2 adds table ``holders``. A file of format 1 (0 in SQLite's
#: header) gains the table when first used; its claims without a holder are judged by their heartbeats alone, and an
#: older cog_pl, which never reads the table, works on a file of format 2 as before.
FORMAT = 2
#: What the messages call the file.
ROLE = "the probe grid's claims file (which worker makes which cell)"


def worker_id() -> str:
    """This process as a claim holder: a random UUID, made once per process (a host name and process id repeat
    across containers)."""
    return _WORKER.setdefault(os.getpid(), uuid.uuid4().hex)


def claims_path(results: str | os.PathLike) -> Path:
    """The claims file of a results file: ``<results>.claims`` beside it."""
    results = Path(results)
    return results.with_name(results.name + ".claims")


@functools.lru_cache(maxsize=1)
def this_machine() -> str | None:
    """Where a process id names one process: host name, kernel boot id and PID namespace (Linux ``/proc``); None
    where they are not known, and then no claim of this process is taken over before its heartbeat goes stale."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{socket.gethostname()} boot {boot} {namespace}"


def _stat(pid: int) -> tuple[str, str] | None:
    """Process ``pid``'s state and start time (``/proc/<pid>/stat`` fields 3 and 22, the latter in clock ticks after
    boot); None where this process cannot read them (no such process, or ``/proc`` hides it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces: fields 3 on
    return fields[0], fields[19]


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` on this machine, None where unknown: with its id, what names the process."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def running(pid: int, started: str) -> bool:
    """Whether process ``pid`` that started at ``started`` (:func:`process_start`) still runs on this machine.
    False only when it is known to be gone: no such process, a zombie (killed, not yet reaped), or another process
    that reuses its id (another start time). One that ``/proc`` hides (another user's, ``hidepid``) counts as
    running."""
    stat = _stat(pid)
    if stat is not None:
        return stat[0] not in ("Z", "X") and stat[1] == started
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # no signal sent: whether the process exists
    except ProcessLookupError:
        return False
    except OSError:  # it exists, and is another user's
        return True
    return True


@dataclass(frozen=True)
class Claim:
    """A cell held by this worker; ``taken_over``: it was another worker's, whose heartbeat had expired or whose
    process on this machine was gone."""

    path: Path
    cell: str
    worker: str
    taken_over: bool = False


@contextlib.contextmanager
def _transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction on the claims file (created where missing): the reads and writes of the
    block as one, with no other claimer in between; committed when the block ends, rolled back on an error. A folder,
    a file that is no SQLite database, or one that cannot be written is named in one line
    (:class:`ClaimsFileError`, :class:`ClaimsFileUnusable`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise ClaimsFileError(f"{path}: {ROLE} is a folder; remove it when no worker of this grid runs (cog-pl makes "
                              "the file again)")
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=120, isolation_level=None)) as con:
            con.executescript(_SCHEMA)
            con.execute("BEGIN IMMEDIATE")
            with con:
                yield con
    except sqlite3.OperationalError as err:  # read-only, locked past the timeout, a disk error
        if isinstance(err, ClaimsFileUnusable):
            raise
        raise ClaimsFileUnusable(f"{path}: cannot use {ROLE}: {err}") from err
    except sqlite3.DatabaseError as err:  # not an SQLite database, or a damaged one
        raise ClaimsFileError(f"{path}: {ROLE} is not a usable SQLite database ({err}); remove it when no worker of "
                              "this grid runs (cog-pl makes the file again)") from err


def check_claims_file(results: str | os.PathLike) -> None:
    """Refuse, before any work, a claims file beside ``results`` that cannot hold claims (a folder, no SQLite
    database, read-only); made where missing, marked as format 2 (``PRAGMA user_version``)."""
    with _transaction(claims_path(results)) as con:
        if con.execute("PRAGMA user_version").fetchone()[0] < FORMAT:
            con.execute(f"PRAGMA user_version = {FORMAT}")


def _gone(machine: str | None, pid: int | None, started: str | None) -> bool:
    """Whether a claim's holder is known to be gone: it ran on this machine and its process no longer runs."""
    return machine is not None and machine == this_machine() and not running(pid, started)


def claim(results: str | os.PathLike, cell: str, stale_after: float, worker: str | None = None) -> Claim | None:
    """Take ``cell`` for ``worker`` (default: this process, :func:`worker_id`) in one transaction, when it is free,
    already the worker's, its holder's heartbeat is older than ``stale_after`` seconds, or its holder ran on this
    machine and its process is gone; None while another worker holds it. This process is recorded as the holder."""
    path, me, now = claims_path(results), worker or worker_id(), time.time()
    machine, pid = this_machine(), os.getpid()
    started = process_start(pid) if machine is not None else None
    with _transaction(path) as con:
        held = con.execute("SELECT c.worker, c.host, c.heartbeat, h.machine, h.pid, h.started FROM claims c LEFT JOIN "
                           "holders h ON h.cell = c.cell AND h.worker = c.worker WHERE c.cell=?", (cell,)).fetchone()
        gone = held is not None and held[0] != me and _gone(*held[3:])
        if held is not None and held[0] != me and now - held[2] <= stale_after and not gone:
            return None
        con.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                    (cell, me, f"{socket.gethostname()}:{pid}", now))
        if started is not None:
            con.execute("INSERT OR REPLACE INTO holders VALUES (?, ?, ?, ?, ?)", (cell, me, machine, pid, started))
        else:
            con.execute("DELETE FROM holders WHERE cell=?", (cell,))
    taken = held is not None and held[0] != me
    if taken and gone:
        log.warning("%s: took over the claim of worker %s on %s (its process no longer runs on this machine)", cell,
                    held[0][:8], held[1])
    elif taken:
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
        con.execute("DELETE FROM holders WHERE cell=? AND worker=?", (held.cell, held.worker))


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
            except (sqlite3.Error, ClaimsFileError) as err:
                log.warning("could not renew the claim on %s (%s); retrying in %.0f s", held.cell, err, every)

    thread = threading.Thread(target=beat, name="claim-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
