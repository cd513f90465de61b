"""Images per synset: the shipped Fall 2011 table, or counted on the user's own ImageNet-21K.

An IN-21K root holds one folder per synset (Winter 2021 layout, ``n01440764/*.JPEG``) or one tar per synset (Fall
2011 layout, ``n01440764.tar``). Counting reads folder listings and tar headers only, never image data.
"""

from __future__ import annotations

import logging
import os
import tarfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cog_pl.resources import fall11_image_counts

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".webp")


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def count_synset(root: Path, wnid: str) -> int | None:
    """Images of one synset under ``root`` (folder or tar); ``None`` when the synset is absent."""
    folder = root / wnid
    if folder.is_dir():
        with os.scandir(folder) as it:
            return sum(1 for e in it if _is_image(e.name) and e.is_file())
    tar = root / f"{wnid}.tar"
    if tar.is_file():
        try:
            with tarfile.open(tar) as tf:
                return sum(1 for m in tf if m.isfile() and _is_image(m.name))
        except (tarfile.TarError, OSError, EOFError) as err:
            raise ValueError(f"unreadable tar {tar}: {err}") from err
    return None


def count_images(root: str | Path, wnids: Iterable[str], allow_missing: bool = False,
                 workers: int = 8) -> dict[str, int]:
    """Count the images of every synset in ``wnids`` under an IN-21K root.

    Missing synsets are an error naming them, unless ``allow_missing`` (then they count 0, and the eligibility rule
    drops them). An empty synset is always an error: it is a broken download, not a small concept.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"IN-21K root {root} is not a folder")
    wnids = list(wnids)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = dict(zip(wnids, pool.map(lambda w: count_synset(root, w), wnids)))
    missing = sorted(w for w, n in found.items() if n is None)
    empty = sorted(w for w, n in found.items() if n == 0)
    if empty:
        raise ValueError(f"{len(empty)} synset(s) under {root} hold no images: {', '.join(empty[:10])}"
                         + (" ..." if len(empty) > 10 else ""))
    if missing and not allow_missing:
        raise ValueError(f"{len(missing)} of {len(wnids)} synsets are missing under {root} (neither {missing[0]}/ nor "
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
