"""Zero-shot beside the linear probe: per level, a model's zero-shot top-1 (``method = "zeroshot"``,
:mod:`cog_pl.probe.zeroshot`), its linear probe's, and their ratio (how much of what is linearly separable the text
side can name); per level concept, the zero-shot top-1 against its similarity to the seen concepts (binned with
bootstrap bands, and the slope: :mod:`cog_pl.analysis.concepts`); and the names, prompts and text tower each row
used, with the concepts of a domain that share a name (polysemy, which confounds zero-shot). From result rows and
stored predictions only (:func:`zeroshot_markdown`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from cog_pl.analysis import concepts as ca
from cog_pl.evaluate.table import method_label
from cog_pl.protocol import LEVEL_OF_DOMAIN
from cog_pl.report.tables import Cell, cells_protocol, domain_label, domains_of
from cog_pl.results import DEFAULT_METHOD, method_of

__all__ = ["ZEROSHOT", "concept_curves", "zeroshot_markdown", "zeroshot_ratios"]

#: The method of zero-shot rows (:data:`cog_pl.probe.zeroshot.METHOD`; the report reads rows, not the probe layer).
ZEROSHOT = "zeroshot"
#: Polysemous names shown per domain; the rest counted.
SHOWN_SHARED = 3


def zeroshot_ratios(cells: Sequence[Cell]) -> dict[tuple[str, str], tuple[Cell, Cell | None, float | None]]:
    """Per (model, official domain) with a zero-shot cell on all data: that cell, the linear probe's (None where
    absent) and zero-shot top-1 / linear top-1 in % (None without a linear cell or with a linear top-1 of 0)."""
    sel = [c for c in cells if c.shots is None and "@" not in c.domain]
    linear = {(c.model, c.domain): c for c in sel if c.method == DEFAULT_METHOD}
    out = {}
    for c in sel:
        if c.method == ZEROSHOT:
            lin = linear.get((c.model, c.domain))
            out[c.model, c.domain] = (c, lin, 100.0 * c.top1 / lin.top1 if lin is not None and lin.top1 > 0
                                      else None)
    return out


def concept_curves(scores: Mapping[tuple[str, str, str], ca.ConceptScores], similarity: Mapping[str, float],
                   seed: int) -> dict[str, tuple[ca.Curve, tuple[float, float, float], int]]:
    """Per model, its zero-shot concept top-1 over similarity to the seen concepts (the level concepts of L1..L5
    pooled, bins at the quantiles of all models' concepts), the slope (points per
    :data:`~cog_pl.analysis.concepts.SLOPE_UNIT`, with its bootstrap interval) and the concepts on the curve."""
    points: dict[str, dict[tuple[str, str], tuple[float, float]]] = {}
    for (model, method, domain), s in scores.items():
        if method != ZEROSHOT or domain not in LEVEL_OF_DOMAIN:
            continue
        points.setdefault(model, {}).update({(domain, w): (similarity[w], float(t)) for w, t in zip(s.classes, s.top1)
                                             if w in similarity and np.isfinite(t)})
    pooled = [v[0] for pts in points.values() for v in pts.values()]
    if not pooled:
        return {}
    edges = ca.quantile_edges(pooled, ca.default_bins(len(pooled) // max(1, len(points))))
    out = {}
    for i, (model, pts) in enumerate(sorted(points.items())):
        sim, val = (np.array(v) for v in zip(*pts.values()))
        slope, low, high = ca.slope_interval(sim, val, seed=seed + i)
        out[model] = (ca.binned_curve(sim, val, edges, seed=seed + i),
                      (slope * ca.SLOPE_UNIT, low * ca.SLOPE_UNIT, high * ca.SLOPE_UNIT), len(pts))
    return out


def _used(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """A line per (model, names, templates, text tower) of the zero-shot rows: its domains and polysemous names."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        if method_of(r) != ZEROSHOT or r.get("shots") is not None:
            continue
        z, t = r.get("zeroshot") or {}, r.get("text_tower") or {}
        key = (r["model"], z.get("names", "?"), z.get("templates", "?"), str(z.get("templates_sha256", ""))[:12],
               t.get("model", "?"), t.get("weights", "?"), str(t.get("sha256", ""))[:12])
        groups.setdefault(key, []).append(r)
    lines = []
    for (model, names, templates, tsha, tower, weights, wsha), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: list(LEVEL_OF_DOMAIN).index(r["domain"]) + 1 if r["domain"] in LEVEL_OF_DOMAIN
                    else 0)
        shared = []
        for r in rs:
            found = r.get("shared_names") or {}
            if found:
                shown = "; ".join(f"'{n}' ({', '.join(ws)})" for n, ws in list(found.items())[:SHOWN_SHARED])
                more = f" and {len(found) - SHOWN_SHARED} more" if len(found) > SHOWN_SHARED else ""
                shared.append(f"{domain_label(r['domain'])}: {len(found)} ({shown}{more})")
        lines.append(f"| {model} | {', '.join(domain_label(r['domain']) for r in rs)} | {names} | {templates} "
                     f"({r.get('templates_count', '?')} templates, sha256 {tsha}) | {tower} ({weights}, sha256 "
                     f"{wsha}) | {'; '.join(shared) or 'none'} |")
    return lines


