"""Feature stores of level variants, regrouped from a model's official-level stores: no new extraction.

A level variant (:mod:`cog_pl.levels.variants`) puts the same concepts into other levels, so the stores a model
already has for ``cog_l1`` .. ``cog_l5`` hold every image of every variant level. :func:`regroup_variant` copies
each concept's rows, train rows from the train stores and test rows from the test stores (the same images, the same
official splits), into ``<root>/<model>/cog_l<i>@<variant>/<split>/``, relabelled in the new level's label order
(sorted wnids). Rows are grouped by source store in the order of the meta's ``regrouped_from``; ``index`` keeps the
source store's index (the image's row in that level's dataset), so every row still names its image.

The levels come from a level file (``cog-pl levels build --measure wup``) or from re-ranking the concepts the stores
hold by a measure (:func:`~cog_pl.levels.variants.variant_levels`). When the stores hold a subset of the concepts
(the demo holds 15 of each official level), the variant levels are the re-ranking *of that subset* cut into five
equal blocks, and the meta says so. The level file actually used is written beside the
stores, ``<root>/<model>/variants/<variant>.json``, and its sha256 is each store's ``level_file_sha256``. A finished
store is skipped; one regrouped from another level file or other features is refused unless ``overwrite``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.errors import CogError
from cog_pl.features.pair import open_pair
from cog_pl.features.store import (
    Chunk,
    FeatureStore,
    StoreError,
    is_complete,
    make_meta,
    open_store,
    write_chunks,
)
from cog_pl.io import file_sha256
from cog_pl.levels import variants
from cog_pl.levels.builder import load_level_file, write_level_file
from cog_pl.protocol import DOMAIN_OF_LEVEL, LEVEL_OF_DOMAIN, SPLITS, variant_domain
from cog_pl.resources import LEVELS
from cog_pl.version import __version__

log = logging.getLogger(__name__)

SOURCE_DOMAINS = tuple(LEVEL_OF_DOMAIN)
VARIANTS_DIR = "variants"
#: Meta keys a regrouped store inherits from the source stores: the model and how its features were made. The
#: others describe one source store (its domain, classes, level file, split, origin: ``source``, ``benchmark``) and
#: are recorded per source store under ``regrouped_from``, or not at all.
_INHERITED = ("model", "arch", "feature", "definition", "trusted_checkpoint", "weights", "weights_sha256", "transform",
              "precision", "versions", "tokens", "token_layout")
#: Keys every source store must agree on: the features of one model, read one way.
_SAME_MODEL = ("model", "weights_sha256", "dim", "transform", "feature", "tokens")


@dataclass(frozen=True)
class Sources:
    """A model's official-level stores by (domain, split), and the official level of the store holding each concept."""

    root: Path
    stores: dict[tuple[str, str], FeatureStore]
    level_of: dict[str, str]

    @property
    def concepts(self) -> list[str]:
        return sorted(self.level_of)


@dataclass
class RegroupResult:
    """What :func:`regroup_variant` did: the level file it used, stores written and skipped, concept moves."""

    variant: str
    level_file: Path
    moves: np.ndarray  # 5 x 5: the stores' level (rows) -> the variant's level (columns)
    written: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)

    @property
    def domains(self) -> list[str]:
        return [variant_domain(d, self.variant) for d in SOURCE_DOMAINS]


def open_sources(model_root: str | os.PathLike) -> Sources:
    """Open ``<model_root>/cog_l1..cog_l5/{train,test}``; refuse, naming the store or concept, when one is missing,
    when they are not one model's features, or when a concept is in two levels or in one split only."""
    model_root = Path(model_root)
    stores = {}
    for domain in SOURCE_DOMAINS:
        for split in SPLITS:
            path = model_root / domain / split
            if not is_complete(path):
                raise StoreError(f"{path}: no complete feature store; level variants regroup the train and test "
                                 f"stores of {', '.join(SOURCE_DOMAINS)} (extract them first: `cog-pl run` or "
                                 f"`cog-pl extract`)")
        pair = open_pair(model_root / domain)  # the train and test stores agree, class lists included
        for split in SPLITS:
            stores[domain, split] = pair[split]
    first = stores[SOURCE_DOMAINS[0], "train"]
    for store in stores.values():
        for key in _SAME_MODEL:
            if store.meta.get(key) != first.meta.get(key):
                raise StoreError(f"{store.path}: {key}={store.meta.get(key)!r} but {first.path} has "
                                 f"{first.meta.get(key)!r}; a variant regroups the features of one model")
    level_of: dict[str, str] = {}
    for domain in SOURCE_DOMAINS:
        for w in stores[domain, "train"].meta["classes"]:
            if w in level_of:
                raise StoreError(f"concept {w} is in the stores of both {level_of[w]} and {LEVEL_OF_DOMAIN[domain]}")
            level_of[w] = LEVEL_OF_DOMAIN[domain]
    return Sources(model_root, stores, level_of)


