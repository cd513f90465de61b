"""Seen concept sets: the label set a model was pretrained on, named or read from a file.

The CoG levels are unseen concepts *relative to a seen set*: the paper's is IN-1K; ``cog-pl levels build --seen``
builds them for any other (:func:`cog_pl.levels.builder.build_levels`), and ``cog-pl run`` warns when the seen set of
a model (its registry entry, or ``--seen``) covers concepts of the levels it is evaluated on (:func:`seen_warnings`).

Named sets (package data; provenance in ``cog_pl/assets/README.md``):

- ``in1k``: the 1000 IN-1K classes, the paper's seen set and the default;
- ``in1k-100``: every 10th IN-1K class in class-index order (indices 0, 10, ..., 990 of ``in1k_synsets.txt``), a
  documented 100-class subset;
- ``in21k-p``: ImageNet-21K-P (Ridnik et al., 2021), Winter 2021 release, 10,450 classes;
- ``in21k-p-fall11``: the same processing of the Fall 2011 release, 11,221 classes (timm's ``*.miil_in21k`` weights);
- ``in12k``: timm's ImageNet-12k, 11,821 classes (timm's ``*.in12k`` weights);
- ``in21k``: all 21,841 Fall 2011 synsets (timm's ``*.in21k`` / ``*.in22k`` weights): no concept is left unseen.

A seen file lists wnids, one per line; ``#`` starts a comment and anything after the wnid is ignored. Every wnid must
be an IN-21K (Fall 2011) or IN-1K synset: the levels' ontology places only those.

A vocabulary is a seen file too: MetaCLIP's entry counts (``entry_counts_400m.json``: a JSON object of entry -> count)
or a plain lemma list (a file whose first entry is not a wnid), its entries mapped to synsets through WordNet's lemmas
(:mod:`cog_pl.levels.vocabulary`; :func:`vocabulary_seen_set` also returns what was ambiguous or unmatched).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cog_pl import resources
from cog_pl.errors import CogError
from cog_pl.levels.vocabulary import VocabularyMatch, describe, match_vocabulary, read_vocabulary, vocabulary_kind


@dataclass(frozen=True)
class SeenSet:
    """The concepts a model has seen: a name, the wnids (label order) and where they come from."""

    name: str
    wnids: tuple[str, ...]
    source: str

    def sha256(self) -> str:
        """Hash of the wnids in order, one per line."""
        return hashlib.sha256("".join(f"{w}\n" for w in self.wnids).encode()).hexdigest()

    def describe(self) -> str:
        return f"{self.name} ({len(self.wnids)} concepts)"

    def record(self) -> dict[str, Any]:
        """What level and benchmark files record about the seen set."""
        return {"name": self.name, "source": self.source, "concepts": len(self.wnids), "sha256": self.sha256(),
                "wnids": list(self.wnids)}


def _asset_list(name: str) -> tuple[str, ...]:
    with resources._open(name) as fh:
        return tuple(line.strip() for line in fh if line.strip())


_TIMM = "timm 1.0.31 timm/data/_info/"
#: name -> (wnids loader, provenance)
NAMED: dict[str, tuple[Callable[[], tuple[str, ...]], str]] = {
    "in1k": (resources.in1k_wnids, "the 1000 IN-1K classes (package data in1k_synsets.txt)"),
    "in1k-100": (lambda: resources.in1k_wnids()[::10],
                 "every 10th IN-1K class in class-index order: indices 0, 10, ..., 990 of in1k_synsets.txt"),
    "in21k-p": (lambda: _asset_list("in21k_p_winter21_synsets.txt.gz"),
                "ImageNet-21K-P, Winter 2021 release, 10,450 classes (Ridnik et al. 2021; "
                f"{_TIMM}imagenet21k_miil_w21_synsets.txt)"),
    "in21k-p-fall11": (lambda: _asset_list("in21k_p_fall11_synsets.txt.gz"),
                       f"ImageNet-21K-P processing of Fall 2011, 11,221 classes ({_TIMM}imagenet21k_miil_synsets.txt)"),
    "in12k": (lambda: _asset_list("in12k_synsets.txt.gz"),
              f"timm's ImageNet-12k, 11,821 classes ({_TIMM}imagenet12k_synsets.txt)"),
    "in21k": (resources.in21k_wnids, "all 21,841 ImageNet-21K Fall 2011 synsets (sorted)"),
}
DEFAULT_SEEN = "in1k"


@functools.cache
def named_seen_set(name: str) -> SeenSet:
    """A named seen set; an unknown name is a ``ValueError`` listing the known ones."""
    key = name.lower().replace("_", "-")
    if key not in NAMED:
        raise CogError(f"unknown seen set {name!r}; choose one of {', '.join(NAMED)} or give a file of wnids")
    load, source = NAMED[key]
    return SeenSet(key, tuple(load()), source)


def known_wnids() -> set[str]:
    """The synsets a seen set may hold: ImageNet-21K (Fall 2011) and IN-1K."""
    return set(resources.fall11_image_counts()) | set(resources.in1k_wnids())


def read_seen_file(path: str | Path) -> SeenSet:
    """A seen set from a file of wnids; errors name the file and the lines (a repeated wnid counts once)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise CogError(f"cannot read the seen list {path}: {err}") from err
    known = known_wnids()
    out: dict[str, None] = {}
    problems = []
    for no, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        wnid = text.split()[0]
        if not resources.is_wnid(wnid):
            problems.append(f"{path}:{no}: {wnid!r} is not a wnid (expected e.g. n02123159)")
        elif wnid not in known:
            problems.append(f"{path}:{no}: {wnid} is not an ImageNet-21K (Fall 2011) or IN-1K synset")
        else:
            out[wnid] = None
    if problems:
        raise CogError(f"seen list {path} has {len(problems)} bad line(s): " + "; ".join(problems[:5])
                       + (" ..." if len(problems) > 5 else ""))
    if not out:
        raise CogError(f"seen list {path} holds no wnid")
    return SeenSet(str(path), tuple(out), f"file {path.resolve()}")


