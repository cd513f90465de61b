"""The probe methods compared: what selecting on test would have added to each, and each one's gain over the linear
probe against concept similarity, from result rows and the test predictions stored beside them.

- **Selection optimism** (:func:`optimism_markdown`): a tuned row records what selecting on test would have
  reported (``oracle_test_top1``: the best trial's, head's or k's test top-1) beside the held-out-selected one
  (:func:`cog_pl.report.tables.selection_gap`); per model, method and level, the mean gap over seeds, so a reader
  can set this benchmark's figures beside a suite's that selects on the data it reports. Rows made before rows
  recorded it show ``n/a``.
- **Gain against similarity** (:func:`probe_gains`): for every probe method with stored predictions beside the
  linear probe's (an attentive probe, an MLP, the k-NN), its per-level paired difference to the linear probe of the
  same weights, whatever the feature definition and label (:func:`partners`: the weights' digest,
  :func:`cog_pl.results.weights.weights_key`, and the test split; :func:`cog_pl.analysis.paired.paired_difference`:
  the same test images and seeds) and the concept-level
  curve: each level concept's top-1 difference against its similarity to the seen concepts, binned with bootstrap
  bands, and its slope (:mod:`cog_pl.analysis.concepts`). Rendered by
  :func:`cog_pl.report.concept_tables.gains_markdown` and :func:`cog_pl.report.plots.plot_gain_curves`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cog_pl.analysis import concepts as ca
from cog_pl.analysis.paired import (
    SEED,
    PairedDifference,
    aligned,
    paired_difference,
    positions,
    seeded_alike,
    split_sha256_of,
)
from cog_pl.errors import CogError
from cog_pl.evaluate.table import is_frozen, sort_methods
from cog_pl.protocol import DOMAINS, LEVEL_OF_DOMAIN
from cog_pl.report.tables import Cell, cells_protocol, method_table, probe_cells, probe_methods, protocol_marks
from cog_pl.results import DEFAULT_METHOD, method_of
from cog_pl.results.predictions import Predictions
from cog_pl.results.weights import weights_key

#: What a table shows where no row of the cell records the oracle (rows made before they did).
NOT_RECORDED = "n/a"


def optimism_value(c: Cell) -> str:
    """A cell's selection optimism: ``+0.84 ± 0.31`` (points, over the seeds recording it, with their n where it is
    not the cell's), or :data:`NOT_RECORDED`."""
    if c.gap is None:
        return NOT_RECORDED
    text = f"{c.gap:+.2f}" + (f" ± {c.gap_std:.2f}" if c.gap_seeds > 1 else "")
    return text + (f" (n = {c.gap_seeds})" if c.gap_seeds != c.seeds or c.gap_seeds < 2 else "")


def optimism_markdown(cells: Sequence[Cell], marks: Mapping[tuple, str] | None = None) -> str:
    """The selection-optimism section: a line per (model, probe method), in the method table's order, the mean gap
    per official domain on all data; empty without probe cells on all data."""
    marks = protocol_marks(cells) if marks is None else marks
    sel = [c for c in probe_cells(cells) if c.shots is None]
    if not sel:
        return ""
    methods = probe_methods(sel)
    lines = ["## Selection optimism: what selecting on test would have added (top-1 points, all data)", "",
             cells_protocol(sel, by_method=True), "",
             "Each tuned row's oracle (the test top-1 of its best trial, head or k: what choosing them on the test "
             "set, as suites that select on the data they report do, would have reported) minus the test top-1 of the "
             "trial, head or k selected on held-out data among the same ones (never negative: the oracle is the best "
             f"of them); mean ± std over seeds. {NOT_RECORDED}: rows that record no oracle or no selected result "
             "(made before rows recorded them, or of a method that tunes nothing).", ""]
    lines += method_table(sel, methods, optimism_value, marks)
    return "\n".join(lines) + "\n"


