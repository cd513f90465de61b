"""Every ``cog-pl`` line of the code blocks of the README and of the documentation site (``docs/**/*.md``), run as a
user types it.

A line runs for real through the installed console command, in a folder holding small generated features where the
line names them (``features/resnet50/...``), the repository's ``configs/`` and a built ``levels.json``, when what it
needs exists here (``RUN``); a line that needs ImageNet, a GPU cluster, a database server or minutes of work is
parsed with ``--help`` appended, which still parses everything before it (a LightningCLI loads the ``--config``
files first). The fast tier parses those in one process through :func:`cog_pl.cli.main.main`; the slow tier runs
each through the console command, as a process. Either way the exit status is 0 and LightningCLI does not warn
about ``args`` given beside ``sys.argv``. Backslash continuations are joined, trailing comments dropped,
``[optional parts]`` and ``...`` left out, a shell redirection or pipe and what follows it dropped, and of ``a|b|c``
alternatives the first is kept.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from test_probe_fixtures import write_features

REPO = Path(__file__).resolve().parents[1]
COG_PL = Path(sys.executable).with_name("cog-pl")  # the console script installed beside the test's Python
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
#: Lines that start like these run for real; the others with --help.
RUN = ("cog-pl wordnet install", "cog-pl levels", "cog-pl similarity", "cog-pl probe tune", "cog-pl probe fit",
       "cog-pl probe knn", "cog-pl configs", "cog-pl models list", "cog-pl features info", "cog-pl demo --out tiny")
#: Real runs of more than a few seconds (30 trials x 100 epochs, a demo, two DDP processes, the text model).
SLOW = ("cog-pl probe tune", "cog-pl demo", "cog-pl probe fit --config linear_probe --config ddp_cpu",
        "cog-pl levels build --seen", "cog-pl levels build --measure",
        "cog-pl probe fit --config linear_probe --data.features features/resnet50/in1k --data.stage_mode final")
#: The line the ``workdir`` fixture runs itself (the level file the other ``levels`` lines read).
LEVELS_BUILD = "cog-pl levels build --out levels.json"
ARGS_WARNING = "LightningCLI's args parameter"
SHELL = ("|", ">", ">>", "&&", ";", "<")


def doc_commands(text: str) -> list[str]:
    """The ``cog-pl`` lines of the code blocks of ``text``, as a user would type them (see the module docstring)."""
    lines = []
    for block in re.findall(r"^ *```[a-z]*\n(.*?)^ *```", text, re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s#.*$", "", line)  # a trailing comment
            line = re.sub(r"\s*\[[^\]]*\]", "", line)  # optional parts
            if not line.lstrip().startswith("cog-pl "):  # python, YAML or other shell lines: not split
                continue
            words = [w.split("|")[0] for w in shlex.split(line) if w != "..."]
            cut = next((k for k, w in enumerate(words) if w in SHELL), len(words))
            lines.append(shlex.join(words[:cut]))
    return list(dict.fromkeys(lines))


def test_doc_commands_are_parsed_as_typed():
    text = ("```bash\ncog-pl a --x 1 \\\n    --y 2   # comment\ncog-pl b [--c 3] lin|wup ...  # c\n```\n"
            "```python\nprint(1)\n```\n    ```text\n    cog-pl c > out.yaml\n    ```\n")
    assert doc_commands(text) == ["cog-pl a --x 1 --y 2", "cog-pl b lin", "cog-pl c"]


COMMANDS = list(dict.fromkeys(c for path in DOC_FILES for c in doc_commands(path.read_text())))
HELP = [c for c in COMMANDS if not c.startswith(RUN) or c.startswith(SLOW)]
REAL = [c for c in COMMANDS if c.startswith(RUN) and c != LEVELS_BUILD]


def test_the_docs_document_every_command():
    """Each of ``cog-pl``'s commands is shown in some code block of the README or the docs."""
    from cog_pl.cli.main import build_parser
    from cog_pl.cli.reference import walk

    shown = {tuple(c.split()[1:3]) for c in COMMANDS} | {tuple(c.split()[1:2]) for c in COMMANDS}
    commands = {words for words, _ in walk(build_parser()) if 1 <= len(words) <= 2}
    groups = {w[:1] for w in commands if len(w) == 2}
    missing = sorted(" ".join(w) for w in commands if w not in shown and w not in groups)
    assert not missing, f"commands no code block of the docs shows: {missing}"
    assert {"probe", "fit"} <= {w for c in COMMANDS for w in c.split()[1:3]}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A user's folder: the repository's configs, small feature stores where the docs' lines name them, a level
    file."""
    root = tmp_path_factory.mktemp("user")
    (root / "configs").symlink_to(REPO / "configs")
    for domain in ("in1k", "cog_l3"):
        write_features(root / "features" / "resnet50" / domain, classes=6, dim=16, per_class=40)
    assert LEVELS_BUILD in COMMANDS  # the docs' own line, run here once for the lines that read its file
    _check(LEVELS_BUILD, subprocess.run([str(COG_PL), *shlex.split(LEVELS_BUILD)[1:]], cwd=root, env=_env(),
                                        capture_output=True, text=True, timeout=600))
    return root


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def _check(line: str, proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert ARGS_WARNING not in proc.stderr, f"{line}\n{proc.stderr[-2000:]}"


def test_console_command_is_installed():
    assert COG_PL.exists(), f"{COG_PL}: install the package (pip install -e .)"


def test_lines_that_need_imagenet_or_a_server_parse_with_help(workdir, monkeypatch):
    """In one process, as ``cog-pl LINE --help``: each exits 0 having printed its usage, without the warning."""
    from cog_pl.cli.main import main

    monkeypatch.chdir(workdir)
    for line in HELP:
        out, err = io.StringIO(), io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err), pytest.raises(SystemExit) as done:
            warnings.simplefilter("always")
            main([*shlex.split(line)[1:], "--help"])
        assert done.value.code in (0, None), f"{line}\n{err.getvalue()[-3000:]}"
        assert "usage: cog-pl" in out.getvalue(), line
        assert not [w for w in caught if ARGS_WARNING in str(w.message)], line


@pytest.mark.slow
def test_lines_that_need_imagenet_or_a_server_parse_with_help_as_processes(workdir):
    """Each through the console command, four at a time: a process that imports its command's libraries."""
    for start in range(0, len(HELP), 4):
        batch = HELP[start:start + 4]
        procs = [(line, subprocess.Popen([str(COG_PL), *shlex.split(line)[1:], "--help"], cwd=workdir, env=_env(),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                 for line in batch]
        for line, proc in procs:
            out, err = proc.communicate(timeout=300)
            _check(line, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
            assert "usage: cog-pl" in out, line


@pytest.mark.parametrize("line", [pytest.param(c, marks=[pytest.mark.slow] if c.startswith(SLOW) else [])
                                  for c in REAL])
def test_line_runs_as_typed(line, workdir):
    """In the docs' order; ``levels compare`` and ``levels plot`` read the ``levels.json`` the fixture built."""
    proc = subprocess.run([str(COG_PL), *shlex.split(line)[1:]], cwd=workdir, env=_env(), capture_output=True,
                          text=True, timeout=900)
    _check(line, proc)
