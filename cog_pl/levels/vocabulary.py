"""A seen set from a vocabulary: the words a model's pretraining data named, mapped to WordNet noun synsets.

Two file formats (the user supplies the file):

- MetaCLIP's entry counts, ``entry_counts_400m.json`` (read in its ``demo.ipynb`` as ``json.load`` of a JSON object
  from metadata entry to count: the substring matches of each entry in the 1.6B-pair pool from which the 400M set
  was curated). Its entries are WordNet synset names (``ss.name()`` before the first dot, ``_`` as a space, as
  ``build_metadata.py`` makes them), Wikipedia unigrams, bigrams and article titles; an entry counts as seen when its
  count reaches ``min_count``;
- a plain lemma list, one per line (``#`` starts a comment).

The same JSON format holds the ``search_counts/*_search_counts.json`` files of "frequency determines performance"
(concept -> count in a pretraining set, for the class names of a downstream dataset, ``_`` for spaces).

Each entry is matched to the noun synsets that have it as a lemma (WordNet 3.0; case, ``_`` for a space and
repeated spaces ignored; no morphology: ``glasses`` is not ``glass``) that are ImageNet-21K (Fall 2011) or IN-1K
synsets, the only ones the levels' ontology places. An entry naming several of them is *ambiguous*:
``senses="all"`` takes them all (the data named the word, not a sense: the cautious reading for a seen set),
``"first"`` the first in WordNet's sense order. Entries naming no noun synset are *unmatched*, those naming only
synsets outside ImageNet-21K *outside*; all are reported (:class:`VocabularyMatch`).

Sources (line by line: ``docs/reference/sources.md``): facebookresearch/MetaCLIP f47f784
``metaclip/metaclip1/entry_counts_400m.json``, ``metaclip/metaclip1/demo.ipynb``,
``metaclip/metaclip1/build_metadata.py``; bethgelab/frequency_determines_performance 11ef009 ``search_counts/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError
from cog_pl.resources import is_wnid

__all__ = ["SENSES", "VocabularyMatch", "match_vocabulary", "read_vocabulary", "vocabulary_kind"]

SENSES = ("all", "first")


def vocabulary_kind(path: str | Path) -> str:
    """``"counts"`` (a JSON object: MetaCLIP's entry counts), ``"wnids"`` (a seen list: its first entry is a wnid)
    or ``"lemmas"`` (a lemma list)."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as fh:
            head = fh.read(4096)
    except (OSError, UnicodeDecodeError) as err:
        raise CogError(f"cannot read the seen list {path}: {err}") from None
    if head.lstrip().startswith("{"):
        return "counts"
    if head.lstrip().startswith("["):
        raise CogError(f"{path} is a JSON list; a vocabulary with counts is a JSON object (entry -> count, as "
                       "MetaCLIP's entry_counts_400m.json), a lemma list has one lemma a line")
    first = next((line.split("#", 1)[0].strip() for line in head.splitlines() if line.split("#", 1)[0].strip()), "")
    return "wnids" if is_wnid(first.split()[0] if first else "") else "lemmas"


def read_vocabulary(path: str | Path, min_count: int | None = None) -> tuple[str, dict[str, int | None]]:
    """(kind, entries) of a vocabulary file: MetaCLIP's counts (the entries whose count is at least ``min_count``,
    default 1) or a lemma list (counts None; ``min_count`` refused); errors name the file."""
    path = Path(path)
    kind = vocabulary_kind(path)
    if kind == "wnids":
        raise CogError(f"{path} is a list of wnids, not a vocabulary")
    text = path.read_text(encoding="utf-8")
    if kind == "lemmas":
        if min_count is not None:
            raise CogError(f"a count threshold needs a vocabulary with counts; {path} is a lemma list")
        entries: dict[str, int | None] = {}
        for no, line in enumerate(text.splitlines(), start=1):
            lemma = line.split("#", 1)[0].strip()
            if is_wnid(lemma):
                raise CogError(f"{path}:{no}: {lemma} is a wnid in a lemma list (a seen list of wnids starts with one)")
            if lemma:
                entries[lemma] = None
        if not entries:
            raise CogError(f"lemma list {path} holds no lemma")
        return kind, entries
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CogError(f"cannot read the vocabulary {path}: {err}") from None
    bad = next(((k, v) for k, v in data.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0), None)
    if bad is not None:
        raise CogError(f"vocabulary {path}: expected MetaCLIP's entry counts (entry -> count, a whole number >= 0), "
                       f"got {bad[0]!r}: {bad[1]!r}")
    threshold = 1 if min_count is None else min_count
    if threshold < 1:
        raise CogError(f"the count threshold must be at least 1, got {threshold}")
    if not data:
        raise CogError(f"vocabulary {path} holds no entry")
    kept = {k: v for k, v in data.items() if v >= threshold}
    if not kept:  # every entry below the threshold: say so, not "none of its 0 entries" later
        raise CogError(f"vocabulary {path}: none of its {len(data)} entries is counted {threshold} times or more "
                       f"(the highest count is {max(data.values())}); lower the count threshold (--seen-min-count)")
    return kind, kept


@dataclass
class VocabularyMatch:
    """How a vocabulary's entries met WordNet: the wnids of the seen set and the entries reported."""

    wnids: list[str]
    matched: dict[str, tuple[str, ...]]  # entry -> the ImageNet noun synsets it names, in sense order
    unmatched: list[str]  # entries naming no noun synset
    outside: list[str]  # entries naming noun synsets, none of them in ImageNet-21K or IN-1K
    senses: str
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ambiguous(self) -> dict[str, tuple[str, ...]]:
        """The entries naming several ImageNet synsets."""
        return {k: v for k, v in self.matched.items() if len(v) > 1}

    def summary(self) -> str:
        """One line of counts."""
        return (f"{len(self.matched)} entries matched ({len(self.ambiguous)} ambiguous: senses {self.senses}), "
                f"{len(self.unmatched)} unmatched, {len(self.outside)} outside ImageNet-21K -> {len(self.wnids)} "
                "seen synsets")

    def report(self) -> dict[str, Any]:
        """Everything, for a JSON file: the ambiguous entries with their synsets, the unmatched and outside ones."""
        return {**self.settings, "senses": self.senses, "seen_synsets": len(self.wnids),
                "matched": len(self.matched), "ambiguous": {k: list(v) for k, v in self.ambiguous.items()},
                "unmatched": self.unmatched, "outside": self.outside}


def match_vocabulary(entries: Iterable[str], known: set[str], senses: str = "all", wn: Any = None) -> VocabularyMatch:
    """Match ``entries`` to the noun synsets whose lemmas they are, keeping the wnids in ``known`` (``wn``: NLTK's
    WordNet, :func:`cog_pl.wordnet.get_wordnet` when None).

    The lemmas of the ``known`` synsets are read from the package data (ImageNet's lemma lists, NLTK's lemma names
    with ``_`` as a space), WordNet's noun index says whether an entry names any noun synset at all, and WordNet's
    sense order is asked for the ambiguous entries alone: loading every synset an entry names would cost a minute
    for MetaCLIP's 500,000 entries."""
    if senses not in SENSES:
        raise CogError(f"unknown sense rule {senses!r}; choose one of {', '.join(SENSES)}")
    if wn is None:
        from cog_pl.wordnet import get_wordnet

        wn = get_wordnet()
    from cog_pl.resources import concept_name
    from cog_pl.wordnet.ontology import wnid_of

    index: dict[str, list[str]] = {}
    for wnid in sorted(known):
        for lemma in concept_name(wnid).split(", "):
            index.setdefault(lemma.lower(), []).append(wnid)
    nouns = set(wn.all_lemma_names("n"))  # WordNet's noun index: lower case, "_" for a space
    matched: dict[str, tuple[str, ...]] = {}
    unmatched, outside, seen = [], [], {}
    for entry in entries:
        key = " ".join(entry.replace("_", " ").split()).lower()
        wnids = index.get(key, [])
        if len(wnids) > 1:  # WordNet's sense order (wn.synsets also tries base forms: those are left out)
            order = {wnid_of(s): k for k, s in enumerate(wn.synsets(key.replace(" ", "_"), "n"))}
            wnids = sorted(wnids, key=lambda w: order.get(w, len(order)))
        if wnids:
            matched[entry] = tuple(wnids)
            seen.update(dict.fromkeys(wnids if senses == "all" else wnids[:1]))
        elif key.replace(" ", "_") in nouns:
            outside.append(entry)
        else:
            unmatched.append(entry)
    return VocabularyMatch(list(seen), matched, unmatched, outside, senses)


def describe(path: Path, kind: str, entries: Mapping[str, int | None], min_count: int | None) -> str:
    """The source line of a seen set made from a vocabulary."""
    what = (f"MetaCLIP entry counts, {len(entries)} entries with count >= {1 if min_count is None else min_count}"
            if kind == "counts" else f"lemma list, {len(entries)} lemmas")
    return f"vocabulary {path.resolve()} ({what})"
