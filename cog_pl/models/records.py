"""The record ``cog-pl models download`` writes beside a file it fetched (``<file>.download.json``): the model, the
URL, the file's SHA-256 and what that digest was checked against. It makes the file the model's published one for its
label (:mod:`cog_pl.models.label`), and names a file kept unverified when it is read (:func:`unverified_note`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["RECORD_SUFFIX", "download_record", "record_download", "unverified_note", "write_download_record"]

#: The suffix of the record ``cog-pl models download`` writes beside a file it fetched.
RECORD_SUFFIX = ".download.json"


def write_download_record(dest: Path, url: str, sha256: str, verified: str | None, model: str | None = None) -> Path:
    """Record beside ``dest`` that ``cog-pl models download`` fetched it as ``model``'s file from ``url``, its
    sha256 and ``verified``: what that digest was checked against (None: nothing)."""
    from cog_pl.io import atomic_open

    record = dest.with_name(dest.name + RECORD_SUFFIX)
    with atomic_open(record) as fh:
        json.dump({"model": model, "file": dest.name, "url": url, "sha256": sha256, "verified": verified}, fh,
                  indent=1)
    return record


def unverified_note(path: str | os.PathLike) -> str | None:
    """One line when ``path`` is a download recorded as unverified (its digest checked against nothing)."""
    record = Path(path).with_name(Path(path).name + RECORD_SUFFIX)
    try:
        facts = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(facts, dict) or facts.get("verified") or facts.get("sha256") is None:
        return None
    return (f"checkpoint {path} is unverified: cog-pl models download fetched it from {facts.get('url')} and "
            f"checked its sha256 ({str(facts['sha256'])[:12]}...) against nothing (the zoo knows no digest of it)")


def download_record(path: str | os.PathLike) -> dict[str, Any] | None:
    """What ``cog-pl models download`` recorded about the file at ``path`` (model, url, sha256), or None."""
    record = Path(str(path) + RECORD_SUFFIX)
    try:
        facts = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) else None


def record_download(path: str | os.PathLike, model: str, url: str, verified: str | None = None) -> Path:
    """Record beside ``path`` that ``cog-pl models download`` fetched it as ``model``'s file from ``url``
    (:func:`write_download_record`, its digest computed here)."""
    from cog_pl.io import file_sha256

    return write_download_record(Path(path), url, file_sha256(path), verified, model)
