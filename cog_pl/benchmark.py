"""Benchmark definitions: which concepts are seen, which form each level, which images are the test split.

The official ImageNet-CoG benchmark (:meth:`Benchmark.official`, from :mod:`cog_pl.resources`) is the default
everywhere; a custom one (the embedded demo's miniature, a subset for a quick look) is a file that the image
datamodules, the splits and ``data check`` take as ``benchmark=<path>``.

File format ``cog-pl-benchmark`` v1 (JSON, written atomically)::

    {"format": "cog-pl-benchmark", "version": 1, "name": "...",
     "in1k": [wnid, ...],                       # seen concepts in label order
     "levels": {"L1": [wnid, ...], ...},         # sorted wnids (the label order), all five levels
     "test": {"L1": ["wnid/filename", ...], ...},
     "in1k_test": "...",                         # a note: what serves as IN-1K's test set
     "protocol": {...},                          # FeatureProtocol fields that differ (image counts), may be {}
     "meta": {...}}                              # free-form: how the benchmark was made
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cog_pl import resources
from cog_pl.errors import CogError
from cog_pl.io import read_json, write_json
from cog_pl.protocol import FeatureProtocol

FORMAT = "cog-pl-benchmark"
VERSION = 1
OFFICIAL_NAME = "imagenet-cog"
OFFICIAL_IN1K_TEST = "the official IN-1K val set (50 images per concept)"


@dataclass(frozen=True)
class Benchmark:
    """Seen concepts, the five levels and their test images; ``protocol`` overrides FeatureProtocol counts."""

    name: str
    in1k: tuple[str, ...]
    levels: Mapping[str, tuple[str, ...]]
    test: Mapping[str, tuple[str, ...]]
    in1k_test: str = ""
    protocol: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "in1k", tuple(self.in1k))
        set_(self, "levels", {lv: tuple(sorted(self.levels[lv])) for lv in self.levels})
        set_(self, "test", {lv: tuple(self.test[lv]) for lv in self.test})
        set_(self, "protocol", dict(self.protocol))
        set_(self, "meta", dict(self.meta))

    @classmethod
    def official(cls) -> Benchmark:
        """The published benchmark: IN-1K, the official levels and test split (package data)."""
        return cls(OFFICIAL_NAME, resources.in1k_wnids(), resources.official_levels(),
                   {lv: resources.official_test_split(lv) for lv in resources.LEVELS}, OFFICIAL_IN1K_TEST)

    def classes(self, level: str) -> tuple[str, ...]:
        """A level's concepts in label order (sorted wnids)."""
        if level not in self.levels:
            raise CogError(f"benchmark {self.name!r} has no level {level!r}; it has {', '.join(self.levels)}")
        return self.levels[level]

    def test_by_concept(self, level: str) -> dict[str, tuple[str, ...]]:
        """The test filenames of a level per concept (every concept of the level, sorted by wnid and name)."""
        out: dict[str, list[str]] = {w: [] for w in self.classes(level)}
        for path in self.test[level]:
            wnid, filename = path.split("/", 1)
            out.setdefault(wnid, []).append(filename)
        return {w: tuple(sorted(v)) for w, v in sorted(out.items())}

    def feature_protocol(self, base: FeatureProtocol | None = None) -> FeatureProtocol:
        """The feature protocol with this benchmark's image counts (the base unchanged for the official one)."""
        return dataclasses.replace(base or FeatureProtocol(), **self.protocol)

    def to_record(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "name": self.name, "in1k": list(self.in1k),
                "levels": {lv: list(v) for lv, v in self.levels.items()},
                "test": {lv: list(v) for lv, v in self.test.items()}, "in1k_test": self.in1k_test,
                "protocol": dict(self.protocol), "meta": dict(self.meta)}

    def sha256(self) -> str:
        """Content hash of the definition (name, concepts, test images, protocol; not ``meta``)."""
        rec = self.to_record()
        rec.pop("meta")
        return hashlib.sha256(json.dumps(rec, sort_keys=True).encode()).hexdigest()

    def save(self, path: str | os.PathLike) -> Path:
        """Write the benchmark file atomically."""
        write_json(path, self.to_record(), indent=None)
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Benchmark:
        """Read and validate a benchmark file; errors name the file and what is wrong."""
        path = Path(path)
        rec = read_json(path, "benchmark file")
        if not isinstance(rec, dict) or rec.get("format") != FORMAT or rec.get("version") != VERSION:
            raise CogError(f"benchmark file {path} {_what(rec)}; expected a {FORMAT!r} file, version {VERSION} "
                           "(cog-pl levels build --seen writes one)")
        try:
            bench = cls(rec["name"], rec["in1k"], rec["levels"], rec["test"], rec.get("in1k_test", ""),
                        rec.get("protocol", {}), rec.get("meta", {}))
        except (KeyError, TypeError, AttributeError) as err:
            raise CogError(f"benchmark file {path}: missing or malformed field {err}") from err
        problems = validate(bench)
        if problems:
            raise CogError(f"benchmark file {path}: " + "; ".join(problems[:5])
                           + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""))
        return bench


