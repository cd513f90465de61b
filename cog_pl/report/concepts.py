"""The report's concept-level results, computed from result rows and the test predictions stored beside them.

:func:`concept_report` reads the predictions of every all-data row on the official domains (rows made before
predictions were kept are listed as lacking them; predictions that do not match their row are refused) and runs the
analyses of :mod:`cog_pl.analysis`: per-concept top-1 of every (model, method, domain); for the linear probes, top-1
against each level concept's similarity to the seen concepts (a binned curve with bands, absolute and relative to the
baseline, and its slope), the concepts most and least right per level, each model's paired difference to the
baseline per domain, the most frequent confusions per level, where the label-noise check's predictions are
stored, the seen concept each unseen concept is most often taken for, and each other probe method's gain over the
linear probe (:mod:`cog_pl.report.probes`). Rendering: :mod:`cog_pl.report.concept_tables`.

Similarity comes from a level file or a benchmark file (``levels``: its ``similarity`` and ``closest_seen``, any
measure), else from WordNet: Lin similarity to the benchmark's seen concepts (IN-1K by default), the measure of the
official levels. ``cog-pl run`` records the source its rows were made with in the results store
(:func:`record_similarity_source`), which a report given no ``levels`` uses (:func:`recorded_similarity`).
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.analysis import concepts as ca
from cog_pl.analysis.confusions import Confusion, most_taken_for, top_confusions
from cog_pl.analysis.paired import SEED, PairedDifference, aligned, check_same_test_split, paired_difference
from cog_pl.errors import CogError
from cog_pl.io import read_json
from cog_pl.protocol import DOMAINS, LEVEL_OF_DOMAIN
from cog_pl.report.probes import ProbeGain, probe_gains
from cog_pl.report.tables import mean_std
from cog_pl.report.variants import Stat
from cog_pl.resources import in1k_wnids, is_wnid
from cog_pl.results import DEFAULT_METHOD, NO_SEED, is_seedless, method_of, read_info, write_info
from cog_pl.results.predictions import (
    Predictions,
    PredictionsError,
    missing_reason,
    noise_file,
    read_noise_predictions,
    read_row_predictions,
)

log = logging.getLogger(__name__)
Cell = tuple[str, str, str]  # (model, method, domain)


@dataclass(frozen=True)
class ConceptInfo:
    """Each level concept's similarity to the seen concepts and the seen concept that attains it; ``measure``
    names the similarity, ``source`` where it came from."""

    similarity: dict[str, float]
    closest: dict[str, str]
    measure: str
    source: str


@dataclass
class ConceptReport:
    """Everything the concept sections of a report show (:mod:`cog_pl.report.concept_tables`)."""

    baseline: str | None
    seed: int
    info: ConceptInfo | None = None
    scores: dict[Cell, ca.ConceptScores] = field(default_factory=dict)
    curves: dict[str, ca.Curve] = field(default_factory=dict)
    relative: dict[str, ca.Curve] = field(default_factory=dict)
    slopes: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # points per SLOPE_UNIT
    drops: dict[str, Stat] = field(default_factory=dict)  # L1 - L5, paired by seed, from rows
    paired: dict[tuple[str, str], PairedDifference] = field(default_factory=dict)
    unpaired: dict[tuple[str, str], str] = field(default_factory=dict)  # why a pair has no statistics
    extremes: dict[tuple[str, str], tuple[list, list]] = field(default_factory=dict)  # (model, level)
    confusions: dict[tuple[str, str], list[Confusion]] = field(default_factory=dict)  # (model, domain)
    lin: dict[tuple[str, str], float] = field(default_factory=dict)  # Lin similarity of confused pairs
    noise: dict[tuple[str, str], tuple[list[Confusion | None], tuple[str, ...], tuple[str, ...], int]] = field(
        default_factory=dict)  # (model, domain): each level concept's confusion, level classes, seen classes, seed
    lacking: list[tuple[str, str]] = field(default_factory=list)  # (row, why it has no predictions)
    gains: dict[str, ProbeGain] = field(default_factory=dict)  # per probe method: its gain over the linear probe
    predictions: dict[Cell, dict[int, Predictions]] = field(default_factory=dict)  # stored_predictions' (per seed)

    @property
    def models(self) -> list[str]:
        return sorted({m for m, _, _ in self.scores})


def _name(row: dict[str, Any]) -> str:
    return f"{row['model']}/{method_of(row)}/{row['domain']}/shots={row.get('shots') or 'all'}/seed={row['seed']}"


#: The key a report of several results stores adds to each row it read: the store it was read from, beside which its
#: predictions lie (:mod:`cog_pl.report.runs`); a row without it is of the report's one store.
STORE = "_store"


def row_store(row: dict[str, Any], results: str | Path) -> Path:
    """The results store ``row`` was read from (:data:`STORE`), else ``results``: where its predictions lie."""
    return Path(row.get(STORE) or results)


def stored_predictions(results: str | Path, rows: Iterable[dict[str, Any]]) -> tuple[
        dict[Cell, dict[int, Predictions]], list[tuple[str, str]]]:
    """The predictions of every all-data row on the official domains, per (model, method, domain) and seed (a seedless
    row's, zero-shot's, under :data:`~cog_pl.results.NO_SEED`, once), and the
    rows lacking them with the reason; predictions not matching their row are refused
    (:class:`~cog_pl.results.predictions.PredictionsError`)."""
    found: dict[Cell, dict[int, Predictions]] = defaultdict(dict)
    lacking = []
    for row in rows:
        if row.get("shots") is not None or row["domain"] not in DOMAINS:
            continue
        store = row_store(row, results)
        preds = read_row_predictions(store, row)
        if preds is None:
            lacking.append((_name(row), missing_reason(store, row) or "no predictions"))
        else:
            seed = NO_SEED if is_seedless(row) else int(row["seed"])
            found[row["model"], method_of(row), row["domain"]][seed] = preds
    return dict(found), lacking


@functools.cache
def _ontology():
    from cog_pl.levels.builder import build_ontology

    return build_ontology()


#: The results store's ``info`` key of the similarity source (:func:`similarity_source`) its rows were made with.
SIMILARITY_INFO = "similarity"


def similarity_source(levels: str | Path | None) -> dict[str, Any]:
    """Where each level concept's similarity to the seen concepts comes from, as the results store records it:
    the values of ``levels`` (a level file, or a benchmark file whose meta holds them: ``similarity``, ``closest``,
    ``measure``), else the seen concepts whose WordNet Lin similarity is taken (``seen``: a benchmark file's, None
    for IN-1K). ``file``: the file it was read from (for the record, not compared)."""
    seen, name = None, "the 1000 IN-1K concepts"
    if levels is None:
        return {"file": None, "measure": "lin", "seen": seen, "seen_name": name}
    if read_json(levels, "level or benchmark file").get("format") == "cog-pl-benchmark":
        from cog_pl.benchmark import Benchmark

        bench = Benchmark.load(levels)
        content, meta = {}, bench.meta
        seen, name = list(bench.in1k), f"the {len(bench.in1k)} seen concepts of {Path(levels).name}"
    else:
        from cog_pl.levels.builder import load_level_file

        content = meta = load_level_file(levels)
    sim = meta.get("similarity") or meta.get("lin_similarity_to_seen")
    if not sim:
        return {"file": str(Path(levels).resolve()), "measure": "lin", "seen": seen, "seen_name": name}
    recorded = meta.get("levels") if isinstance(meta.get("levels"), dict) else {}
    measure = (content.get("settings", {}).get("protocol", {}).get("measure")
               or recorded.get("protocol", {}).get("measure")
               or ("lin" if "lin_similarity_to_seen" in meta else "similarity"))
    return {"file": str(Path(levels).resolve()), "measure": measure, "source": Path(levels).name,
            "similarity": {w: float(v) for w, v in sim.items()}, "closest": dict(meta.get("closest_seen") or {})}


def record_similarity_source(results: str | Path, levels: str | Path | None) -> dict[str, Any]:
    """Record in ``results`` the similarity source of ``levels`` (:func:`similarity_source`), which the report of its
    rows then uses; refused in one line when the file already records another (rows made on another benchmark)."""
    want, have = similarity_source(levels), read_info(results, SIMILARITY_INFO)
    if have is None:
        write_info(results, SIMILARITY_INFO, want)
    elif similarity_compared(have) != similarity_compared(want):
        raise CogError(f"results file {results} holds rows whose concept similarity comes from "
                       f"{similarity_where(have)}; this run's from {similarity_where(want)}: give this run another "
                       "--out")
    return want


def similarity_compared(source: dict[str, Any]) -> dict[str, Any]:
    """What two similarity sources must share to be the same (:func:`similarity_source`, less the file's path)."""
    return {k: v for k, v in source.items() if k != "file"}


def similarity_where(source: dict[str, Any]) -> str:
    """A similarity source in words: its file and concept count, or WordNet's Lin similarity to its seen concepts."""
    if source.get("similarity"):
        return f"{source.get('file') or source.get('source')} ({len(source['similarity'])} concepts)"
    return f"WordNet, Lin similarity to {source.get('seen_name')}"


def concept_info_of(source: dict[str, Any], wnids: Sequence[str]) -> ConceptInfo | None:
    """The similarity of ``wnids`` (level concepts) to the seen concepts from a :func:`similarity_source`: its values,
    else Lin similarity from WordNet to its seen concepts; None when no concept is a WordNet synset."""
    if source.get("similarity"):
        return ConceptInfo(dict(source["similarity"]), dict(source.get("closest") or {}), source["measure"],
                           source.get("source") or Path(source["file"]).name)
    from cog_pl.wordnet.similarity import similarity_to_set

    onto = _ontology()
    known = [w for w in dict.fromkeys(wnids) if is_wnid(w) and w in onto.index]
    seen = [w for w in (source.get("seen") or in1k_wnids()) if w in onto.index]
    if not known or not seen:
        return None
    sim, closest = similarity_to_set(onto, known, seen)
    return ConceptInfo({w: float(s) for w, s in zip(known, sim)}, {w: seen[i] for w, i in zip(known, closest)},
                       "lin", f"WordNet, Lin similarity to {source.get('seen_name')}")


def concept_info(levels: str | Path | None, wnids: Sequence[str]) -> ConceptInfo | None:
    """The similarity of ``wnids`` (level concepts) to the seen concepts: from ``levels`` (a level file, or a
    benchmark file whose meta holds them) where it has them, else Lin similarity from WordNet to the benchmark file's
    seen concepts (IN-1K without one); None when no concept is a WordNet synset."""
    return concept_info_of(similarity_source(levels), wnids)


def recorded_similarity(results: str | Path) -> dict[str, Any]:
    """The similarity source ``results`` records (:func:`record_similarity_source`; ``cog-pl run`` does), else
    WordNet's Lin similarity to IN-1K."""
    return read_info(results, SIMILARITY_INFO) or similarity_source(None)


def level_drops(rows: Iterable[dict[str, Any]]) -> dict[str, Stat]:
    """Per model, the linear probe's L1 - L5 top-1 drop on all data, paired by seed (mean ± std over the seeds
    having both levels)."""
    top1: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if r["domain"] in ("cog_l1", "cog_l5") and r.get("shots") is None and method_of(r) == DEFAULT_METHOD:
            top1[r["model"]][r["domain"]][int(r["seed"])] = float(r["test_top1"])
    out = {}
    for model, by in top1.items():
        first, last = by.get("cog_l1", {}), by.get("cog_l5", {})
        paired = [first[s] - last[s] for s in sorted(first.keys() & last.keys())]
        if paired:
            out[model] = Stat(*mean_std(paired), len(paired))
    return out


def _level_points(scores: ca.ConceptScores, info: ConceptInfo) -> dict[tuple[str, str], tuple[float, float]]:
    """``(domain, wnid) -> (similarity, top-1)`` of a level's concepts with a known similarity."""
    return {(scores.domain, w): (info.similarity[w], float(v)) for w, v in zip(scores.classes, scores.top1)
            if w in info.similarity and np.isfinite(v)}


def concept_report(results: str | Path, rows: Sequence[dict[str, Any]], baseline: str | None = None,
                   levels: str | Path | None = None, seed: int = SEED) -> ConceptReport:
    """The concept-level results of ``rows`` (already selected) of ``results``; every bootstrap and permutation
    draws from ``seed``."""
    out = ConceptReport(baseline, seed, drops=level_drops(rows))
    stored, out.lacking = stored_predictions(results, rows)
    out.predictions = stored
    out.scores = {cell: ca.concept_scores(*cell, by_seed) for cell, by_seed in sorted(stored.items())}
    linear = {m: [s for (mm, meth, d), s in out.scores.items() if mm == m and meth == DEFAULT_METHOD
                  and d in LEVEL_OF_DOMAIN] for m in out.models}
    level_wnids = [w for ss in linear.values() for s in ss for w in s.classes]
    if level_wnids:
        source = similarity_source(levels) if levels is not None else recorded_similarity(results)
        out.info = concept_info_of(source, level_wnids)
    if out.info is not None:
        _curves(out, linear)
    for (model, method, domain), s in out.scores.items():
        if method == DEFAULT_METHOD and domain in LEVEL_OF_DOMAIN:
            out.extremes[model, LEVEL_OF_DOMAIN[domain]] = ca.extremes(s.classes, s.top1)
            by_seed = stored[model, method, domain]
            num = len(s.classes)
            out.confusions[model, domain] = top_confusions([p.label for p in by_seed.values()],
                                                           [p.top5[:, 0] for p in by_seed.values()], num)
    if baseline:
        out.paired, out.unpaired = paired_to_baseline(stored, baseline, sorted({r["model"] for r in rows}), seed,
                                                      rows=rows, results=results)
    out.gains = probe_gains(stored, out.info.similarity if out.info is not None else None, seed, rows=rows)
    out.lin = _confusion_similarity(out)
    _noise(out, results, rows)
    return out


def _noise(out: ConceptReport, results: str | Path, rows: Sequence[dict[str, Any]]) -> None:
    """Per model, the label-noise predictions of its IN-1K linear all-data row of the lowest seed that has them."""
    sources = sorted((r for r in rows if r["domain"] == "in1k" and method_of(r) == DEFAULT_METHOD
                      and r.get("shots") is None and isinstance(r.get("predictions"), dict)),
                     key=lambda r: (r["model"], r["seed"]))
    for row in sources:
        if any(m == row["model"] for m, _ in out.noise):
            continue
        for domain in LEVEL_OF_DOMAIN:
            preds = read_noise_predictions(row_store(row, results), row, domain)
            if preds is not None and preds.classes and preds.meta.get("label_classes"):
                labels = tuple(preds.meta["label_classes"])
                shown = out.scores.get((row["model"], DEFAULT_METHOD, domain))
                if shown is not None and tuple(shown.classes) != labels:
                    where = noise_file(row_store(row, results), row, domain)
                    raise PredictionsError(f"label-noise predictions {where} name "
                                           f"{len(labels)} concepts ({', '.join(labels[:2])}, ...) that are not "
                                           f"{domain}'s ({', '.join(shown.classes[:2])}, ...): remove the file")
                taken = most_taken_for([preds.label], [preds.top5[:, 0]], len(labels), len(preds.classes))
                out.noise[row["model"], domain] = (taken, labels, preds.classes, int(row["seed"]))


def _curves(out: ConceptReport, linear: dict[str, list[ca.ConceptScores]]) -> None:
    points = {m: {k: v for s in ss for k, v in _level_points(s, out.info).items()} for m, ss in linear.items()}
    pooled = {k: v[0] for pts in points.values() for k, v in pts.items()}
    if not pooled:
        return
    edges = ca.quantile_edges(list(pooled.values()), ca.default_bins(len(pooled)))
    base = points.get(out.baseline or "", {})
    for i, (model, pts) in enumerate(sorted(points.items())):
        if not pts:
            continue
        sim, val = (np.array(v) for v in zip(*pts.values()))
        out.curves[model] = ca.binned_curve(sim, val, edges, seed=out.seed + i)
        slope, low, high = ca.slope_interval(sim, val, seed=out.seed + i)
        out.slopes[model] = (slope * ca.SLOPE_UNIT, low * ca.SLOPE_UNIT, high * ca.SLOPE_UNIT)
        common = sorted(pts.keys() & base.keys())
        if model != out.baseline and common:
            out.relative[model] = ca.binned_curve([pts[k][0] for k in common],
                                                  [pts[k][1] - base[k][1] for k in common], edges, seed=out.seed + i)


def paired_to_baseline(stored: dict[Cell, dict[int, Predictions]], baseline: str, models: Sequence[str],
                       seed: int = SEED, rows: Iterable[dict[str, Any]] = (), results: str | Path = ""
                       ) -> tuple[dict[tuple[str, str], PairedDifference], dict[tuple[str, str], str]]:
    """Each model's paired difference to ``baseline`` per official domain (linear probes, all data) from
    ``stored`` (:func:`stored_predictions`), and why a (model, domain) has none; a model with no linear probe's
    row nor predictions on any domain (a label of token stores, probed by other methods) is left out. Where ``rows``
    (those of ``results``) record the test split each was made on, a model tested on another split than the
    baseline's is refused (:func:`~cog_pl.analysis.paired.check_same_test_split`)."""
    paired, unpaired = {}, {}
    made = {(r["model"], r["domain"], int(r["seed"])): r for r in rows
            if method_of(r) == DEFAULT_METHOD and r.get("shots") is None}
    linear = {m for m, meth, _ in stored if meth == DEFAULT_METHOD} | {m for m, _, _ in made}
    for model in models:
        if model == baseline or model not in linear:  # a label of no linear probe's predictions (a token store's)
            continue
        for domain in DOMAINS:
            a, b = stored.get((model, DEFAULT_METHOD, domain)), stored.get((baseline, DEFAULT_METHOD, domain))
            if a is None or b is None:
                if a is not None or b is not None:
                    unpaired[model, domain] = "predictions of one model lacking"
                continue
            for s in sorted(a.keys() & b.keys()):
                if (model, domain, s) in made and (baseline, domain, s) in made:
                    check_same_test_split(made[model, domain, s], made[baseline, domain, s], str(results))
            try:
                ca_, cb, seeds = aligned(a, b)
            except ValueError as err:
                unpaired[model, domain] = str(err)
                continue
            paired[model, domain] = paired_difference(ca_, cb, seeds=seeds, seed=seed)
    return paired, unpaired


def _confusion_similarity(out: ConceptReport) -> dict[tuple[str, str], float]:
    """Lin similarity of each confused pair of wnids (WordNet; pairs of non-synsets left out)."""
    pairs = set()
    for (model, domain), confusions in out.confusions.items():
        classes = out.scores[model, DEFAULT_METHOD, domain].classes
        pairs |= {(classes[c.true], classes[c.predicted]) for c in confusions}
    pairs = {p for p in pairs if is_wnid(p[0]) and is_wnid(p[1])}
    if not pairs:
        return {}
    from cog_pl.wordnet.similarity import pairwise

    onto = _ontology()
    pairs = sorted((a, b) for a, b in pairs if a in onto.index and b in onto.index)
    if not pairs:
        return {}
    rows, cols = sorted({a for a, _ in pairs}), sorted({b for _, b in pairs})
    mat = pairwise(onto, rows, cols)  # one pass over the ontology for every pair
    return {(a, b): float(mat[rows.index(a), cols.index(b)]) for a, b in pairs}
