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
that detects the root; ``synsets`` is the fallback and detects any folder. :func:`open_split_source` opens IN-1K's
train or val images under one root, whichever layout holds them.

The other built-in sources each live in their own module and register here: ``flat_val``
(:mod:`cog_pl.data.flat_val`: the official flat ``val/`` labelled by the devkit or Kaggle's CSV), ``wds``
(:mod:`cog_pl.data.webdataset`: timm's webdataset shards of IN-1K and IN-21K Winter 2021) and ``hf_tars``
(:mod:`cog_pl.data.hf_tars`: Hugging Face's gzipped ``ILSVRC/imagenet-1k`` tars, streamed) and ``whole_tar``
(:mod:`cog_pl.data.whole_tar`: IN-21K's ``fall11_whole.tar`` / ``winter21_whole.tar.gz``, one tar per synset inside;
the root may be that file). Each keeps an index
built in one pass and cached (:mod:`cog_pl.data.index_cache`), and :meth:`ImageSource.record` hashes it into the
meta of the feature stores made from it.
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
from cog_pl.errors import CogError, MissingFileError, NotFoundError, WrongTypeError
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
    """Registered source names in registration order.

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


def open_source(root: str | os.PathLike, kind: str = "auto", cache_dir: str | os.PathLike | None = None,
                split: str | None = None) -> ImageSource:
    """``root`` opened as the source ``kind``, or with ``"auto"`` as the newest registered source that detects it."""
    if kind != "auto":
        return get_source(kind)(root, cache_dir, split)
    path = Path(root)
    if not path.is_dir() and not (path.is_file() and get_source("whole_tar").detect(path)):
        raise MissingFileError(f"image root {path} is not a directory")  # a file: only IN-21K's whole tar
    for name in reversed(list_sources()):
        if get_source(name).detect(path):
            return get_source(name)(path, cache_dir, split)
    raise CogError(f"image root {path}: no registered source recognises it; known: {', '.join(list_sources())}")


#: IN-1K's folders under its root, by split, for layouts that keep them apart.
IN1K_FOLDERS = {"train": "train", "test": "val"}
#: Where Kaggle's ImageNet download (``imagenet-object-localization-challenge``), as unpacked, keeps IN-1K's train/
#: and val/ (its ``LOC_val_solution.csv`` four folders above val/, :mod:`cog_pl.data.flat_val`).
KAGGLE_IMAGES = "ILSVRC/Data/CLS-LOC"


def open_split_source(root: str | os.PathLike, split: str, kind: str = "auto",
                      cache_dir: str | os.PathLike | None = None) -> ImageSource:
    """IN-1K's ``"train"`` or ``"test"`` (val) images under ``root``: one root holding both (webdataset shards, HF
    tars) opened with ``split``, else ``root/train`` or ``root/val`` (folders, tars, a flat val). A ``kind`` that
    cannot hold the split (``flat_val`` for train) leaves it to detection."""
    path, sub = Path(root), IN1K_FOLDERS[split]
    if kind != "auto" and split in get_source(kind).serves:
        cls = get_source(kind)
        return cls(path if cls.holds_splits else path / sub, cache_dir, split)
    if path.is_dir() and not (path / sub).is_dir():
        for name in reversed(list_sources()):
            cls = get_source(name)
            if cls.holds_splits and cls.detect(path):
                return cls(path, cache_dir, split)
        if (path / KAGGLE_IMAGES / sub).is_dir():
            raise MissingFileError(f"image root {path / sub} is not a directory: {path} is Kaggle's ImageNet "
                                   f"download as unpacked, whose IN-1K root is {path / KAGGLE_IMAGES}")
    return open_source(path / sub, "auto", cache_dir, split)


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


# the other built-in sources register themselves on import (newest first in detection: whole_tar, wds, hf_tars,
# flat_val)
from cog_pl.data import flat_val, hf_tars, webdataset, whole_tar  # noqa: E402, F401
