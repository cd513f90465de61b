"""Result rows of probes: one JSON object per (model, domain, shots, seed), in a JSON-lines file.

Format version 1. Every row carries the protocol values and search plan it was made with, the chosen lr and wd,
validation and test top-1/top-5 (percent), timings and library versions. The file is rewritten atomically on every
append, so a reader never sees half a row; a run that finds its key in the file skips it.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from cog_pl.io import atomic_open

FORMAT_VERSION = 1
KEY_FIELDS = ("model", "domain", "shots", "seed")


def row_key(row: dict[str, Any]) -> tuple:
    """The identity of a row."""
    return tuple(row[f] for f in KEY_FIELDS)


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows of a results file (none if it does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_row(path: str | os.PathLike, row: dict[str, Any]) -> None:
    """Add or replace the row of its key, atomically."""
    rows = [r for r in read_rows(path) if row_key(r) != row_key(row)] + [row]
    with atomic_open(path) as fh:
        for r in rows:
            fh.write(json.dumps(r, sort_keys=True) + "\n")


def versions() -> dict[str, str]:
    """Versions of the libraries that shape a result (read from package metadata, nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    from cog_pl import __version__

    out = {"cog_pl": __version__, "python": platform.python_version()}
    for name in ("torch", "optuna", "lightning", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out
