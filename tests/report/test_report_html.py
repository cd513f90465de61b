"""``report.html`` opened in headless Chromium (Debian's ``chromium``): the page renders (the screenshot is not
blank), its console shows no script error, and the concept table filters and sorts as its address asks."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from concept_fixtures import simulated_results

from cog_pl.report.build import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian: apt-get install chromium) absent")


def chromium(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium on ``url`` with its console logged to stderr (``--enable-logging=stderr --v=0``: a line
    ``...:CONSOLE...`` per console message, uncaught exceptions included), in a profile of its own."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
           "--window-size=1280,2400", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console(proc: subprocess.CompletedProcess) -> list[str]:
    """The page's console messages (errors among them) in Chromium's log."""
    return [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]


@pytest.fixture(scope="module")
def report(tmp_path_factory, onto):
    import cog_pl.report.concepts as concepts

    tmp = tmp_path_factory.mktemp("html")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(concepts, "_ontology", lambda: onto)  # the session's ontology for the confusions' similarity
        results, levels = simulated_results(tmp, {"base": 0.0, "better": 0.2, "twin": 0.0}, n=12, images=8)
        files = write_report(results, tmp / "report", baseline="base", levels=levels, html=True)
    lines = list(csv.DictReader(io.StringIO(files["concepts"].read_text())))
    return tmp, files["html"], lines


def test_console_errors_are_seen(tmp_path):
    """The check below is not vacuous: a page whose script fails shows it in the log read."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>undefinedFunction();</script></body></html>")
    proc = chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert any("Uncaught ReferenceError: undefinedFunction is not defined" in ln for ln in console(proc)), \
        proc.stderr[-2000:]


def test_page_renders_without_script_errors(report, tmp_path):
    _, html, _ = report
    shot = tmp_path / "shot.png"
    proc = chromium(tmp_path, html.as_uri(), f"--screenshot={shot}")
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    assert console(proc) == []  # no script error, nothing logged at all
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1280)
    ink = (pixels < 0.9).any(axis=2).mean()  # share of pixels that are not (nearly) white
    assert 0.02 < ink < 0.6 and pixels.std() > 0.05, (ink, pixels.std())  # text, tables and figures drawn


def _dom(tmp: Path, html: Path, fragment: str) -> str:
    proc = chromium(tmp, f"{html.as_uri()}#{fragment}", "--dump-dom")
    assert proc.returncode == 0 and console(proc) == [], proc.stderr[-2000:]
    return proc.stdout


def _shown(dom: str) -> list[tuple[str, str, str, float | None]]:
    """(model, level, wnid, top-1) of each row the concept table shows, in order."""
    rows = re.findall(r'<tr data-wnid="([^"]+)" data-model="([^"]+)" data-level="([^"]+)">(.*?)</tr>', dom)
    out = []
    for wnid, model, level, cells in rows:
        tds = re.findall(r"<td[^>]*>(.*?)</td>", cells)
        out.append((model, level, wnid, None if tds[6] == "\u2013" else float(tds[6])))
    return out


def test_filtering_the_concept_table_works(report, tmp_path):
    _, html, lines = report
    # level, model and similarity range, sorted by top-1 (descending)
    lo, hi = 0.5, 0.7
    dom = _dom(tmp_path, html, f"level=L3&model=better&min={lo}&max={hi}&sort=top1&dir=desc")
    want = {ln["wnid"] for ln in lines if ln["level"] == "L3" and ln["model"] == "better" and ln["similarity"]
            and lo <= float(ln["similarity"]) <= hi}
    shown = _shown(dom)
    assert want and {w for _, _, w, _ in shown} == want and len(shown) == len(want)
    assert all(m == "better" and lv == "L3" for m, lv, _, _ in shown)
    top1 = [t for *_, t in shown]
    assert top1 == sorted(top1, reverse=True)
    assert f'id="concept-count" class="meta">{len(want)} of {len(lines)} concepts<' in dom
    # by name: a word of one concept's name finds that concept for every model and method
    name = next(ln for ln in lines if ln["level"] == "L2")["name"].split(",")[0]
    shown = _shown(_dom(tmp_path, html, f"name={name.replace(' ', '%20')}"))
    want = {(ln["model"], ln["wnid"]) for ln in lines if name.lower() in ln["name"].lower()
            or name.lower() in ln["wnid"]}
    assert want and {(m, w) for m, _, w, _ in shown} == want
    # no filter: every concept counted, the first 1000 drawn
    dom = _dom(tmp_path, html, "")
    assert f">{len(lines)} of {len(lines)} concepts<" in dom and len(_shown(dom)) == min(1000, len(lines))
    assert np.isfinite([t for *_, t in _shown(dom) if t is not None]).all()


def test_an_address_opened_after_other_filters_is_the_whole_view(report, tmp_path):
    """Issue 47: ``#level=L4`` opened after other filters (a model, a name, a similarity range) clears them: every
    model's L4 concepts are shown, not ``0 of N``."""
    _, html, lines = report
    page = tmp_path / "again.html"
    later = ('<script>setTimeout(function () { location.hash = "level=L3&model=better&name=zzz&min=0.9&max=0.95"; '
             'setTimeout(function () { location.hash = "level=L4"; }, 200); }, 200);</script></body>')
    page.write_text(html.read_text().replace("</body>", later))
    dom = _dom(tmp_path, page, "level=L2&model=twin&sort=top1&dir=desc")
    want = [ln for ln in lines if ln["level"] == "L4"]
    shown = _shown(dom)
    assert want and len(shown) == len(want) and {lv for _, lv, _, _ in shown} == {"L4"}
    assert {m for m, *_ in shown} == {ln["model"] for ln in want}  # every model's, the model filter cleared
    assert f'id="concept-count" class="meta">{len(want)} of {len(lines)} concepts<' in dom
    assert 'id="f-name"' in dom and 'value="zzz"' not in dom