def zeroshot_markdown(cells: Sequence[Cell], rows: Sequence[Mapping[str, Any]],
                      scores: Mapping[tuple[str, str, str], ca.ConceptScores] | None = None,
                      similarity: Mapping[str, float] | None = None, measure: str = "similarity",
                      seed: int = 0) -> str:
    """The zero-shot section: zero-shot, linear probe and their ratio per official domain (all data), the
    per-concept zero-shot top-1 against ``similarity`` (level concept -> similarity to the seen concepts, from
    ``scores``: :attr:`cog_pl.report.concepts.ConceptReport.scores`) and the names and prompts used; empty without
    zero-shot rows."""
    ratios = zeroshot_ratios(cells)
    if not ratios:
        return ""
    domains = domains_of([c for c, _, _ in ratios.values()])
    label = method_label(ZEROSHOT)
    shown = [c for g in ratios.values() for c in g[:2] if c is not None]
    lines = ["", "## Zero-shot beside the linear probe: test top-1 (%) on all data", "",
             cells_protocol(shown, by_method=True), "",
             f"{label[:1].upper()}{label[1:]}: the model's text classifier of each concept's names and prompts "
             "(below) on the test features the linear probe reads, no training image (one row per domain, nothing "
             "drawn at random); ratio: zero-shot top-1 / linear-probe top-1 (%), how much of what is linearly "
             "separable the text side can name.", "",
             "| model | | " + " | ".join(domain_label(d) for d in domains) + " |", "|---" * (len(domains) + 2) + "|"]
    for model in sorted({m for m, _ in ratios}):
        got = [ratios.get((model, d)) for d in domains]
        lines.append(f"| {model} | {label} | " + " | ".join("–" if g is None else f"{g[0].top1:.2f}" for g in got)
                     + " |")
        lines.append(f"| {model} | {method_label(DEFAULT_METHOD)} | " + " | ".join(
            "–" if g is None or g[1] is None else g[1].value for g in got) + " |")
        lines.append(f"| {model} | ratio (%) | " + " | ".join(
            "–" if g is None or g[2] is None else f"{g[2]:.1f}" for g in got) + " |")
    curves = concept_curves(scores or {}, similarity or {}, seed) if similarity else {}
    if curves:
        lines += ["", f"### Zero-shot top-1 per level concept against its similarity ({measure}) to the seen "
                      "concepts", "",
                  f"The level concepts of L1–L5 pooled, binned at quantiles of {measure}; mean concept top-1 per bin "
                  f"with its 95 % bootstrap interval over the bin's concepts ({ca.N_BOOT:,} resamples, seed {seed}); "
                  f"slope: least-squares slope of concept top-1 on {measure}, points per +{ca.SLOPE_UNIT}.", "",
                  "| model | concepts | slope [95 %] | " + " | ".join(
                      f"bin {i + 1}" for i in range(max(len(c.mean) for c, _, _ in curves.values()))) + " |",
                  "|---" * (3 + max(len(c.mean) for c, _, _ in curves.values())) + "|"]
        for model, (curve, (slope, low, high), n) in curves.items():
            bins = [f"{curve.center[b]:.2f}: {curve.mean[b]:.1f} [{curve.low[b]:.1f}, {curve.high[b]:.1f}]"
                    if curve.concepts[b] else "–" for b in range(len(curve.mean))]
            fitted = f"{slope:+.2f} [{low:+.2f}, {high:+.2f}]" if np.isfinite([slope, low, high]).all() else "–"
            lines.append(f"| {model} | {n} | {fitted} | " + " | ".join(bins) + " |")
        lines += ["", f"A bin: its mean {measure} similarity: mean zero-shot concept top-1 [interval]; –: no slope "
                  "(fewer than two distinct similarities)."]
    used = _used(rows)
    if used:
        lines += ["", "### Names and prompts of the zero-shot rows", "",
                  "| model | domains | names | templates | text tower | concepts sharing a name (polysemy) |",
                  "|---" * 6 + "|", *used, "",
                  "A name two concepts of one domain share gives both the same prompts: zero-shot cannot tell them "
                  "apart by name."]
    return "\n".join(lines) + "\n"
