"""Build the CoG levels from WordNet and write them as a versioned level file.

Level file format ``cog-pl-levels`` version 1 (JSON, written atomically):

- ``levels``: ``{"L1": [...], ..., "L5": [...]}``, each list sorted by wnid (the label order the evaluation uses);
- ``ranking``: every eligible concept, most similar to the seen set first;
- ``similarity``: ``{wnid: float}`` for every eligible concept, its largest similarity to a seen concept;
  ``closest_seen``: the seen concept that attains it;
- ``eligibility``: the steps with ``dropped`` and ``remaining`` counts;
- ``settings``: the level protocol values, the discard list, the image-count source and the seen set (``seen``:
  name, source, count, sha256 and wnids; IN-1K by default, see :mod:`cog_pl.levels.seen`);
- ``versions``: the libraries' (:func:`cog_pl.provenance.versions`) and WordNet's; ``created``: UTC time.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError
from cog_pl.io import read_json, write_json
from cog_pl.levels.counts import image_counts
from cog_pl.levels.eligibility import Step, eligible_concepts
from cog_pl.levels.measures import similarity_to_set
from cog_pl.levels.ontology import build_ontology  # below builder and measures; importable here
from cog_pl.levels.ranking import cut_levels, rank
from cog_pl.levels.seen import SeenSet, resolve_seen
from cog_pl.protocol import LevelProtocol, as_record
from cog_pl.provenance import provenance
from cog_pl.resources import LEVELS, fall11_image_counts, in1k_wnids, in21k_wnids, is_wnid
from cog_pl.wordnet import get_wordnet
from cog_pl.wordnet.ontology import Ontology

logger = logging.getLogger(__name__)

FORMAT = "cog-pl-levels"
FORMAT_VERSION = 1
DEFAULT = LevelProtocol()


def build_levels(protocol: LevelProtocol = DEFAULT, discard: Iterable[str] = (),
                 in21k_root: str | Path | None = None, allow_missing: bool = False,
                 onto: Ontology | None = None, seen: SeenSet | str | None = None,
                 fit: bool = False) -> dict[str, Any]:
    """Run the whole construction and return the level file's content.

    ``seen``: the concepts the model has seen (a :class:`~cog_pl.levels.seen.SeenSet`, a named set or a file;
    IN-1K by default): eligibility drops them and their ancestors, similarity is the largest to any of them.
    A pool smaller than ``n_levels * level_size`` is refused naming the largest level size that fits, or with
    ``fit`` cut into levels of that size (recorded in ``settings.protocol.level_size``).
    """
    seen = resolve_seen(seen)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    onto = onto or build_ontology(protocol)
    timings["ontology_s"] = time.perf_counter() - t0
    in21k = list(in21k_wnids())
    t = time.perf_counter()
    counts = image_counts(in21k_root, in21k, allow_missing)
    timings["counts_s"] = time.perf_counter() - t
    discard = sorted(set(discard))
    eligible, steps = eligible_concepts(onto, in21k, seen.wnids, counts, discard, protocol.min_images,
                                        protocol.person_root, protocol.leaf_rule,
                                        "IN-1K" if set(seen.wnids) == set(in1k_wnids()) else "seen")
    for s in steps:
        logger.debug("  %-52s %6d  (-%d)", s.name, s.remaining, s.dropped)
    protocol = _fitted(protocol, steps, seen, fit)
    t = time.perf_counter()
    held = [w for w in seen.wnids if w in onto.index]
    if not held:
        raise CogError(f"none of the seen set {seen.describe()} is in the IN-21K ontology")
    sim, closest = similarity_to_set(protocol.measure, eligible, held, onto, protocol.lcs)
    timings["similarity_s"] = time.perf_counter() - t
    similarity = {w: float(v) for w, v in zip(eligible, sim)}
    ranked = rank(similarity)
    levels = cut_levels(ranked, protocol.n_levels, protocol.level_size)
    timings["total_s"] = time.perf_counter() - t0
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "levels": {k: sorted(v) for k, v in levels.items()},
        "ranking": ranked,
        "similarity": similarity,
        "closest_seen": dict(zip(eligible, closest)),
        "eligibility": [dataclasses.asdict(s) for s in steps],
        "settings": {
            "protocol": as_record(protocol),
            "discard": discard,
            "image_counts": str(in21k_root) if in21k_root else "fall11 (ImageNet ReleaseStatus.xml)",
            "ranking_ties": "decreasing similarity, then increasing wnid",
            "seen": seen.record(),
        },
        "timings": {k: round(v, 3) for k, v in timings.items()},
        **provenance(wordnet=get_wordnet().get_version()),
    }


def _fitted(protocol: LevelProtocol, steps: list[Step], seen: SeenSet, fit: bool) -> LevelProtocol:
    """The protocol, its level size cut to ``pool // n_levels`` with ``fit``; a pool it cannot fill is refused
    with the eligibility counts."""
    n, size, pool = protocol.n_levels, protocol.level_size, steps[-1].remaining
    if pool >= n * size:
        return protocol
    largest = pool // n
    counts = " -> ".join(f"{s.name} {s.remaining}" for s in steps)
    if largest < 1:
        raise CogError(f"only {pool} concept(s) are eligible relative to the seen set {seen.describe()}, too few "
                       f"for {n} levels (eligibility: {counts}); lower --min-images to admit smaller concepts")
    if not fit:
        raise CogError(f"the {pool} concepts eligible relative to the seen set {seen.describe()} cannot fill {n} "
                       f"levels of {size}; use a level size of at most {largest} (--level-size {largest}, "
                       "or --level-size auto)")
    logger.info("%d eligible concepts: %d levels of %d (not %d)", pool, n, largest, size)
    return dataclasses.replace(protocol, level_size=largest)


def write_level_file(path: str | Path, content: Mapping[str, Any]) -> None:
    """Write a level file atomically."""
    write_json(path, content)


def load_level_file(path: str | Path) -> dict[str, Any]:
    """Read and validate a level file; errors name the file and what is wrong (the level, the wnid).

    A file without ``format`` and ``version`` is read as version 1 (hand-made files); given, they must be this
    format and an integer version this cog_pl knows. ``levels`` maps exactly L1..L5 to non-empty lists of IN-21K
    wnids (:func:`check_levels`).
    """
    path = Path(path)
    data = read_json(path, "level file")
    if not isinstance(data, dict):
        raise CogError(f"level file {path} holds a JSON {type(data).__name__}, not an object with 'levels'")
    version = data.get("version", 1)
    if data.get("format", FORMAT) != FORMAT or type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        raise CogError(f"level file {path} is {data.get('format')!r} version {version!r}; "
                       f"this cog_pl reads {FORMAT} up to v{FORMAT_VERSION}")
    if not isinstance(data.get("levels"), dict):
        raise CogError(f"level file {path} has no 'levels' mapping (L1..L5 to lists of wnids)")
    check_levels(data["levels"], f"level file {path}")
    return data


def check_levels(levels: Mapping[str, Any], where: str) -> None:
    """``levels`` maps L1..L5, and nothing else, to non-empty lists of distinct IN-21K (Fall 2011) wnids, each in one
    level; errors start with ``where`` and name the level and the wnid."""
    missing = [k for k in LEVELS if k not in levels]
    if missing:
        raise CogError(f"{where} lacks level(s) {', '.join(missing)}")
    unknown = [k for k in levels if k not in LEVELS]
    if unknown:
        raise CogError(f"{where} has unknown level(s) {', '.join(map(repr, unknown))}; expected {', '.join(LEVELS)}")
    known = fall11_image_counts()
    seen: dict[str, str] = {}
    for level in LEVELS:
        wnids = levels[level]
        if not isinstance(wnids, list) or not wnids:
            raise CogError(f"{where}: level {level} is {_short(wnids)}, not a non-empty list of wnids")
        for w in wnids:
            if not isinstance(w, str) or not is_wnid(w):
                raise CogError(f"{where}: level {level} holds {_short(w)}, not a wnid such as n02123159")
            if w not in known:
                raise CogError(f"{where}: level {level} holds {w}, which is not an ImageNet-21K (Fall 2011) synset")
            if w in seen:
                twice = "twice" if seen[w] == level else f"and in {seen[w]}"
                raise CogError(f"{where}: {w} is in level {level} {twice}; a concept belongs to one level")
            seen[w] = level


def _short(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."

