"""Write the whole report of a results store: markdown, CSV, the figures and, on request, one HTML page."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from cog_pl.analysis.paired import SEED
from cog_pl.errors import CogError, MissingFileError
from cog_pl.io import atomic_open
from cog_pl.provenance import created, versions
from cog_pl.report.concept_tables import (
    concept_rows,
    concepts_csv,
    concepts_markdown,
    relative_intervals,
    summary_columns,
)
from cog_pl.report.concepts import concept_report
from cog_pl.report.export import FOLDER as EXPORT_FOLDER
from cog_pl.report.export import LEADERBOARD, export_records, leaderboard_markdown, write_exports
from cog_pl.report.html import report_html
from cog_pl.report.models import model_facts, models_markdown, resolve_baseline
from cog_pl.report.plots import (
    plot_domains,
    plot_few_shot,
    plot_gain_curves,
    plot_methods,
    plot_severity,
    plot_similarity_curves,
    plot_variants,
)
from cog_pl.report.probes import optimism_markdown
from cog_pl.report.protocols import split_protocols, stale_markdown
from cog_pl.report.ridge import ridge_markdown
from cog_pl.report.runs import Runs, merge_sections, read_runs, runs_markdown, runs_note, with_runs
from cog_pl.report.severity import add_concept_columns, severity_markdown, severity_report
from cog_pl.report.tables import csv_table, official_cells, probe_cells, report_markdown, summarize
from cog_pl.report.variants import variant_lines, variants_markdown
from cog_pl.report.zeroshot import zeroshot_markdown
from cog_pl.results import read_info, read_rows, row_times

logger = logging.getLogger(__name__)


def skipped_markdown(features: str | Path, models: Sequence[str] = ()) -> str:
    """A report section counting, per store under ``features`` (``<model>/<domain>/<split>``), the images skipped as
    unreadable at extraction (meta.json ``missing``, left out of the probes); empty when none was skipped."""
    lines = []
    for meta in sorted(Path(features).glob("*/*/*/meta.json")):
        model, domain, split = meta.parts[-4:-1]
        if models and model not in models:
            continue
        try:
            missing = json.loads(meta.read_text()).get("missing") or []
        except (OSError, ValueError, AttributeError):
            continue
        if missing:
            lines.append(f"| {model} | {domain} | {split} | {len(missing)} | {missing[0].get('path')} |")
    if not lines:
        return ""
    return ("\n## Images skipped at extraction (unreadable, left out of the probes)\n\n"
            "| model | domain | split | skipped | first |\n|---|---|---|---|---|\n" + "\n".join(lines) + "\n")


#: Every file a report may write into its folder; those a report does not write this time are removed, so a folder
#: holds one report (:func:`write_report`).
ARTEFACTS = ("report.md", "results.csv", "concepts.csv", "domains.png", "domains_relative.png", "few_shot.png",
             "methods.png", "variants.png", "concepts_similarity.png", "concepts_similarity_relative.png",
             "probe_gains.png", "severity.png", "report.html", "leaderboard.md")
#: The results store's ``info`` key of the feature stores' root its rows were made from (``cog-pl run`` records it).
FEATURES_INFO = "features"


def recorded_features(results: str | Path) -> Path | None:
    """The feature stores' root ``results`` records (:data:`FEATURES_INFO`), where it still exists."""
    found = read_info(results, FEATURES_INFO)
    return Path(found) if found and Path(found).is_dir() else None


def trusted_markdown(features: str | Path, models: Sequence[str] = ()) -> str:
    """One line per model whose feature stores under ``features`` were made from a checkpoint read with trust
    (meta.json ``trusted_checkpoint``: code from the file, or from the file it was converted from, ran)."""
    trusted = {}
    for meta in sorted(Path(features).glob("*/*/*/meta.json")):
        model = meta.parts[-4]
        try:
            facts = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(facts, dict) and facts.get("trusted_checkpoint") and (not models or model in models):
            trusted.setdefault(model, facts.get("weights"))
    return "".join(f"\n{model}'s features were made from a checkpoint read with trust_checkpoint (code from "
                   f"{weights} or the file it was converted from ran when it was read).\n"
                   for model, weights in trusted.items())


