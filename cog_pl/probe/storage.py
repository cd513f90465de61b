"""Where a probe's Optuna study lives: a database URL, a journal file, or (the default) a SQLite file.

A SQLite file on a local disk runs in write-ahead-log mode with ``synchronous=NORMAL``: a commit appends to the log
instead of rewriting pages and syncing twice, which makes the study's transactions (some six per trial) about a
third cheaper, and readers no longer block the writer when several workers of one machine share the file. A killed
process loses nothing (commits are in the log); a power cut may lose the last commits, never the file. WAL needs
memory shared between the processes of one host, so a SQLite file on a network filesystem keeps SQLite's default
rollback journal (and several machines should share a database server or a journal file instead).
:func:`close_storage` folds the log back into the file, so that the file alone holds the study afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import time
from pathlib import Path

from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from cog_pl.errors import CogError

log = logging.getLogger(__name__)

JOURNAL_SUFFIXES = (".log", ".journal", ".jsonl")
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
    "fuse.glusterfs", "fuse.sshfs", "fuse.cephfs", "orangefs", "pvfs2", "panfs", "wekafs",
})


def filesystem_type(path: str | os.PathLike, mounts: str | None = None) -> str | None:
    """The type of the filesystem holding ``path``: that of the longest mount point above it in ``mounts`` (a mount
    table, ``/proc/self/mounts`` by default), or None where there is none."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return None
    target, best, kind = str(Path(path).resolve()), "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind


def _synchronous_normal(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


@contextlib.contextmanager
def _exclusive(directory: Path):
    """Hold an exclusive ``flock`` on ``directory`` (not on the database: closing any descriptor of a file drops
    every POSIX record lock the process holds on it, SQLite's included)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, as Optuna alone would do
        yield
        return
    handle = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the flock


def _journal_mode(path: Path, mode: str) -> str:
    """Set the file's journal mode (kept by the file); returns the mode in force afterwards."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=60)) as connection:
            return connection.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
    except sqlite3.Error as err:
        raise CogError(f"{path}: cannot open the study database ({err})") from err


OPTUNA_TABLES = frozenset({
    "studies", "study_directions", "study_user_attributes", "study_system_attributes", "trials", "trial_params",
    "trial_values", "trial_intermediate_values", "trial_user_attributes", "trial_system_attributes",
    "trial_heartbeats", "version_info", "alembic_version",
})
SQLITE_TABLES = frozenset({"sqlite_sequence", "sqlite_stat1", "sqlite_stat4"})


def check_sqlite_study(path: Path) -> None:
    """Refuse an existing SQLite file that is not an Optuna study database: one with tables of its own (a results
    file, another application's database). Read-only: a refused file is left byte for byte as it was."""
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=60)) as connection:
            tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as err:
        raise CogError(f"{path}: cannot open the study database ({err})") from err
    foreign = tables - OPTUNA_TABLES - SQLITE_TABLES
    if foreign:
        raise CogError(f"{path} is not an Optuna storage (it has tables {', '.join(sorted(foreign))}); point "
                       "--storage at a new file")


def journal_storage(path: Path) -> JournalStorage:
    """The journal file at ``path``; one that is not an Optuna journal is named in a ValueError."""
    try:
        return JournalStorage(JournalFileBackend(str(path)))
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:  # JSON and replay errors
        raise CogError(f"{path} is not an Optuna journal file ({type(err).__name__}: {err}); point --storage at "
                       "a new file") from err


def _create(url: str, attempts: int = 5, new: bool = False) -> RDBStorage:
    """Optuna's storage, retried while another worker is creating the same new file's tables. ``new``: the file is
    one this process creates (under a lock), so its schema is this Optuna's and the version check is skipped (it
    parses Alembic's migration scripts)."""
    from sqlalchemy.exc import IntegrityError, OperationalError

    for attempt in range(attempts):
        try:
            return RDBStorage(url, skip_compatibility_check=new)
        except (OperationalError, IntegrityError) as err:
            racing = "already exists" in str(err) or "UNIQUE constraint failed: alembic_version" in str(err)
            if not racing or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def sqlite_storage(path: Path) -> RDBStorage:
    """The SQLite study file at ``path``: WAL mode on a local disk, the rollback journal on a network filesystem
    (see the module's docstring).

    Workers that start together take turns to open it: Optuna creates a new database's tables without a lock, and
    a second process creating them at the same moment fails ("table studies already exists"). On a network
    filesystem, where locks are not to be trusted, a worker that loses that race retries instead."""
    url = f"sqlite:///{path}"
    check_sqlite_study(path)  # before the journal mode or Optuna's tables touch it
    if filesystem_type(path.parent) in NETWORK_FILESYSTEMS:
        if path.exists() and _journal_mode(path, "DELETE") != "delete":  # a file made on a local disk, copied here
            raise CogError(f"{path}: a SQLite study in WAL mode on a network filesystem, which SQLite does not "
                           "support, and it could not be switched back (is a worker using it?)")
        return _create(url)
    with _exclusive(path.parent):
        new = not path.exists() or path.stat().st_size == 0
        mode = _journal_mode(path, "WAL")
        storage = _create(url, new=new)
        if mode == "wal":
            from sqlalchemy import event

            event.listen(storage.engine, "connect", _synchronous_normal)
            storage.engine.dispose()  # the connections made while creating the schema: the next ones get the pragma
    return storage


