"""The tutorials' first tries, run as written on the demo's output (issue #39): every ``cog-pl`` line of the code
block under "A first try on the demo's data" of ``docs/tutorials/evaluate-a-model.md`` and
``docs/tutorials/own-checkpoint.md``, in order, through the installed console command, in a folder where
``runs/demo`` is the demo's output, ending in a report.

The demo's line (``cog-pl demo --out runs/demo``) is the one line not run as typed: its data and two trained CNNs
are made at a smaller size (6 seen concepts, 3 per level, 1 epoch each) by the function it calls,
:func:`cog_pl.demo.prepare.prepare`, which writes the same files (``runs/demo/data/cog_data.json``, the images, the
benchmark files, ``demo_cnn.pt``, ``demo_cnn_ssl.pt``); the other lines run exactly as the page prints them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cog_pl.results import read_rows

REPO = Path(__file__).resolve().parents[1]
COG_PL = Path(sys.executable).with_name("cog-pl")
FIRST_TRY = re.compile(r"^#+ A first try on the demo's data\n.*?^```bash\n(.*?)^```", re.S | re.M)
TUTORIALS = ("evaluate-a-model", "own-checkpoint")

pytestmark = pytest.mark.slow


def first_try_lines(name: str) -> list[list[str]]:
    """The ``cog-pl`` lines of a tutorial's first-try block, continuations joined and comments dropped."""
    (block,) = FIRST_TRY.findall((REPO / "docs" / "tutorials" / f"{name}.md").read_text())
    lines = re.sub(r"\\\n\s*", " ", block).splitlines()
    return [shlex.split(re.sub(r"\s#.*$", "", line)) for line in lines if line.startswith("cog-pl ")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, onto):
    """A folder whose ``runs/demo/data`` is a (small) demo's output."""
    from cog_pl.demo.prepare import prepare

    root = tmp_path_factory.mktemp("tutorial")
    prepare(root / "runs" / "demo" / "data", n_seen=6, n_per_level=3, train_per_concept=12, test_per_concept=4,
            image_size=32, epochs=1, ssl_epochs=1, onto=onto)
    return root


def _run(words: list[str], cwd: Path) -> str:
    done = subprocess.run([str(COG_PL), *words[1:]], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{shlex.join(words)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.parametrize("name", TUTORIALS)
def test_a_tutorials_first_try_runs_as_written_on_the_demos_output_and_ends_in_a_report(name, workdir):
    lines = first_try_lines(name)
    assert lines[-1][:2] == ["cog-pl", "report"] and any(w[:2] == ["cog-pl", "run"] for w in lines)
    outs = []
    for words in lines:
        if words[:2] == ["cog-pl", "demo"]:
            assert words[2:] == ["--out", "runs/demo"]  # made by the fixture, smaller
            continue
        outs.append(_run(words, workdir))
    report = Path(workdir, lines[-1][lines[-1].index("--out") + 1])
    results = Path(workdir, lines[-1][lines[-1].index("--results") + 1])
    text = (report / "report.md").read_text()
    rows = read_rows(results)
    models = {w[w.index("--name") + 1] if "--name" in w else w[w.index("--model") + 1]
              for w in lines if w[:2] == ["cog-pl", "run"]}
    assert {r["model"] for r in rows} == models
    domains = {"in1k", "cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5"}
    for model in models:  # the quick protocol's grid: one seed, all data and 4 shots, on every domain
        cells = {(r["domain"], r["shots"], r["seed"]) for r in rows if r["model"] == model}
        assert cells == {(d, s, 22) for d in domains for s in (None, 4)}, cells
        assert model in text
    assert all(r["protocol"]["extra"] == {"protocol": "quick"} for r in rows)
    # the report names the protocol its numbers come from, in words from the rows, above the tables and in each
    assert "**Not the paper's protocol: quick (10 trials × 30 epochs, 1 seed)**" in text
    assert "protocol: quick (10 trials × 30 epochs, 1 seed)" in text.split("## Linear probes on all training data")[1]
    assert "protocol: quick (10 trials × 30 epochs, 1 seed)" in outs[-1]  # the console shows the main table
    if "--baseline" in lines[-1]:
        assert "## Relative to demo_cnn (top-1 points)" in text, text
    if name == "evaluate-a-model":  # data check through --data: the demo's data file named, and the check passing
        check = next(o for w, o in zip([w for w in lines if w[:2] != ["cog-pl", "demo"]], outs)
                     if w[:3] == ["cog-pl", "data", "check"])
        assert check.startswith("data from runs/demo/data/cog_data.json: ")