def _what(rec: Any) -> str:
    """What a JSON document given as a benchmark file is, for the refusal."""
    if not isinstance(rec, dict):
        return f"holds a JSON {type(rec).__name__}, not an object"
    if "format" not in rec:
        keys = ", ".join(map(str, list(rec)[:5])) or "none"
        return f"is not a cog-pl benchmark file (a JSON object with no format field; its keys: {keys})"
    if rec["format"] != FORMAT:
        return f"is a {rec['format']!r} file"
    return f"is version {rec.get('version')!r} of the format"


def validate(bench: Benchmark) -> list[str]:
    """What is wrong with a definition (empty when it is usable)."""
    problems = []
    bad = [w for w in bench.in1k if not resources.is_wnid(w)]
    if not bench.in1k or bad or len(set(bench.in1k)) != len(bench.in1k):
        problems.append(f"in1k must be distinct wnids (malformed: {', '.join(bad[:3]) or 'none'})")
    if sorted(bench.levels) != list(resources.LEVELS) or sorted(bench.test) != list(resources.LEVELS):
        problems.append(f"levels and test must hold exactly {', '.join(resources.LEVELS)}")
        return problems
    seen = set(bench.in1k)
    fields = {f.name for f in dataclasses.fields(FeatureProtocol)}
    unknown = sorted(set(bench.protocol) - fields)
    if unknown:
        problems.append(f"unknown protocol field(s) {', '.join(unknown)}")
    for lv in resources.LEVELS:
        wnids = set(bench.levels[lv])
        if not wnids or not all(resources.is_wnid(w) for w in wnids) or wnids & seen:
            problems.append(f"{lv} must be non-empty wnids, none of them seen (in1k)")
        for other in resources.LEVELS[resources.LEVELS.index(lv) + 1:]:
            shared = sorted(wnids & set(bench.levels[other]))
            if shared:
                problems.append(f"{lv} and {other} share concept(s) {', '.join(shared[:3])}")
        stray = [p for p in bench.test[lv] if "/" not in p or p.split("/", 1)[0] not in wnids]
        if stray:
            problems.append(f"{lv} test image(s) not of a {lv} concept, e.g. {stray[0]!r}")
        if len(set(bench.test[lv])) != len(bench.test[lv]):
            problems.append(f"{lv} lists a test image twice")
        covered = {p.split("/", 1)[0] for p in bench.test[lv]}
        if wnids - covered:
            problems.append(f"{lv} concept(s) without test images: {', '.join(sorted(wnids - covered)[:3])}")
    return problems


def load_benchmark(path: str | os.PathLike | None = None) -> Benchmark:
    """The benchmark of a file, or the official one.

    Args:
        path: a benchmark file (``cog-pl levels build --seen``); None for the official ImageNet-CoG.

    Returns:
        The :class:`Benchmark`: its levels' concepts and test images.

    Example:
        >>> [len(load_benchmark().classes(level)) for level in ("L1", "L5")]
        [1000, 1000]
    """
    return Benchmark.official() if path is None else Benchmark.load(path)
