"""Random access into uncompressed tar files: an index of member offsets, built once and cached.

ImageNet-21K Fall 2011 ships one tar per synset (``n01234567.tar`` holding ``n01234567_123.JPEG`` ...), and IN-1K's
train set ships the same way. Reading a member needs only its data offset and size, so an index of
``name -> (offset, size)`` turns a tar into a read-only key-value store without unpacking a byte.

Index file (JSON): ``{"format": "cog-pl-tar-index", "version": 2, "tar_size", "tar_mtime_ns", "members":
[[name, offset, size], ...]}``. Names are full member paths without a leading ``./`` (``n01_1.JPEG``, ``a/x.JPEG``), so
two members with one base name in different folders are two images; a name twice in one tar is refused. A member
named outside the tar's folder (an absolute path, or one climbing with ``..``) is no image of it: it is left out,
named in a warning (:func:`outside`; every reader of a tar applies it). When every member lies in one folder
(``n01/n01_1.JPEG``, as ``tar cf n01.tar n01/`` makes), that folder is the root. The index is rebuilt when the tar's
size or mtime changes. It is written beside the tar (``<tar>.index.json``) when that folder is
writable, else under ``<cache_dir>/tar_index/``.

A tar cut short (an interrupted copy) is refused when indexed, naming it and the bytes missing: Python's ``tarfile``
stops silently at a truncated header, so the file's size is checked against the end of the last member's data
(padded to 512-byte blocks) and what follows must be the end-of-archive marker (zero blocks).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import posixpath
import tarfile
from pathlib import Path
from typing import BinaryIO

from cog_pl.errors import NotFoundError
from cog_pl.io import printable, write_json

log = logging.getLogger(__name__)

INDEX_FORMAT = "cog-pl-tar-index"
INDEX_VERSION = 3  # 3: members named outside the tar left out (version 2 indexed them)
BLOCK = 512  # tar block size: headers and padded member data


def default_cache_dir() -> Path:
    """``$COG_PL_CACHE``, else ``$XDG_CACHE_HOME/cog_pl``, else ``~/.cache/cog_pl``."""
    if os.environ.get("COG_PL_CACHE"):
        return Path(os.environ["COG_PL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cog_pl"


def _index_paths(tar_path: Path, cache_dir: Path | None) -> list[Path]:
    """Where an index may live, in order of preference."""
    digest = hashlib.sha256(str(tar_path.resolve()).encode()).hexdigest()[:16]
    cached = (cache_dir or default_cache_dir()) / "tar_index" / f"{tar_path.stem}-{digest}.json"
    beside = tar_path.with_name(tar_path.name + ".index.json")
    return [cached, beside] if cache_dir is not None else [beside, cached]


def member_key(name: str) -> str:
    """The key of a tar member: its path inside the tar, without a leading ``./`` or ``/``."""
    return posixpath.normpath(name).lstrip("/")


def outside(name: str) -> bool:
    """Whether a tar member is named outside the tar's folder: an absolute path, or one that climbs out with ``..``
    (unpacked, it would land elsewhere; it is no image of the tar's synset)."""
    return name.startswith("/") or posixpath.normpath(name).split("/")[0] == ".."


def leave_out(what: str, names: list[str]) -> None:
    """Say which members of ``what`` (a tar) were left out as named outside it (:func:`outside`)."""
    if names:
        shown = ", ".join(printable(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        log.warning("%s: %d member(s) named outside the tar (absolute, or climbing with ..) left out, not images of "
                    "it: %s", what, len(names), shown)


class TarWindow(io.RawIOBase):
    """``size`` bytes of an open binary file from ``start``, read as a file of their own: a tar held inside another
    uncompressed tar (IN-21K's ``fall11_whole.tar``) is scanned in place, its offsets relative to ``start``."""

    def __init__(self, fh: BinaryIO, start: int, size: int) -> None:
        super().__init__()
        self.fh, self.start, self.size, self.pos = fh, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = {0: pos, 1: self.pos + pos, 2: self.size + pos}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        if n <= 0:
            return b""
        data = os.pread(self.fh.fileno(), n, self.start + self.pos)
        self.pos += len(data)
        return data

    def readinto(self, buf: bytearray | memoryview) -> int:
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def scan_tar(tar_path: str | os.PathLike, offset: int = 0, size: int | None = None,
             label: str | None = None) -> dict[str, tuple[int, int]]:
    """Read a tar's headers once: ``{member path: (data offset, size)}`` for its regular files; ``OSError`` naming the
    tar when it is not a tar, truncated, or holds one name twice. ``offset`` / ``size``: the tar is those bytes of
    ``tar_path`` (a member of an outer tar, ``label`` naming it in messages); offsets are relative to ``offset``."""
    what = label or str(tar_path)
    members: dict[str, tuple[int, int]] = {}
    strays: list[str] = []  # members named outside the tar
    end, last = 0, None  # where the last member's padded data ends, and its name
    with open(tar_path, "rb") as fh:
        window = TarWindow(fh, offset, os.fstat(fh.fileno()).st_size - offset if size is None else size)
        try:
            with tarfile.open(fileobj=window, mode="r:") as tf:
                for info in tf:
                    end, last = info.offset_data + -(-info.size // BLOCK) * BLOCK, info.name
                    if info.isfile() and outside(info.name):
                        strays.append(info.name)
                    elif info.isfile():
                        key = member_key(info.name)
                        if key in members:
                            raise OSError(f"{what}: member {key} appears twice; which one is the image is ambiguous")
                        members[key] = (info.offset_data, info.size)
        except (tarfile.TarError, EOFError) as err:
            if last is not None:
                check_tail(what, window, end, last)  # cut short: say so, and by how much
            raise OSError(f"{what}: not a readable uncompressed tar ({err})") from err
        check_tail(what, window, end, last)
    leave_out(what, strays)
    tops = {key.split("/", 1)[0] if "/" in key else None for key in members}
    if len(tops) == 1 and None not in tops:  # all in one folder (``tar cf n01.tar n01/``): read it as the root
        cut = len(tops.pop()) + 1
        members = {key[cut:]: where for key, where in members.items()}
    return members


def check_complete(tar_path: str | os.PathLike, end: int, last: str | None) -> None:
    """Refuse a tar whose size falls short of its last member's data (``end``) or whose bytes after it are not the
    end-of-archive marker (two zero blocks): a truncated or damaged copy, which ``tarfile`` reads without a word."""
    with open(tar_path, "rb") as fh:
        check_tail(str(tar_path), TarWindow(fh, 0, os.fstat(fh.fileno()).st_size), end, last)


def check_tail(what: str, window: TarWindow, end: int, last: str | None) -> None:
    """:func:`check_complete` of a tar read through ``window``; messages name ``what``."""
    size = window.size
    after = f"after member {last}" if last else "at its start"
    if size < end:
        raise OSError(f"{what}: truncated, {end - size} bytes missing (member {last} ends at byte {end}, the file "
                      f"has {size})")
    window.seek(end)
    tail = window.read(1 << 20)
    if tail.strip(b"\0"):
        raise OSError(f"{what}: truncated or damaged {after}: the {size - end} bytes from byte {end} are not a "
                      "readable tar header")
    if size - end < 2 * BLOCK:
        raise OSError(f"{what}: truncated {after}: no end-of-archive marker ({2 * BLOCK - (size - end)} bytes "
                      "missing at least)")


class TarIndex:
    """A tar opened for random access: ``names()``, ``read(name)``.

    Holds no open file between reads, so thousands of tars can be open at once and DataLoader workers (forked or
    spawned) share it safely.
    """

    def __init__(self, tar_path: str | os.PathLike, members: dict[str, tuple[int, int]]) -> None:
        self.path = Path(tar_path)
        self.members = members

    @classmethod
    def open(cls, tar_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> TarIndex:
        """Load the cached index of ``tar_path`` if it is current, else scan the tar and cache the index."""
        tar_path = Path(tar_path)
        st = tar_path.stat()
        candidates = _index_paths(tar_path, Path(cache_dir) if cache_dir is not None else None)
        for idx in candidates:
            try:
                data = json.loads(idx.read_text())
            except (OSError, ValueError):
                continue
            if (data.get("format") == INDEX_FORMAT and data.get("version") == INDEX_VERSION
                    and data.get("tar_size") == st.st_size and data.get("tar_mtime_ns") == st.st_mtime_ns):
                return cls(tar_path, {n: (o, s) for n, o, s in data["members"]})
        members = scan_tar(tar_path)
        record = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "tar": tar_path.name, "tar_size": st.st_size,
                  "tar_mtime_ns": st.st_mtime_ns, "members": [[n, o, s] for n, (o, s) in sorted(members.items())]}
        for idx in candidates:
            try:
                write_json(idx, record, indent=None)
                log.debug("indexed %s (%d members) -> %s", tar_path, len(members), idx)
                break
            except OSError:
                continue
        else:
            log.warning("could not cache the index of %s anywhere; it will be rebuilt next time", tar_path)
        return cls(tar_path, members)

    def names(self) -> list[str]:
        """Member paths (:func:`member_key`), sorted."""
        return sorted(self.members)

    def __contains__(self, name: str) -> bool:
        return name in self.members

    def read(self, name: str) -> bytes:
        """The bytes of one member; raises ``KeyError`` naming the tar when absent, ``OSError`` when cut short."""
        try:
            offset, size = self.members[name]
        except KeyError:
            raise NotFoundError(f"{name} is not in {self.path}") from None
        return read_range(self.path, offset, size, what=f"{self.path} member {name}")


def read_range(path: str | os.PathLike, offset: int, size: int, what: str | None = None) -> bytes:
    """``size`` bytes of ``path`` from ``offset``; ``OSError`` naming ``what`` when the file ends early."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, size, offset)
    finally:
        os.close(fd)
    if len(data) != size:
        raise OSError(f"{what or path} is truncated ({len(data)} of {size} bytes)")
    return data
