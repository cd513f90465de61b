"""The built docs site at a 1280 px window (issue 39, item 4): on the models, CLI reference and tutorial pages no
table or code block is cut unseen. Each is either as narrow as the page, or a box that scrolls sideways with its
scroll bar in the window and the page's note above it (``docs/javascripts/overflow.js``); names in table cells do
not wrap inside a word; the page itself never scrolls sideways. Built with ``mkdocs build --strict``, opened in
headless Chromium (Debian's ``chromium``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MKDOCS = Path(sys.executable).with_name("mkdocs")
PAGES = ("models", "reference/cli", "tutorials/demo", "tutorials/evaluate-a-model", "tutorials/own-checkpoint",
         "tutorials/lightning-project", "tutorials/cluster")
WIDTH, HEIGHT = 1280, 900

pytestmark = [pytest.mark.slow,  # the site's build: about a minute
              pytest.mark.skipif(CHROMIUM is None or not MKDOCS.is_file(), reason="chromium or mkdocs absent")]

#: Appended to a copy of a page: after the page's own scripts, every table box and code block measured, the
#: ``??? details`` opened first (the CLI reference's --help blocks), written into the DOM that --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  setTimeout(function () {
    var out = {page: document.documentElement.scrollWidth, window: window.innerWidth, height: window.innerHeight,
               blocks: [], names: []};
    document.querySelectorAll(".md-typeset .md-typeset__scrollwrap, .md-typeset pre > code").forEach(function (el) {
      if (el.offsetParent === null) return;
      var holder = el.tagName === "CODE" ? el.parentElement : el, prev = holder.previousElementSibling;
      out.blocks.push({kind: el.tagName === "CODE" ? "code" : "table", text: el.textContent.slice(0, 60),
                       wide: el.scrollWidth > el.clientWidth + 1, marked: el.classList.contains("cog-scrolls"),
                       note: prev !== null && prev.classList.contains("cog-scroll-note") && prev.offsetHeight > 0,
                       overflow: getComputedStyle(el).overflowX, height: el.getBoundingClientRect().height});
    });
    document.querySelectorAll(".md-typeset td:first-child > code").forEach(function (c) {
      out.names.push([c.textContent, c.getClientRects().length]);
    });
    var pre = document.createElement("pre");
    pre.id = "cog-probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 300);
});
</script>"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([str(MKDOCS), "build", "--strict", "-q", "-d", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def measure(site: Path, page: str, tmp: Path) -> dict:
    """The probe's measurements of ``page`` at WIDTH x HEIGHT."""
    html = site / page / "index.html"
    probed = html.with_name("probed.html")  # beside the page: its relative links to the site's assets hold
    probed.write_text(html.read_text().replace("</body>", PROBE + "</body>"))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=5000", f"--window-size={WIDTH},{HEIGHT}",
           "--dump-dom", probed.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="cog-probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


@pytest.mark.parametrize("page", PAGES)
def test_no_table_or_code_block_is_cut_unseen(site, page, tmp_path):
    m = measure(site, page, tmp_path)
    assert m["window"] == WIDTH and m["blocks"], m
    assert m["page"] <= m["window"], f"{page}: the page itself scrolls sideways ({m['page']} px)"
    cut = [b for b in m["blocks"] if b["wide"] and not (
        b["marked"] and b["note"] and b["overflow"] in ("auto", "scroll") and b["height"] <= m["height"])]
    assert not cut, f"{page}: wider than the page without a visible scroll and its note: {cut}"
    wrapped = [name for name, lines in m["names"] if lines > 1]
    assert not wrapped, f"{page}: names broken over lines in a table's first column: {wrapped}"


def test_the_models_table_shows_every_column(site, tmp_path):
    """The paper's 31 models: the table fits the page (no column behind a scroll)."""
    tables = [b for b in measure(site, "models", tmp_path)["blocks"] if b["kind"] == "table"]
    assert tables and not [b for b in tables if b["wide"]], tables
