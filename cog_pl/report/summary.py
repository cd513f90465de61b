"""What ``cog-pl run``, ``cog-pl report`` and ``cog-pl demo`` print of a report: its main table, one line per other
section, and where the files are. The whole report stays in its files (``report.md``, ``report.html``, the figures
and tables): a console of a few hundred lines would scroll the main table away."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["console_summary"]

#: How each kind of report file is introduced, by suffix.
_KINDS = {".md": "report", ".html": "page", ".png": "plot", ".csv": "table"}


def _sections(markdown: str) -> tuple[list[str], list[str], list[str]]:
    """(the lines before the first section, the first section's lines, the other sections' headings)."""
    before: list[str] = []
    sections: list[list[str]] = []
    for line in markdown.splitlines():
        if line.startswith("## "):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
        elif not line.startswith("# "):
            before.append(line)
    return before, sections[0] if sections else [], [s[0][3:] for s in sections[1:]]


def console_summary(files: Mapping[str, Path]) -> str:
    """The console text of a report whose files are ``files`` (:func:`cog_pl.report.build.write_report`'s): the
    notes above its first table (a protocol other than the paper's), its first section (the linear probes on all
    data, or every probe method's where there is no linear probe's: the table and its protocol line), the heading of
    every other section of ``report.md``, one line each, and every file written."""
    before, main, others = _sections(Path(files["markdown"]).read_text())
    lines = [line.replace("**", "") for line in before if line.strip()]
    if main:
        lines += [""] * bool(lines) + [main[0][3:], *main[1:]]
    while lines and not lines[-1].strip():
        lines.pop()
    if others:
        lines += ["", f"In {files['markdown'].name} (and {files['html'].name})" if "html" in files
                  else f"In {files['markdown'].name}", *(f"  - {title}" for title in others)]
    lines += [""] + [f"{_KINDS.get(path.suffix, 'file') + ':':<7} {path}"
                     for path in sorted(files.values(), key=lambda p: (list(_KINDS).index(p.suffix)
                                                                       if p.suffix in _KINDS else len(_KINDS), p.name))]
    return "\n".join(lines)
