"""Ranking by similarity to IN-1K and cutting the ranked list into levels (paper Sec. 3.3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cog_pl.errors import CogError
from cog_pl.resources import LEVELS


def rank(similarity: Mapping[str, float]) -> list[str]:
    """Concepts by decreasing similarity; ties (equal floats) by increasing wnid, so the order is total."""
    return sorted(similarity, key=lambda w: (-similarity[w], w))


def block_starts(n_ranked: int, n_levels: int = 5, size: int = 1000) -> list[int]:
    """Start ranks of ``n_levels`` blocks of ``size`` spread over the whole list with even gaps.

    The first block starts at rank 0 and the last ends at the last rank; the ``n_ranked - n_levels * size`` left-over
    concepts are split into ``n_levels - 1`` gaps whose sizes differ by at most one (larger gaps first).
    """
    spare = n_ranked - n_levels * size
    if spare < 0:
        raise CogError(f"{n_ranked} ranked concepts cannot fill {n_levels} levels of {size}")
    if n_levels == 1:
        return [0]
    gaps = [spare // (n_levels - 1) + (1 if k < spare % (n_levels - 1) else 0) for k in range(n_levels - 1)]
    starts = [0]
    for gap in gaps:
        starts.append(starts[-1] + size + gap)
    return starts


def cut_levels(ranked: Sequence[str], n_levels: int = 5, size: int = 1000) -> dict[str, list[str]]:
    """Levels ``L1..Ln`` as ranked blocks (L1 the most similar); each list keeps rank order."""
    names = LEVELS if n_levels == len(LEVELS) else tuple(f"L{k + 1}" for k in range(n_levels))
    return {name: list(ranked[s:s + size]) for name, s in zip(names, block_starts(len(ranked), n_levels, size))}


def cut_blocks(ranked: Sequence[str], n_levels: int = 5) -> dict[str, list[str]]:
    """Consecutive blocks with no gaps (used to compare orderings of the same 5000 concepts)."""
    size = len(ranked) // n_levels
    return cut_levels(ranked[: size * n_levels], n_levels, size)
