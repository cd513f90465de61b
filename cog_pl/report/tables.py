"""Result tables computed from rows only: mean ± std over seeds, accuracy relative to a baseline.

A row is a dict with at least ``model``, ``domain``, ``shots`` (``None`` = all data), ``seed``, ``test_top1`` and
``test_top5`` (percent). Relative accuracy is the difference in top-1 points to the baseline model on the same
domain and shots (the paper's "relative to ResNet-50" plots). Domains of level variants (``cog_l3@wup``) come after
the official ones, grouped by variant; the main tables show the official domains and the variants get their own
table (:mod:`cog_pl.report.variants`). Cells are grouped by the rows' ``method``, labelled and ordered by the method
table (:mod:`cog_pl.evaluate`): the main tables are the linear probes'; fine-tuned models (method ``finetune``, paper
App. C.2) are set against their linear probes in a section of their own; other probe methods (``knn``, a registered
one) are set beside the linear probe per domain (:func:`methods_markdown`) and get rows of their own in the few-shot
tables.

A cell averages rows of one protocol only (:func:`cog_pl.results.identity.protocol_key`: every value a row's number
depends on but its seed and shot count): :func:`cog_pl.report.protocols.split_protocols` keeps each cell's newest
protocol and sets the other rows apart as stale, and :func:`summarize` refuses rows of two protocols in one cell.
A cell shows its n where it is not the protocol's seed count. A relative compares a row with the baseline's row of the
same method (k-NN with k-NN, fine-tuned with fine-tuned); where the baseline has none, the relative is empty and
``relative_note`` says why.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cog_pl.errors import CogError
from cog_pl.evaluate.finetune import METHOD as FINETUNE
from cog_pl.evaluate.table import is_frozen, method_label, method_sort_key, sort_methods
from cog_pl.io import digest
from cog_pl.protocol import DOMAINS, LEVEL_OF_DOMAIN, PAPER, ProbeProtocol, split_domain
from cog_pl.report.protocol_names import NOT_RECORDED, protocol_line, row_protocol
from cog_pl.results import DEFAULT_METHOD, method_of, one_per_seedless_cell
from cog_pl.results.identity import describe, protocol_differences, protocol_key, settings_of, value_differences

DOMAIN_LABELS = {"in1k": "IN-1K", **{f"cog_l{i}": f"L{i}" for i in range(1, 6)}}
LEVELS = tuple(LEVEL_OF_DOMAIN)


def domain_label(domain: str) -> str:
    """``IN-1K``, ``L3``, ``L3 (wup)`` for the level variant ``cog_l3@wup``."""
    base, variant = split_domain(domain)
    label = DOMAIN_LABELS.get(base, base)
    return f"{label} ({variant})" if variant else label


def domain_key(domain: str) -> tuple:
    """Sort key: the official domains in protocol order, then each variant's levels, then any other domain."""
    base, variant = split_domain(domain)
    return (variant is not None, variant or "", DOMAINS.index(base) if base in DOMAINS else len(DOMAINS), domain)


def is_variant(domain: str) -> bool:
    return split_domain(domain)[1] is not None


@dataclass(frozen=True)
class Cell:
    """One (model, method, domain, shots) entry aggregated over seeds."""

    model: str
    method: str
    domain: str
    shots: int | None
    top1: float
    top1_std: float
    top5: float
    seeds: int
    relative: float | None = None  # top-1 minus the baseline's, in points
    expected: int | None = None  # the protocol's seed count (None: its rows record none)
    protocol: str | None = None  # the rows' protocol key (cog_pl.results.identity.protocol_key)
    relative_to: str | None = None  # the baseline cell the relative is taken against: "<model>/<method>"
    relative_note: str | None = None  # why there is no relative, or how the baseline's settings differ
    settings: tuple = ()  # the rows' settings (cog_pl.results.identity.settings_of) as sorted (name, JSON) pairs
    oracle: float | None = None  # mean oracle_test_top1 over the rows recording it (what selecting on test reports)
    gap: float | None = None  # selection optimism: mean of selection_gap over the rows recording it (points)
    gap_std: float = 0.0
    gap_seeds: int = 0  # the rows recording it (0: made before rows recorded it, n/a)
    protocol_kind: str | None = None  # paper, quick or custom (a tuned probe's rows), else None (protocol_names)
    protocol_words: str = NOT_RECORDED  # what the tables show: "paper (30 trials × 100 epochs, 5 seeds)"

    @property
    def shots_label(self) -> str:
        return "All" if self.shots is None else str(self.shots)

    @property
    def value(self) -> str:
        """Mean ± std of top-1, with n where it is not the protocol's seed count (:func:`spread`)."""
        return spread(self.top1, self.top1_std, self.seeds, self.expected)


