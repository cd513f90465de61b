"""Figures in the style of the paper: top-1 across IN-1K and L1..L5 (absolute and relative), few-shot curves, the
level variants (top-1 per level for each similarity measure), and concept top-1 against similarity to the seen
concepts (binned, with bands); each probe method's gain over the linear probe against that similarity; the mean mistake
severity per level."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cog_pl.analysis.concepts import Curve
from cog_pl.evaluate.table import method_label, method_sort_key
from cog_pl.io import atomic_open
from cog_pl.protocol import LEVEL_OF_DOMAIN
from cog_pl.report.tables import Cell, domain_label, domains_of
from cog_pl.report.variants import OFFICIAL, VariantLine
from cog_pl.results import DEFAULT_METHOD


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: str | Path) -> Path:
    out = Path(out)
    with atomic_open(out, "wb") as fh:
        fig.savefig(fh, format="png")
    _plt().close(fig)
    return out


def plot_domains(cells: Sequence[Cell], out: str | Path, relative: bool = False, shots: int | None = None,
                 baseline: str | None = None) -> Path:
    """One line per model over IN-1K, L1..L5 (all data by default), error bars = std over seeds."""
    plt = _plt()
    sel = [c for c in cells if c.shots == shots and (not relative or c.relative is not None)]
    domains = domains_of(sel)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for model in sorted({c.model for c in sel}):
        by = {c.domain: c for c in sel if c.model == model}
        xs = [i for i, d in enumerate(domains) if d in by]
        ys = [by[domains[i]].relative if relative else by[domains[i]].top1 for i in xs]
        err = [by[domains[i]].top1_std for i in xs]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=model, lw=1.5)
    if relative:
        ax.axhline(0, color="grey", lw=1, ls="--")
    ax.set_xticks(range(len(domains)), [domain_label(d) for d in domains])
    what = "all data" if shots is None else f"{shots} images per concept"
    ax.set_ylabel(f"top-1 relative to {baseline} (points)" if relative else "top-1 accuracy (%)")
    ax.set_title(("Relative" if relative else "Linear probe") + f" top-1 across concept generalization levels ({what})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return _save(fig, out)


def _line(model: str, method: str) -> tuple[str, dict]:
    """A line's label and style: the linear probe's solid and named by its model, another method's dashed."""
    if method == DEFAULT_METHOD:
        return model, {}
    return f"{model} ({method_label(method)})", {"ls": "--"}