@dataclass
class ProbeGain:
    """One method's gain over the linear probe (top-1 points, method minus linear), per model: the paired
    difference per official domain, the concept-level curve over similarity and its slope (points per
    :data:`~cog_pl.analysis.concepts.SLOPE_UNIT`), and why a (model, domain) has no paired difference. A model is the
    method's label; ``against`` names, per (model, domain), the label of the linear probe it is set against (the same
    weights, :func:`partners`), which is the model itself, or ``<label> (against <linear label>)`` where several
    labels of the same weights have linear probes."""

    method: str
    paired: dict[tuple[str, str], PairedDifference] = field(default_factory=dict)
    unpaired: dict[tuple[str, str], str] = field(default_factory=dict)
    curves: dict[str, ca.Curve] = field(default_factory=dict)
    slopes: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    concepts: dict[str, int] = field(default_factory=dict)  # per model: the level concepts on its curve
    against: dict[tuple[str, str], str] = field(default_factory=dict)  # (model, domain): the linear probe's label


#: Per (model, method, domain) of all-data rows: what its weights are (:func:`cog_pl.results.weights.weights_key`) and
#: the digest of the test split it was made on (None where it records none).
Made = dict[tuple[str, str, str], tuple[tuple[str, str], str | None]]


def made_of(rows: Iterable[Mapping[str, Any]]) -> Made:
    """:data:`Made` of the all-data rows on the official domains of ``rows``."""
    out: Made = {}
    for r in rows:
        if r.get("shots") is None and r["domain"] in DOMAINS:
            out.setdefault((r["model"], method_of(dict(r)), r["domain"]), (weights_key(dict(r)), split_sha256_of(r)))
    return out


def partners(model: str, method: str, domain: str, linear: Iterable[str], made: Made) -> list[str]:
    """The labels among ``linear`` (those with linear-probe predictions on ``domain``) whose linear probe
    ``model``'s ``method`` is set against: of the same weights (:func:`cog_pl.results.weights.weights_key`, whatever
    the feature definition: a token store's label and its vector store's share them) tested on the same split where
    both record it; ``model`` alone where it is one of them. A label missing from ``made`` (no row given) is of its own
    weights."""
    def key(label: str, meth: str) -> tuple[tuple[str, str], str | None]:
        return made.get((label, meth, domain), (("label", label), None))

    (weights, split) = key(model, method)
    found = [lab for lab in sorted(linear) if key(lab, DEFAULT_METHOD)[0] == weights
             and (split is None or key(lab, DEFAULT_METHOD)[1] in (None, split))]
    return [model] if model in found else found


def _no_partner(model: str, method: str, domain: str, made: Made) -> str:
    kind, value = made.get((model, method, domain), (("label", model), None))[0]
    if kind == "sha256":
        return f"no linear-probe predictions of the same weights (sha256 {value[:12]}) on this test split"
    return "no linear-probe predictions of this label (its rows record no weights digest to pair other labels by)"


def concept_differences(label: np.ndarray, correct_a: np.ndarray, correct_b: np.ndarray,
                        classes: Sequence[str] | None) -> tuple[tuple[str, ...], np.ndarray]:
    """Each concept's top-1 of A minus B (points), pooled over the seeds, from ``(seeds, images)`` correctness
    arrays of the same images (``label``: theirs; :func:`~cog_pl.analysis.paired.aligned`). Returns the concepts
    (``classes``, or ``class <i>``) and the differences (NaN: a concept without test images)."""
    num = len(classes) if classes is not None else int(np.max(label, initial=-1)) + 1
    top_a, _ = ca.concept_accuracy(label, correct_a, num)
    top_b, _ = ca.concept_accuracy(label, correct_b, num)
    return tuple(classes) if classes is not None else tuple(f"class {i}" for i in range(num)), top_a - top_b


