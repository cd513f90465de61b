"""Package data: official CoG levels and test split, synset lists, image counts, concept names and glosses.

Provenance is in ``cog_pl/assets/README.md``. Every loader is cached; lists are returned as tuples so that callers
cannot alter the shared copy.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from importlib import resources
from typing import IO

from cog_pl.errors import CogError

LEVELS = ("L1", "L2", "L3", "L4", "L5")
WNID_RE = re.compile(r"^n\d{8}$")


def _open(name: str) -> IO[str]:
    path = resources.files("cog_pl") / "assets" / name
    if name.endswith(".gz"):
        return gzip.open(path.open("rb"), "rt", encoding="utf-8")  # type: ignore[arg-type]
    return path.open("r", encoding="utf-8")


def is_wnid(text: str) -> bool:
    """True for a noun synset id such as ``n02123159``."""
    return bool(WNID_RE.match(text))


@functools.cache
def level_file_sha256() -> str:
    """sha256 of the official level file shipped with the package (``assets/cog_levels.json``): feature stores
    record it, so a store made with other levels is recognised."""
    import hashlib

    return hashlib.sha256((resources.files("cog_pl") / "assets" / "cog_levels.json").read_bytes()).hexdigest()


@functools.cache
def official_levels() -> dict[str, tuple[str, ...]]:
    """The official ImageNet-CoG levels, each a sorted tuple of 1000 wnids."""
    with _open("cog_levels.json") as fh:
        data = json.load(fh)
    return {level: tuple(data[level]) for level in LEVELS}


@functools.cache
def in1k_wnids() -> tuple[str, ...]:
    """The 1000 IN-1K synsets in class-index order."""
    with _open("in1k_synsets.txt") as fh:
        return tuple(line.strip() for line in fh if line.strip())


@functools.cache
def fall11_image_counts() -> dict[str, int]:
    """Images per synset in the ImageNet-21K Fall 2011 release (21,841 synsets)."""
    with _open("in21k_fall11_numimages.tsv.gz") as fh:
        next(fh)
        return {wnid: int(n) for wnid, n in (line.split() for line in fh)}


def in21k_wnids() -> tuple[str, ...]:
    """The 21,841 synsets of ImageNet-21K Fall 2011, sorted."""
    return tuple(sorted(fall11_image_counts()))


@functools.cache
def _text_table(name: str) -> dict[str, str]:
    with _open(name) as fh:
        return dict(line.rstrip("\n").split("\t", 1) for line in fh if "\t" in line)


def concept_name(wnid: str) -> str:
    """ImageNet's lemma list for a synset, e.g. ``'tiger cat'``; the wnid itself when unknown."""
    return _text_table("synset_names.tsv.gz").get(wnid, wnid)


def concept_gloss(wnid: str) -> str:
    """ImageNet's definition of a synset (empty when unknown)."""
    return _text_table("synset_glosses.tsv.gz").get(wnid, "")


@functools.cache
def official_test_split(level: str) -> tuple[str, ...]:
    """The official test images of a level: 50,000 ``wnid/filename.JPEG`` paths."""
    if level not in LEVELS:
        raise CogError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")
    with _open(f"cog_test_split_{level}.txt.gz") as fh:
        return tuple(line.strip() for line in fh if line.strip())
