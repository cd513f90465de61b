"""Result tables and figures, computed from result rows only.

- :mod:`~cog_pl.report.build`: :func:`write_report`, the report of a results store (markdown, CSV, plots, HTML).
- :mod:`~cog_pl.report.tables`, ``plots``, ``variants``, ``concepts``, ``concept_tables``, ``html``, ``probes``,
  ``protocols``, ``protocol_names``: its parts.
- :mod:`~cog_pl.report.summary`: :func:`console_summary`, what the commands print of a report.
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "write_report": ".build",
    "summarize": ".tables",
    "split_protocols": ".protocols",
    "report_markdown": ".tables",
    "markdown_table": ".tables",
    "csv_table": ".tables",
    "Cell": ".tables",
    "report_html": ".html",
    "concept_report": ".concepts",
    "plot_domains": ".plots",
    "console_summary": ".summary",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
