"""A train/test pair of feature stores, opened and checked once: what every reader of a store root starts from.

:func:`open_pair` opens ``<root>/train`` and ``<root>/test`` with :func:`~cog_pl.features.store.open_store` (each
store's own checks: headers, shapes, dtypes, labels within the classes, ``classes`` consistent with
``num_classes``, ``expect``), then checks that the two belong together: the same feature width and, where both
stores record them, the same model, weights, domain, level file, transform and classes. A store without rows is
refused (a probe of it would report a number measured on nothing), so is a train store of fewer than two classes (a
probe of one class is right by construction: a 100 % row), and so is a pair of plain stores whose class
counts differ (a test label the train split never has, say), unless ``allow_class_mismatch``; test labels the train
split lacks are logged either way, since no probe can predict them. The returned :class:`StorePair` holds both
memory-mapped stores and what readers need (class count, width, model, domain), so the probe, ``FeatureDataModule``
and ``cog-pl features`` never reopen a split folder or decide these again; :meth:`StorePair.names` is the one rule
for the model and domain its result rows are filed under.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.errors import NotFoundError, StoreError
from cog_pl.features.store import FeatureStore, open_store
from cog_pl.io import printable
from cog_pl.protocol import SPLITS

log = logging.getLogger(__name__)

#: Meta keys the two stores of a pair must agree on (compared where both record them).
PAIRED_KEYS = ("model", "weights_sha256", "domain", "level_file_sha256", "transform", "num_classes", "classes",
               "feature")
#: The option that lets a pair of plain stores with other class counts be probed (named in the refusal).
#: The fewest classes the train store of a pair opened for probing may hold (:func:`open_pair`).
MIN_CLASSES = 2
MISMATCH_HINT = "pass --allow-class-mismatch (FeatureDataModule: allow_class_mismatch=True) to probe them anyway"


@dataclass(frozen=True)
class StorePair:
    """The train and test stores of one (model, domain), checked together.

    ``num_classes``: the stores' class count (``len(classes)`` of meta.json, which must equal its ``num_classes``);
    for two plain stores, the largest label of both + 1. ``model`` and ``domain`` come from the stores' metadata; plain
    stores record neither, and the folder names (``<model>/<domain>/``) stand in."""

    root: Path
    train: FeatureStore
    test: FeatureStore
    num_classes: int
    dim: int
    model: str
    domain: str

    @property
    def plain(self) -> bool:
        """True when neither store has a meta.json (nothing about their origin can be verified)."""
        return self.train.plain and self.test.plain

    @property
    def tokens(self) -> int | None:
        """T of a pair of token stores (``[N, T, D]``), None for vector stores."""
        return self.train.tokens

    @property
    def classes(self) -> tuple[str, ...] | None:
        """The concepts the labels stand for (meta.json ``classes``: wnids in label order); None for plain stores."""
        return next((tuple(s.meta["classes"]) for s in (self.train, self.test) if not s.plain), None)

    @property
    def test_images(self) -> np.ndarray:
        """The dataset row of each test feature row the probes read (the test store's ``index`` without its missing
        rows): what stored predictions name their images by."""
        return np.asarray(self.test.index)[self.test.valid]

    def __getitem__(self, split: str) -> FeatureStore:
        if split not in SPLITS:
            raise NotFoundError(f"split {split!r}; a store pair holds {' and '.join(SPLITS)}")
        return self.train if split == "train" else self.test

    def names(self, model: str | None = None, domain: str | None = None) -> tuple[str, str]:
        """The model and domain the pair's result rows (and studies) are filed under: those given, else the
        pair's. A name that is not UTF-8 text (a folder name's undecodable bytes) is refused, naming it and the
        option that sets it: a results store and a study database hold text."""
        folders = {"--model": self.root.resolve().parent, "--domain": self.root.resolve()}
        for option, given, own in (("--model", model, self.model), ("--domain", domain, self.domain)):
            try:
                (given or own).encode("utf-8")
            except UnicodeEncodeError:
                whose = "as given" if given else f"the name of folder {printable(folders[option])}"
                raise StoreError(f"{option[2:]} '{printable(given or own)}' ({whose}) is not UTF-8 text, which "
                                 f"result rows and study names must be; pass {option} NAME") from None
        return model or self.model, domain or self.domain


def open_pair(root: str | os.PathLike, expect: dict[str, Any] | None = None,
              allow_class_mismatch: bool = False, min_classes: int = MIN_CLASSES) -> StorePair:
    """Open and check ``root/train`` and ``root/test`` (v1 or plain stores) once; ``expect``: meta values each store
    must hold (keys of :data:`~cog_pl.features.store.CHECKED_KEYS`; ``split`` is set per store);
    ``allow_class_mismatch``: accept plain stores whose class counts differ (see the module docstring);
    ``min_classes``: the fewest classes the train store's rows may hold (a probe's two; a reader that probes
    nothing, ``cog-pl features info`` or an export, passes 1)."""
    root = Path(root)
    given = {k: v for k, v in (expect or {}).items() if k != "split"}
    train, test = (open_store(root / s, {**given, "split": s} if given else None) for s in SPLITS)
    dim = _check_together(train, test, root)
    for store in (train, test):
        _check_rows(store)
    _check_class_count(train, min_classes)
    _check_classes(train, test, root, allow_class_mismatch)
    recorded = [s.meta for s in (train, test) if not s.plain]  # a plain store's meta is made up
    if recorded:
        num_classes = recorded[0]["num_classes"]
        for store in (train, test):  # a plain half of a mixed pair: its labels must be the other's classes
            if store.num_classes > num_classes:
                raise StoreError(f"{store.path / 'labels.npy'}: labels up to {store.num_classes - 1}, but "
                                 f"{root} has {num_classes} classes")
    else:
        num_classes = max(train.num_classes, test.num_classes)
    model = next((m["model"] for m in recorded if m.get("model")), root.resolve().parent.name)
    domain = next((m["domain"] for m in recorded if m.get("domain")), root.resolve().name)
    return StorePair(root, train, test, int(num_classes), dim, model, domain)


def _check_together(train: FeatureStore, test: FeatureStore, root: Path) -> int:
    """Refuse a train and a test store that cannot be probed together: other feature widths, or metadata of another
    model, weights, domain, level file, transform, class list or feature definition (a token store and a vector
    store, say); returns the width."""
    train_dim, test_dim = train.features.shape[-1], test.features.shape[-1]
    if train.tokens != test.tokens:
        said = [f"{s.tokens} tokens per image" if s.tokens else "one vector per image" for s in (train, test)]
        raise StoreError(f"{root}: the train store holds {said[0]} (feature {train.meta.get('feature')!r}), the "
                         f"test store {said[1]} (feature {test.meta.get('feature')!r}): one definition per pair")
    if train_dim != test_dim:
        raise StoreError(f"{root}: train features have {train_dim} dimensions, test features {test_dim}")
    if train.plain or test.plain:
        return int(train_dim)
    for key in PAIRED_KEYS:
        a, b = train.meta.get(key), test.meta.get(key)
        if a is None or b is None or a == b:
            continue
        if key == "classes":
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            raise StoreError(f"{root}: the train and test stores have different class lists ({len(a)} and "
                             f"{len(b)} classes, first difference at position {first})")
        raise StoreError(f"{root}: the train and test stores differ in {key}: {a!r} and {b!r}")
    return int(train_dim)


def _check_rows(store: FeatureStore) -> None:
    """Refuse a store with no rows to read (none at all, or only rows whose image was unreadable)."""
    if not store.valid.any():
        left = f" left: all {len(store)} are missing rows (unreadable images)" if len(store) else ""
        raise StoreError(f"{store.path}: the {store.meta.get('split', store.path.name)} store has no rows{left}; a "
                         "probe needs rows in both train and test")


def _check_class_count(train: FeatureStore, min_classes: int) -> None:
    """Refuse a train store whose readable rows hold fewer than ``min_classes`` classes: a probe trained on one class
    predicts it for every image, and its accuracy on a test store of that class is 100 % by construction."""
    held = _labels(train)
    if len(held) < min_classes:
        which = f"one class (label {held[0]})" if len(held) == 1 else f"{len(held)} classes"
        raise StoreError(f"{train.path}: the train store's {int(train.valid.sum())} rows hold {which}; a probe needs "
                         f"at least {min_classes} classes (on one it is right by construction)")


def _labels(store: FeatureStore) -> np.ndarray:
    """The distinct labels of a store's readable rows."""
    return np.unique(np.asarray(store.labels)[store.valid])


