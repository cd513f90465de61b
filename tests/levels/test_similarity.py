"""Bulk similarity equals NLTK's own functions, pair by pair, on real WordNet."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cog_pl.resources import in1k_wnids
from cog_pl.wordnet.ontology import synset_of
from cog_pl.wordnet.similarity import pair, pairwise, similarity_to_set


@pytest.fixture(scope="module")
def sample(onto):
    rng = random.Random(7)
    rows = rng.sample(onto.wnids, 30) + ["n07769584", "n03732114", "n02123159"]
    cols = rng.sample(list(in1k_wnids()), 30) + ["n02123159", "n07742313", "n00001740"]
    return rows, cols


def _ic(onto, s):
    return float(onto.ic[onto.index[f"n{s.offset():08d}"]])


REFERENCES = {
    ("lin", "max-ic"): lambda o, a, b, ic: a.lin_similarity(b, ic),
    ("lin", "deepest"): lambda o, a, b, ic: 2 * _ic(o, a.lowest_common_hypernyms(b)[0]) / (_ic(o, a) + _ic(o, b)),
    ("jcn", "max-ic"): lambda o, a, b, ic: a.jcn_similarity(b, ic),
    ("wup", "deepest"): lambda o, a, b, ic: a.wup_similarity(b),
    ("path", "deepest"): lambda o, a, b, ic: a.path_similarity(b),
}


@pytest.mark.parametrize(("measure", "lcs"), list(REFERENCES))
def test_bulk_equals_nltk_pair_by_pair(onto, wn, sample, measure, lcs):
    rows, cols = sample
    mat = pairwise(onto, rows, cols, measure, lcs, block=7)  # small blocks exercise the block loop
    ic = onto.nltk_ic()
    ref = np.array([[REFERENCES[measure, lcs](onto, synset_of(wn, a), synset_of(wn, b), ic) for b in cols]
                    for a in rows])
    np.testing.assert_allclose(mat, ref, rtol=1e-12, atol=1e-12)


def test_deepest_subsumer_differs_from_max_ic_under_multiple_inheritance(onto):
    # quince.n.02 reaches fruit both as edible fruit and as a pome: the deepest subsumer with apple is not the
    # max-IC one, which is what moves it from L2 to its official L3.
    deepest = pair(onto, "n07769584", "n07742313", "lin", "deepest")
    max_ic = pair(onto, "n07769584", "n07742313", "lin", "max-ic")
    assert deepest < max_ic


def test_similarity_to_set_is_max_over_seen(onto, sample):
    rows, cols = sample
    best, arg = similarity_to_set(onto, rows, cols)
    full = pairwise(onto, rows, cols)
    np.testing.assert_array_equal(best, full.max(1))
    np.testing.assert_array_equal(full[np.arange(len(rows)), arg], best)


def test_unknown_measure_is_named(onto):
    with pytest.raises(ValueError, match="unknown similarity measure 'cosine'"):
        pairwise(onto, ["n02123159"], ["n02123045"], "cosine")
    with pytest.raises(ValueError, match="unknown LCS rule"):
        pairwise(onto, ["n02123159"], ["n02123045"], "lin", "shallowest")