def spread(mean: float, std: float, n: int, expected: int | None = None) -> str:
    """``56.90 ± 0.42`` over two or more seeds, ``56.90 ± 0.42 (n = 2)`` where the protocol has ``expected`` seeds
    and n is not that; ``56.90 (n = 1)`` for one seed, which has no spread to show."""
    if n < 2:
        return f"{mean:.2f} (n = {n})"
    return f"{mean:.2f} ± {std:.2f}" + (f" (n = {n})" if expected is not None and n != expected else "")


def expected_seeds(row: dict) -> int | None:
    """The seed count of the protocol a row was made under: the seeds its ``protocol`` records, else the published
    protocol's for a row made by cog-pl (it records an identity); None for a row written by hand."""
    recorded = (row.get("protocol") or {}).get("seeds") if isinstance(row.get("protocol"), dict) else None
    if recorded:
        return len(recorded)
    return len(ProbeProtocol().seeds) if protocol_key(row) else None


def selected_top1(row: Mapping[str, Any]) -> float | None:
    """The test top-1 of the head, trial or k a tuned row selected on held-out data, among those its oracle is the
    best of: its ``selected_test_top1``, else (an attentive or MLP row made before rows recorded it) the
    ``test_top1`` of its ``best_trial`` in its ``trials``; None where it records neither. Never the retrained head's
    ``test_top1``: that head is not among the trials the oracle is the best of."""
    selected = row.get("selected_test_top1")
    if selected is not None:
        return float(selected)
    best, trials = row.get("best_trial"), row.get("trials")
    if best is not None and isinstance(trials, list):
        found = [t.get("test_top1") for t in trials if isinstance(t, dict) and t.get("number") == best]
        if len(found) == 1 and found[0] is not None:
            return float(found[0])
    return None


def selection_gap(row: Mapping[str, Any]) -> float | None:
    """A tuned row's selection optimism (points): what selecting on test would have reported (``oracle_test_top1``,
    the best of its trials, heads or ks on test) minus what selecting on held-out data chose among the same ones
    (:func:`selected_top1`), so never negative; None for a row that records no oracle or no selected result (made
    before rows did, or untuned)."""
    oracle, selected = row.get("oracle_test_top1"), selected_top1(row)
    if oracle is None or selected is None:
        return None
    return float(oracle) - selected


