"""The report's section on the closed-form ridge probe beside the tuned linear probe: does the cheap probe rank models
as the linear probe does, level by level, and how far below or above it does it land?

Per official domain and shot setting, over the models with cells of both methods (:func:`ridge_markdown`, computed by
:func:`cog_pl.analysis.agreement.rank_agreement`): Spearman's rank correlation of their mean top-1 (n, rho; not
defined for n < 3), the mean gap (ridge minus linear, points) and, on all data, the gap's paired bootstrap interval
and permutation p-value from the test predictions stored beside the rows (:func:`stored_pairs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cog_pl.analysis.agreement import LevelAgreement, rank_agreement
from cog_pl.analysis.paired import SEED
from cog_pl.evaluate.table import method_label
from cog_pl.protocol import DOMAINS
from cog_pl.report.concepts import row_store
from cog_pl.report.tables import Cell, cells_protocol, domain_key, domain_label
from cog_pl.results import DEFAULT_METHOD, method_of
from cog_pl.results.predictions import Predictions, read_row_predictions

__all__ = ["METHOD", "agreement_rows", "ridge_markdown", "stored_pairs"]

#: The method set beside the linear probe here.
METHOD = "ridge"


def stored_pairs(results: str | Path, rows: Sequence[Mapping[str, Any]], method: str = METHOD,
                 reference: str = DEFAULT_METHOD) -> dict[tuple[str, str, str], dict[int, Predictions]]:
    """The stored predictions of the all-data rows of ``method`` and ``reference`` on the official domains, by
    (model, method, domain) and seed (rows without them left out)."""
    out: dict[tuple[str, str, str], dict[int, Predictions]] = {}
    for row in rows:
        meth = method_of(dict(row))
        if meth not in (method, reference) or row.get("shots") is not None or row["domain"] not in DOMAINS:
            continue
        preds = read_row_predictions(row_store(dict(row), results), dict(row))
        if preds is not None:
            out.setdefault((row["model"], meth, row["domain"]), {})[int(row["seed"])] = preds
    return out


def agreement_rows(cells: Sequence[Cell], results: str | Path | None = None, rows: Sequence[Mapping[str, Any]] = (),
                   seed: int = SEED, method: str = METHOD) -> list[LevelAgreement]:
    """:func:`~cog_pl.analysis.agreement.rank_agreement` of ``method`` and the linear probe on the official domains'
    cells, all data first then by shots, each shot setting's domains in protocol order; with ``results``, the
    all-data gaps' paired intervals from the predictions of ``rows``."""
    top1 = {(c.model, c.method, c.domain, c.shots): c.top1 for c in cells if c.domain in DOMAINS}
    stored = stored_pairs(results, rows, method) if results is not None else None
    found = rank_agreement(top1, method, DEFAULT_METHOD, stored, seed)
    return sorted(found, key=lambda a: (a.shots is not None, a.shots or 0, domain_key(a.domain)))


def _interval(a: LevelAgreement) -> str:
    if a.shots is not None:
        return "–"
    if a.paired is None:
        return f"n/a ({a.paired_note})" if a.paired_note else "n/a (no stored predictions)"
    p = a.paired
    return (f"{p.difference:+.2f} [{p.low:+.2f}, {p.high:+.2f}], p = {p.p_value:.3g} ({len(p.seeds)} seed(s) × "
            f"{p.images} images)")


def ridge_markdown(cells: Sequence[Cell], rows: Sequence[Mapping[str, Any]] = (), results: str | Path | None = None,
                   seed: int = SEED) -> str:
    """The section: a line per (shots, official domain) where some model has cells of both the ridge probe and the
    linear probe; empty where none has."""
    found = agreement_rows(cells, results, rows, seed)
    if not found:
        return ""
    ridge, linear = method_label(METHOD), method_label(DEFAULT_METHOD)
    compared = {(m, a.domain, a.shots) for a in found for m in a.models}
    shown = [c for c in cells if c.method in (METHOD, DEFAULT_METHOD) and (c.model, c.domain, c.shots) in compared]
    lines = ["", f"## {ridge[:1].upper()}{ridge[1:]} beside the {linear}: ranking agreement per level", "",
             cells_protocol(shown, by_method=True), "",
             f"The closed-form {ridge} probe (big_vision's few-shot least squares, its penalty chosen on the same "
             f"held-out split, refitted on the same samples) against the tuned {linear}, over the models with rows "
             "of both: n, the models; Spearman's ρ of their mean top-1 under the two (how well the cheap probe ranks "
             f"models as the {linear} does; not defined for n < 3); gap, the mean over them of {ridge} top-1 minus "
             f"{linear} top-1 (points). All data: the gap's paired difference on the test images and seeds every "
             "model has, with its 95 % bootstrap interval over test images and the paired permutation p-value "
             "(cog_pl.analysis.agreement).", "",
             "| shots | level | n | Spearman ρ | gap (points) | paired difference [95 % interval] |",
             "|---|---|---|---|---|---|"]
    for a in found:
        rho = f"{a.rho:+.2f}" if a.rho is not None else a.rho_note
        lines.append(f"| {'All' if a.shots is None else a.shots} | {domain_label(a.domain)} | {len(a.models)} | "
                     f"{rho} | {a.gap:+.2f} | {_interval(a)} |")
    return "\n".join(lines) + "\n"
