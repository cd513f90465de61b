"""The report's mistake severity per level: how far in WordNet each model's wrong predictions land from the truth.

From the test predictions stored beside the rows (every all-data row of the official domains, the same predictions
the concept sections read: :attr:`cog_pl.report.concepts.ConceptReport.predictions`), no probe run again. Per model,
method and domain: the number of wrong top-1 predictions over the seeds, their mean severity (hypernym steps from the
true concept up to the lowest hypernym it shares with the prediction, :mod:`cog_pl.analysis.severity`) with a
bootstrap interval over test images, and the share of them within the same parent (a direct hypernym in common).
Severity is measured in WordNet 3.0's noun hypernym graph (:func:`cog_pl.wordnet.get_wordnet`), instance hypernyms
included as the level builder includes them (:class:`~cog_pl.protocol.LevelProtocol`); a cell whose classes are not
WordNet synsets has no severity, and the section says so.

Rendered here: the section of ``report.md`` (:func:`severity_markdown`), the columns ``errors``, ``severity`` and
``same_parent_share`` of ``concepts.csv`` (:func:`add_concept_columns`); the figure is
:func:`cog_pl.report.plots.plot_severity`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cog_pl.analysis.concepts import N_BOOT
from cog_pl.analysis.severity import ClassHierarchy, Severity, class_hierarchy, mistake_severity
from cog_pl.errors import CogError
from cog_pl.evaluate.table import method_label, method_sort_key
from cog_pl.protocol import DOMAINS, LevelProtocol
from cog_pl.report.tables import Cell, cells_protocol, domain_key, domain_label
from cog_pl.resources import is_wnid
from cog_pl.results.predictions import Predictions

__all__ = ["SeverityReport", "add_concept_columns", "severity_markdown", "severity_report"]

Key = tuple[str, str, str]  # (model, method, domain)
#: The per-concept columns this module adds to ``concepts.csv``.
CONCEPT_COLUMNS = ("errors", "severity", "same_parent_share")


@dataclass
class SeverityReport:
    """Per (model, method, domain) of all-data predictions: its :class:`~cog_pl.analysis.severity.Severity`, or why it
    has none (``skipped``)."""

    cells: dict[Key, Severity] = field(default_factory=dict)
    classes: dict[Key, tuple[str, ...]] = field(default_factory=dict)  # each cell's classes, in label order
    skipped: dict[Key, str] = field(default_factory=dict)
    seed: int = 0


@functools.lru_cache(maxsize=16)
def _hierarchy(classes: tuple[str, ...]) -> ClassHierarchy:
    """The severities of ``classes`` in the WordNet subgraph of them and their hypernyms (the same steps as in the
    whole IN-21K ontology: a concept's hypernyms are all in its own subgraph)."""
    from cog_pl.wordnet import get_wordnet
    from cog_pl.wordnet.ontology import Ontology

    onto = Ontology.build(get_wordnet(), classes, instance=LevelProtocol().instance_hypernyms)
    return class_hierarchy(onto, classes)


def severity_report(predictions: Mapping[Key, Mapping[int, Predictions]], seed: int = 0,
                    n_boot: int = N_BOOT) -> SeverityReport:
    """The severity of every official domain's cell of ``predictions`` (per (model, method, domain), by seed:
    :func:`cog_pl.report.concepts.stored_predictions`); each cell's bootstrap draws from ``seed`` and its position."""
    out = SeverityReport(seed=seed)
    for k, (key, by_seed) in enumerate(sorted(predictions.items())):
        if key[2] not in DOMAINS or not by_seed:
            continue
        classes = next(iter(by_seed.values())).classes
        if not classes or not all(is_wnid(w) for w in classes):
            out.skipped[key] = "its classes are not WordNet synsets (no wnids stored)"
            continue
        try:
            hierarchy = _hierarchy(tuple(classes))
        except CogError as err:  # a wnid WordNet 3.0 does not have
            out.skipped[key] = str(err)
            continue
        out.cells[key] = mistake_severity(by_seed, hierarchy, n_boot=n_boot, seed=seed + k)
        out.classes[key] = hierarchy.classes
    return out


def _num(value: float, digits: int = 2) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _order(key: Key) -> tuple:
    return key[0], method_sort_key(key[1]), domain_key(key[2])


def severity_markdown(report: SeverityReport, cells: Sequence[Cell] = ()) -> str:
    """The section of ``report.md``: a line per (model, method, domain) with errors; empty without any cell.
    ``cells``: the report's cells, whose protocols the section names."""
    if not report.cells and not report.skipped:
        return ""
    shown = {(m, meth) for m, meth, _ in [*report.cells, *report.skipped]}
    line = cells_protocol([c for c in cells if (c.model, c.method) in shown and c.shots is None
                           and c.domain in DOMAINS], by_method=True)
    first = next(iter(report.cells.values()), None)
    parts = ["## Mistake severity per level (all data, over seeds)", "", *([line, ""] if line else []),
             "Each wrong top-1 prediction's distance in WordNet from the true concept: the hypernym steps from the "
             "true concept up to the lowest hypernym it shares with the predicted one (the height of their lowest "
             "common ancestor, as in LCA-on-the-Line, ICML 2024; 1: siblings). Mean over the wrong predictions of "
             "every seed; [low, high]: 95 % bootstrap interval over test images"
             + (f" ({first.n_boot:,} resamples, seed {report.seed} + the line's place)" if first else "")
             + "; same parent: the share of the errors whose predicted concept has a direct hypernym in common with "
             "the true one. Figure: `severity.png`; per concept: `concepts.csv`.", "",
             "| model | method | domain | errors | mean severity | 95 % interval | same parent | seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for key in sorted(report.cells, key=_order):
        s = report.cells[key]
        unanswered = f" (+{s.unanswered} unanswered)" if s.unanswered else ""
        parts.append(f"| {key[0]} | {method_label(key[1])} | {domain_label(key[2])} | {s.errors} of "
                     f"{s.images * len(s.seeds)}{unanswered} | {_num(s.mean)} | [{_num(s.low)}, {_num(s.high)}] | "
                     f"{_num(s.same_parent, 1) + ' %' if s.errors else '–'} | {', '.join(map(str, s.seeds))} |")
    for key in sorted(report.skipped, key=_order):
        parts.append(f"| {key[0]} | {method_label(key[1])} | {domain_label(key[2])} | – | – | "
                     f"{report.skipped[key]} | – | – |")
    return "\n".join(parts) + "\n"


def add_concept_columns(lines: list[dict[str, Any]], report: SeverityReport) -> None:
    """Fill :data:`CONCEPT_COLUMNS` of ``concepts.csv``'s lines (:func:`cog_pl.report.concept_tables.concept_rows`)
    from ``report``: each concept's wrong predictions over the seeds, their mean severity and same-parent share (%);
    empty where its cell has none."""
    index = {key: {w: i for i, w in enumerate(classes)} for key, classes in report.classes.items()}
    for line in lines:
        key = (line["model"], line["method"], line["domain"])
        s = report.cells.get(key)
        i = index.get(key, {}).get(line["wnid"])
        if s is None or i is None:
            continue
        line["errors"] = int(s.concept_errors[i])
        line["severity"] = float(s.concept_mean[i]) if s.concept_errors[i] else None
        line["same_parent_share"] = float(s.concept_same_parent[i]) if s.concept_errors[i] else None
