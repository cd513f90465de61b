"""The CLI reference as the docs site renders it, and what ``cog-pl extract --help`` lists (issue 39, item 4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cog_pl.cli.reference import _md

markdown = pytest.importorskip("markdown")  # the docs' renderer (mkdocs's dependency, in the dev extra)
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _code_spans(text: str) -> list[str]:
    """The code spans of Markdown ``text`` rendered as the site renders tables (Python-Markdown's ``tables``)."""
    return re.findall(r"<code>(.*?)</code>", markdown.markdown(text, extensions=["tables"]))


def test_a_pipe_in_a_code_span_of_a_table_cell_shows_no_backslash():
    row = "| " + _md("`fit|test` or `N|auto`, a|b <x>") + " | y |"
    html = markdown.markdown("| a | b |\n|---|---|\n" + row, extensions=["tables"])
    assert "<code>fit|test</code>" in html and "<code>N|auto</code>" in html, html
    assert "a|b &lt;x&gt;</td>" in html and "<td>y</td>" in html, html  # outside code: escaped, one cell still


@pytest.mark.parametrize("page", ["reference/cli.md", "reference/configs.md"])
def test_the_written_reference_pages_show_no_escaped_pipe(page):
    spans = _code_spans((DOCS / page).read_text())
    assert spans and not [s for s in spans if "\\|" in s]


def test_extract_help_lists_the_launcher_options(capsys):
    """docs/cluster.md names ``cog-pl extract ... --launcher slurm``: its ``--help`` says so too."""
    from cog_pl.cli import extract

    with pytest.raises(SystemExit) as exit_:
        extract.run(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "--trainer.devices" in out  # the LightningCLI's own help first
    tail = out[out.index("cluster (SLURM)"):]
    assert all(flag in tail for flag in ("--launcher slurm|sbatch-scripts", "--nodes", "--gpus-per-node",
                                         "--partition", "--time", "--sbatch-option"))