def vocabulary_seen_set(path: str | Path, min_count: int | None = None,
                        senses: str = "all") -> tuple[SeenSet, VocabularyMatch]:
    """The seen set of a vocabulary file (MetaCLIP's entry counts, their entries counted ``min_count`` times or more,
    default 1; or a lemma list) and how its entries matched WordNet (ambiguous, unmatched, outside ImageNet-21K)."""
    path = Path(path)
    kind, entries = read_vocabulary(path, min_count)
    match = match_vocabulary(entries, known_wnids(), senses)
    match.settings = {"file": str(path.resolve()), "format": kind, "entries": len(entries),
                      "min_count": (1 if min_count is None else min_count) if kind == "counts" else None}
    if not match.wnids:
        counted = f" counted {min_count} times or more" if kind == "counts" and min_count is not None else ""
        raise CogError(f"vocabulary {path}: none of its {len(entries)} entries{counted} names an ImageNet-21K or IN-1K "
                       f"synset ({match.summary()})")
    source = f"{describe(path, kind, entries, min_count)}; senses {senses}: {match.summary()}"
    return SeenSet(str(path), tuple(match.wnids), source), match


def resolve_seen(spec: str | SeenSet | None) -> SeenSet:
    """``None`` (IN-1K), a :class:`SeenSet`, a named set, a file of wnids or a vocabulary file (its default
    threshold and senses: :func:`vocabulary_seen_set`)."""
    if spec is None:
        return named_seen_set(DEFAULT_SEEN)
    if isinstance(spec, SeenSet):
        return spec
    if spec.lower().replace("_", "-") in NAMED:
        return named_seen_set(spec)
    if Path(spec).is_file():
        if vocabulary_kind(spec) != "wnids":
            return vocabulary_seen_set(spec)[0]
        return read_seen_file(spec)
    raise CogError(f"seen set {spec!r} is neither a named set ({', '.join(NAMED)}) nor a file (of wnids, MetaCLIP's "
                   "entry counts or lemmas)")


def overlap(seen: SeenSet, levels: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Per level, its concepts that are in the seen set (sorted)."""
    held = set(seen.wnids)
    return {lv: sorted(w for w in wnids if w in held) for lv, wnids in levels.items()}


def overlap_warning(seen: SeenSet, who: str, levels: Mapping[str, Sequence[str]]) -> str | None:
    """The warning for a seen set that covers level concepts (None when it covers none)."""
    shared = overlap(seen, levels)
    n = sum(map(len, shared.values()))
    if not n:
        return None
    total = sum(len(v) for v in levels.values())
    first = next(w for v in shared.values() for w in v)
    per_level = ", ".join(f"{lv} {len(shared[lv])}/{len(levels[lv])}" for lv in levels)
    return (f"{who} pretraining covered {seen.describe()}, which holds {n} of the {total} concepts of the levels "
            f"evaluated ({per_level}; e.g. {first} {resources.concept_name(first)!r}): for this model they are seen "
            f"concepts, not a concept generalization test; build levels relative to its label set with "
            f"`cog-pl levels build --seen {seen.name if seen.name in NAMED else 'FILE'} --benchmark FILE ...` and "
            "run with --benchmark FILE")


def seen_warnings(model: str, seen: str | None, levels: Mapping[str, Sequence[str]],
                  registry_seen: str | None = None) -> list[str]:
    """Warnings for ``model`` evaluated on ``levels``, naming the overlap: from ``seen`` (the user's ``--seen``, who
    knows the checkpoint) or else from ``registry_seen``, the named seen set of the model's registry entry (its spec's
    ``seen``, which the caller looks up: ``cog_pl.pipeline.run_seen_warnings``)."""
    if seen is not None:
        who, s = f"--seen says {model}'s", resolve_seen(seen)
    elif registry_seen is not None:
        who, s = f"the registry entry of {model} says its", named_seen_set(registry_seen)
    else:
        return []
    msg = overlap_warning(s, who, levels)
    return [msg] if msg else []
