"""Level variants from other similarities (paper App. D): the same concepts, re-ranked, cut into equal blocks.

Re-ranking the official concepts (instead of building from all eligible ones) keeps the concept set fixed, so a
variant differs from the official levels only in which level each concept falls into. Measures: any registered in
:mod:`cog_pl.levels.measures` (the WordNet ones and ``text``, sentence embeddings of names and glosses).

:func:`rerank` assigns any set of concepts to five variant levels: ranked by decreasing similarity to IN-1K and cut
into five equal consecutive blocks. On the official 5000 (:func:`rerank_official`) the blocks hold 1000 concepts; on
a subset (the demo's 75 concepts, the concepts a model has features for) they hold a fifth of the subset each, so a
subset's variant levels are *the re-ranking of that subset*, not the official variant restricted to it.
:func:`restrict` does the same from an existing level file's ranking.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.errors import CogError
from cog_pl.io import file_sha256
from cog_pl.levels.measures import get_measure, similarity_to_set
from cog_pl.levels.ranking import cut_blocks, rank
from cog_pl.protocol import LevelProtocol, as_record
from cog_pl.provenance import provenance
from cog_pl.resources import LEVELS, concept_name, in1k_wnids, official_levels

logger = logging.getLogger(__name__)

def official_concepts() -> list[str]:
    return sorted(w for lvl in LEVELS for w in official_levels()[lvl])


def equal_blocks(ranked: Sequence[str], n_levels: int = 5) -> dict[str, list[str]]:
    """``ranked`` cut into ``n_levels`` consecutive blocks of equal size; refuses a count that does not divide."""
    if not ranked or len(ranked) % n_levels:
        raise CogError(f"{len(ranked)} concepts cannot be cut into {n_levels} equal levels")
    return cut_blocks(ranked, n_levels)


def rerank(concepts: Collection[str], measure: str, lcs: str = "deepest", onto=None,
           seen: Sequence[str] | None = None, description: str | None = None) -> dict[str, Any]:
    """A level file whose five levels are ``concepts`` ranked by ``measure`` similarity to ``seen`` (all of IN-1K
    by default) and cut into five equal consecutive blocks (L1 the most similar)."""
    model = get_measure(measure).model  # refuses an unknown measure before any work
    concepts = sorted(set(concepts))
    equal_blocks(concepts)  # refuse before any similarity is computed
    seen = list(in1k_wnids() if seen is None else seen)
    sim, closest = similarity_to_set(measure, concepts, seen, onto, lcs)
    similarity = {w: float(v) for w, v in zip(concepts, sim)}
    ranked = rank(similarity)
    levels = equal_blocks(ranked)
    size = len(concepts) // 5
    protocol = dataclasses.replace(LevelProtocol(), measure=measure, lcs=lcs, level_size=size)
    return {
        "format": "cog-pl-levels", "version": 1,
        "levels": {k: sorted(v) for k, v in levels.items()},
        "ranking": ranked, "similarity": similarity,
        "closest_seen": dict(zip(concepts, closest)),
        "eligibility": [{"name": "concepts given to re-rank", "dropped": 0, "remaining": len(concepts)}],
        "settings": {"protocol": as_record(protocol),
                     "concepts": description or f"{len(concepts)} concepts re-ranked, five blocks of {size}",
                     "seen": f"{len(seen)} IN-1K concepts",
                     "text_model": model,
                     "ranking_ties": "decreasing similarity, then increasing wnid"},
        **provenance(),
    }


def rerank_official(measure: str, lcs: str = "deepest", onto=None) -> dict[str, Any]:
    """A level file whose levels are the official 5000 re-ranked by ``measure`` and cut in blocks of 1000."""
    content = rerank(official_concepts(), measure, lcs, onto, description="official-5000 re-ranked (paper App. D)")
    content["eligibility"][0]["name"] = "official ImageNet-CoG concepts"
    return content


def restrict(content: Mapping[str, Any], concepts: Collection[str]) -> dict[str, Any]:
    """A level file's ranking restricted to ``concepts`` and cut into five equal blocks (a subset's variant levels).

    The ranking is the file's ``ranking`` (or its ``similarity`` ranked); every concept must be in it. The level size
    of ``settings.protocol`` becomes the new block size and the eligibility steps end with the restriction.
    """
    ranking = content.get("ranking") or (rank(content["similarity"]) if content.get("similarity") else None)
    if not ranking:
        raise CogError("the level file has neither a ranking nor similarities to re-rank a subset of concepts by")
    wanted = set(concepts)
    unranked = sorted(wanted - set(ranking))
    if unranked:
        raise CogError(f"{len(unranked)} concept(s) are not in its ranking, e.g. {unranked[0]} "
                       f"({concept_name(unranked[0])})")
    ranked = [w for w in ranking if w in wanted]
    levels = equal_blocks(ranked)

    def keep(key: str) -> dict[str, Any]:
        return {w: v for w, v in content.get(key, {}).items() if w in wanted}

    size = len(ranked) // 5
    settings = dict(content.get("settings", {}))
    settings["concepts"] = (f"{len(ranked)} of the file's concepts, in its ranking order, cut into five blocks of "
                            f"{size} (was: {settings.get('concepts', 'its own levels')})")
    if "protocol" in settings:
        settings["protocol"] = {**settings["protocol"], "level_size": size}
    eligibility = [*content.get("eligibility", []),
                   {"name": "restricted to the concepts given", "dropped": len(ranking) - len(ranked),
                    "remaining": len(ranked)}]
    return {**content, "levels": {k: sorted(v) for k, v in levels.items()}, "ranking": ranked,
            "similarity": keep("similarity"), "closest_seen": keep("closest_seen"), "eligibility": eligibility,
            "settings": settings}


def variant_levels(concepts: Collection[str], measure: str | None = None, level_file: str | os.PathLike | None = None,
                   lcs: str = "deepest", onto=None) -> dict[str, Any]:
    """The variant's level file over ``concepts`` (when regrouping: the concepts the stores hold): a level file's own
    levels when they hold exactly these concepts, else its ranking restricted to them and cut into five equal
    blocks; or ``concepts`` re-ranked by ``measure``."""
    if (measure is None) == (level_file is None):
        raise CogError("give either a similarity measure or a level file")
    if measure is not None:
        return rerank(concepts, measure, lcs, onto, description=(
            f"the {len(concepts)} concepts with features, re-ranked by {measure} similarity to IN-1K and cut into "
            f"five blocks of {len(concepts) // 5}"))
    from cog_pl.levels.builder import load_level_file

    path = Path(level_file)
    content = load_level_file(path)
    in_file = {w for lvl in LEVELS for w in content["levels"][lvl]}
    if in_file != set(concepts):
        try:
            content = restrict(content, concepts)
        except ValueError as err:
            raise CogError(f"level file {path}: {err}") from None
    settings = dict(content.get("settings", {}))
    settings["source_level_file"] = {"path": str(path.resolve()), "sha256": file_sha256(path)}
    return {**content, "settings": settings}


def variant_name(content: dict[str, Any]) -> str:
    """The measure a level file was made with (its ``settings.protocol.measure``)."""
    measure = content.get("settings", {}).get("protocol", {}).get("measure")
    if not measure:
        raise CogError("the level file does not record its measure; name the variant (--name)")
    return measure


def level_moves(content: Mapping[str, Any], reference: Mapping[str, str] | None = None) -> np.ndarray:
    """5 x 5 matrix: row = reference level (the official one by default), column = the variant's level."""
    if reference is None:
        reference = {w: lvl for lvl in LEVELS for w in official_levels()[lvl]}
    out = np.zeros((5, 5), dtype=np.int64)
    for j, lvl in enumerate(LEVELS):
        for w in content["levels"][lvl]:
            if w in reference:
                out[LEVELS.index(reference[w]), j] += 1
    return out
