"""Write the whole report of a results store: markdown, CSV and the figures."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from cog_pl.io import atomic_open
from cog_pl.report.plots import plot_domains, plot_few_shot, plot_variants
from cog_pl.report.tables import csv_table, official_cells, report_markdown, summarize
from cog_pl.report.variants import variant_lines, variants_markdown
from cog_pl.results import read_rows

logger = logging.getLogger(__name__)


def write_report(results: str | Path, out: str | Path, models: Sequence[str] = (),
                 baseline: str | None = None) -> dict[str, Path]:
    """Tables and plots of ``models`` (all models in the store when empty); returns the files written."""
    rows = read_rows(results)
    if not rows:
        raise ValueError(f"results file {results} holds no rows (run `cog-pl run` or `cog-pl probe` first)")
    known = sorted({r["model"] for r in rows})
    missing = [m for m in (*models, *([baseline] if baseline else [])) if m not in known]
    if missing:
        raise ValueError(f"no results for model(s) {', '.join(missing)} in {results}; it has {', '.join(known)}")
    if models:
        keep = set(models) | ({baseline} if baseline else set())
        rows = [r for r in rows if r["model"] in keep]
    cells = summarize(rows, baseline)
    official = official_cells(cells)  # the probes' figures
    variants = variant_lines(rows)
    out = Path(out)
    files = {"markdown": out / "report.md", "csv": out / "results.csv", "domains": out / "domains.png"}
    with atomic_open(files["markdown"]) as fh:
        fh.write(report_markdown(cells, baseline, variants_markdown(variants) if variants else ""))
    with atomic_open(files["csv"]) as fh:
        fh.write(csv_table(cells))
    plot_domains(official, files["domains"])
    if baseline:
        files["relative"] = plot_domains(official, out / "domains_relative.png", relative=True, baseline=baseline)
    if any(c.shots is not None for c in official):
        files["few_shot"] = plot_few_shot(official, out / "few_shot.png")
    if variants:
        files["variants"] = plot_variants(variants, out / "variants.png")
    return files
