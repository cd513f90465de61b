"""Where the paper's published files live on a user's machine: ``<models dir>/<model>/<file>``.

``cog-pl models download NAME DIR`` puts a file there; ``cog-pl run --model NAME`` without ``--checkpoint`` takes it
from there. The models dir is ``$COG_PL_MODELS``, else ``~/.cache/cog_pl/models``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from cog_pl.models.zoo import PAPER_MODELS, resolve_spec

logger = logging.getLogger(__name__)


#: Beside a file ``cog-pl models download`` fetched: where from, its sha256 and what it was verified against.
RECORD_SUFFIX = ".download.json"


def write_download_record(dest: Path, url: str, sha256: str, verified: str | None) -> Path:
    """Record where ``dest`` came from and ``verified``: what its digest was checked against (None: nothing)."""
    from cog_pl.io import atomic_open

    record = dest.with_name(dest.name + RECORD_SUFFIX)
    with atomic_open(record) as fh:
        json.dump({"file": dest.name, "url": url, "sha256": sha256, "verified": verified}, fh, indent=1)
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


def models_dir(given: str | os.PathLike | None = None) -> Path:
    """The folder of downloaded model files: ``given``, ``$COG_PL_MODELS`` or ``~/.cache/cog_pl/models``."""
    if given:
        return Path(given)
    return Path(os.environ.get("COG_PL_MODELS") or Path.home() / ".cache" / "cog_pl" / "models")


def model_folder(name: str, root: str | os.PathLike | None = None) -> Path:
    return models_dir(root) / resolve_spec(name).name


def find_checkpoint(name: str, root: str | os.PathLike | None = None) -> Path | None:
    """A paper model's file in the models dir: its published file name, else the one file its folder holds."""
    spec = resolve_spec(name)
    if spec.name not in PAPER_MODELS or spec.published is None:
        return None
    folder = model_folder(name, root)
    named = folder / spec.published.file
    if named.is_file():
        return named
    files = ([p for p in folder.glob("*") if p.is_file() and not p.name.endswith((".part", RECORD_SUFFIX))]
             if folder.is_dir() else [])
    return files[0] if len(files) == 1 else None


def default_checkpoint(name: str, root: str | os.PathLike | None = None) -> str | None:
    """The checkpoint ``cog-pl run`` uses when none is given: the model's file in the models dir, if there."""
    found = find_checkpoint(name, root)
    if found is not None:
        logger.info("checkpoint of %s: %s (from the models dir)", name, found)
        return str(found)
    if resolve_spec(name).name in PAPER_MODELS:
        logger.warning("no checkpoint for %s (none given, none in %s): its weights are random; cog-pl models "
                       "download %s fetches the published file", name, model_folder(name, root), name)
    return None
