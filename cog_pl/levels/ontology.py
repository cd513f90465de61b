"""The ontology the levels are built on: the IN-21K (Fall 2011) WordNet subgraph (:func:`build_ontology`).

It sits below both its users, the level builder (:mod:`cog_pl.levels.builder`, which re-exports it) and the WordNet
similarity measures (:mod:`cog_pl.levels.measures`, which build it when no ontology is given)."""

from __future__ import annotations

from cog_pl.protocol import LevelProtocol
from cog_pl.resources import in1k_wnids, in21k_wnids
from cog_pl.wordnet import get_wordnet
from cog_pl.wordnet.ontology import Ontology

DEFAULT = LevelProtocol()


def build_ontology(protocol: LevelProtocol = DEFAULT) -> Ontology:
    """The IN-21K (Fall 2011) WordNet subgraph, with IN-1K added when the protocol says so."""
    concepts = list(in21k_wnids())
    if protocol.corpus_includes_in1k:
        known = set(concepts)
        concepts += [w for w in in1k_wnids() if w not in known]
    return Ontology.build(get_wordnet(), concepts, instance=protocol.instance_hypernyms)
