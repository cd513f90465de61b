"""Ranking and the level cut (pure functions)."""

from __future__ import annotations

import itertools

import pytest

from cog_pl.levels.ranking import block_starts, cut_blocks, cut_levels, rank


def test_rank_is_by_decreasing_similarity_then_wnid():
    assert rank({"n3": 0.5, "n1": 0.9, "n2": 0.5, "n0": 0.1}) == ["n1", "n2", "n3", "n0"]


def test_blocks_span_the_whole_list_with_even_gaps():
    starts = block_starts(5146)
    assert starts[0] == 0 and starts[-1] + 1000 == 5146
    gaps = [b - a - 1000 for a, b in itertools.pairwise(starts)]
    assert sum(gaps) == 146 and max(gaps) - min(gaps) <= 1
    assert block_starts(5000) == [0, 1000, 2000, 3000, 4000]


def test_cut_levels_are_disjoint_consecutive_blocks():
    ranked = [f"n{i:08d}" for i in range(5146)]
    levels = cut_levels(ranked)
    assert list(levels) == ["L1", "L2", "L3", "L4", "L5"]
    assert all(len(v) == 1000 for v in levels.values())
    assert levels["L1"][0] == ranked[0] and levels["L5"][-1] == ranked[-1]
    assert len(set().union(*map(set, levels.values()))) == 5000
    assert cut_blocks(ranked[:5000])["L2"] == ranked[1000:2000]


def test_too_few_concepts_is_an_error():
    with pytest.raises(ValueError, match="4999 ranked concepts cannot fill 5 levels of 1000"):
        block_starts(4999)
