"""IN-1K's validation set as the official release ships it: 50,000 files in one flat ``val/`` folder.

The labels come from the first of these found in the folder or up to four folders above it (Kaggle's download keeps
its CSV four folders above ``ILSVRC/Data/CLS-LOC/val/``):

- the devkit: ``ILSVRC2012_validation_ground_truth.txt`` (line ``i`` is the ILSVRC2012_ID of
  ``ILSVRC2012_val_{i:08d}.JPEG``) with ``meta.mat`` beside it (the IDs' wnids), directly or under ``data/`` or
  ``ILSVRC2012_devkit_t12/data/``; reading ``meta.mat`` needs scipy;
- Kaggle's ``LOC_val_solution.csv`` (``ImageId,PredictionString``, the first word of which is the wnid).

Images keep their names (``ILSVRC2012_val_00000001.JPEG``), the names the sorted-folder layout (``val/<wnid>/``)
gives them, so both read as the same rows. The index (:mod:`cog_pl.data.index_cache`: wnid -> present images, the
labelled images that are absent, and the images that have no label) is cached and rebuilt when the labels or the
folder's listing change.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import Any

from cog_pl.data.index_cache import cached_index
from cog_pl.data.source_base import ImageSource, is_image_name
from cog_pl.errors import CogError, MissingDependencyError, MissingFileError
from cog_pl.io import printable

GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
KAGGLE = "LOC_val_solution.csv"
OFFICIAL_VAL = 50_000
_VAL = re.compile(r"ILSVRC2012_val_(\d{8})\.\w+")
_WNID = re.compile(r"n\d{8}")
INDEX_VERSION = 1
#: How many folders above a flat val folder its labels may be (Kaggle's CSV: ``<download>/`` above
#: ``ILSVRC/Data/CLS-LOC/val/``).
LABELS_ABOVE = 4


def find_labels(root: Path) -> Path:
    """The labels file of a flat val folder (see the module docstring); ``FileNotFoundError`` listing where it
    looked."""
    tried = []
    for folder in [root, *list(root.resolve().parents)[:LABELS_ABOVE]]:
        for rel in (GROUND_TRUTH, f"data/{GROUND_TRUTH}", f"ILSVRC2012_devkit_t12/data/{GROUND_TRUTH}", KAGGLE):
            tried.append(folder / rel)
            if tried[-1].is_file():
                return tried[-1]
    raise MissingFileError(f"flat val folder {root}: no labels found; put the devkit's {GROUND_TRUTH} (with "
                           f"meta.mat) or Kaggle's {KAGGLE} in it or up to {LABELS_ABOVE} folders above it")


def devkit_meta(truth: Path) -> Path:
    """The devkit's ``meta.mat`` beside its ground truth ``truth``; a missing one is named with what needs it."""
    meta = truth.parent / "meta.mat"
    if not meta.is_file():
        raise MissingFileError(f"{meta}: the devkit's meta.mat is missing beside {truth} (it maps the ground "
                               f"truth's ILSVRC2012_IDs to wnids); copy it from the devkit, or use Kaggle's {KAGGLE}")
    return meta


def devkit_ids(meta: Path) -> dict[int, str]:
    """ILSVRC2012_ID -> wnid from the devkit's ``meta.mat``."""
    try:
        from scipy.io import loadmat
    except ImportError:
        raise MissingDependencyError(f"reading {meta} needs scipy (pip install 'cog_pl[devkit]'), or use Kaggle's "
                                     f"{KAGGLE}") from None
    try:
        synsets = loadmat(str(meta), squeeze_me=True)["synsets"]
        return {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in synsets}
    except (KeyError, ValueError, TypeError, OSError) as err:
        raise CogError(f"{meta}: not the devkit's meta.mat (a synsets table with ILSVRC2012_ID and WNID): "
                       f"{err}") from err