def cell_of(row: dict) -> tuple:
    """The (model, method, domain, shots) cell of a row."""
    return row["model"], method_of(row), row["domain"], row.get("shots")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def summarize(rows: Iterable[dict], baseline: str | None = None) -> list[Cell]:
    """Aggregate rows over seeds per (model, method, domain, shots); rows of two protocols in one cell are refused
    (:func:`cog_pl.report.protocols.split_protocols` sets a cell's older ones apart). With a ``baseline`` model, fill
    ``relative`` against the baseline's cell of the same method, domain and shots, and ``relative_note`` where it has
    none or its settings differ. A seedless cell (zero-shot's) counts one row, however many runs of other seeds
    wrote one (:func:`~cog_pl.results.one_per_seedless_cell`)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in one_per_seedless_cell(list(rows)):
        groups[cell_of(r)].append(r)
    cells = {}
    for (model, method, domain, shots), rs in groups.items():
        mixed = [r for r in rs if protocol_key(r) != protocol_key(rs[0])]
        if mixed:
            raise CogError(f"rows of {model}/{method}/{domain}/shots={shots or 'all'} were made under two protocols "
                           f"({describe(protocol_differences(rs[0], mixed[0]), 1)} against "
                           f"{describe(protocol_differences(rs[0], mixed[0]), 2)}); a cell averages rows of one "
                           "protocol: cog_pl.report.split_protocols keeps each cell's newest")
        top1, std = mean_std([float(r["test_top1"]) for r in rs])
        top5, _ = mean_std([float(r.get("test_top5", math.nan)) for r in rs])
        settings = tuple(sorted((k, json.dumps(v, sort_keys=True, default=str)) for k, v in settings_of(rs[0]).items()))
        measured = [(float(r["oracle_test_top1"]), gap) for r in rs if (gap := selection_gap(r)) is not None]
        gap, gap_std = mean_std([g for _, g in measured]) if measured else (None, 0.0)
        kind, words = row_protocol(rs[0])
        cells[model, method, domain, shots] = Cell(model, method, domain, shots, top1, std, top5,
                                                   len({r["seed"] for r in rs}), expected=expected_seeds(rs[0]),
                                                   protocol=protocol_key(rs[0]), settings=settings,
                                                   oracle=mean_std([o for o, _ in measured])[0] if measured else None,
                                                   gap=gap, gap_std=gap_std, gap_seeds=len(measured),
                                                   protocol_kind=kind, protocol_words=words)
    if baseline:
        for key, c in list(cells.items()):
            base = cells.get((baseline, *key[1:]))
            if base is not None:
                cells[key] = Cell(**{**asdict(c), "relative": c.top1 - base.top1,
                                     "relative_to": f"{baseline}/{c.method}", "relative_note": _unlike(c, base)})
            else:
                cells[key] = Cell(**{**asdict(c), "relative_note": f"{baseline} has no {method_label(c.method)} row on "
                                                                   f"{domain_label(c.domain)}, shots {c.shots_label}"})
    return sorted(cells.values(), key=lambda c: (c.model, method_sort_key(c.method), domain_key(c.domain),
                                                 -1 if c.shots is None else c.shots))


_OWN_VALUES = ("model", "checkpoint_sha256", "transform")  # a fine-tuned model's own, not the run's choice


def _settings(settings: tuple) -> dict[str, Any]:
    return {k: json.loads(v) for k, v in settings}


def _settings_diff(a: Cell, b: Cell) -> list[tuple[str, Any, Any]]:
    """The settings in which two cells differ."""
    return value_differences(_settings(a.settings), _settings(b.settings))


def _unlike(c: Cell, base: Cell) -> str | None:
    """How the baseline cell's settings differ from ``c``'s (None when alike): its relative is not like with like."""
    diff = [d for d in _settings_diff(base, c) if d[0] not in _OWN_VALUES]
    return f"{base.model} made with {describe(diff, 1)}, this cell with {describe(diff, 2)}" if diff else None


def protocol_marks(cells: Iterable[Cell]) -> dict[tuple, str]:
    """A letter per settings of each (model, method) whose cells were made with more than one (``a``, ``b``, ..., in
    the order of the cells), by (model, method, settings); none for a model and method of one settings."""
    seen: dict[tuple, list[tuple]] = defaultdict(list)
    for c in cells:
        if c.settings not in seen[c.model, c.method]:
            seen[c.model, c.method].append(c.settings)
    return {(m, method, st): chr(ord("a") + i) for (m, method), sts in seen.items() if len(sts) > 1
            for i, st in enumerate(sts)}


def _mark(c: Cell, marks: Mapping[tuple, str]) -> str:
    letter = marks.get((c.model, c.method, c.settings))
    return f" [{letter}]" if letter else ""


def protocols_markdown(cells: Sequence[Cell], marks: Mapping[tuple, str]) -> str:
    """The legend of ``marks``: per model and method, each letter's cells and the settings that differ between
    them; empty without marks."""
    if not marks:
        return ""
    lines = ["## Cells made with other settings", "",
             "Each cell averages rows of one protocol; a model's cells marked [a], [b], ... were made with other "
             "settings, which differ in:", "", "| model | method | mark | settings | cells |", "|---" * 5 + "|"]
    for (model, method) in dict.fromkeys((m, meth) for m, meth, _ in marks):
        group = [c for c in cells if (c.model, c.method) == (model, method)]
        order = list(dict.fromkeys(c.settings for c in group))
        names = {d[0] for a in order for b in order for d in value_differences(_settings(a), _settings(b))}
        for st in order:
            where = ", ".join(f"{domain_label(c.domain)} ({c.shots_label})" for c in group if c.settings == st)
            shown = [d for d in value_differences(_settings(st), {}) if d[0] in names]
            lines.append(f"| {model} | {method_label(method)} | [{marks[model, method, st]}] | "
                         f"{describe(shown, 1, len(shown))} | {where} |")
    return "\n".join(lines)


def domains_of(cells: Sequence[Cell]) -> list[str]:
    return sorted({c.domain for c in cells}, key=domain_key)


def markdown_table(cells: Sequence[Cell], shots: int | None = None, relative: bool = False,
                   extra: Mapping[str, Mapping[str, str]] | None = None,
                   notes: Mapping[tuple[str, str], str] | None = None,
                   marks: Mapping[tuple, str] | None = None) -> str:
    """Models as rows, domains as columns, for one shots setting: ``mean ± std`` (or relative points). ``extra``:
    columns after the domains (model -> column -> text); ``notes``: text after a cell's value ((model, domain) ->
    text, e.g. a relative difference's interval); ``marks``: :func:`protocol_marks` (by default, of ``cells``)."""
    marks = protocol_marks(cells) if marks is None else marks
    sel = [c for c in cells if c.shots == shots]
    domains = domains_of(sel)
    models = sorted({c.model for c in sel})
    by = {(c.model, c.domain): c for c in sel}
    columns = list(dict.fromkeys(k for m in models for k in (extra or {}).get(m, {})))
    head = "| model | " + " | ".join([domain_label(d) for d in domains] + columns) + " |"
    lines = [head, "|---" * (len(domains) + len(columns) + 1) + "|"]
    for m in models:
        vals = []
        for d in domains:
            c = by.get((m, d))
            if c is None:
                vals.append("–")
            elif relative:
                vals.append("–" if c.relative is None else f"{c.relative:+.2f}")
            else:
                vals.append(c.value)
            if c is not None and (m, d) in (notes or {}) and vals[-1] != "–":
                vals[-1] += f" {notes[m, d]}"
            if c is not None and vals[-1] != "–":
                vals[-1] += _mark(c, marks)
        vals += [(extra or {}).get(m, {}).get(k, "–") for k in columns]
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def settings_digest(c: Cell) -> str:
    """The first 12 digits of the digest of a cell's settings (:func:`~cog_pl.results.identity.settings_of`: what a
    run chooses, never the features, so the same settings give the same digest on any stores); empty for rows that
    record no identity."""
    return digest(_settings(c.settings))[:12] if c.protocol else ""


