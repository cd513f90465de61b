"""Which real concepts the demo's miniature benchmark uses: a seeded sample of IN-1K as the seen set, and five levels
built relative to it by the level builder (``cog-pl levels build --seen``), not by code of the demo's own.

The seen set is ``n_seen`` IN-1K concepts drawn with the seed; the levels are the eligible concepts (unseen, not an
ancestor of a seen concept, outside the person subtree, with at least 782 Fall 2011 images, leaves) ranked by Lin
similarity to the closest seen concept and cut into five levels of 1000 spread over the ranking, as the paper cuts
them (:func:`cog_pl.levels.builder.build_levels`, smaller levels where the pool cannot fill five of 1000); the
miniature keeps a seeded sample of ``n_per_level`` concepts of each, as a small benchmark samples the real one.
Unseen IN-1K concepts are eligible: the demo's backbone never sees them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from cog_pl import resources
from cog_pl.errors import CogError
from cog_pl.levels.seen import SeenSet
from cog_pl.protocol import LevelProtocol
from cog_pl.wordnet.ontology import Ontology
from cog_pl.wordnet.similarity import similarity_to_set


@dataclass(frozen=True)
class DemoConcepts:
    """The sampled concepts: seen (IN-1K label order) and per level (sorted), with each one's Lin similarity."""

    in1k: tuple[str, ...]
    levels: dict[str, tuple[str, ...]]
    similarity_full: dict[str, float]  # level concept -> max Lin similarity to all of IN-1K
    similarity_seen: dict[str, float]  # level concept -> max Lin similarity to the sampled seen concepts
    content: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)  # the level file

    def mean_similarity(self) -> dict[str, dict[str, float]]:
        """Per level, the mean similarity to all of IN-1K and to the sampled seen concepts."""
        return {lv: {"in1k": float(np.mean([self.similarity_full[w] for w in ws])),
                     "seen": float(np.mean([self.similarity_seen[w] for w in ws]))}
                for lv, ws in self.levels.items()}


def demo_seen_set(onto: Ontology, n_seen: int, seed: int) -> SeenSet:
    """``n_seen`` IN-1K concepts drawn with ``seed`` (IN-1K label order)."""
    in1k = [w for w in resources.in1k_wnids() if w in onto.index]
    if not 2 <= n_seen <= len(in1k):
        raise CogError(f"n_seen={n_seen} must be between 2 and the {len(in1k)} IN-1K concepts")
    rng = np.random.default_rng([seed, 0xC06])
    picked = set(rng.choice(len(in1k), n_seen, replace=False).tolist())
    return SeenSet(f"demo-seed{seed}", tuple(w for k, w in enumerate(in1k) if k in picked),
                   f"{n_seen} IN-1K concepts drawn with numpy default_rng([{seed}, 0xC06]) (cog_pl.demo.concepts)")


def sample_concepts(onto: Ontology, n_seen: int, n_per_level: int, seed: int,
                    protocol: LevelProtocol | None = None) -> DemoConcepts:
    """A deterministic seen sample of ``n_seen`` IN-1K concepts and ``n_per_level`` concepts of each of the five
    levels the level builder builds relative to it."""
    from cog_pl.levels.builder import build_levels

    protocol = protocol or LevelProtocol()
    if n_per_level < 1:
        raise CogError(f"n_per_level={n_per_level} must be at least 1")
    seen = demo_seen_set(onto, n_seen, seed)
    content = build_levels(protocol, onto=onto, seen=seen, fit=True)
    size = len(content["levels"]["L1"])
    if n_per_level > size:
        raise CogError(f"n_per_level={n_per_level} exceeds the {size} concepts per level built relative to the "
                       f"{n_seen} seen concepts")
    rng = np.random.default_rng([seed, 0xC06, 1])
    levels = {lv: tuple(sorted(rng.choice(content["levels"][lv], n_per_level, replace=False).tolist()))
              for lv in resources.LEVELS}
    flat = [w for lv in resources.LEVELS for w in levels[lv]]
    in1k = [w for w in resources.in1k_wnids() if w in onto.index]
    sim_full, _ = similarity_to_set(onto, flat, in1k, protocol.measure, protocol.lcs)
    return DemoConcepts(seen.wnids, levels, dict(zip(flat, map(float, sim_full))),
                        {w: content["similarity"][w] for w in flat}, content)
