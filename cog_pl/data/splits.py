"""The CoG train/test split of a level: the official test images, and a deterministic train selection.

Rule (split file format ``cog-pl-split`` v1, ``rule: "sha256-rank-v1"``): for each concept, the candidates are
all of its images (files of its folder or members of its tar) that are not among its official test images. When
there are more than ``max_train`` (1300) candidates, they are ranked by ``sha256(f"{seed}/{wnid}/{filename}")``
(hex digest, ascending) and the first ``max_train`` are kept; the kept names are listed sorted by filename. The
rule depends only on the file names, so every copy of ImageNet-21K (Fall 2011 tars or Winter 2021 folders) gives
the same split, and the split file records it so that two machines evaluate on the same images. A file name that is
not UTF-8 (:func:`os.fsdecode` keeps its bytes as surrogate escapes) is hashed by its bytes and written to the split
file as JSON ``\\udcXX`` escapes, which read back to the same name.

Split file: gzipped JSON ``{"format": "cog-pl-split", "version": 1, "level", "rule", "seed", "max_train",
"train": {wnid: [filename, ...]}, "test": {wnid: [...]}, "sha256"}`` where ``sha256`` is :meth:`LevelSplit.sha256`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cog_pl.benchmark import Benchmark
from cog_pl.data.sources import printable
from cog_pl.data.tar_index import default_cache_dir
from cog_pl.errors import CogError
from cog_pl.io import atomic_open
from cog_pl.protocol import FeatureProtocol

SPLIT_FORMAT = "cog-pl-split"
SPLIT_VERSION = 1
RULE = "sha256-rank-v1"
RULE_TEXT = ("train = the concept's images that are not official test images; if more than max_train, rank them by "
             "sha256('{seed}/{wnid}/{filename}') hex digest ascending and keep the first max_train; list by filename")


def _utf8(text: str) -> bytes:
    """UTF-8 bytes of a text holding file names: a name's non-UTF-8 bytes (surrogate escapes) hashed as they are."""
    return text.encode("utf-8", "surrogateescape")


def official_test_by_concept(level: str, benchmark: Benchmark | None = None) -> dict[str, tuple[str, ...]]:
    """The test filenames of a level, per concept (every concept of the level, sorted); official by default."""
    return (benchmark or Benchmark.official()).test_by_concept(level)


def select_train(wnid: str, filenames: Iterable[str], test: Iterable[str], max_train: int, seed: int = 0) -> list[str]:
    """The train images of one concept under the documented rule (sorted by filename)."""
    test = set(test)
    candidates = sorted(set(filenames) - test)
    if len(candidates) > max_train:
        def rank(name: str) -> str:
            return hashlib.sha256(_utf8(f"{seed}/{wnid}/{name}")).hexdigest()
        candidates = sorted(sorted(candidates, key=rank)[:max_train])
    return candidates


@dataclass(frozen=True)
class LevelSplit:
    """Train and test filenames per concept of one CoG level."""

    level: str
    train: dict[str, tuple[str, ...]]
    test: dict[str, tuple[str, ...]]
    seed: int = 0
    max_train: int = 1300

    @property
    def classes(self) -> tuple[str, ...]:
        """The level's concepts in label order (sorted wnids)."""
        return tuple(sorted(self.test))

    def samples(self, split: str) -> tuple[list[tuple[str, str]], list[int]]:
        """``(wnid, filename)`` rows and labels of ``"train"`` or ``"test"``, by class then filename."""
        table = {"train": self.train, "test": self.test}[split]
        rows, labels = [], []
        for label, wnid in enumerate(self.classes):
            for name in table.get(wnid, ()):
                rows.append((wnid, name))
                labels.append(label)
        return rows, labels

    def sha256(self) -> str:
        """Content hash: level, and every ``split<TAB>wnid/filename`` line in sorted order."""
        h = hashlib.sha256(f"{SPLIT_FORMAT}/{self.level}\n".encode())
        for split, table in (("test", self.test), ("train", self.train)):
            for wnid in sorted(table):
                for name in table[wnid]:
                    h.update(_utf8(f"{split}\t{wnid}/{name}\n"))
        return h.hexdigest()

    def to_record(self) -> dict:
        return {"format": SPLIT_FORMAT, "version": SPLIT_VERSION, "level": self.level, "rule": RULE,
                "rule_text": RULE_TEXT, "seed": self.seed,
                "max_train": self.max_train, "train": {w: list(v) for w, v in sorted(self.train.items())},
                "test": {w: list(v) for w, v in sorted(self.test.items())}, "sha256": self.sha256()}


