"""The demo's closing summary: the stage times, then what every command prints of its report (the main table, one
line per other section, the files: :func:`cog_pl.report.summary.console_summary`)."""

from __future__ import annotations

from cog_pl.demo.run import DemoSummary
from cog_pl.progress import duration
from cog_pl.report.summary import console_summary


def format_demo_summary(s: DemoSummary) -> str:
    """Plain text for the end of ``cog-pl demo``: what took how long, then the report's main table, its other
    sections one line each and where its files are."""
    width = max(len(k) for k in s.seconds) + 2
    lines = ["", f"cog-pl demo finished in {duration(sum(s.seconds.values()))}. Time of each stage:"]
    lines += [f"  {stage:<{width}}{duration(sec):>10}" for stage, sec in s.seconds.items()]
    return "\n".join([*lines, "", console_summary(s.report)])