def csv_table(cells: Sequence[Cell], runs: Mapping[str, str] | None = None) -> str:
    """Long format: one line per cell; ``protocol``: :func:`settings_digest`, ``protocol_name``: its words
    (:mod:`cog_pl.report.protocol_names`); ``runs`` (a report of several runs: each label's run,
    :mod:`cog_pl.report.runs`): a last column ``run`` naming it."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["model", "method", "domain", "shots", "top1_mean", "top1_std", "top5_mean", "seeds", "top1_relative",
                "relative_to", "relative_note", "protocol", "protocol_name", "oracle_top1_mean", "selection_gap_mean",
                "selection_gap_seeds", *(["run"] if runs else [])])
    for c in cells:
        w.writerow([c.model, c.method, c.domain, c.shots_label, f"{c.top1:.4f}", f"{c.top1_std:.4f}", f"{c.top5:.4f}",
                    c.seeds, "" if c.relative is None else f"{c.relative:.4f}", c.relative_to or "",
                    c.relative_note or "", settings_digest(c), c.protocol_words,
                    "" if c.oracle is None else f"{c.oracle:.4f}", "" if c.gap is None else f"{c.gap:.4f}",
                    c.gap_seeds, *([runs.get(c.model, "")] if runs else [])])
    return buf.getvalue()


def _not_the_papers(cells: Sequence[Cell]) -> list[str]:
    """A line per protocol other than the paper's (a named one, ``cog-pl run --protocol quick``, or other trials and
    epochs) some tuned probe's cells were made under, naming it in words and the models, and that they are not the
    paper's protocol."""
    models: dict[str, set[str]] = defaultdict(set)
    for c in cells:
        if c.protocol_kind is not None and c.protocol_kind != PAPER:
            models[c.protocol_words].add(c.model)
    return ["", *(f"**Not the paper's protocol: {words}** ({', '.join(sorted(ms))}): beside published numbers or "
                  "other models' cells these cells are a first check only."
                  for words, ms in sorted(models.items()))] if models else []


