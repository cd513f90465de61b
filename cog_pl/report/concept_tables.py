"""The concept-level sections of the report as markdown and CSV, from a :class:`~cog_pl.report.concepts.ConceptReport`.

:func:`concept_rows` is the per-concept table (one line per model, method, domain and concept) that ``concepts.csv``
and the HTML report's explorer are made from; :func:`summary_columns` and :func:`relative_intervals` are what the
main and relative tables show of it (the slope and L1-L5 drop, each difference's interval and whether it is
significant).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cog_pl.analysis.concepts import N_BOOT, SLOPE_UNIT
from cog_pl.analysis.paired import PairedDifference
from cog_pl.evaluate.table import method_label, method_sort_key
from cog_pl.protocol import DOMAINS, LEVEL_OF_DOMAIN
from cog_pl.report.concepts import ConceptReport
from cog_pl.report.tables import Cell, cells_protocol, domain_label
from cog_pl.resources import concept_name
from cog_pl.results import DEFAULT_METHOD

#: What the relative tables append to a difference whose permutation p-value is 0.05 or more.
NOT_SIGNIFICANT = "n.s."
SLOPE_HEADER = f"slope (points per +{SLOPE_UNIT} similarity)"


def _name(wnid: str) -> str:
    """The concept's first ImageNet lemma and its wnid (``concepts.csv`` has every lemma)."""
    name = concept_name(wnid).split(", ")[0]
    return wnid if name == wnid else f"{name} ({wnid})"