def build_split(level: str, source, seed: int = 0, protocol: FeatureProtocol | None = None,
                benchmark: Benchmark | None = None) -> LevelSplit:
    """Apply the rule to the images a :class:`~cog_pl.data.sources.ImageSource` holds; missing synsets get none.

    ``benchmark`` gives the level's concepts and test images (the official ones by default).
    """
    protocol = protocol or FeatureProtocol()
    test = official_test_by_concept(level, benchmark)
    train = {}
    for wnid, test_names in test.items():
        names = source.list(wnid) if source.has(wnid) else []
        train[wnid] = tuple(select_train(wnid, names, test_names, protocol.max_train_per_concept, seed))
    return LevelSplit(level, train, test, seed, protocol.max_train_per_concept)


def save_split(split: LevelSplit, path: str | os.PathLike) -> Path:
    """Write a split file (gzipped JSON) atomically."""
    path = Path(path)
    with atomic_open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
        gz.write(json.dumps(split.to_record(), indent=None).encode())
    return path


def load_split(path: str | os.PathLike, level: str | None = None, benchmark: Benchmark | None = None) -> LevelSplit:
    """Read and verify a split file: format, level, hash, test = the benchmark's (official) split, train disjoint."""
    path = Path(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            rec = json.load(fh)
    except (OSError, ValueError) as err:
        raise CogError(f"{path}: not a cog-pl split file ({err})") from err
    if rec.get("format") != SPLIT_FORMAT or rec.get("version") != SPLIT_VERSION:
        raise CogError(f"{path}: format {rec.get('format')!r} v{rec.get('version')}, expected {SPLIT_FORMAT} "
                       f"v{SPLIT_VERSION}")
    if level is not None and rec["level"] != level:
        raise CogError(f"{path}: split of level {rec['level']}, expected {level}")
    split = LevelSplit(rec["level"], {w: tuple(v) for w, v in rec["train"].items()},
                       {w: tuple(v) for w, v in rec["test"].items()}, rec["seed"], rec["max_train"])
    if split.sha256() != rec.get("sha256"):
        raise CogError(f"{path}: content hash mismatch (file edited or damaged)")
    if split.test != official_test_by_concept(split.level, benchmark):
        which = "official" if benchmark is None else f"benchmark {benchmark.name!r}'s"
        raise CogError(f"{path}: its test images differ from the {which} {split.level} test split")
    for wnid, names in split.train.items():
        leaked = set(names) & set(split.test.get(wnid, ()))
        if leaked:
            raise CogError(f"{path}: {len(leaked)} official test image(s) of {wnid} listed as train, "
                           f"e.g. {wnid}/{min(leaked)}")
    return split


def installed_split_path(level: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``cog-pl data split import`` installs the split file of a level."""
    return Path(cache_dir or default_cache_dir()) / "splits" / f"cog_{level}.split.json.gz"


@dataclass(frozen=True)
class ConceptIssue:
    """A concept that breaks the protocol's counts or whose images are missing."""

    wnid: str
    problem: str


def check_split(split: LevelSplit, protocol: FeatureProtocol | None = None, source=None) -> list[ConceptIssue]:
    """Per-concept checks: train count in [min, max], test count exact; with a source, every listed file exists."""
    protocol = protocol or FeatureProtocol()
    issues = []
    for wnid in split.classes:
        n_train, test = len(split.train.get(wnid, ())), split.test[wnid]
        if source is not None and not source.has(wnid):
            issues.append(ConceptIssue(wnid, "synset missing"))
            continue
        if len(test) != protocol.test_per_concept:
            issues.append(ConceptIssue(wnid, f"{len(test)} test images, expected {protocol.test_per_concept}"))
        if not protocol.min_train_per_concept <= n_train <= protocol.max_train_per_concept:
            issues.append(ConceptIssue(wnid, f"{n_train} train images, expected {protocol.min_train_per_concept}"
                                             f"..{protocol.max_train_per_concept}"))
        if source is not None:
            present = set(source.list(wnid))
            missing = [n for n in test if n not in present]
            if missing:
                issues.append(ConceptIssue(wnid, f"{len(missing)} test image(s) missing: "
                                                 + ", ".join(printable(f"{wnid}/{n}") for n in missing[:5])
                                                 + (" ..." if len(missing) > 5 else "")))
            gone = [n for n in split.train.get(wnid, ()) if n not in present]
            if gone:
                issues.append(ConceptIssue(wnid, f"{len(gone)} train image(s) of the split file missing, e.g. "
                                                 + printable(f"{wnid}/{gone[0]}")))
    return issues