def cells_protocol(cells: Iterable[Cell], by_method: bool = False) -> str:
    """The protocol line of a table of ``cells`` (:func:`cog_pl.report.protocol_names.protocol_line`), its entries
    named by model, or by model and method (``by_method``)."""
    return protocol_line((f"{c.model} ({method_label(c.method)})" if by_method else c.model, c.protocol_words)
                         for c in cells)


def _main_table(cells: Sequence[Cell], summary: Mapping[str, Mapping[str, str]] | None,
                marks: Mapping[tuple, str]) -> tuple[list[str], bool]:
    """The report's first section: the linear probes on all data (with the ``summary`` columns), or, where no linear
    probe's row is there, every probe method's on all data; and whether it is the linear probes'."""
    official = official_cells(cells)
    linear = [c for c in official if c.shots is None]
    if linear:
        parts = ["## Linear probes on all training data: test top-1 (%), mean ± std over seeds", "",
                 cells_protocol(linear), "", markdown_table(official, None, extra=summary, marks=marks)]
        if any("L1−L5" in cols for cols in (summary or {}).values()):
            slope = any(k.startswith("slope") for cols in summary.values() for k in cols)
            parts += ["", "L1−L5: the top-1 drop from L1 to L5, paired by seed" + (
                "; slope: concept top-1 against similarity to the seen concepts (section Concepts)." if slope
                else ".")]
        return parts, True
    sel = [c for c in probe_cells(cells) if c.shots is None]
    if not sel:
        return ["## No probe rows on all training data", "",
                "No row of a probe method on all training data on IN-1K or L1..L5: the tables below hold what there "
                "is."], False
    shown = [m for m in probe_methods(sel) if any(c.method == m for c in sel)]
    return ["## " + " and ".join(method_label(m) for m in shown) + " on all training data: test top-1 (%), mean ± std "
            "over seeds (no linear-probe rows)", "", cells_protocol(sel, by_method=True), "",
            *method_table(sel, shown, lambda c: c.value, marks)], False


