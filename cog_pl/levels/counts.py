"""Images per synset: the shipped Fall 2011 table, or counted on the user's own ImageNet-21K.

The root is read as an image source (:func:`cog_pl.data.sources.open_source`: one folder or tar per synset, or any
registered layout), so a count is the number of images the splits are later built from. Counting reads folder
listings and tar headers only (the tar indexes it builds are the ones extraction reuses), never image data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cog_pl.data.sources import ImageSource, open_source
from cog_pl.errors import CogError, MissingFileError
from cog_pl.resources import fall11_image_counts

logger = logging.getLogger(__name__)


def count_synset(source: ImageSource, wnid: str) -> int | None:
    """Images of one synset of ``source``; ``None`` when the synset is absent."""
    if not source.has(wnid):
        return None
    try:
        return len(source.list(wnid))
    except OSError as err:
        raise CogError(f"unreadable synset {source.where(wnid, '')}: {err}") from err


def count_images(root: str | Path, wnids: Iterable[str], allow_missing: bool = False,
                 workers: int = 8) -> dict[str, int]:
    """Count the images of every synset in ``wnids`` under an IN-21K root.

    Missing synsets are an error naming them, unless ``allow_missing`` (then they count 0, and the eligibility rule
    drops them). An empty synset is always an error: it is a broken download, not a small concept.
    """
    root = Path(root)
    if not root.is_dir():
        raise MissingFileError(f"IN-21K root {root} is not a folder")
    wnids = list(wnids)
    source = open_source(root)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = dict(zip(wnids, pool.map(lambda w: count_synset(source, w), wnids)))
    missing = sorted(w for w, n in found.items() if n is None)
    empty = sorted(w for w, n in found.items() if n == 0)
    if empty:
        raise CogError(f"{len(empty)} synset(s) under {root} hold no images: {', '.join(empty[:10])}"
                       + (" ..." if len(empty) > 10 else ""))
    if missing and not allow_missing:
        raise CogError(f"{len(missing)} of {len(wnids)} synsets are missing under {root} (neither {missing[0]}/ nor "
                       f"{missing[0]}.tar): {', '.join(missing[:10])}" + (" ..." if len(missing) > 10 else "")
                       + "; pass --allow-missing to count them as 0")
    if missing:
        logger.warning("%d synsets missing under %s count as 0 images", len(missing), root)
    return {w: (n or 0) for w, n in found.items()}


def image_counts(in21k_root: str | Path | None, wnids: Iterable[str], allow_missing: bool = False) -> Mapping[str, int]:
    """The Fall 2011 table when no root is given, else counts from the root."""
    if in21k_root is None:
        return fall11_image_counts()
    return count_images(in21k_root, wnids, allow_missing)
