"""Image sources: where a dataset's images are and how to read them, looked up by name or detected from a path.

A source reads images by ``(wnid, filename)`` under a root: :meth:`ImageSource.synsets` (the synsets it holds),
:meth:`~ImageSource.list` (a synset's image names, sorted), :meth:`~ImageSource.read` (encoded bytes) and
:meth:`~ImageSource.where` (a location for messages). Sources that need one keep an index from that key to the bytes
(a tar's member offsets, :mod:`cog_pl.data.tar_index`) and build it once.

Built-in: ``synsets``, one folder of images (IN-1K ``train/`` and ``val/``, IN-21K Winter 2021) or one uncompressed
tar (IN-21K Fall 2011) per synset, a folder winning over a tar. A folder's images are its files (not its
subfolders'); a tar's are its members by full path (``n01_1.JPEG``, or ``a/x.JPEG`` beside ``b/x.JPEG``).
File names are ``str`` as :func:`os.fsdecode` gives them: bytes that are not UTF-8 are kept as surrogate escapes
and name the same file everywhere (split hashes encode them back with ``surrogateescape``).

Add a source with :func:`register_source`::

    @register_source("flat_val")
    class FlatVal(ImageSource):
        @classmethod
        def detect(cls, root): ...  # does ``root`` look like this layout
        ...

:func:`open_source` opens a root as the named source, or (``"auto"``) as the first registered source, newest first,
that detects the root; ``synsets`` is the fallback and detects any folder.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, TypeVar

from cog_pl.data.tar_index import TarIndex
from cog_pl.registry import Registry

_WNID = re.compile(r"n\d{8}")
#: What counts as an image file, by name (case-insensitive): a synset's other files are not listed.
IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".webp")


def is_image_name(name: str) -> bool:
    """Whether a file name (or a tar member's path) is an image's: a known extension, not hidden."""
    base = name.rsplit("/", 1)[-1]
    return not base.startswith(".") and base.lower().endswith(IMAGE_EXTENSIONS)


def printable(name: str) -> str:
    """A file name for messages and logs: bytes that are not UTF-8 (kept by Python as surrogate escapes, see
    :func:`os.fsdecode`) shown as ``\\xff``, so printing or writing the name as text never fails."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class ImageSource(ABC):
    """Images of synsets under ``root`` (``cache_dir``: where indexes go when ``root`` is read-only)."""

    name: ClassVar[str] = ""

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"image root {self.root} is not a directory")
        self.cache_dir = cache_dir

    @classmethod
    def detect(cls, root: Path) -> bool:
        """Whether ``root`` looks like this source's layout (for ``open_source(root, "auto")``)."""
        return False

    @abstractmethod
    def synsets(self) -> list[str]:
        """The wnids this source holds, sorted."""

    @abstractmethod
    def has(self, wnid: str) -> bool:
        """Whether the synset is present."""

    @abstractmethod
    def list(self, wnid: str) -> list[str]:
        """Sorted image filenames of a synset (:func:`is_image_name`); ``FileNotFoundError`` naming it when
        missing."""

    @abstractmethod
    def read(self, wnid: str, filename: str) -> bytes:
        """The encoded bytes of one image."""

    def where(self, wnid: str, filename: str) -> str:
        """A human-readable location for messages (:func:`printable`)."""
        return printable(f"{self.root}:{wnid}/{filename}")


S = TypeVar("S", bound=type[ImageSource])
_SOURCES: Registry[type[ImageSource]] = Registry("image source")


def register_source(name: str, *, replace: bool = False) -> Callable[[S], S]:
    """Class decorator registering an :class:`ImageSource` subclass as ``name`` (its ``name`` attribute is set)."""
    def add(cls: S) -> S:
        if not (isinstance(cls, type) and issubclass(cls, ImageSource)):
            raise TypeError(f"image source {name!r}: {cls!r} is not an ImageSource subclass")
        cls.name = name
        _SOURCES.add(name, cls, replace=replace)
        return cls
    return add


def get_source(name: str) -> type[ImageSource]:
    """The source class registered as ``name``; an unknown name is a ``ValueError`` listing the known ones."""
    return _SOURCES.get(name)


def list_sources() -> tuple[str, ...]:
    """Registered source names in registration order."""
    return _SOURCES.names()


def unregister_source(name: str) -> type[ImageSource]:
    """Remove a registered source (tests, plugins)."""
    return _SOURCES.remove(name)


def open_source(root: str | os.PathLike, kind: str = "auto",
                cache_dir: str | os.PathLike | None = None) -> ImageSource:
    """``root`` opened as the source ``kind``, or with ``"auto"`` as the newest registered source that detects it."""
    if kind != "auto":
        return get_source(kind)(root, cache_dir)
    path = Path(root)
    if not path.is_dir():
        raise FileNotFoundError(f"image root {path} is not a directory")
    for name in reversed(list_sources()):
        if get_source(name).detect(path):
            return get_source(name)(path, cache_dir)
    raise ValueError(f"image root {path}: no registered source recognises it; known: {', '.join(list_sources())}")


@register_source("synsets")
class SynsetSource(ImageSource):
    """One folder or one tar per synset under ``root``; tars are read through a cached member index, never
    unpacked."""

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> None:
        super().__init__(root, cache_dir)
        self._tars: dict[str, TarIndex] = {}
        self._lists: dict[str, list[str]] = {}
        self._layouts: dict[str, str | None] = {}

    @classmethod
    def detect(cls, root: Path) -> bool:
        return root.is_dir()  # the fallback: missing synsets are then reported one by one

    def synsets(self) -> list[str]:
        with os.scandir(self.root) as it:
            names = {e.name.removesuffix(".tar") for e in it}
        return sorted(w for w in names if _WNID.fullmatch(w) and self.has(w))

    def layout(self, wnid: str) -> str | None:
        """``"folder"``, ``"tar"`` or ``None`` when the synset is missing (a folder wins over a tar)."""
        if wnid not in self._layouts:
            if (self.root / wnid).is_dir():
                self._layouts[wnid] = "folder"
            elif (self.root / f"{wnid}.tar").is_file():
                self._layouts[wnid] = "tar"
            else:
                self._layouts[wnid] = None
        return self._layouts[wnid]

    def has(self, wnid: str) -> bool:
        return self.layout(wnid) is not None

    def _tar(self, wnid: str) -> TarIndex:
        if wnid not in self._tars:
            self._tars[wnid] = TarIndex.open(self.root / f"{wnid}.tar", self.cache_dir)
        return self._tars[wnid]

    def list(self, wnid: str) -> list[str]:
        if wnid not in self._lists:
            kind = self.layout(wnid)
            if kind == "folder":
                with os.scandir(self.root / wnid) as it:
                    names = sorted(e.name for e in it if is_image_name(e.name) and e.is_file())
            elif kind == "tar":
                names = [n for n in self._tar(wnid).names() if is_image_name(n)]
            else:
                raise FileNotFoundError(f"synset {wnid} is missing under {self.root} (no {wnid}/ nor {wnid}.tar)")
            self._lists[wnid] = names
        return self._lists[wnid]

    def where(self, wnid: str, filename: str) -> str:
        if self.layout(wnid) == "tar":
            return printable(f"{self.root / (wnid + '.tar')}:{filename}")
        return printable(str(self.root / wnid / filename))

    def read(self, wnid: str, filename: str) -> bytes:
        if self.layout(wnid) == "tar":
            return self._tar(wnid).read(filename)
        with open(self.root / wnid / filename, "rb") as fh:
            return fh.read()