def report_markdown(cells: Sequence[Cell], baseline: str | None = None, variants: str = "",
                    summary: Mapping[str, Mapping[str, str]] | None = None,
                    intervals: Mapping[tuple[str, str], str] | None = None, concepts: str = "",
                    optimism: str = "") -> str:
    """The whole report: all-data table (with ``summary`` columns per model: the L1-L5 drop and the slope over
    similarity; every probe method's where there is no linear probe's), relative table (each difference with its
    paired interval, ``intervals``), the level variants' table (``variants``, markdown, from
    :func:`cog_pl.report.variants.variants_markdown`), the concept sections (``concepts``,
    :func:`cog_pl.report.concept_tables.concepts_markdown`) and one few-shot table per domain; ``optimism``: the
    selection-optimism section (:func:`cog_pl.report.probes.optimism_markdown`), after the probe methods' table.
    Each table names the protocol its cells were made under (:func:`cells_protocol`)."""
    official = official_cells(cells)
    marks = protocol_marks(cells)
    main, linear = _main_table(cells, summary, marks)
    parts = ["# ImageNet-CoG results", *_not_the_papers(cells), "", *main]
    if baseline and any(c.relative is not None for c in official):
        parts += ["", f"## Relative to {baseline} (top-1 points)", "",
                  cells_protocol(c for c in official if c.shots is None), "",
                  markdown_table(official, None, relative=True, notes=intervals, marks=marks)]
        lacking = sorted({c.relative_note for c in official if c.relative_note and c.relative is None})
        if lacking:
            parts += ["", "–: no relative where the baseline has no row of the same method: " + "; ".join(lacking)
                      + "."]
        unlike = sorted({f"{c.model} on {domain_label(c.domain)}: {c.relative_note}" for c in official
                         if c.relative_note and c.relative is not None and c.shots is None})
        if unlike:
            parts += ["", "Relatives between cells of other settings: " + "; ".join(unlike) + "."]
        if any(c.method != DEFAULT_METHOD for c in cells):
            parts += ["", "results.csv sets each method against the baseline's row of the same method (column "
                      "relative_to; relative_note says why where the baseline has none)."]
        if intervals:
            parts += ["", "[low, high]: 95 % paired bootstrap interval of the difference; n.s.: not significant "
                      "(paired permutation p ≥ 0.05); section Paired differences."]
    beside = methods_markdown(cells, marks) if linear else ""
    if beside:
        others = [method_label(m) for m in reversed(probe_methods(cells)) if m != DEFAULT_METHOD]
        named = ", ".join(others[:-1]) + " and " + others[-1] if len(others) > 1 else others[0]
        parts += ["", f"## {named} beside {method_label(DEFAULT_METHOD)}: test top-1 (%) on all data, mean ± std "
                  "over seeds", "",
                  cells_protocol((c for c in probe_cells(cells) if c.shots is None), by_method=True), "", beside]
    if optimism:
        parts += ["", optimism.rstrip("\n")]
    vs_ft = finetune_relative(cells)
    if vs_ft:
        parts += ["", "## Linear probe relative to fine-tuning (probe top-1 / fine-tuned top-1, %)", "",
                  cells_protocol((c for c in cells if c.shots is None and not is_variant(c.domain)
                                  and c.method in (DEFAULT_METHOD, FINETUNE)), by_method=True), "",
                  vs_ft, "", "Test top-1 (%) on all data, mean over seeds:", "", finetune_markdown(cells)]
    if variants:
        parts += ["", "## Level variants: top-1 (%) per level for each similarity measure (same model, all data, "
                  "mean ± std over seeds)", "",
                  "The same concepts cut into five levels by another similarity to IN-1K (`cog-pl features regroup`; "
                  "the official levels are Lin's). The larger a measure's L1−L5 drop, the more its levels order the "
                  "concepts by how hard they are for the model. The drop is paired by seed.", "",
                  cells_protocol(c for c in cells if c.method == DEFAULT_METHOD and c.shots is None
                                 and (is_variant(c.domain) or c.domain in LEVELS)), "", variants]
    if marks:
        parts += ["", protocols_markdown(cells, marks)]
    if concepts:
        parts += ["", concepts.rstrip("\n")]
    shots = sorted({c.shots for c in cells if c.shots is not None})
    if shots:
        methods = probe_methods(cells)
        few = {(c.model, c.method) for c in cells if c.shots is not None}
        parts += ["", "## Few-shot: test top-1 (%) per number of images per concept", "",
                  cells_protocol((c for c in cells if c.method in methods and not is_variant(c.domain)
                                  and (c.model, c.method) in few), by_method=True)]
        for d in domains_of([c for c in cells if c.shots is not None]):
            sel = [c for c in cells if c.domain == d and c.method in methods]
            lines = sorted({(c.model, methods.index(c.method)) for c in sel})
            by = {(c.model, c.method, c.shots): c for c in sel}
            cols = [*shots, None]
            parts += ["", f"### {domain_label(d)}", "",
                      "| model | " + " | ".join("All" if s is None else f"N={s}" for s in cols) + " |",
                      "|---" * (len(cols) + 1) + "|"]
            for m, i in lines:
                method = methods[i]
                vals = [_few_shot_value(by[m, method, s]) + _mark(by[m, method, s], marks) if (m, method, s) in by
                        else "–" for s in cols]
                name = m if method == DEFAULT_METHOD else f"{m} ({method_label(method)})"
                parts.append(f"| {name} | " + " | ".join(vals) + " |")
    return "\n".join(parts) + "\n"


def _few_shot_value(c: Cell) -> str:
    """A few-shot table's entry: the mean, with n where it is not the protocol's seed count."""
    return f"{c.top1:.2f}" + (f" (n = {c.seeds})" if c.expected is not None and c.seeds != c.expected else "")


def probe_methods(cells: Iterable[Cell]) -> list[str]:
    """The probe methods with cells (every method that evaluates the frozen backbone, on features or on images: all but
    fine-tuning), the linear probe first, in report order."""
    have = {c.method for c in cells} | {DEFAULT_METHOD}
    return sort_methods(m for m in have if is_frozen(m))


