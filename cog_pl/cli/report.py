"""``cog-pl report``: tables and figures from a results store, or from several runs' stores side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from cog_pl.cli.options import at_least


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="result tables (markdown, CSV) and plots from a results store",
                       description="Top-1 mean ± std over seeds per domain and shots, relative to a baseline "
                                   "with paired intervals, the paper's plots, and concept-level results from the "
                                   "stored test predictions, for any number of models side by side; of one run, or "
                                   "of several runs of one benchmark and protocol (--runs A B, --results A B).")
    p.add_argument("models", nargs="*", help="models to show (default: all in the store); before --runs")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--results", type=Path, action="append", default=None, metavar="FILE",
                       help="results store (SQLite; default: results.sqlite); several (--results A B, or --results A "
                            "--results B): one report of several runs of one benchmark, similarity source and "
                            "protocol (refused otherwise), each label's rows from the first store given that holds "
                            "it, its run named in the tables")
    given.add_argument("--runs", type=Path, nargs="+", default=None, metavar="DIR",
                       help="run folders (cog-pl run --out DIR): their DIR/results.sqlite, as --results")
    given.add_argument("--leaderboard", type=Path, nargs="+", default=None, metavar="EXPORT",
                       help="export files (cog-pl report --export, one per model, from anyone): check they share "
                            "the format, benchmark digest and linear-probe protocol, and write OUT/leaderboard.md of "
                            "them (no results store read)")
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
    p.add_argument("--export", action="store_true",
                   help="also write OUT/export/<model>.json, one machine-readable file per model (format "
                        "cog-pl-export v1: label, weights digest, benchmark digest, protocol in words, per-level "
                        "top-1 with intervals), and OUT/leaderboard.md of every model, ranked by L5 and by L1−L5")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from cog_pl.report.build import write_report
    from cog_pl.report.summary import console_summary

    if args.leaderboard is not None:
        return _leaderboard(args)
    if args.runs is not None:
        from cog_pl.report.runs import run_stores

        stores = run_stores(args.runs)
    else:
        stores = args.results or [Path("results.sqlite")]
        if args.results:  # --results A B: the SQLite files among the words after A are stores too, not labels
            more = [Path(m) for m in args.models if _is_sqlite(Path(m))]
            stores = [*stores, *more]
            args.models = [m for m in args.models if not _is_sqlite(Path(m))]
    files = write_report(stores[0] if len(stores) == 1 else stores, args.out, args.models, args.baseline,
                         args.features, levels=args.levels, html=args.html, seed=args.seed, export=args.export)
    print(console_summary(files))  # the main table and where the rest is: the whole report stays in its files
    return 0


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` is an SQLite file (its header), not a model's label."""
    try:
        with path.open("rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _leaderboard(args: argparse.Namespace) -> int:
    """``--leaderboard``: a leaderboard of export files, checked as a shared one checks them."""
    from cog_pl.errors import CogError
    from cog_pl.io import atomic_open
    from cog_pl.report.build import check_out
    from cog_pl.report.export import LEADERBOARD, leaderboard_markdown, read_exports

    if args.models or args.export or args.baseline:
        raise CogError("--leaderboard makes a leaderboard of export files only: leave out models, --baseline and "
                       "--export")
    check_out(args.out)
    records = read_exports(args.leaderboard)
    path = args.out / LEADERBOARD
    with atomic_open(path) as fh:
        fh.write(leaderboard_markdown(records, f"{len(records)} export file(s)"))
    print(f"{len(records)} model(s) ranked: {path}")
    return 0