def _num(value: float, digits: int = 2, sign: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def interval_text(p: PairedDifference) -> str:
    """``[+0.41, +2.07]``, followed by ``n.s.`` when the difference is not significant (p >= 0.05)."""
    text = f"[{p.low:+.2f}, {p.high:+.2f}]"
    return text if p.significant() else f"{text} {NOT_SIGNIFICANT}"


def relative_intervals(report: ConceptReport) -> dict[tuple[str, str], str]:
    """Per (model, domain), the paired interval the relative table shows beside the difference."""
    return {key: interval_text(p) for key, p in report.paired.items()}


def summary_columns(report: ConceptReport) -> dict[str, dict[str, str]]:
    """Per model, the main table's summary figures: the L1-L5 drop (from rows) and, where some model's predictions
    are stored, the slope of concept top-1 over similarity."""
    out: dict[str, dict[str, str]] = {}
    for model in sorted(set(report.drops) | set(report.slopes)):
        drop = report.drops.get(model)
        out[model] = {"L1−L5": "–" if drop is None else str(drop)}
        if report.slopes:
            slope = report.slopes.get(model)
            out[model][SLOPE_HEADER] = "–" if slope is None else _num(slope[0], sign=True)
    return out


def _curve_table(curves: Mapping[str, Any], relative: bool) -> list[str]:
    models = sorted(curves)
    first = curves[models[0]]
    lines = ["| similarity | concepts | " + " | ".join(models) + " |", "|---" * (len(models) + 2) + "|"]
    for b in range(len(first.edges) - 1):
        counts = "/".join(sorted({str(int(curves[m].concepts[b])) for m in models}))
        vals = [f"{_num(c.mean[b], 1, relative)} [{_num(c.low[b], 1, relative)}, {_num(c.high[b], 1, relative)}]"
                if c.concepts[b] else "–" for c in (curves[m] for m in models)]
        lines.append(f"| {first.edges[b]:.3f}–{first.edges[b + 1]:.3f} | {counts} | " + " | ".join(vals) + " |")
    return lines


def _protocol(cells: Sequence[Cell], models: Iterable[str], methods: Sequence[str] = (DEFAULT_METHOD,),
              first: bool = False) -> list[str]:
    """The protocol line of a section over ``models``' cells of ``methods`` (all data, official domains), followed by
    a blank line (``first``: preceded by one); nothing without ``cells``."""
    models = set(models)
    line = cells_protocol([c for c in cells if c.model in models and c.method in methods], by_method=len(methods) > 1)
    return ([""] if first else []) + [line] + ([] if first else [""]) if line else []


def concepts_markdown(report: ConceptReport, cells: Sequence[Cell] = ()) -> str:
    """The concept sections of ``report.md`` (empty when no row has stored predictions); ``cells``: the report's
    cells on all data, whose protocols each section names."""
    cells = [c for c in cells if c.shots is None and c.domain in DOMAINS]
    parts: list[str] = []
    if report.curves:
        info = report.info
        parts += ["## Concepts: top-1 against similarity to the seen concepts", "", *_protocol(cells, report.curves),
                  f"Each level concept's test top-1 (linear probe, all data, pooled over the seeds) against its "
                  f"{info.measure} similarity to the seen concepts ({info.source}); the concepts of L1..L5 together, "
                  f"in bins of about equal counts. [low, high]: 95 % bootstrap interval over the bin's concepts "
                  f"({N_BOOT:,} resamples, seed {report.seed}). Figure: `concepts_similarity.png`.", "",
                  *_curve_table(report.curves, False), "",
                  f"Slope: least-squares slope of concept top-1 on similarity, top-1 points per +{SLOPE_UNIT} of "
                  "similarity, with a 95 % bootstrap interval over concepts; L1−L5: the top-1 drop from rows, paired "
                  "by seed.", "", f"| model | {SLOPE_HEADER} | 95 % interval | L1−L5 |", "|---|---|---|---|"]
        for model in sorted(report.curves):
            s, lo, hi = report.slopes[model]
            drop = report.drops.get(model)
            parts.append(f"| {model} | {_num(s, sign=True)} | [{_num(lo, sign=True)}, {_num(hi, sign=True)}] | "
                         f"{drop or '–'} |")
        if report.relative:
            parts += ["", f"### Relative to {report.baseline}: concept top-1 minus the baseline's (points)", "",
                      "Figure: `concepts_similarity_relative.png`.", "", *_curve_table(report.relative, True)]
    if report.paired or report.unpaired:
        parts += ["", f"## Paired differences to {report.baseline} (linear probe, all data)", "",
                  *_protocol(cells, {report.baseline, *(m for m, _ in [*report.paired, *report.unpaired])}),
                  "Top-1 of the model minus the baseline's on the same test images, mean over the seeds both have. "
                  "Interval: 95 % paired bootstrap over test images within each seed (one resample of the images "
                  "shared by the seeds), combined over seeds; p: paired permutation test (images' answers swapped "
                  f"between the models); {NOT_SIGNIFICANT}: p ≥ 0.05. Seeded: the same report every time.", "",
                  "| model | domain | difference | 95 % interval | p | images | seeds |",
                  "|---|---|---|---|---|---|---|"]
        for (model, domain), p in sorted(report.paired.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
            parts.append(f"| {model} | {domain_label(domain)} | {p.difference:+.2f} | {interval_text(p)} | "
                         f"{p.p_value:.4f} | {p.images} | {', '.join(map(str, p.seeds))} |")
        for (model, domain), why in sorted(report.unpaired.items()):
            parts.append(f"| {model} | {domain_label(domain)} | – | {why} | – | – | – |")
        if report.paired:
            first = next(iter(report.paired.values()))
            parts += ["", f"({first.n_boot:,} bootstrap resamples, {first.n_perm:,} permutations, seed {first.seed}.)"]
    parts += gains_markdown(report, cells) + _extremes(report, cells) + _confusions(report, cells) + _noise(report,
                                                                                                           cells)
    if report.lacking and not report.scores:
        parts += ["", "## Rows without stored predictions", "",
                  f"None of the {len(report.lacking)} all-data rows has stored test predictions (made before they were "
                  "kept): the concept analyses, paired intervals and confusions need them; rows made from now on "
                  "keep them."]
    elif report.lacking:
        shown = "; ".join(f"{name} ({why})" for name, why in report.lacking[:5])
        more = f" and {len(report.lacking) - 5} more" if len(report.lacking) > 5 else ""
        parts += ["", "## Rows without stored predictions", "",
                  f"{len(report.lacking)} all-data row(s) have no stored test predictions and are left out of the "
                  f"concept analyses: {shown}{more}."]
    return "\n".join(parts).strip("\n") + "\n" if parts else ""


def gains_markdown(report: ConceptReport, cells: Sequence[Cell] = ()) -> list[str]:
    """Per probe method other than the linear probe (:attr:`ConceptReport.gains`), its section: the paired gain over
    the linear probe of the same weights per domain (column ``linear probe``: that probe's label) and, where the
    concepts' similarity is known, the concept-level curve and slope; ``cells``: whose protocols it names."""
    out: list[str] = []
    for method, gain in report.gains.items():
        label = method_label(method)
        models = {m.split(" (against ")[0] for m, _ in [*gain.paired, *gain.unpaired]} | set(gain.against.values())
        out += ["", f"## {label} against the linear probe: gain per level and over concept similarity (all data)", "",
                *_protocol(cells, models, (DEFAULT_METHOD, method)),
                f"Top-1 of the {label} minus the linear probe's of the same weights (column linear probe: its label, "
                "which may hold another feature definition of them) on the same test images, mean over the seeds both "
                "have; 95 % paired bootstrap interval over test images and permutation p as in section Paired "
                f"differences ({NOT_SIGNIFICANT}: p ≥ 0.05).", "",
                "| model | linear probe | domain | gain | 95 % interval | p | images | seeds |",
                "|---|---|---|---|---|---|---|---|"]
        for (model, domain), p in sorted(gain.paired.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
            out.append(f"| {model} | {gain.against.get((model, domain), '–')} | {domain_label(domain)} | "
                       f"{p.difference:+.2f} | {interval_text(p)} | {p.p_value:.4f} | {p.images} | "
                       f"{', '.join(map(str, p.seeds))} |")
        out += [f"| {model} | {gain.against.get((model, domain), '–')} | {domain_label(domain)} | – | {why} | – | – "
                "| – |"
                for (model, domain), why in sorted(gain.unpaired.items(), key=lambda kv: (kv[0][0], _order(kv[0][1])))]
        if gain.curves:
            info = report.info
            out += ["", f"Each level concept's top-1 difference ({label} minus linear probe, points, pooled over the "
                    f"seeds) against its {info.measure} similarity to the seen concepts ({info.source}); the concepts "
                    f"of L1..L5 together, in bins of about equal counts; [low, high]: 95 % bootstrap interval over the "
                    f"bin's concepts ({N_BOOT:,} resamples, seed {report.seed}). Figure: `probe_gains.png`.", "",
                    *_curve_table(gain.curves, True), "",
                    f"| model | {SLOPE_HEADER} | 95 % interval | concepts |", "|---|---|---|---|"]
            for model in sorted(gain.curves):
                s, lo, hi = gain.slopes[model]
                out.append(f"| {model} | {_num(s, sign=True)} | [{_num(lo, sign=True)}, {_num(hi, sign=True)}] | "
                           f"{gain.concepts[model]} |")
    return out


def _order(domain: str) -> int:
    return list(LEVEL_OF_DOMAIN).index(domain) + 1 if domain in LEVEL_OF_DOMAIN else 0


def _closest(report: ConceptReport, wnid: str) -> str:
    seen = report.info.closest.get(wnid) if report.info else None
    return _name(seen) if seen else "–"


def _extremes(report: ConceptReport, cells: Sequence[Cell]) -> list[str]:
    if not report.extremes:
        return []
    out = ["", "## Concepts most and least right (linear probe, all data, top-1 pooled over seeds)",
           *_protocol(cells, {m for m, _ in report.extremes}, first=True)]
    for level in LEVEL_OF_DOMAIN.values():
        keys = sorted(k for k in report.extremes if k[1] == level)
        if not keys:
            continue
        out += ["", f"### {level}", "", "| model | most right | top-1 | closest seen | least right | top-1 | "
                "closest seen |", "|---|---|---|---|---|---|---|"]
        for model, _ in keys:
            best, worst = report.extremes[model, level]
            for (bw, bv), (ww, wv) in zip(best, worst):
                out.append(f"| {model} | {_name(bw)} | {bv:.1f} | {_closest(report, bw)} | {_name(ww)} | {wv:.1f} | "
                           f"{_closest(report, ww)} |")
    return out


def _confusions(report: ConceptReport, cells: Sequence[Cell]) -> list[str]:
    if not any(report.confusions.values()):
        return []
    out = ["", "## Most frequent confusions per level (linear probe, all data, over seeds)", "",
           *_protocol(cells, {m for m, _ in report.confusions}),
           "A test image of a concept whose first class is another concept of the level; share: of the concept's "
           "test images over the seeds."]
    for domain, level in LEVEL_OF_DOMAIN.items():
        keys = sorted(m for m, d in report.confusions if d == domain and report.confusions[m, d])
        if not keys:
            continue
        out += ["", f"### {level}", "", "| model | concept | taken for | Lin similarity | images | share |",
                "|---|---|---|---|---|---|"]
        for model in keys:
            classes = report.scores[model, DEFAULT_METHOD, domain].classes
            for c in report.confusions[model, domain]:
                a, b = classes[c.true], classes[c.predicted]
                out.append(f"| {model} | {_name(a)} | {_name(b)} | {_num(report.lin.get((a, b), math.nan), 3)} | "
                           f"{c.count} of {c.total} | {c.share:.1f} % |")
    return out


def _noise(report: ConceptReport, cells: Sequence[Cell], k: int = 5) -> list[str]:
    if not report.noise:
        return []
    seeds = sorted({v[3] for v in report.noise.values()})
    out = ["", "## What the IN-1K probe takes unseen concepts for (label-noise check)", "",
           *_protocol(cells, {m for m, _ in report.noise}),
           f"The IN-1K linear probe (all data, seed {'/'.join(map(str, seeds))}, made again from its row) applied to "
           f"each level's test images; per level, the {k} unseen concepts most consistently given one seen concept "
           "(`concepts.csv` has every concept)."]
    for domain, level in LEVEL_OF_DOMAIN.items():
        keys = sorted(m for m, d in report.noise if d == domain)
        if not keys:
            continue
        out += ["", f"### {level}", "", "| model | unseen concept | most often taken for | share of its images |",
                "|---|---|---|---|"]
        for model in keys:
            taken, labels, seen, _ = report.noise[model, domain]
            ranked = sorted((c for c in taken if c is not None), key=lambda c: (-c.share, labels[c.true]))[:k]
            out += [f"| {model} | {_name(labels[c.true])} | {_name(seen[c.predicted])} | {c.count} of {c.total} "
                    f"({c.share:.1f} %) |" for c in ranked]
    return out


CONCEPT_COLUMNS = ("model", "method", "domain", "level", "wnid", "name", "similarity", "closest_seen",
                   "closest_seen_name", "top1", "images", "seeds", "taken_for", "taken_for_name", "taken_for_share",
                   "errors", "severity", "same_parent_share")


def concept_rows(report: ConceptReport) -> list[dict[str, Any]]:
    """One line per (model, method, domain, concept): its top-1 pooled over seeds, its similarity and closest seen
    concept (level concepts), and what the IN-1K probe most often takes it for (where stored)."""
    info = report.info
    taken: dict[tuple[str, str, str], tuple[str, float]] = {}
    for (model, domain), (conf, labels, seen, _) in report.noise.items():
        for c in conf:
            if c is not None:
                taken[model, domain, labels[c.true]] = (seen[c.predicted], c.share)
    rows = []
    for (model, method, domain), s in sorted(report.scores.items(), key=lambda kv: (
            kv[0][0], method_sort_key(kv[0][1]), _order(kv[0][2]))):
        for wnid, top1, n in zip(s.classes, s.top1, s.images):
            sim = info.similarity.get(wnid) if info and domain in LEVEL_OF_DOMAIN else None
            closest = info.closest.get(wnid) if info and domain in LEVEL_OF_DOMAIN else None
            t = taken.get((model, domain, wnid))
            rows.append({"model": model, "method": method, "domain": domain, "level": domain_label(domain),
                         "wnid": wnid, "name": concept_name(wnid), "similarity": sim, "closest_seen": closest,
                         "closest_seen_name": concept_name(closest) if closest else None,
                         "top1": None if not math.isfinite(top1) else float(top1), "images": int(n),
                         "seeds": len(s.seeds), "taken_for": t[0] if t else None,
                         "taken_for_name": concept_name(t[0]) if t else None, "taken_for_share": t[1] if t else None})
    return rows


def concepts_csv(rows: list[dict[str, Any]]) -> str:
    """``concepts.csv``: :func:`concept_rows` with :data:`CONCEPT_COLUMNS` (those a line lacks empty: the mistake
    severity's, :func:`cog_pl.report.severity.add_concept_columns`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CONCEPT_COLUMNS)
    for r in rows:
        w.writerow(["" if r.get(c) is None else (f"{r[c]:.4f}" if isinstance(r[c], float) else r[c])
                    for c in CONCEPT_COLUMNS])
    return buf.getvalue()
