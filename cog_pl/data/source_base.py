"""The base of the image sources: :class:`ImageSource`, their registry, and ``synsets``, the fallback layout.

A source reads images by ``(wnid, filename)`` under a root: :meth:`ImageSource.synsets` (the synsets it holds),
:meth:`~ImageSource.list` (a synset's image names, sorted), :meth:`~ImageSource.read` (encoded bytes) and
:meth:`~ImageSource.where` (a location for messages). :func:`register_source` adds a layout to the registry.

This module imports none of the layouts that register on it: :mod:`cog_pl.data.sources` imports this base and the
built-in plug-ins (each in its own module, importing this base) and registers them, and holds the functions that
look sources up by name or detect them (:func:`~cog_pl.data.sources.open_source`). Import the names from there.

``synsets`` (:class:`SynsetSource`), registered first: one folder of images (IN-1K ``train/`` and ``val/``, IN-21K
Winter 2021) or one uncompressed tar (IN-21K Fall 2011) per synset, a folder winning over a tar. A folder's images
are its files (not its subfolders'); a tar's are its members by full path (``n01_1.JPEG``, or ``a/x.JPEG`` beside
``b/x.JPEG``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from cog_pl.data.tar_index import TarIndex
from cog_pl.errors import MissingFileError, NotFoundError, WrongTypeError
from cog_pl.io import printable
from cog_pl.registry import Registry

_WNID = re.compile(r"n\d{8}")
#: What counts as an image file, by name (case-insensitive): a synset's other files are not listed.
IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".webp")


def is_image_name(name: str) -> bool:
    """Whether a file name (or a tar member's path) is an image's: a known extension, not hidden."""
    base = name.rsplit("/", 1)[-1]
    return not base.startswith(".") and base.lower().endswith(IMAGE_EXTENSIONS)


log = logging.getLogger(__name__)

class ImageSource(ABC):
    """Images of synsets under ``root`` (``cache_dir``: where indexes go when ``root`` is read-only; ``split``:
    ``"train"`` or ``"test"`` for a source whose one root holds both of IN-1K's, else ignored)."""

    name: ClassVar[str] = ""
    #: Whether :meth:`read` is cheap for any image. A source that can only stream (gzip) says False: extraction
    #: then reads it through :meth:`stream` (:class:`~cog_pl.data.streamed.StreamedImages`).
    random_access: ClassVar[bool] = True
    _warned_streaming = False  # read_streaming has said it is slow
    #: Whether one root holds IN-1K's train and val images, told apart by ``split`` (:func:`open_split_source`).
    holds_splits: ClassVar[bool] = False
    #: The IN-1K splits the layout can hold (``flat_val``: only ``"test"``).
    serves: ClassVar[tuple[str, ...]] = ("train", "test")

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 split: str | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise MissingFileError(f"image root {self.root} is not a directory")
        self.cache_dir = cache_dir
        self.split = split

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

    def extra(self) -> list[str]:
        """Images under the root that belong to no synset (a flat ``val/`` image with no label), for data check."""
        return []

    def absent(self, wnid: str) -> list[str]:
        """Images of ``wnid`` that the source's own catalogue (devkit labels) lists but the root lacks."""
        return []

    def altered(self) -> dict[tuple[str, str], str]:
        """``{(wnid, filename): why}`` for images not stored as the original file (a webdataset copy re-encoded
        them), for data check: their features may differ from the original's."""
        return {}

    def entry(self, wnid: str, filename: str) -> str:
        """Where the index places one image (shard, offset, size), hashed by :meth:`record`; ``""`` when the
        name alone locates it."""
        return ""

    def record(self, wnids: Sequence[str]) -> dict[str, Any]:
        """What a feature store records about where its images came from: the source's name, root, split and a
        hash of its index over ``wnids`` (each image's name and :meth:`entry`)."""
        h = hashlib.sha256()
        for wnid in wnids:
            if self.has(wnid):
                for name in self.list(wnid):
                    h.update(f"{wnid}/{name}\t{self.entry(wnid, name)}\n".encode("utf-8", "surrogateescape"))
        return {"images": self.name, "root": str(self.root), "split": self.split, "index_sha256": h.hexdigest()}

    def stream(self, keys: Sequence[tuple[str, str]]) -> Iterator[tuple[int, bytes | OSError]]:
        """``(position in keys, bytes)`` for each ``(wnid, filename)`` of ``keys``, in the order the source reads
        them best (a streaming source: its storage order); an image that cannot be read comes as its error."""
        for i, (wnid, filename) in enumerate(keys):
            try:
                yield i, self.read(wnid, filename)
            except (OSError, KeyError) as err:
                yield i, OSError(str(err))

    def read_streaming(self, wnid: str, filename: str, where: Path) -> bytes:
        """One image of a source without random access (``where``: the stream), read by streaming up to it; slow, so
        said once per source: extraction streams every image in one pass instead."""
        if not self._warned_streaming:
            log.warning("%s: reading single images decompresses the tar up to them; extraction streams instead", where)
            self._warned_streaming = True
        for _, data in self.stream([(wnid, filename)]):
            if isinstance(data, OSError):
                raise data
            return data
        raise NotFoundError(f"{wnid}/{printable(filename)} is not in {where}")

    def stream_units(self, keys: Sequence[tuple[str, str]]) -> list[list[int]]:
        """Positions of ``keys`` grouped by what streams independently (one gzip tar each), so that workers and
        ranks share the work; a random-access source is one unit."""
        return [list(range(len(keys)))]


S = TypeVar("S", bound=type[ImageSource])
_SOURCES: Registry[type[ImageSource]] = Registry("image source")


def register_source(name: str, *, replace: bool = False) -> Callable[[S], S]:
    """Class decorator registering an :class:`ImageSource` subclass as ``name`` (its ``name`` attribute is set).

    Args:
        name: the source's name (``--in1k-source``, ``--in21k-source``, ``source=`` of the datamodules).
        replace: replace a source already registered as ``name``.

    Returns:
        The decorator; it returns the class.

    Example:
        >>> @register_source("my_store")  # doctest: +SKIP
        ... class MyStore(ImageSource):
        ...     ...  # list(wnid), read(wnid, filename), has(wnid), ...
    """
    def add(cls: S) -> S:
        if not (isinstance(cls, type) and issubclass(cls, ImageSource)):
            raise WrongTypeError(f"image source {name!r}: {cls!r} is not an ImageSource subclass")
        cls.name = name
        _SOURCES.add(name, cls, replace=replace)
        return cls
    return add


def get_source(name: str) -> type[ImageSource]:
    """The source class registered as ``name``; an unknown name is an :class:`~cog_pl.errors.UnknownNameError`
    suggesting the closest and listing the known ones."""
    return _SOURCES.get(name)


def list_sources() -> tuple[str, ...]:
    """Registered source names in registration order (the built-in layouts other than ``synsets`` are registered by
    :mod:`cog_pl.data.sources`, where this is imported from).

    Returns:
        The names, the built-ins first.

    Example:
        >>> list_sources()[:2]
        ('synsets', 'flat_val')
    """
    return _SOURCES.names()


def unregister_source(name: str) -> type[ImageSource]:
    """Remove a registered source (tests, plugins)."""
    return _SOURCES.remove(name)


@register_source("synsets")
class SynsetSource(ImageSource):
    """One folder or one tar per synset under ``root``; tars are read through a cached member index, never
    unpacked."""

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 split: str | None = None) -> None:
        super().__init__(root, cache_dir, split)
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
                raise MissingFileError(f"synset {wnid} is missing under {self.root} (no {wnid}/ nor {wnid}.tar)")
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

    def entry(self, wnid: str, filename: str) -> str:
        if self.layout(wnid) == "tar":
            offset, size = self._tar(wnid).members[filename]
            return f"{wnid}.tar:{offset}:{size}"
        return ""