def select_rows(labels: np.ndarray, classes: Sequence[str], wanted: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose concept (``classes[label]``) is in ``wanted``, in row order, and their labels in ``wanted``."""
    pos = {w: i for i, w in enumerate(wanted)}
    relabel = np.array([pos.get(w, -1) for w in classes], dtype=np.int64)
    new = relabel[np.asarray(labels, dtype=np.int64)]
    rows = np.flatnonzero(new >= 0)
    return rows, new[rows]


def regroup_variant(features_root: str | os.PathLike, model: str, measure: str | None = None,
                    level_file: str | os.PathLike | None = None, name: str | None = None, lcs: str = "deepest",
                    overwrite: bool = False, onto=None) -> RegroupResult:
    """Write the ten stores (five levels, train and test) of a level variant of ``model`` from its official-level
    stores under ``features_root``; see the module docstring. Finished stores are skipped."""
    sources = open_sources(Path(features_root) / model)
    name = _valid(name or measure)
    saved = sources.root / VARIANTS_DIR / f"{name}.json" if name else None
    old = _saved(saved, overwrite) if saved else None
    content = old if old is not None and _reusable(old, sources.concepts, measure, lcs) else None
    if content is None:
        content = variants.variant_levels(sources.concepts, measure, level_file, lcs, onto)
        if not name:  # named by the level file's measure: only now is the saved file known
            name = _valid(variants.variant_name(content))
            saved = sources.root / VARIANTS_DIR / f"{name}.json"
            old = _saved(saved, overwrite)
        if old is None or old["levels"] != content["levels"] or _settings(old) != _settings(content):
            if not overwrite:  # the saved file is what the finished stores were made from: refuse before touching it
                _refuse_finished(sources.root, name, saved)
            write_level_file(saved, content)
    sha = file_sha256(saved)
    result = RegroupResult(name, saved, variants.level_moves(content, sources.level_of))
    for i, (domain, level) in enumerate(LEVEL_OF_DOMAIN.items()):
        classes = sorted(content["levels"][level])
        for split in SPLITS:
            out = sources.root / variant_domain(domain, name) / split
            if is_complete(out) and not overwrite:
                _check_existing(out, sha, sources)
                result.skipped.append(out)
                continue
            parts = _parts(sources, split, classes)
            meta = _meta(sources, split, domain, name, classes, content, saved, sha, parts)
            _write(out, parts, meta, overwrite)
            result.written.append(out)
        log.info("variant %s: level %d of 5 regrouped", name, i + 1)
    return result


def _valid(name: str | None) -> str | None:
    """The name, once it is known to make a valid domain (it becomes a path)."""
    if name is not None:
        variant_domain(SOURCE_DOMAINS[0], name)
    return name


def _settings(content: dict[str, Any]) -> tuple:
    s = content.get("settings", {})
    return s.get("protocol", {}).get("measure"), s.get("protocol", {}).get("lcs"), s.get("source_level_file")


def _saved(path: Path, overwrite: bool) -> dict[str, Any] | None:
    """The level file an earlier run wrote for this variant (validated), unless ``overwrite`` or there is none."""
    if overwrite or not path.is_file():
        return None
    try:
        return load_level_file(path)
    except ValueError as err:
        raise CogError(f"{err} (the variant's saved level file; pass overwrite=True (--overwrite) to regroup the "
                       "variant again)") from None


def _reusable(old: dict[str, Any], concepts: list[str], measure: str | None, lcs: str) -> bool:
    """Whether an earlier run's level file re-ranked the same concepts by the same measure (so it need not be
    computed again)."""
    return (measure is not None and _settings(old) == (measure, lcs, None)
            and sorted(w for lvl in LEVELS for w in old["levels"][lvl]) == concepts)


def _refuse_finished(root: Path, name: str, saved: Path) -> None:
    """Refuse to replace the level file of a variant that has finished stores (they record its sha256)."""
    for domain in LEVEL_OF_DOMAIN:
        for split in SPLITS:
            out = root / variant_domain(domain, name) / split
            if is_complete(out):
                raise StoreError(f"{out} was regrouped from another level file ({saved}); pass overwrite=True "
                                 f"(--overwrite) to regroup it again, or name this variant otherwise (--name)")


def _check_existing(out: Path, sha: str, sources: Sources) -> None:
    meta = open_store(out).meta
    first = sources.stores[SOURCE_DOMAINS[0], "train"].meta
    if meta.get("level_file_sha256") != sha:
        raise StoreError(f"{out} was regrouped from another level file (sha256 {meta.get('level_file_sha256')}, "
                         f"now {sha}); pass overwrite=True (--overwrite) to regroup it again, or name this variant "
                         "otherwise (--name)")
    differ = [key for key in _SAME_MODEL if meta.get(key) != first.get(key)]
    if differ:
        raise StoreError(f"{out} was regrouped from other features than the stores under {sources.root} (they differ "
                         f"in {', '.join(differ)}); pass overwrite=True (--overwrite) to regroup it again")


def _parts(sources: Sources, split: str, classes: list[str]) -> list[tuple[str, FeatureStore, np.ndarray, np.ndarray]]:
    """Per source store holding some of ``classes``: its rows of them and their new labels; every concept must have
    rows in this split."""
    parts, counts = [], np.zeros(len(classes), dtype=np.int64)
    for domain in SOURCE_DOMAINS:
        store = sources.stores[domain, split]
        rows, labels = select_rows(store.labels, store.meta["classes"], classes)
        keep = store.valid[rows]  # rows whose image was unreadable at extraction stay out of the variant
        rows, labels = rows[keep], labels[keep]
        if len(rows):
            parts.append((domain, store, rows, labels))
            counts += np.bincount(labels, minlength=len(classes))
    if not counts.all():  # every concept of the variant is a concept of some store (open_sources)
        w = classes[int(np.flatnonzero(counts == 0)[0])]
        raise StoreError(f"concept {w} has no {split} rows in "
                         f"{sources.stores[DOMAIN_OF_LEVEL[sources.level_of[w]], split].path}")
    return parts


def _meta(sources: Sources, split: str, domain: str, name: str, classes: list[str], content: dict[str, Any],
          saved: Path, sha: str, parts: list) -> dict[str, Any]:
    first = sources.stores[SOURCE_DOMAINS[0], split].meta
    settings = content.get("settings", {})
    return make_meta(**{
        **{k: first[k] for k in _INHERITED if k in first},
        "domain": variant_domain(domain, name), "split": split, "classes": classes, "num_classes": len(classes),
        "level_file_sha256": sha,
        "variant": {"name": name, "level": LEVEL_OF_DOMAIN[domain], "measure": settings.get("protocol", {}).get(
                        "measure"), "concepts": settings.get("concepts"), "level_file": str(saved.resolve()),
                    "source_level_file": settings.get("source_level_file"), "text_model": settings.get("text_model"),
                    "regrouped_by": f"cog_pl {__version__}"},
        "regrouped_from": [{"domain": d, "path": str(store.path.resolve()), "rows": len(rows),
                            "concepts": len(np.unique(labels)), "level_file_sha256": store.meta.get(
                                "level_file_sha256"), "split_sha256": store.meta.get("split_sha256")}
                           for d, store, rows, labels in parts],
    })


def _write(out: Path, parts: list, meta: dict[str, Any], overwrite: bool, chunk: int = 65536) -> Path:
    """Stream the selected rows into a new store, written atomically; a killed regroup's leftovers are discarded."""
    def chunks() -> Iterator[Chunk]:
        for _, store, rows, labels in parts:
            for a in range(0, len(rows), chunk):
                r = rows[a:a + chunk]
                yield store.features[r], labels[a:a + chunk], store.index[r]

    n = sum(len(rows) for _, _, rows, _ in parts)
    dtype = "float32" if any(p[1].features.dtype == np.float32 for p in parts) else "float16"  # the sources'
    shape = parts[0][1].features.shape  # [N, D], or a token store's [N, T, D]
    return write_chunks(out, n, int(shape[-1]), chunks(), meta, overwrite, dtype,
                        int(shape[1]) if len(shape) == 3 else None)
