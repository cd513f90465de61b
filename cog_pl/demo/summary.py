"""The demo's closing summary: the stage times, the main table, each model relative to the baseline, the files (the
report, its page, plots and tables)."""

from __future__ import annotations

from cog_pl.demo.run import DemoSummary
from cog_pl.progress import duration
from cog_pl.report.concept_tables import interval_text
from cog_pl.report.concepts import paired_to_baseline, stored_predictions
from cog_pl.report.protocols import split_protocols
from cog_pl.report.tables import markdown_table, official_cells, summarize
from cog_pl.results import read_rows, row_times


def format_demo_summary(s: DemoSummary) -> str:
    """Plain text for the end of ``cog-pl demo``: what took how long, the linear probes on all data (absolute and
    relative to the baseline), and where the report and the plots are."""
    rows = [r for r in read_rows(s.out / "results.sqlite") if r["model"] in s.models]
    rows, _ = split_protocols(rows, row_times(s.out / "results.sqlite"))  # as the report: its stale rows listed there
    cells = official_cells(summarize(rows, s.baseline))
    seeds = sorted({c.seeds for c in cells if c.shots is None})
    width = max(len(k) for k in s.seconds) + 2
    lines = ["", f"cog-pl demo finished in {duration(sum(s.seconds.values()))}. Time of each stage:"]
    lines += [f"  {stage:<{width}}{duration(sec):>10}" for stage, sec in s.seconds.items()]
    over = "one seed (n = 1, no spread)" if seeds == [1] else f"mean ± std over {'/'.join(map(str, seeds))} seeds"
    lines += ["", f"Linear probe on all data: test top-1 (%), {over}", "", markdown_table(cells, None)]
    if len(s.models) > 1:
        stored, _ = stored_predictions(s.out / "results.sqlite", rows)
        paired, _ = paired_to_baseline(stored, s.baseline, s.models)
        notes = {key: interval_text(p) for key, p in paired.items()}
        lines += ["", f"Relative to the baseline {s.baseline} (top-1 points; the paper's Fig. 3 (b)-(e) view"
                  + ("; [95 % paired bootstrap interval], n.s.: not significant" if notes else "") + ")", "",
                  markdown_table(cells, None, relative=True, notes=notes).replace("| model |",
                                                                                 f"| model − {s.baseline} |", 1)]
    lines += ["", f"report: {s.report['markdown']}"]
    lines += [f"page:   {s.report['html']}"] if "html" in s.report else []
    lines += [f"plot:   {path}" for path in s.report.values() if path.suffix == ".png"]
    lines += [f"table:  {path}" for path in s.report.values() if path.suffix == ".csv"]
    return "\n".join(lines)
