"""``cog-pl report``: tables and figures from a results store."""

from __future__ import annotations

import argparse
from pathlib import Path

from cog_pl.cli.options import at_least


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="result tables (markdown, CSV) and plots from a results store",
                       description="Top-1 mean ± std over seeds per domain and shots, relative to a baseline "
                                   "with paired intervals, the paper's plots, and concept-level results from the "
                                   "stored test predictions, for any number of models side by side.")
    p.add_argument("models", nargs="*", help="models to show (default: all in the store)")
    p.add_argument("--results", type=Path, default=Path("results.sqlite"), help="results store (SQLite)")
    p.add_argument("--baseline", default=None, help="model the relative accuracies refer to, e.g. resnet50")
    p.add_argument("--out", type=Path, default=Path("report"),
                   help="folder for report.md, results.csv, PNGs, report.html; report files of an earlier report "
                        "that this one does not write are removed")
    p.add_argument("--features", type=Path, default=None,
                   help="feature stores' root: count the images each store skipped as unreadable (--on-error skip); "
                        "default: the one the results store records (cog-pl run records its own)")
    p.add_argument("--html", action=argparse.BooleanOptionalAction, default=True,
                   help="also write report.html: the tables, the figures and a per-concept table to sort and filter, "
                        "in one self-contained page (default: on, as in cog-pl run; --no-html removes an older one)")
    p.add_argument("--levels", type=Path, default=None,
                   help="level file (cog-pl levels build) or benchmark file giving each level concept's similarity to "
                        "the seen concepts (any measure) and its closest seen concept; default: the source the "
                        "results store records (cog-pl run records its benchmark file's), else Lin similarity to "
                        "IN-1K from WordNet")
    p.add_argument("--seed", type=at_least(0), default=0,
                   help="seed of the bootstrap intervals and permutation tests (an integer of at least 0)")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from cog_pl.report.build import write_report
    from cog_pl.report.summary import console_summary

    files = write_report(args.results, args.out, args.models, args.baseline, args.features, levels=args.levels,
                         html=args.html, seed=args.seed)
    print(console_summary(files))  # the main table and where the rest is: the whole report stays in its files
    return 0
