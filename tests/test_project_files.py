"""The project's own files: one version in one place, the changelog and citation that name it, a README of two
screens, a documentation nav that holds every page."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from cog_pl import __version__

REPO = Path(__file__).resolve().parents[1]


def test_the_version_is_written_once():
    assert "version = attr: cog_pl.version.__version__" in (REPO / "setup.cfg").read_text()
    assert "version" not in (REPO / "pyproject.toml").read_text().split("[tool", 1)[0]
    assert not re.search(r"^version:", (REPO / "CITATION.cff").read_text(), re.M)  # cite yours: cog-pl --version


def test_the_changelog_starts_with_this_version():
    headings = re.findall(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == __version__


def test_the_citation_names_the_paper_and_the_package():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    paper = cff["preferred-citation"]
    assert paper["title"] == "Concept Generalization in Visual Representation Learning" and paper["year"] == 2021
    assert [a["family-names"] for a in paper["authors"]] == ["Sariyildiz", "Kalantidis", "Larlus", "Alahari"]
    assert cff["type"] == "software" and "cog_pl" in cff["title"]


def test_the_readme_fits_on_two_screens():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 150
    assert "bash scripts/run.sh" in lines[lines.index("## Quick start") + 5]  # the two commands open the page
    assert any(line.startswith("bash scripts/test.sh") for line in lines)


def test_the_readme_gives_the_demo_time_on_a_quiet_and_on_a_busy_machine():
    """Issue 39 (6): the quick start says what the demo costs on quiet cores and under load, figures the performance
    page measured (with their date, machine and command)."""
    readme = " ".join((REPO / "README.md").read_text().split("## Quick start")[1].split("\n## ")[0].split())
    said = next((s for s in readme.split(". ") if "quiet" in s and "cog-pl demo" in s), "no quiet machine")
    times = re.findall(r"\d+ min(?: \d+ s)?", said)
    assert len(times) >= 2 and "load" in said, said
    page = " ".join((REPO / "docs" / "explanation" / "performance.md").read_text().split())
    demo = page.split("## The demo")[1].split(" ## ")[0]
    assert all(t in demo for t in times) and "load average" in demo, times


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for v in node.values() for p in _nav_pages(v)]
    return [p for v in node for p in _nav_pages(v)]


def test_the_docs_nav_holds_every_page_and_only_pages_that_exist():
    """What `mkdocs build --strict` also checks (CI): a page outside the nav is a page nobody finds."""
    text = (REPO / "mkdocs.yml").read_text()
    nav = _nav_pages(yaml.safe_load("nav:" + text.split("\nnav:", 1)[1].split("\nhooks:", 1)[0]))
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")
             if "hooks" not in p.parts}
    assert sorted(nav) == sorted(pages)