#: A database URL's password (``scheme://user:PASSWORD@host``), hidden in messages where SQLAlchemy cannot parse it.
_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")


def shown_url(url: str) -> str:
    """A database URL for messages: its password as ``***``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _PASSWORD.sub(r"\1***@", url)


def _port(url: str) -> str:
    """The port of a database URL as written (``scheme://user:pw@host:PORT/db``, ``[v6]:PORT``); ``""`` for none."""
    netloc = re.split(r"[/?#]", url.split("://", 1)[-1], maxsplit=1)[0].rpartition("@")[2]
    return "" if netloc.endswith("]") else netloc.rpartition(":")[2] if ":" in netloc else ""


def _database(url: str) -> RDBStorage:
    """Optuna's storage for a database URL; a URL it cannot use is named (without its password) in a ValueError."""
    from sqlalchemy.exc import ArgumentError, DatabaseError

    port = _port(url)
    if port and not port.isdigit():  # SQLAlchemy's int() of it would name neither the URL nor the port
        raise CogError(f"storage {shown_url(url)}: port {port!r} is not a number")
    try:
        return _create(url)
    except (ImportError, ArgumentError, DatabaseError) as err:
        shown = shown_url(url)
        if isinstance(err, DatabaseError):
            why = f"cannot open the study database ({err.orig})"
        elif isinstance(err, ImportError):
            why = f"the database driver for it is not installed ({err.__cause__ or err})"
        else:
            why = f"not a database URL SQLAlchemy can use ({err})"
        raise CogError(f"storage {shown}: {why}") from err


def storage_kind(storage: str | os.PathLike) -> str:
    """What a storage string is: ``"database"`` (a database server's URL), ``"sqlite"`` (a SQLite file, as a path
    or a ``sqlite://`` URL) or ``"journal"`` (a journal file: ``*.log``, ``*.journal``, ``*.jsonl``). Only a
    database or a journal file can be shared by workers on several machines."""
    text = str(storage)
    if "://" in text:
        return "sqlite" if text.startswith("sqlite:") else "database"
    return "journal" if Path(text).suffix in JOURNAL_SUFFIXES else "sqlite"


def resolve_storage(storage: str | os.PathLike | BaseStorage) -> BaseStorage:
    """A storage object as is; a database URL as Optuna's database storage (one engine, so that its connections
    can be closed: :func:`close_storage`); a journal file path (``*.log``, ``*.journal``, ``*.jsonl``) as a journal
    storage; any other path as a SQLite file (:func:`sqlite_storage`); see :func:`storage_kind`."""
    if isinstance(storage, BaseStorage):
        return storage
    text, kind = str(storage), storage_kind(storage)
    if "://" in text:
        if text.startswith("sqlite:///") and text != "sqlite:///:memory:":  # used as given, but never another's file
            check_sqlite_study(Path(text[len("sqlite:///"):]))
        return _database(text)
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "journal":
        return journal_storage(path)
    return sqlite_storage(path)


def close_storage(storage: BaseStorage) -> None:
    """Close a storage's database connections (a SQLite file in WAL mode then holds every commit itself)."""
    if isinstance(storage, RDBStorage):
        storage.engine.dispose()


@contextlib.contextmanager
def opened(storage: str | os.PathLike | BaseStorage):
    """:func:`resolve_storage` for the duration of a block, closed afterwards unless it was handed in as a storage
    object (which stays open for its owner)."""
    resolved = resolve_storage(storage)
    try:
        yield resolved
    finally:
        if resolved is not storage:
            close_storage(resolved)
