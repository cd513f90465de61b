"""Shared fixtures: real WordNet 3.0 (installed by scripts/test.sh), the IN-21K ontology, a built level file."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def wn():
    from cog_pl.wordnet import get_wordnet

    return get_wordnet()


@pytest.fixture(scope="session")
def onto(wn):
    from cog_pl.levels.builder import build_ontology

    return build_ontology()


@pytest.fixture(scope="session")
def level_content(onto):
    from cog_pl.levels.builder import build_levels

    return build_levels(onto=onto)