def probe_gains(stored: Mapping[tuple[str, str, str], Mapping[int, Predictions]],
                similarity: Mapping[str, float] | None, seed: int = SEED,
                rows: Iterable[Mapping[str, Any]] = ()) -> dict[str, ProbeGain]:
    """Per probe method other than the linear probe (in the method table's order), its gain over the linear probe of
    the same weights from ``stored`` (``(model, method, domain) -> {seed: predictions}``, all-data rows): the paired
    difference per official domain on the seeds and test images both have (:func:`partners`: by the weights and test
    split ``rows`` record, whatever the labels; without ``rows``, within a label) and, with ``similarity`` (level
    concept -> similarity to the seen concepts), the concept-level curve over the level concepts of L1..L5 pooled, its
    bins cut at the quantiles of the method's concepts (:func:`~cog_pl.analysis.concepts.quantile_edges`); every
    bootstrap drawn from ``seed``."""
    made = made_of(rows)
    methods = sort_methods({meth for _, meth, _ in stored if meth != DEFAULT_METHOD and is_frozen(meth)})
    out = {}
    for method in methods:
        gain = ProbeGain(method)
        points: dict[str, dict[tuple[str, str], tuple[float, float]]] = {}
        for model in sorted({m for m, meth, _ in stored if meth == method}):
            for domain in DOMAINS:
                a = stored.get((model, method, domain))
                if a is None:
                    continue
                linear = [m for m, meth, d in stored if meth == DEFAULT_METHOD and d == domain]
                found = partners(model, method, domain, linear, made)
                if not found:
                    gain.unpaired[model, domain] = _no_partner(model, method, domain, made)
                for other in found:
                    name = model if len(found) == 1 else f"{model} (against {other})"
                    gain.against[name, domain] = other
                    _pair(gain, points, name, domain, a, stored[other, DEFAULT_METHOD, domain], similarity, seed)
        _gain_curves(gain, points, seed)
        if gain.paired or gain.unpaired:
            out[method] = gain
    return out


def _pair(gain: ProbeGain, points: dict[str, dict[tuple[str, str], tuple[float, float]]], name: str, domain: str,
          a: Mapping[int, Predictions], b: Mapping[int, Predictions], similarity: Mapping[str, float] | None,
          seed: int) -> None:
    """The paired difference of ``a`` (the method's predictions) and ``b`` (the linear probe's) on ``domain``, and
    each level concept's difference against its similarity, filed under ``name``."""
    a, b = seeded_alike(a, b)  # zero-shot's one row under each of the linear probe's seeds
    try:
        ca_, cb, seeds = aligned(a, b)
    except CogError as err:
        gain.unpaired[name, domain] = str(err)
        return
    gain.paired[name, domain] = paired_difference(ca_, cb, seeds=seeds, seed=seed)
    if similarity and domain in LEVEL_OF_DOMAIN:
        first = a[seeds[0]]
        images = np.intersect1d(first.image, b[seeds[0]].image)  # those aligned() compares, in order
        classes, diff = concept_differences(first.label[positions(first.image, images)], ca_, cb, first.classes)
        points.setdefault(name, {}).update({(domain, w): (similarity[w], float(d)) for w, d in zip(classes, diff)
                                            if w in similarity and np.isfinite(d)})


def _gain_curves(gain: ProbeGain, points: dict[str, dict[tuple[str, str], tuple[float, float]]], seed: int) -> None:
    """Each model's binned curve and slope of its concepts' differences, the bins cut at the quantiles of every
    model's concepts pooled (each level concept once)."""
    pooled = {k: v[0] for pts in points.values() for k, v in pts.items()}
    if not pooled:
        return
    edges = ca.quantile_edges(list(pooled.values()), ca.default_bins(len(pooled)))
    for i, (model, pts) in enumerate(sorted(points.items())):
        if not pts:
            continue
        sim, val = (np.array(v) for v in zip(*pts.values()))
        gain.curves[model] = ca.binned_curve(sim, val, edges, seed=seed + i)
        slope, low, high = ca.slope_interval(sim, val, seed=seed + i)
        gain.slopes[model] = (slope * ca.SLOPE_UNIT, low * ca.SLOPE_UNIT, high * ca.SLOPE_UNIT)
        gain.concepts[model] = len(pts)
