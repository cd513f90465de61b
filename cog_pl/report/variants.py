"""How hard the level variants are for the same model: top-1 per level for each similarity measure, from rows only.

A variant re-ranks the same concepts by another similarity to IN-1K (:mod:`cog_pl.levels.variants`); its levels are
probed as domains ``cog_l<i>@<measure>`` (:mod:`cog_pl.features.regroup`). The official levels (Lin) are the
domains ``cog_l1`` .. ``cog_l5``. A measure whose L1-L5 drop is larger orders the concepts more as the model finds
them hard. The drop is paired by seed: ``top1(L1, seed) - top1(L5, seed)``, mean ± std over the seeds having both.
The figure is :func:`cog_pl.report.plots.plot_variants`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cog_pl.levels.measures import list_measures
from cog_pl.protocol import LEVEL_OF_DOMAIN, split_domain
from cog_pl.report.tables import mean_std, spread
from cog_pl.results import DEFAULT_METHOD, method_of

OFFICIAL = "lin (official)"


@dataclass(frozen=True)
class Stat:
    """Mean and sample std of top-1 over ``seeds`` seeds."""

    mean: float
    std: float
    seeds: int

    def __str__(self) -> str:
        return spread(self.mean, self.std, self.seeds)


@dataclass(frozen=True)
class VariantLine:
    """One model's levels under one ordering of the concepts: per level (``L1`` ..) and the L1-L5 drop."""

    model: str
    measure: str  # OFFICIAL for cog_l1..cog_l5, else the variant's name
    levels: dict[str, Stat]
    drop: Stat | None


def variant_lines(rows: Iterable[dict], shots: int | None = None) -> list[VariantLine]:
    """One line per (model, measure) of the models that have variant rows, the official levels first; linear
    probes' rows only."""
    top1: dict[tuple[str, str], dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        base, variant = split_domain(r["domain"])
        if base in LEVEL_OF_DOMAIN and r.get("shots") == shots and method_of(r) == DEFAULT_METHOD:
            top1[r["model"], variant or OFFICIAL][LEVEL_OF_DOMAIN[base]][r["seed"]] = float(r["test_top1"])
    models = {m for m, measure in top1 if measure != OFFICIAL}
    lines = []
    for (model, measure), per_level in top1.items():
        if model not in models:
            continue
        levels = {lvl: Stat(*mean_std(list(s.values())), len(s)) for lvl, s in sorted(per_level.items())}
        first, last = per_level.get("L1", {}), per_level.get("L5", {})
        paired = [first[s] - last[s] for s in sorted(first.keys() & last.keys())]
        drop = Stat(*mean_std(paired), len(paired)) if paired else None
        lines.append(VariantLine(model, measure, levels, drop))
    return sorted(lines, key=lambda ln: (ln.model, _rank(ln.measure)))


def _rank(measure: str) -> tuple[int, str]:
    if measure == OFFICIAL:
        return -1, ""
    known = list_measures()
    if measure in known:
        return known.index(measure), ""
    return len(known), measure


def variants_markdown(lines: Sequence[VariantLine]) -> str:
    """Rows: model and measure; columns L1..L5 and the L1-L5 drop (mean ± std over seeds) and the seeds."""
    levels = list(LEVEL_OF_DOMAIN.values())
    out = ["| model | levels by | " + " | ".join(levels) + " | L1−L5 | seeds |", "|---" * (len(levels) + 4) + "|"]
    for ln in lines:
        vals = [str(ln.levels[lvl]) if lvl in ln.levels else "–" for lvl in levels]
        seeds = sorted({s.seeds for s in ln.levels.values()})
        out.append(f"| {ln.model} | {ln.measure} | " + " | ".join(vals) + f" | {ln.drop or '–'} | "
                   + "/".join(map(str, seeds)) + " |")
    return "\n".join(out)
