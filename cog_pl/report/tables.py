"""Result tables computed from rows only: mean ± std over seeds, accuracy relative to a baseline.

A row is a dict with at least ``model``, ``domain``, ``shots`` (``None`` = all data), ``seed``, ``test_top1`` and
``test_top5`` (percent). Relative accuracy is the difference in top-1 points to the baseline model on the same
domain and shots (the paper's "relative to ResNet-50" plots).
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from cog_pl.protocol import DOMAINS

DOMAIN_LABELS = {"in1k": "IN-1K", **{f"cog_l{i}": f"L{i}" for i in range(1, 6)}}


@dataclass(frozen=True)
class Cell:
    """One (model, domain, shots) entry aggregated over seeds."""

    model: str
    domain: str
    shots: int | None
    top1: float
    top1_std: float
    top5: float
    seeds: int
    relative: float | None = None  # top-1 minus the baseline's, in points

    @property
    def shots_label(self) -> str:
        return "All" if self.shots is None else str(self.shots)


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def summarize(rows: Iterable[dict], baseline: str | None = None) -> list[Cell]:
    """Aggregate rows over seeds; with a ``baseline`` model, fill ``relative`` where it has the same cell."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["model"], r["domain"], r.get("shots")].append(r)
    cells = {}
    for (model, domain, shots), rs in groups.items():
        top1, std = _mean_std([float(r["test_top1"]) for r in rs])
        top5, _ = _mean_std([float(r.get("test_top5", math.nan)) for r in rs])
        cells[model, domain, shots] = Cell(model, domain, shots, top1, std, top5, len({r["seed"] for r in rs}))
    if baseline:
        for key, c in list(cells.items()):
            base = cells.get((baseline, key[1], key[2]))
            if base is not None:
                cells[key] = Cell(**{**asdict(c), "relative": c.top1 - base.top1})
    order = {d: i for i, d in enumerate(DOMAINS)}
    return sorted(cells.values(), key=lambda c: (c.model, order.get(c.domain, 99), -1 if c.shots is None else c.shots))


def domains_of(cells: Sequence[Cell]) -> list[str]:
    present = {c.domain for c in cells}
    return [d for d in DOMAINS if d in present] + sorted(present - set(DOMAINS))


def markdown_table(cells: Sequence[Cell], shots: int | None = None, relative: bool = False) -> str:
    """Models as rows, domains as columns, for one shots setting: ``mean ± std`` (or relative points)."""
    sel = [c for c in cells if c.shots == shots]
    domains = domains_of(sel)
    models = sorted({c.model for c in sel})
    by = {(c.model, c.domain): c for c in sel}
    head = "| model | " + " | ".join(DOMAIN_LABELS.get(d, d) for d in domains) + " |"
    lines = [head, "|---" * (len(domains) + 1) + "|"]
    for m in models:
        vals = []
        for d in domains:
            c = by.get((m, d))
            if c is None:
                vals.append("–")
            elif relative:
                vals.append("–" if c.relative is None else f"{c.relative:+.2f}")
            else:
                vals.append(f"{c.top1:.2f} ± {c.top1_std:.2f}")
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def csv_table(cells: Sequence[Cell]) -> str:
    """Long format: one line per cell."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["model", "domain", "shots", "top1_mean", "top1_std", "top5_mean", "seeds", "top1_relative"])
    for c in cells:
        w.writerow([c.model, c.domain, c.shots_label, f"{c.top1:.4f}", f"{c.top1_std:.4f}", f"{c.top5:.4f}",
                    c.seeds, "" if c.relative is None else f"{c.relative:.4f}"])
    return buf.getvalue()


def report_markdown(cells: Sequence[Cell], baseline: str | None = None) -> str:
    """The whole report: all-data table, relative table, and one few-shot table per domain."""
    parts = ["# ImageNet-CoG results", "", "## Linear probes on all training data: test top-1 (%), mean ± std over "
             "seeds", "", markdown_table(cells, None)]
    if baseline and any(c.relative is not None for c in cells):
        parts += ["", f"## Relative to {baseline} (top-1 points)", "", markdown_table(cells, None, relative=True)]
    vs_ft = finetune_relative(cells)
    if vs_ft:
        parts += ["", "## Linear probe relative to fine-tuning (probe top-1 / fine-tuned top-1, %)", "",
                  vs_ft]
    shots = sorted({c.shots for c in cells if c.shots is not None})
    if shots:
        parts += ["", "## Few-shot: test top-1 (%) per number of images per concept"]
        for d in domains_of(cells):
            sel = [c for c in cells if c.domain == d]
            models = sorted({c.model for c in sel})
            by = {(c.model, c.shots): c for c in sel}
            cols = [*shots, None]
            parts += ["", f"### {DOMAIN_LABELS.get(d, d)}", "",
                      "| model | " + " | ".join("All" if s is None else f"N={s}" for s in cols) + " |",
                      "|---" * (len(cols) + 1) + "|"]
            for m in models:
                vals = [f"{by[m, s].top1:.2f}" if (m, s) in by else "–" for s in cols]
                parts.append(f"| {m} | " + " | ".join(vals) + " |")
    return "\n".join(parts) + "\n"


FINETUNE_SUFFIX = "@finetune"


def finetune_relative(cells: Sequence[Cell]) -> str:
    """Markdown table of ``100 * probe / fine-tuned`` top-1 per domain, for models with ``<name>@finetune`` rows."""
    by = {(c.model, c.domain): c for c in cells if c.shots is None}
    models = sorted({c.model[: -len(FINETUNE_SUFFIX)] for c in cells if c.model.endswith(FINETUNE_SUFFIX)})
    models = [m for m in models if any((m, d) in by for d in DOMAINS)]
    if not models:
        return ""
    domains = [d for d in DOMAINS if any((m, d) in by and (m + FINETUNE_SUFFIX, d) in by for m in models)]
    lines = ["| model | " + " | ".join(DOMAIN_LABELS[d] for d in domains) + " |", "|---" * (len(domains) + 1) + "|"]
    for m in models:
        vals = []
        for d in domains:
            probe, ft = by.get((m, d)), by.get((m + FINETUNE_SUFFIX, d))
            vals.append(f"{100 * probe.top1 / ft.top1:.1f}" if probe and ft and ft.top1 > 0 else "–")
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    return "\n".join(lines)
