"""Resumable, verified downloads of published checkpoints (standard-library HTTP), behind ``cog-pl models download``.

:func:`download` writes ``<dest>.part`` and renames it onto ``dest`` only once the transfer is complete and, where a
hash prefix is given, the file's SHA-256 starts with it: ``dest`` is the whole published file or absent, never a part
of one. An interrupted transfer keeps the ``.part``; the next call asks the server for the rest (``Range: bytes=N-``)
and appends it, or starts again where the server cannot resume. :func:`hash_prefix_of` reads the prefix a published
file name carries (torch.hub's convention), so a caller can verify what it downloads without a table of digests.

Looking up the host and connecting are bounded by :data:`CONNECT_TIMEOUT` together (the name lookup runs in a
thread: the system's resolver of a machine without network can take many seconds to give up, and a socket's timeout
does not bound it); reads by the longer ``timeout``.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import logging
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import HTTPHandler, HTTPSHandler, OpenerDirector, Request, build_opener

from cog_pl.errors import CogError, DownloadError
from cog_pl.io import DISK_FULL, disk_full, file_sha256
from cog_pl.progress import Progress, duration, is_terminal
from cog_pl.version import __version__

log = logging.getLogger(__name__)

#: torch.hub's rule for the hash in a published name (torch/hub.py: ``HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")``,
#: read by ``load_state_dict_from_url(check_hash=True)``: ``filename-<sha256>.ext``, "the first eight or more digits"
#: of the SHA-256), with at least 6 digits: torch's ``*`` would also take ``b0`` from ``efficientnet-b0.pth``.
HASH_REGEX = re.compile(r"-([a-f0-9]{6,})\.")
#: Bytes read from the connection at a time (and the progress bar's step).
CHUNK = 1 << 18
#: Seconds to look up a host and connect to it, together: a machine without network fails within them.
CONNECT_TIMEOUT = 5.0
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)")


def hash_prefix_of(filename: str) -> str | None:
    """The SHA-256 prefix a published file name (or URL) carries: ``resnet50-19c8e357.pth`` -> ``19c8e357``; None
    where it carries none (``moco_v2_800ep_pretrain.pth.tar``)."""
    match = HASH_REGEX.search(filename.rsplit("/", 1)[-1])
    return match.group(1) if match else None


class ByteProgress(Progress):
    """A transfer's progress: :class:`Progress`'s bar on a terminal or log lines elsewhere, counted in bytes with the
    rate; a resumed transfer starts at the bytes it already has (counted as done, not in the rate)."""

    def __init__(self, desc: str, total: int | None, initial: int = 0, *, enabled: bool = True,
                 interval: float = 30.0) -> None:
        super().__init__(desc, total or 0, "B", terminal=False, interval=interval, enabled=enabled)
        self.done = self.initial = float(initial)
        if enabled and is_terminal():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit="B", unit_scale=True, file=sys.stderr,
                             dynamic_ncols=True, leave=True)

    def rate(self) -> float:
        """Bytes per second of this transfer."""
        return (self.done - self.initial) / max(time.monotonic() - self.start, 1e-9)

    def line(self) -> str:
        """``45.0 MB of 97.8 MB (46 %), 12.3 MB/s, about 4 s left``."""
        rate = self.rate()
        text = f"{size(self.done)} of {size(self.total)} ({100 * self.done / max(self.total, 1):.0f} %), " \
               f"{size(rate)}/s"
        if rate > 0 and self.done < self.total:
            text += f", about {duration((self.total - self.done) / rate)} left"
        return text

    def close(self) -> None:
        if self._bar is None and self.enabled:
            self.enabled = False
            log.info("%s: %s in %s (%s/s)", self.desc, size(self.done - self.initial),
                     duration(time.monotonic() - self.start), size(self.rate()))
        super().close()


def size(n: float) -> str:
    """``512 B``, ``45.0 MB``, ``1.23 GB`` (decimal units, as tqdm's)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{n:.0f} B"


def download(url: str, dest: Path, sha256_prefix: str | None = None, progress: bool = True,
             timeout: float = 60, prefix_of: str = "", connect_timeout: float | None = None) -> Path:
    """Download ``url`` to ``dest`` through ``<dest>.part`` (resumed where one exists) and return ``dest``.

    With ``sha256_prefix`` the file's SHA-256 must start with it, else the part is removed and a ``ValueError``
    says so; a ``dest`` that exists and matches is returned without a request (without a prefix, existing is enough).
    Network failures raise :class:`DownloadError` naming the URL; ``timeout`` is per read, in seconds, and
    ``connect_timeout`` (default :data:`CONNECT_TIMEOUT`) bounds looking up the host and connecting to it.
    ``prefix_of``: whose digest the prefix is, for the message (e.g. ``" (resnet50's published file)"``).
    """
    dest = Path(dest)
    prefix = None if sha256_prefix is None else sha256_prefix.lower()
    if prefix is not None and not re.fullmatch(r"[0-9a-f]+", prefix):
        raise CogError(f"sha256 prefix {sha256_prefix!r} for {dest} is not hexadecimal")
    if dest.is_file():
        digest = None if prefix is None else file_sha256(dest)
        if digest is None or digest.startswith(prefix):
            log.info("%s exists%s: not downloaded again", dest,
                     " (not verified: no hash prefix)" if prefix is None else f" and its sha256 starts with {prefix}")
            return dest
        log.warning("%s exists but its sha256 %s does not start with %s: downloading it again", dest, digest, prefix)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    offset = part.stat().st_size if part.is_file() else 0
    timeouts = (CONNECT_TIMEOUT if connect_timeout is None else connect_timeout, timeout)
    if not _fetch(url, part, offset, progress, timeouts):  # 416: the part is not the whole file, start again
        part.unlink()
        _fetch(url, part, 0, progress, timeouts)
    digest = file_sha256(part)
    if prefix is not None and not digest.startswith(prefix):
        part.unlink(missing_ok=True)
        raise CogError(f"{dest} from {url}: sha256 {digest} does not start with the expected {prefix}{prefix_of} "
                       "(the download was removed)")
    os.replace(part, dest)
    _fsync_dir(dest.parent)
    log.info("downloaded %s to %s (sha256 %s)", url, dest, digest)
    return dest


def _connect_timeout(what: str) -> TimeoutError:
    """A lookup or connect that ran out of time, saying which (its ``strerror``; a read's timeout has none)."""
    return TimeoutError(errno.ETIMEDOUT, what)


def _resolve(host: str, port: int, timeout: float) -> list[tuple[Any, ...]]:
    """``socket.getaddrinfo`` of ``host``, given up after ``timeout`` seconds (the lookup thread is left to end)."""
    found: dict[str, Any] = {}

    def look_up() -> None:
        try:
            found["addresses"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except OSError as err:
            found["error"] = err

    thread = threading.Thread(target=look_up, name=f"resolve {host}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise _connect_timeout(f"could not look up {host} within {timeout:g} s (no network?)")
    if "error" in found:
        raise found["error"]
    return found["addresses"]


class _Bounded:
    """An ``http.client`` connection whose name lookup and connect are bounded by its ``timeout`` (the connect
    timeout) and whose socket then reads with ``read_timeout``."""

    def __init__(self, *args: Any, read_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = read_timeout
        self._create_connection = self._connect

    def _connect(self, address: tuple[str, int], timeout: float, source_address: Any = None) -> socket.socket:
        host, port = address
        deadline = time.monotonic() + timeout
        error: OSError | None = None
        for family, kind, proto, _, where in _resolve(host, port, timeout):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(left)
                if source_address:
                    sock.bind(source_address)
                sock.connect(where)
            except TimeoutError:
                sock.close()
                error = _connect_timeout(f"could not connect to {host}:{port} within {timeout:g} s")
                continue
            except OSError as err:
                sock.close()
                error = err
                continue
            sock.settimeout(self.read_timeout)
            return sock
        raise error or _connect_timeout(f"could not connect to {host}:{port} within {timeout:g} s")


class _HTTPConnection(_Bounded, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Bounded, http.client.HTTPSConnection):
    pass


def _bounded_handler(base: type, connection: type, read_timeout: float) -> Any:
    """``base`` (urllib's HTTP or HTTPS handler) opening its connections as ``connection``."""

    class Handler(base):
        def do_open(self, http_class: Any, req: Request, **kwargs: Any) -> Any:
            return super().do_open(lambda *a, **k: connection(*a, read_timeout=read_timeout, **k), req, **kwargs)

    return Handler()


def _open(request: Request, timeouts: tuple[float, float]) -> Any:
    """``urlopen(request)`` with the lookup and connect bounded by ``timeouts[0]`` and each read by ``timeouts[1]``."""
    connect, read = timeouts
    opener: OpenerDirector = build_opener(_bounded_handler(HTTPHandler, _HTTPConnection, read),
                                          _bounded_handler(HTTPSHandler, _HTTPSConnection, read))
    return opener.open(request, timeout=connect)


def _fetch(url: str, part: Path, offset: int, progress: bool, timeouts: tuple[float, float]) -> bool:
    """Bring ``part`` (``offset`` bytes now) to the whole file; False where the server refused the range (416) and
    the part is not the whole file. ``timeouts``: (lookup and connect, each read) in seconds."""
    timeout = timeouts[1]
    headers = {"User-Agent": f"cog-pl/{__version__}", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        log.info("resuming %s at byte %d", url, offset)
    try:
        response = _open(Request(url, headers=headers), timeouts)
    except HTTPError as err:
        with err:
            if err.code == 416 and offset:
                total = _content_range(err.headers.get("Content-Range"))[1] or _remote_size(url, timeouts)
                log.info("%s refused the range from byte %d; the file has %s bytes", url, offset, total or "unknown")
                return total == offset
            raise DownloadError(f"cannot download {url}: HTTP {err.code} {err.reason}") from None
    except (URLError, OSError) as err:
        raise DownloadError(f"cannot download {url}: {_reason(err, timeout)}") from None
    with response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        mode = "wb"
        if offset and response.status == 206:
            start, total = _content_range(response.headers.get("Content-Range"))
            if start != offset:
                raise DownloadError(f"cannot resume {url}: asked for the bytes from {offset}, the server sent "
                                    f"{response.headers.get('Content-Range')!r}; delete {part} to start again")
            if total is None and length and length.isdigit():
                total = offset + int(length)
            mode = "ab"
        elif offset:
            log.info("%s ignored the range request: downloading it from the start", url)
            offset = 0
        with ByteProgress(part.stem, total, offset, enabled=progress) as bar, open(part, mode) as fh:
            try:
                while chunk := response.read(CHUNK):
                    fh.write(chunk)
                    bar.update(len(chunk))
                fh.flush()
                os.fsync(fh.fileno())
            except (OSError, http.client.HTTPException) as err:
                if isinstance(err, OSError) and err.errno in DISK_FULL:
                    raise disk_full(part, None if total is None else total - fh.tell()) from err
                raise DownloadError(f"download of {url} interrupted at byte {fh.tell()}: {_reason(err, timeout)}; "
                                    f"{part} is kept to resume") from None
            done = fh.tell()
    if total is not None and done != total:
        raise DownloadError(f"download of {url} interrupted at byte {done} of {total}: connection closed; "
                            f"{part} is kept to resume")
    return True


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, file size) of a ``Content-Range`` header (``bytes 100-199/1000``, ``bytes */1000``)."""
    match = _CONTENT_RANGE.fullmatch((value or "").strip())
    if match is None:
        return None, None
    start, total = match.groups()
    return (None if start is None else int(start)), (None if total == "*" else int(total))


def _remote_size(url: str, timeouts: tuple[float, float]) -> int | None:
    """The file's size per a HEAD request (``Content-Length``); None where the server does not say."""
    try:
        with _open(Request(url, method="HEAD", headers={"User-Agent": f"cog-pl/{__version__}"}),
                   timeouts) as response:
            length = response.headers.get("Content-Length")
    except (URLError, OSError):
        return None
    return int(length) if length and length.isdigit() else None


def _reason(err: BaseException, timeout: float) -> str:
    """Why a connection failed, in a few words on one line."""
    reason = err.reason if isinstance(err, URLError) else err
    if isinstance(reason, TimeoutError):
        return reason.strerror or f"timed out after {timeout:g} s"
    if isinstance(reason, socket.gaierror):  # the host's name was not found
        return f"{reason.strerror or reason} (looking up the host; no network?)"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return " ".join(str(reason).split()) or type(reason).__name__


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (where the platform can open a directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