def check_out(out: str | Path) -> None:
    """Refuse, in one line naming it, an output folder where a file stands (``out`` or a folder above it)."""
    blocker = next((p for p in (Path(out), *Path(out).parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        where = "" if blocker == Path(out) else f" ({blocker}, a folder above it, is a file)"
        raise CogError(f"report folder {out} cannot be made: {'it is a file' if not where else 'a file is in the way'}"
                       f"{where}; give --out a folder")


def check_report_arguments(results: str | Path, out: str | Path, features: str | Path | None = None) -> None:
    """Refuse, before any work, a results file that does not exist, an output folder where a file stands (``out``
    or a folder above it) and a feature stores' root given that is not a folder: each in one line naming it."""
    if not Path(results).exists():
        raise MissingFileError(f"results file {results} does not exist (cog-pl run and cog-pl probe write it)")
    check_out(out)
    if features is not None and not Path(features).is_dir():
        error = CogError if Path(features).exists() else MissingFileError
        raise error(f"features {features} {'is a file' if error is CogError else 'does not exist'}: give the feature "
                    "stores' root (OUT/features of cog-pl run), or leave --features out")


def write_report(results: str | Path | Sequence[str | Path], out: str | Path, models: Sequence[str] = (),
                 baseline: str | None = None, features: str | Path | None = None, levels: str | Path | None = None,
                 html: bool = True, seed: int = SEED, export: bool = False) -> dict[str, Path]:
    """Tables and plots of ``models`` (all models in the store when empty); returns the files written. With
    ``features`` (the feature stores' root; by default the one the results store records), the images each store
    skipped as unreadable are counted. The concept sections come from the predictions stored beside the rows
    (:mod:`cog_pl.report.concepts`; similarity from ``levels``, a level or benchmark file, by default the source the
    results store records, else WordNet; every bootstrap seeded by ``seed``); ``html``: also ``report.html``
    (:mod:`cog_pl.report.html`). The files of :data:`ARTEFACTS` in ``out`` that this report does not write (a plot
    of a method no longer shown, ``report.html`` without ``html``) are removed: ``cog-pl run`` and ``cog-pl report``
    leave the same set. A cell's rows of an older protocol than its newest row's are left out of every
    table, figure and analysis and listed in a section of their own
    (:func:`~cog_pl.report.protocols.split_protocols`). ``results``: one results store, or several (runs of one
    benchmark and protocol, :mod:`cog_pl.report.runs`), each label's rows from one of them, named in the tables.
    ``export``: also one ``export/<label>.json`` per model and ``leaderboard.md`` (:mod:`cog_pl.report.export`);
    without it, those of an earlier report are removed."""
    started = time.perf_counter()
    stores = [Path(results)] if isinstance(results, (str, os.PathLike)) else [Path(r) for r in results]
    if not stores:
        raise CogError("no results store to report: give --results or --runs")
    for store in stores:
        check_report_arguments(store, out, features)
    runs = None
    if len(stores) > 1:
        if features is not None:
            raise CogError(f"--features {features} names one feature stores' root; a report of several results stores "
                           "reads the root each records: leave --features out")
        runs = read_runs(stores)  # refuses stores of other benchmarks, similarity sources or protocols
        rows, times, roots = runs.rows, runs.times, runs.features_of()
    else:
        rows, times = read_rows(stores[0]), row_times(stores[0])
        if not rows:
            raise CogError(f"results file {stores[0]} holds no rows (run `cog-pl run` or `cog-pl probe` first)")
        root = features if features is not None else recorded_features(stores[0])
        roots = {r["model"]: root for r in rows}
    where = ", ".join(map(str, stores))
    results = stores[0]  # the store of every row that names none (cog_pl.report.concepts.STORE): the one of one
    known = sorted({r["model"] for r in rows})
    baseline = resolve_baseline(baseline, known)  # a label, or the model name of one (resnet50, ResNet-50)
    missing = [m for m in (*models, *([baseline] if baseline else [])) if m not in known]
    if missing:
        raise CogError(f"no results for model(s) {', '.join(missing)} in {where}; it has {', '.join(known)}")
    if models:
        keep = set(models) | ({baseline} if baseline else set())
        rows = [r for r in rows if r["model"] in keep]
    rows, stale = split_protocols(rows, times)  # a cell's older protocols: listed, never averaged
    cells = summarize(rows, baseline)
    official = official_cells(cells)  # the probes' figures
    variants = variant_lines(rows)
    concepts = concept_report(results, rows, baseline, levels, seed)
    severity = severity_report(concepts.predictions, seed)
    out = Path(out)
    files = {"markdown": out / "report.md", "csv": out / "results.csv"}
    markdown = (report_markdown(cells, baseline, variants_markdown(variants) if variants else "",
                                with_runs(summary_columns(concepts), runs, rows), relative_intervals(concepts),
                                concepts_markdown(concepts, probe_cells(cells))
                                + severity_markdown(severity, cells),
                                optimism_markdown(cells) + ridge_markdown(cells, rows, results, seed)
                                + zeroshot_markdown(
                                    cells, rows, concepts.scores, concepts.info.similarity if concepts.info else None,
                                    concepts.info.measure if concepts.info else "similarity", seed))
                + _features_markdown(roots, rows, models, runs) + stale_markdown(stale, rows)
                + (runs_markdown(runs) if runs else "") + models_markdown(rows, roots, runs.run_of if runs else None))
    if runs:
        markdown = markdown.replace("# ImageNet-CoG results\n", f"# ImageNet-CoG results\n\n{runs_note(runs)}\n", 1)
    with atomic_open(files["markdown"]) as fh:
        fh.write(markdown)
    with atomic_open(files["csv"]) as fh:
        fh.write(csv_table(cells, runs.run_of if runs else None))
    concept_lines = concept_rows(concepts)
    add_concept_columns(concept_lines, severity)
    if concept_lines:
        files["concepts"] = out / "concepts.csv"
        with atomic_open(files["concepts"]) as fh:
            fh.write(concepts_csv(concept_lines))
    if any(c.shots is None for c in official):  # the linear probes' (none: a report of other methods' rows)
        files["domains"] = plot_domains(official, out / "domains.png")
    if baseline and official:
        files["relative"] = plot_domains(official, out / "domains_relative.png", relative=True, baseline=baseline)
    probes = probe_cells(cells)  # the linear probe's and other probe methods' (k-NN) cells
    if any(c.shots is not None for c in probes):
        files["few_shot"] = plot_few_shot(probes, out / "few_shot.png")
    if len({c.method for c in probes}) > 1:
        files["methods"] = plot_methods(probes, out / "methods.png")
    if variants:
        files["variants"] = plot_variants(variants, out / "variants.png")
    if concepts.curves:
        files["concepts_similarity"] = plot_similarity_curves(concepts.curves, out / "concepts_similarity.png",
                                                              concepts.info.measure)
    if concepts.relative:
        files["concepts_similarity_relative"] = plot_similarity_curves(
            concepts.relative, out / "concepts_similarity_relative.png", concepts.info.measure, baseline)
    gains = {method: gain.curves for method, gain in concepts.gains.items() if gain.curves}
    if gains:
        files["probe_gains"] = plot_gain_curves(gains, out / "probe_gains.png", concepts.info.measure)
    if severity.cells:
        files["severity"] = plot_severity(severity.cells, out / "severity.png")
    if export:
        records = export_records(cells, rows, model_facts(rows, roots), concepts.predictions,
                                 runs.run_of if runs else None, seed)
        files["export"] = out / EXPORT_FOLDER
        write_exports(files["export"], records)
        files["leaderboard"] = out / LEADERBOARD
        with atomic_open(files["leaderboard"]) as fh:
            fh.write(leaderboard_markdown(list(records.values()), where))
    elif (out / EXPORT_FOLDER).is_dir():
        write_exports(out / EXPORT_FOLDER, {})  # an earlier report's records: this one exports none
    if html:
        figures = {k: v for k, v in files.items() if v.suffix == ".png"}
        made = {"results": where, "made": created(), "by": f"cog_pl {versions()['cog_pl']}",
                "seed": str(seed), "seconds": f"{time.perf_counter() - started:.1f}"}
        files["html"] = out / "report.html"
        with atomic_open(files["html"]) as fh:
            fh.write(report_html(markdown, figures, concept_lines, made))
    _remove_stale(out, files)
    return files


def _features_markdown(roots: dict[str, Path | None], rows: Sequence[dict], models: Sequence[str],
                       runs: Runs | None) -> str:
    """The sections read from the feature stores' meta.json (images skipped at extraction, checkpoints read with
    trust): of the one root (``models``: the labels asked for, all by default), or of each run's, for its labels."""
    if runs is None:
        root = next(iter(roots.values()), None)
        return skipped_markdown(root, models) + trusted_markdown(root, models) if root is not None else ""
    shown = {r["model"] for r in rows}
    by_root: dict[Path, list[str]] = {}
    for label, root in sorted(roots.items()):
        if root is not None and label in shown:
            by_root.setdefault(root, []).append(label)
    return (merge_sections([skipped_markdown(root, labels) for root, labels in by_root.items()])
            + "".join(trusted_markdown(root, labels) for root, labels in by_root.items()))


def _remove_stale(out: Path, files: dict[str, Path]) -> None:
    """Remove the report files (:data:`ARTEFACTS`) in ``out`` that this report did not write."""
    written = {p.name for p in files.values()}
    for name in ARTEFACTS:
        if name not in written and (out / name).is_file():
            (out / name).unlink()
            logger.info("removed %s: this report does not write it", out / name)
