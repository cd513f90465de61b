"""Build the CoG levels from WordNet and write them as a versioned level file.

Level file format ``cog-pl-levels`` version 1 (JSON, written atomically):

- ``levels``: ``{"L1": [...], ..., "L5": [...]}``, each list sorted by wnid (the label order the evaluation uses);
- ``ranking``: every eligible concept, most similar to IN-1K first;
- ``similarity``: ``{wnid: float}`` for every eligible concept; ``closest_seen``: the IN-1K concept that attains it;
- ``eligibility``: the steps with ``dropped`` and ``remaining`` counts;
- ``settings``: the level protocol values, the discard list and the image-count source;
- ``versions``: the libraries' (:func:`cog_pl.provenance.versions`) and WordNet's; ``created``: UTC time.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cog_pl.io import read_json, write_json
from cog_pl.levels.counts import image_counts
from cog_pl.levels.eligibility import eligible_concepts
from cog_pl.levels.measures import similarity_to_set
from cog_pl.levels.ranking import cut_levels, rank
from cog_pl.protocol import LevelProtocol, as_record
from cog_pl.provenance import provenance
from cog_pl.resources import LEVELS, in1k_wnids, in21k_wnids
from cog_pl.wordnet import get_wordnet
from cog_pl.wordnet.ontology import Ontology

logger = logging.getLogger(__name__)

FORMAT = "cog-pl-levels"
FORMAT_VERSION = 1
DEFAULT = LevelProtocol()


def build_ontology(protocol: LevelProtocol = DEFAULT) -> Ontology:
    """The IN-21K (Fall 2011) WordNet subgraph, with IN-1K added when the protocol says so."""
    concepts = list(in21k_wnids())
    if protocol.corpus_includes_in1k:
        known = set(concepts)
        concepts += [w for w in in1k_wnids() if w not in known]
    return Ontology.build(get_wordnet(), concepts, instance=protocol.instance_hypernyms)


def build_levels(protocol: LevelProtocol = DEFAULT, discard: Iterable[str] = (),
                 in21k_root: str | Path | None = None, allow_missing: bool = False,
                 onto: Ontology | None = None) -> dict[str, Any]:
    """Run the whole construction and return the level file's content."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    onto = onto or build_ontology(protocol)
    timings["ontology_s"] = time.perf_counter() - t0
    in21k = list(in21k_wnids())
    in1k = list(in1k_wnids())
    t = time.perf_counter()
    counts = image_counts(in21k_root, in21k, allow_missing)
    timings["counts_s"] = time.perf_counter() - t
    discard = sorted(set(discard))
    eligible, steps = eligible_concepts(onto, in21k, in1k, counts, discard, protocol.min_images,
                                        protocol.person_root, protocol.leaf_rule)
    for s in steps:
        logger.debug("  %-52s %6d  (-%d)", s.name, s.remaining, s.dropped)
    t = time.perf_counter()
    seen = [w for w in in1k if w in onto.index]
    sim, closest = similarity_to_set(protocol.measure, eligible, seen, onto, protocol.lcs)
    timings["similarity_s"] = time.perf_counter() - t
    similarity = {w: float(v) for w, v in zip(eligible, sim)}
    ranked = rank(similarity)
    levels = cut_levels(ranked, protocol.n_levels, protocol.level_size)
    timings["total_s"] = time.perf_counter() - t0
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "levels": {k: sorted(v) for k, v in levels.items()},
        "ranking": ranked,
        "similarity": similarity,
        "closest_seen": dict(zip(eligible, closest)),
        "eligibility": [dataclasses.asdict(s) for s in steps],
        "settings": {
            "protocol": as_record(protocol),
            "discard": discard,
            "image_counts": str(in21k_root) if in21k_root else "fall11 (ImageNet ReleaseStatus.xml)",
            "ranking_ties": "decreasing similarity, then increasing wnid",
        },
        "timings": {k: round(v, 3) for k, v in timings.items()},
        **provenance(wordnet=get_wordnet().get_version()),
    }


def write_level_file(path: str | Path, content: Mapping[str, Any]) -> None:
    """Write a level file atomically."""
    write_json(path, content)


def load_level_file(path: str | Path) -> dict[str, Any]:
    """Read and validate a level file; errors name the file and what is wrong."""
    path = Path(path)
    data = read_json(path, "level file")
    if not isinstance(data, dict) or not isinstance(data.get("levels"), dict):
        raise ValueError(f"level file {path} has no 'levels' mapping")
    if data.get("format", FORMAT) != FORMAT or int(data.get("version", 1)) > FORMAT_VERSION:
        raise ValueError(f"level file {path} is {data.get('format')} v{data.get('version')}; "
                         f"this cog_pl reads {FORMAT} up to v{FORMAT_VERSION}")
    missing = [k for k in LEVELS if k not in data["levels"]]
    if missing:
        raise ValueError(f"level file {path} lacks level(s) {', '.join(missing)}")
    return data

