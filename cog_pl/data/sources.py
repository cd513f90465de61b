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

The base (:class:`ImageSource`, the registry, ``synsets``) is :mod:`cog_pl.data.source_base`, which imports no
layout; this module imports it and the other built-in layouts, registers those, and keeps the names importable from
here. Registered, in order (``"auto"`` tries the newest first):

>>> list_sources()[:5]
('synsets', 'flat_val', 'hf_tars', 'wds', 'whole_tar')

Add a source with :func:`register_source`::

    @register_source("my_layout")
    class MyLayout(ImageSource):
        @classmethod
        def detect(cls, root): ...  # does ``root`` look like this layout
        ...

:func:`open_source` opens a root as the named source, or (``"auto"``) as the first registered source, newest first,
that detects the root; ``synsets`` is the fallback and detects any folder. :func:`open_split_source` opens IN-1K's
train or val images under one root, whichever layout holds them.

The other built-in sources each live in their own module and are registered here: ``flat_val``
(:mod:`cog_pl.data.flat_val`: the official flat ``val/`` labelled by the devkit or Kaggle's CSV), ``wds``
(:mod:`cog_pl.data.webdataset`: timm's webdataset shards of IN-1K and IN-21K Winter 2021) and ``hf_tars``
(:mod:`cog_pl.data.hf_tars`: Hugging Face's gzipped ``ILSVRC/imagenet-1k`` tars, streamed) and ``whole_tar``
(:mod:`cog_pl.data.whole_tar`: IN-21K's ``fall11_whole.tar`` / ``winter21_whole.tar.gz``, one tar per synset inside;
the root may be that file). Each keeps an index
built in one pass and cached (:mod:`cog_pl.data.index_cache`), and :meth:`ImageSource.record` hashes it into the
meta of the feature stores made from it.
"""

from __future__ import annotations

import os
from pathlib import Path

from cog_pl.data.flat_val import FlatValSource
from cog_pl.data.hf_tars import HFTarSource
from cog_pl.data.source_base import (
    IMAGE_EXTENSIONS,
    ImageSource,
    SynsetSource,
    get_source,
    is_image_name,
    list_sources,
    register_source,
    unregister_source,
)
from cog_pl.data.webdataset import WebDatasetSource
from cog_pl.data.whole_tar import WholeTarSource
from cog_pl.errors import CogError, MissingFileError
from cog_pl.io import printable

__all__ = ["IMAGE_EXTENSIONS", "IN1K_FOLDERS", "KAGGLE_IMAGES", "ImageSource", "SynsetSource", "get_source",
           "is_image_name", "list_sources", "open_source", "open_split_source", "printable", "register_source",
           "unregister_source"]

#: The built-in plug-ins, registered here after ``synsets`` in this order, whichever of their modules was imported
#: first: :func:`open_source` tries the newest first (whole_tar, wds, hf_tars, flat_val).
BUILTIN_PLUGINS = (FlatValSource, HFTarSource, WebDatasetSource, WholeTarSource)
for _plugin in BUILTIN_PLUGINS:
    register_source(_plugin.name)(_plugin)


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