def plot_methods(cells: Sequence[Cell], out: str | Path, shots: int | None = None) -> Path:
    """Top-1 over IN-1K, L1..L5 of every probe method (all data by default), a line per (model, method): the
    linear probe solid, the k-NN dashed; error bars = std over seeds."""
    plt = _plt()
    sel = [c for c in cells if c.shots == shots]
    domains = domains_of(sel)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for model, method in sorted({(c.model, c.method) for c in sel}, key=lambda p: (p[0], method_sort_key(p[1]))):
        by = {c.domain: c for c in sel if c.model == model and c.method == method}
        xs = [i for i, d in enumerate(domains) if d in by]
        label, style = _line(model, method)
        ax.errorbar(xs, [by[domains[i]].top1 for i in xs], yerr=[by[domains[i]].top1_std for i in xs], marker="o",
                    capsize=3, label=label, lw=1.5, **style)
    ax.set_xticks(range(len(domains)), [domain_label(d) for d in domains])
    ax.set_ylabel("top-1 accuracy (%)")
    what = "all data" if shots is None else f"{shots} images per concept"
    ax.set_title(f"Probe methods across concept generalization levels ({what})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return _save(fig, out)


def plot_few_shot(cells: Sequence[Cell], out: str | Path) -> Path:
    """Top-1 against the number of training images per concept, one panel per domain, one line per model (and
    method: other methods than the linear probe dashed)."""
    plt = _plt()
    domains = domains_of(cells)
    shots = sorted({c.shots for c in cells if c.shots is not None})
    cols = [*shots, None]
    pos = {s: i for i, s in enumerate(cols)}
    fig, axes = plt.subplots(1, len(domains), figsize=(3.2 * len(domains), 3.4), dpi=110, sharey=True, squeeze=False)
    for ax, d in zip(axes[0], domains):
        for model, method in sorted({(c.model, c.method) for c in cells},
                                    key=lambda p: (p[0], method_sort_key(p[1]))):
            pts = sorted(((pos[c.shots], c.top1) for c in cells if c.domain == d and c.model == model
                          and c.method == method and c.shots in pos), key=lambda p: p[0])
            if pts:
                label, style = _line(model, method)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, lw=1.3, **style)
        ax.set_xticks(range(len(cols)), ["All" if s is None else str(s) for s in cols], fontsize=7)
        ax.set_title(domain_label(d))
        ax.set_xlabel("images per concept")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("top-1 accuracy (%)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, out)


def plot_variants(lines: Sequence[VariantLine], out: str | Path) -> Path:
    """Top-1 against the level, one line per measure (error bars: std over seeds), one panel per model."""
    plt = _plt()
    levels = list(LEVEL_OF_DOMAIN.values())
    models = sorted({ln.model for ln in lines})
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 3.8), dpi=120, squeeze=False, sharey=True)
    for ax, model in zip(axes[0], models):
        for ln in (ln for ln in lines if ln.model == model):
            xs = [i for i, lvl in enumerate(levels) if lvl in ln.levels]
            style = {"color": "black", "lw": 2.2, "zorder": 3} if ln.measure == OFFICIAL else {"lw": 1.4}
            ax.errorbar(xs, [ln.levels[levels[i]].mean for i in xs], yerr=[ln.levels[levels[i]].std for i in xs],
                        marker="o", capsize=3, label=ln.measure, **style)
        ax.set_xticks(range(len(levels)), levels)
        ax.set_title(f"{model}: levels by each similarity", fontsize=10)
        ax.set_xlabel("level (L1 most similar to IN-1K)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("top-1 accuracy (%)")
    fig.tight_layout()
    return _save(fig, out)


def plot_similarity_curves(curves: Mapping[str, Curve], out: str | Path, measure: str = "similarity",
                           baseline: str | None = None) -> Path:
    """Concept top-1 against similarity to the seen concepts, a line per model through the bins' means (at each
    bin's mean similarity) with its 95 % band; ``baseline``: the curves are differences to it (points)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for model in sorted(curves):
        c = curves[model]
        keep = c.concepts > 0
        line = ax.plot(c.center[keep], c.mean[keep], marker="o", lw=1.5, label=model)[0]
        ax.fill_between(c.center[keep], c.low[keep], c.high[keep], color=line.get_color(), alpha=0.2, lw=0)
    if baseline:
        ax.axhline(0, color="grey", lw=1, ls="--")
    ax.set_xlabel(f"{measure} similarity to the closest seen concept")
    ax.set_ylabel(f"concept top-1 relative to {baseline} (points)" if baseline else "concept top-1 (%)")
    ax.set_title(("Relative concept" if baseline else "Concept") + " top-1 against similarity (levels L1..L5, bins "
                 "with 95 % bands)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return _save(fig, out)


def plot_gain_curves(gains: Mapping[str, Mapping[str, Curve]], out: str | Path, measure: str = "similarity") -> Path:
    """Each probe method's gain over the linear probe against concept similarity, one panel per method (``gains``:
    method -> model -> its curve of concept top-1 differences), a line per model through the bins' means with its
    95 % band (:func:`cog_pl.report.probes.probe_gains`)."""
    plt = _plt()
    methods = [m for m in sorted(gains, key=method_sort_key) if gains[m]]
    fig, axes = plt.subplots(1, len(methods), figsize=(5.4 * len(methods), 3.9), dpi=120, squeeze=False,
                             sharey=True)
    for ax, method in zip(axes[0], methods):
        for model in sorted(gains[method]):
            c = gains[method][model]
            keep = c.concepts > 0
            line = ax.plot(c.center[keep], c.mean[keep], marker="o", lw=1.5, label=model)[0]
            ax.fill_between(c.center[keep], c.low[keep], c.high[keep], color=line.get_color(), alpha=0.2, lw=0)
        ax.axhline(0, color="grey", lw=1, ls="--")
        ax.set_title(f"{method_label(method)} − linear probe against similarity\n(levels L1..L5, bins with 95 % "
                     "bands)", fontsize=10)
        ax.set_xlabel(f"{measure} similarity to the closest seen concept")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("concept top-1 gain (points)")
    fig.tight_layout()
    return _save(fig, out)


def plot_severity(severity: Mapping[tuple[str, str, str], Any], out: str | Path) -> Path:
    """Mean mistake severity (hypernym steps) over IN-1K, L1..L5, a line per (model, method): the linear probe solid,
    other methods dashed; error bars = the 95 % bootstrap interval over test images
    (:func:`cog_pl.report.severity.severity_report`'s cells: (model, method, domain) -> its severity)."""
    plt = _plt()
    domains = sorted({d for _, _, d in severity}, key=lambda d: list(LEVEL_OF_DOMAIN).index(d) + 1
                     if d in LEVEL_OF_DOMAIN else 0)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for model, method in sorted({(m, meth) for m, meth, _ in severity}, key=lambda p: (p[0], method_sort_key(p[1]))):
        xs = [i for i, d in enumerate(domains) if (model, method, d) in severity
              and severity[model, method, d].errors]
        got = [severity[model, method, domains[i]] for i in xs]
        label, style = _line(model, method)
        ax.errorbar(xs, [s.mean for s in got], yerr=[[s.mean - s.low for s in got], [s.high - s.mean for s in got]],
                    marker="o", capsize=3, label=label, lw=1.5, **style)
    ax.set_xticks(range(len(domains)), [domain_label(d) for d in domains])
    ax.set_ylabel("mean severity of the errors (hypernym steps)")
    ax.set_title("Mistake severity: steps from the true concept to the lowest common hypernym\n(wrong top-1 "
                 "predictions, all data, 95 % intervals over test images)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return _save(fig, out)