def _check_classes(train: FeatureStore, test: FeatureStore, root: Path, allow: bool) -> None:
    """Refuse two plain stores whose class counts (largest label + 1) differ, unless ``allow``; log the test labels
    the train split never has either way (every test row of them counts as an error)."""
    unseen = np.setdiff1d(_labels(test), _labels(train))
    rows = int(np.isin(np.asarray(test.labels)[test.valid], unseen).sum()) if len(unseen) else 0
    shown = ", ".join(map(str, unseen[:5])) + (" ..." if len(unseen) > 5 else "")
    if train.plain and test.plain and train.num_classes != test.num_classes and not allow:
        extra = f"; test labels the train split never has: {shown} ({rows} row(s))" if len(unseen) else ""
        raise StoreError(f"{root}: the train store has {train.num_classes} classes (labels 0.."
                         f"{train.num_classes - 1}), the test store {test.num_classes}{extra}; {MISMATCH_HINT}")
    if len(unseen):
        log.warning("%s: %d test row(s) have labels the train split never has (%s): no probe can predict them, so "
                    "each counts as an error", root, rows, shown)


def vectors_only(pair: StorePair, method: str, takers: str = "") -> StorePair:
    """``pair``, refused in one line when it holds token stores (``[N, T, D]``) and ``method`` reads one vector per
    image (the linear probe, k-NN): the line names the store and the methods that take token stores (``takers``: the
    method table's, which a caller above this layer gives; else where they are listed)."""
    if pair.tokens is None:
        return pair
    named = f": {takers} (cog-pl run --methods)" if takers else " are those `cog-pl run --methods` marks [token stores]"
    raise StoreError(f"{pair.train.path}: a token store ({pair.tokens} tokens per image, feature "
                     f"{pair.train.meta.get('feature')!r}); {method} reads one vector per image: the methods that take "
                     f"token stores{named}")
