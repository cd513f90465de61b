"""Where a feature store lives on disk while it is written and once it is finished: the two path rules that
:mod:`cog_pl.features.store` (the writer and readers) and :mod:`cog_pl.features.missing` (the rows of unreadable
images, kept in the partial directory) share. Standard library only; :mod:`~cog_pl.features.store` re-exports both."""

from __future__ import annotations

import os
from pathlib import Path


def is_complete(path: str | os.PathLike) -> bool:
    """True when ``path`` is a finished v1 store (its ``meta.json`` exists)."""
    return (Path(path) / "meta.json").is_file()


def partial_path(path: str | os.PathLike) -> Path:
    """The hidden directory a store at ``path`` is written in before it is renamed into place."""
    path = Path(path)
    return path.parent / f".{path.name}.partial"