def devkit_labels(truth: Path, present: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``({present image: wnid}, {listed image id: wnid})`` from the devkit; refuses a ground truth too short for
    the present images or holding an unknown ID, naming the file and the line or image."""
    ids = devkit_ids(devkit_meta(truth))
    lines = truth.read_text().split()
    listed = {}
    for k, word in enumerate(lines, start=1):
        try:
            listed[f"ILSVRC2012_val_{k:08d}"] = ids[int(word)]
        except (ValueError, KeyError):
            raise CogError(f"{truth}: line {k} ({word!r}, the label of ILSVRC2012_val_{k:08d}) is not an "
                           f"ILSVRC2012_ID of {truth.parent / 'meta.mat'}") from None
    labels = {}
    for name in present:
        k = int(_VAL.fullmatch(name).group(1))
        if not 1 <= k <= len(lines):
            raise CogError(f"{truth}: {len(lines)} lines, but image {name} needs line {k}: a ground truth of "
                           f"the wrong length (the official one has {OFFICIAL_VAL} lines)")
        labels[name] = listed[f"ILSVRC2012_val_{k:08d}"]
    return labels, listed


def kaggle_labels(csv_path: Path) -> dict[str, str]:
    """``{image id (no extension): wnid}`` from Kaggle's CSV; a row without a wnid is refused, naming it."""
    out = {}
    with open(csv_path, newline="") as fh:
        for n, row in enumerate(csv.reader(fh), start=1):
            if n == 1 and row[:1] == ["ImageId"]:
                continue
            words = row[1].split() if len(row) > 1 else []
            if not words or not _WNID.fullmatch(words[0]):
                raise CogError(f"{csv_path}: line {n} ({','.join(row)[:60]!r}) has no wnid after the image id")
            out[row[0]] = words[0]
    return out


class FlatValSource(ImageSource):
    """The 50,000 validation images directly under ``root``, labelled by the devkit or Kaggle's CSV."""

    name = "flat_val"  # registered by cog_pl.data.sources
    serves = ("test",)

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 split: str | None = None) -> None:
        super().__init__(root, cache_dir, split)
        self.labels_path = find_labels(self.root)
        inputs = [self.labels_path, self.root]
        if self.labels_path.name == GROUND_TRUTH:
            inputs.append(devkit_meta(self.labels_path))
        self.index: dict[str, Any] = cached_index(self.root, "flat_val", INDEX_VERSION, inputs, self._build,
                                                  cache_dir)

    @classmethod
    def detect(cls, root: Path) -> bool:
        with os.scandir(root) as it:
            return any(_VAL.fullmatch(e.name) and e.is_file() for e in it)

    def _build(self) -> dict[str, Any]:
        with os.scandir(self.root) as it:
            present = sorted(e.name for e in it if is_image_name(e.name) and e.is_file())
        numbered = [n for n in present if _VAL.fullmatch(n)]
        if self.labels_path.name == GROUND_TRUTH:
            labels, wnid_of_id = devkit_labels(self.labels_path, numbered)
        else:
            wnid_of_id = kaggle_labels(self.labels_path)
            labels = {n: wnid_of_id[n.rsplit(".", 1)[0]] for n in present if n.rsplit(".", 1)[0] in wnid_of_id}
        by_wnid: dict[str, list[str]] = {}
        for name, wnid in labels.items():
            by_wnid.setdefault(wnid, []).append(name)
        stems = {n.rsplit(".", 1)[0] for n in labels}
        absent: dict[str, list[str]] = {}
        for stem, wnid in wnid_of_id.items():
            if stem not in stems:
                absent.setdefault(wnid, []).append(f"{stem}.JPEG")
        return {"labels": str(self.labels_path), "by_wnid": {w: sorted(v) for w, v in sorted(by_wnid.items())},
                "absent": {w: sorted(v) for w, v in sorted(absent.items())},
                "extra": [n for n in present if n not in labels]}

    def synsets(self) -> list[str]:
        return sorted(self.index["by_wnid"])

    def has(self, wnid: str) -> bool:
        return wnid in self.index["by_wnid"]

    def list(self, wnid: str) -> list[str]:
        if wnid not in self.index["by_wnid"]:
            raise MissingFileError(f"synset {wnid} has no image under {self.root} (labels: {self.labels_path})")
        return self.index["by_wnid"][wnid]

    def read(self, wnid: str, filename: str) -> bytes:
        with open(self.root / filename, "rb") as fh:
            return fh.read()

    def where(self, wnid: str, filename: str) -> str:
        return printable(str(self.root / filename))

    def extra(self) -> list[str]:
        return self.index["extra"]

    def absent(self, wnid: str) -> list[str]:
        return self.index["absent"].get(wnid, [])
