"""The IN-21K WordNet subgraph and its information content."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cog_pl.resources import in1k_wnids, in21k_wnids
from cog_pl.wordnet.ontology import synset_of, wnid_of


def test_corpus_is_in21k_in1k_and_all_ancestors(onto, wn):
    assert set(in21k_wnids()) | set(in1k_wnids()) <= set(onto.wnids)
    for s in onto.synsets[:2000]:
        for p in s.hypernyms() + s.instance_hypernyms():
            assert wnid_of(p) in onto.index


def test_information_content_follows_the_paper(onto):
    n = len(onto)
    ic = onto.ic
    assert ic[onto.index["n00001740"]] == pytest.approx(0.0)  # entity: p = 1
    tiger_cat = onto.index["n02123159"]  # a leaf: only itself under it
    assert onto.under[tiger_cat] == 1 and ic[tiger_cat] == pytest.approx(math.log(n))
    for i, parents in enumerate(onto.parent_idx[:5000]):
        for p in parents:
            assert onto.under[p] > onto.under[i] or onto.under[p] >= onto.under[i] + 0  # parents hold more
            assert ic[p] <= ic[i]


def test_under_counts_each_concept_once_under_multiple_inheritance(onto):
    quince = onto.index["n07769584"]  # edible_fruit and pome both lead to fruit.n.01
    fruit = onto.index["n13134947"]
    assert fruit in set(onto.ancestors[quince].tolist())
    cat = onto.index["n02121620"]
    under_cat = [i for i, a in enumerate(onto.ancestors) if cat in set(a.tolist())]
    assert onto.under[cat] == len(under_cat)


def test_ancestor_distances_match_nltk(onto):
    rng = np.random.default_rng(0)
    for i in rng.choice(len(onto), 200, replace=False):
        s = onto.synsets[i]
        ref = {wnid_of(k): d for k, d in s._shortest_hypernym_paths(False).items()}
        got = {onto.wnids[a]: int(d) for a, d in zip(onto.ancestors[i], onto.anc_dist[i])}
        assert got == ref
        assert onto.max_depth[i] == s.max_depth() and onto.min_depth[i] == s.min_depth()


def test_instance_hypernyms_are_followed(wn, onto):
    inst = next(s for s in onto.synsets if s.instance_hypernyms())
    i = onto.index[wnid_of(inst)]
    assert onto.index[wnid_of(inst.instance_hypernyms()[0])] in set(onto.ancestors[i].tolist())


def test_bad_wnids_are_named(wn, onto):
    with pytest.raises(ValueError, match="malformed wnid 'n123'"):
        synset_of(wn, "n123")
    with pytest.raises(ValueError, match="unknown wnid n99999999"):
        synset_of(wn, "n99999999")
    with pytest.raises(KeyError, match="n00000000"):
        onto.idx(["n00000000"])
