"""Atomic file writing (a reader sees the old file or the complete new one, never a partial one), JSON reading,
file hashes, the umask's file modes, one-line disk-full errors, printable file names and why ``torch.load`` failed."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from cog_pl.errors import CogError, DiskFullError, MissingFileError

#: errno values that mean the file system is full (ENOSPC) or the user's quota is spent (EDQUOT).
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def printable(name: str | os.PathLike) -> str:
    """A file name for messages and logs: bytes that are not UTF-8 (kept by Python as surrogate escapes, see
    :func:`os.fsdecode`) shown as ``\\xff``, so printing or writing the name as text never fails."""
    return os.fspath(name).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def disk_full(path: str | os.PathLike, needed: int | None = None, refused: OSError | None = None) -> DiskFullError:
    """The error for a write to ``path`` that ran out of space: the path and the bytes needed (when known), and
    either what the file system said when it ``refused`` them (no space, or a quota) with the free space it counts,
    in whole blocks (why it can refuse a request smaller than that), or, for a check made beforehand, the free space
    found."""
    path = Path(path)
    try:
        where = next(p for p in (path, *path.parents) if p.exists())
        free, block = shutil.disk_usage(where).free, os.statvfs(where).f_frsize
    except (OSError, StopIteration, AttributeError):
        free = block = None
    if refused is None:
        need = "" if needed is None else f"{needed} bytes needed, "
        text = f"({need}{'free space unknown' if free is None else f'{free} bytes free'})"
        return DiskFullError(errno.ENOSPC, f"disk full: cannot write {path} {text}", str(path))
    why = os.strerror(refused.errno).lower() if refused.errno else "no space left"
    asked = "" if needed is None else f"asked for {needed} bytes, "
    counted = "" if free is None else f"; it counts {free} bytes free, in whole {block}-byte blocks"
    return DiskFullError(refused.errno or errno.ENOSPC,
                         f"disk full: cannot write {path}: {asked}the file system refused ({why}{counted})", str(path))


def umask() -> int:
    """The process's umask, read without changing it where Linux reports it (``/proc/self/status``)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # elsewhere: set and restore (racy only against threads changing the umask)
    os.umask(mask)
    return mask


def default_mode(directory: bool = False) -> int:
    """The mode ``open``/``mkdir`` would give a new file (0o666) or directory (0o777) under the umask; ``mkstemp``
    and ``mkdtemp`` create 0o600/0o700, which callers writing outputs others read reset to this."""
    return (0o777 if directory else 0o666) & ~umask()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path`` (mode per the umask); on success it is flushed, fsynced and renamed over
    ``path``. A full disk raises :class:`DiskFullError` naming ``path``, and leaves neither file half-made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        if err.errno in DISK_FULL:
            raise disk_full(path, refused=err) from err
        raise
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and not isinstance(err, DiskFullError) and err.errno in DISK_FULL:
            raise disk_full(path, refused=err) from err
        raise


def write_json(path: str | os.PathLike, data: Any, indent: int | None = 1) -> None:
    """Write JSON atomically."""
    with atomic_open(path) as fh:
        json.dump(data, fh, indent=indent)
        fh.write("\n")


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Parse a JSON file; errors say which ``what`` (e.g. "level file") at which path could not be read."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingFileError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CogError(f"{what} {path} is not readable JSON: {err}") from err


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


#: What torch's safe loading (``weights_only=True``) names when it refuses a pickle: a global, or an opcode.
_REFUSED_GLOBAL = re.compile(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)")
_REFUSED_OPCODE = re.compile(r"Unsupported operand (\d+)")


def digest(values: Any) -> str:
    """The identity digest of JSON-able ``values``: SHA-256 of their JSON with sorted keys (non-JSON values as
    ``str``), as recorded in result rows (:mod:`cog_pl.results.identity`) and model definitions."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def load_failure(err: BaseException) -> str:
    """Why ``torch.load`` could not read a file, in one line: what safe loading refused (nothing from the file ran),
    else the error's first sentence with its type, and what that means (torch's own errors are pages long, some a
    bare key: ``KeyError: 101``)."""
    text = str(err).strip()
    found = _REFUSED_GLOBAL.search(text)
    if found:
        return f"it pickles {found.group(1)}, which safe loading refuses (nothing from the file ran)"
    found = _REFUSED_OPCODE.search(text)
    if found:
        return (f"its pickle stream holds opcode {found.group(1)}, which safe loading refuses (nothing from the "
                "file ran): a damaged file, or not one torch.save wrote")
    first = text.splitlines()[0].split(". ")[0].rstrip(".") if text else ""
    return f"torch.load failed ({type(err).__name__}{': ' + first if first else ''}): a damaged file, or not one " \
           "torch.save wrote"
