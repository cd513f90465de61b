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
import sqlite3
from pathlib import Path

from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

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
def _exclusive(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (created if absent; an empty file is an empty SQLite database).
    SQLite's own locks are POSIX record locks, which ``flock`` does not touch on a local disk."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, as Optuna alone would do
        yield
        return
    with open(path, "ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sqlite_storage(path: Path) -> str | RDBStorage:
    """The SQLite study file at ``path``: WAL mode on a local disk (see the module's docstring), else its URL.

    Workers that start together take turns to open it: Optuna creates a new database's tables without a lock, and
    a second process creating them at the same moment fails ("table studies already exists")."""
    url = f"sqlite:///{path}"
    if filesystem_type(path.parent) in NETWORK_FILESYSTEMS:
        return url
    with _exclusive(path):
        try:
            with contextlib.closing(sqlite3.connect(path, timeout=60)) as connection:
                mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]  # persistent, kept by the file
        except sqlite3.Error as err:
            raise ValueError(f"{path}: cannot open the study database ({err})") from err
        storage = RDBStorage(url)
    if mode == "wal":
        from sqlalchemy import event

        event.listen(storage.engine, "connect", _synchronous_normal)
        storage.engine.dispose()  # the connections made while creating the schema: the next ones get the pragma
    return storage


def resolve_storage(storage: str | os.PathLike | BaseStorage) -> str | BaseStorage:
    """A database URL as is; a journal file path (``*.log``, ``*.journal``, ``*.jsonl``) as a journal storage;
    any other path as a SQLite file (:func:`sqlite_storage`)."""
    if isinstance(storage, BaseStorage):
        return storage
    text = str(storage)
    if "://" in text:
        return text
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in JOURNAL_SUFFIXES:
        return JournalStorage(JournalFileBackend(str(path)))
    return sqlite_storage(path)


def close_storage(storage: str | BaseStorage) -> None:
    """Close a storage's database connections (a SQLite file in WAL mode then holds every commit itself)."""
    if isinstance(storage, RDBStorage):
        storage.engine.dispose()