def probe_cells(cells: Iterable[Cell]) -> list[Cell]:
    """Every probe method's cells on the official domains (the linear probe's and, say, the k-NN's)."""
    cells = list(cells)
    methods = probe_methods(cells)
    return [c for c in cells if not is_variant(c.domain) and c.method in methods]


def methods_markdown(cells: Sequence[Cell], marks: Mapping[tuple, str] | None = None) -> str:
    """Markdown table of every probe method's top-1 per official domain on all data, a line per (model, method);
    empty when the linear probe is the only method. ``marks``: :func:`protocol_marks` (by default, of ``cells``)."""
    marks = protocol_marks(cells) if marks is None else marks
    methods = probe_methods(cells)
    if len(methods) < 2:
        return ""
    return "\n".join(method_table([c for c in probe_cells(cells) if c.shots is None], methods,
                                   lambda c: c.value, marks))


def method_table(sel: Sequence[Cell], methods: Sequence[str], value: Callable[[Cell], str],
                 marks: Mapping[tuple, str]) -> list[str]:
    """The lines of a table of ``sel``'s cells, a line per (model, method of ``methods`` it has cells of) and a column
    per official domain, each entry ``value(cell)`` with its protocol mark (``–`` where the cell is missing)."""
    domains = domains_of(sel)
    by = {(c.model, c.method, c.domain): c for c in sel}
    lines = ["| model | method | " + " | ".join(domain_label(d) for d in domains) + " |",
             "|---" * (len(domains) + 2) + "|"]
    for m in sorted({c.model for c in sel}):
        for method in methods:
            got = [by.get((m, method, d)) for d in domains]
            if any(got):
                lines.append(f"| {m} | {method_label(method)} | " + " | ".join(
                    "–" if c is None else value(c) + _mark(c, marks) for c in got) + " |")
    return lines


def official_cells(cells: Iterable[Cell]) -> list[Cell]:
    """The linear probes' cells on the official domains: no level variant, no other method."""
    return [c for c in cells if not is_variant(c.domain) and c.method == DEFAULT_METHOD]


def _finetune_pairs(cells: Sequence[Cell]) -> tuple[list[str], dict[tuple[str, str, str], Cell]]:
    """The models with fine-tuned cells, and the all-data cells by (model, method, domain)."""
    by = {(c.model, c.method, c.domain): c for c in cells if c.shots is None}
    return sorted({c.model for c in cells if c.method == FINETUNE}), by


def finetune_markdown(cells: Sequence[Cell]) -> str:
    """Markdown table of the linear probe's and the fine-tuned model's top-1 per domain (all data), per model."""
    models, by = _finetune_pairs(cells)
    domains = [d for d in DOMAINS if any((m, FINETUNE, d) in by for m in models)]
    lines = ["| model | method | " + " | ".join(DOMAIN_LABELS[d] for d in domains) + " | seeds |",
             "|---" * (len(domains) + 3) + "|"]
    for m in models:
        for method in (DEFAULT_METHOD, FINETUNE):
            got = [by.get((m, method, d)) for d in domains]
            seeds = sorted({c.seeds for c in got if c is not None})
            vals = " | ".join("–" if c is None else f"{c.top1:.2f}" for c in got)
            lines.append(f"| {m} | {method_label(method)} | {vals} | " + ("/".join(map(str, seeds)) or "–") + " |")
    return "\n".join(lines)


def finetune_relative(cells: Sequence[Cell]) -> str:
    """Markdown table of ``100 * probe / fine-tuned`` top-1 per domain, for models with fine-tuned cells."""
    models, by = _finetune_pairs(cells)
    models = [m for m in models if any((m, DEFAULT_METHOD, d) in by for d in DOMAINS)]
    if not models:
        return ""
    domains = [d for d in DOMAINS if any((m, DEFAULT_METHOD, d) in by and (m, FINETUNE, d) in by for m in models)]
    lines = ["| model | " + " | ".join(DOMAIN_LABELS[d] for d in domains) + " |", "|---" * (len(domains) + 1) + "|"]
    for m in models:
        vals = []
        for d in domains:
            probe, ft = by.get((m, DEFAULT_METHOD, d)), by.get((m, FINETUNE, d))
            vals.append(f"{100 * probe.top1 / ft.top1:.1f}" if probe and ft and ft.top1 > 0 else "–")
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    return "\n".join(lines)
