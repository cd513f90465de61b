"""Which real CoG concepts the demo's miniature benchmark uses: a seeded sample of each level and of IN-1K.

Each sampled level concept keeps the IN-1K concept it is most similar to (Lin, as the level builder ranks them),
so that its similarity to the miniature's seen set equals its similarity to the whole of IN-1K, as in the real
benchmark: the seen sample starts with these closest concepts (L1's first) and is filled up at random.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cog_pl import resources
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

    def mean_similarity(self) -> dict[str, dict[str, float]]:
        """Per level, the mean similarity to all of IN-1K and to the sampled seen concepts."""
        return {lv: {"in1k": float(np.mean([self.similarity_full[w] for w in ws])),
                     "seen": float(np.mean([self.similarity_seen[w] for w in ws]))}
                for lv, ws in self.levels.items()}


def sample_concepts(onto: Ontology, n_seen: int, n_per_level: int, seed: int,
                    protocol: LevelProtocol | None = None) -> DemoConcepts:
    """A deterministic sample of ``n_per_level`` concepts of each official level and ``n_seen`` IN-1K concepts."""
    protocol = protocol or LevelProtocol()
    rng = np.random.default_rng([seed, 0xC06])
    official = resources.official_levels()
    in1k = [w for w in resources.in1k_wnids() if w in onto.index]
    if not 1 <= n_per_level <= min(len(v) for v in official.values()) or not 2 <= n_seen <= len(in1k):
        raise ValueError(f"n_per_level={n_per_level} and n_seen={n_seen} must fit the official levels and IN-1K")
    levels = {lv: tuple(sorted(rng.choice(sorted(official[lv]), n_per_level, replace=False).tolist()))
              for lv in resources.LEVELS}
    flat = [w for lv in resources.LEVELS for w in levels[lv]]
    sim, arg = similarity_to_set(onto, flat, in1k, protocol.measure, protocol.lcs)
    seen: list[str] = []
    for a in arg:  # level order, L1 first: the closest seen concepts of the nearest levels win a place first
        if in1k[a] not in seen and len(seen) < n_seen:
            seen.append(in1k[a])
    rest = sorted(set(in1k) - set(seen))
    seen += rng.choice(rest, n_seen - len(seen), replace=False).tolist()
    order = {w: i for i, w in enumerate(resources.in1k_wnids())}
    seen.sort(key=order.__getitem__)
    sim_seen, _ = similarity_to_set(onto, flat, seen, protocol.measure, protocol.lcs)
    return DemoConcepts(tuple(seen), levels, dict(zip(flat, map(float, sim))), dict(zip(flat, map(float, sim_seen))))
