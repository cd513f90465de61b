"""Every ``cog-pl`` line of the README's code blocks, run through the installed console command as a user types it.

A line runs for real, in a folder holding small generated features where the line names them
(``features/resnet50/...``) and the repository's ``configs/``, when what it needs exists here (``RUN``); a line that
needs ImageNet, a GPU cluster, a database server or minutes of work runs with ``--help`` appended, which still parses
everything before it (a LightningCLI loads the ``--config`` files first). Either way the exit status is 0 and
LightningCLI does not warn about ``args`` given beside ``sys.argv``. Backslash continuations are joined, trailing
comments dropped, ``[optional parts]`` and ``...`` left out, and of ``a|b|c`` alternatives the first is kept.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_probe_fixtures import write_features

REPO = Path(__file__).resolve().parents[1]
COG_PL = Path(sys.executable).with_name("cog-pl")  # the console script installed beside the test's Python
#: Lines that start like these run for real; the others with --help.
RUN = ("cog-pl wordnet install", "cog-pl levels", "cog-pl similarity", "cog-pl probe tune", "cog-pl probe fit")
#: Real runs of more than a few seconds (30 trials x 100 epochs, even on small features).
SLOW = ("cog-pl probe tune",)
ARGS_WARNING = "LightningCLI's args parameter"


def readme_commands(text: str) -> list[str]:
    """The ``cog-pl`` lines of the code blocks of ``text``, as a user would type them (see the module docstring)."""
    lines = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s#.*$", "", line)  # a trailing comment
            line = re.sub(r"\s*\[[^\]]*\]", "", line)  # optional parts
            words = [w.split("|")[0] for w in shlex.split(line) if w != "..."]
            if words[:1] == ["cog-pl"]:
                lines.append(shlex.join(words))
    return list(dict.fromkeys(lines))


def test_readme_commands_are_parsed_as_typed():
    text = ("```bash\ncog-pl a --x 1 \\\n    --y 2   # comment\ncog-pl b [--c 3] lin|wup ...  # c\n```\n"
            "```python\nprint(1)\n```\n")
    assert readme_commands(text) == ["cog-pl a --x 1 --y 2", "cog-pl b lin"]


COMMANDS = readme_commands((REPO / "README.md").read_text())


def test_the_readme_documents_the_commands():
    assert len(COMMANDS) >= 20 and {c.split()[1] for c in COMMANDS} >= {"extract", "probe", "finetune", "run",
                                                                          "levels", "report", "data", "features"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A user's folder: the repository's configs and small feature stores where the README's lines name them."""
    root = tmp_path_factory.mktemp("user")
    (root / "configs").symlink_to(REPO / "configs")
    for domain in ("in1k", "cog_l3"):
        write_features(root / "features" / "resnet50" / domain, classes=6, dim=16, per_class=40)
    return root


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def _check(line: str, proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert ARGS_WARNING not in proc.stderr, f"{line}\n{proc.stderr[-2000:]}"


def test_console_command_is_installed():
    assert COG_PL.exists(), f"{COG_PL}: install the package (pip install -e .)"


def test_lines_that_need_imagenet_or_a_server_parse_with_help(workdir):
    """All at once: each is a process that imports its command's libraries and prints its help."""
    lines = [c for c in COMMANDS if not c.startswith(RUN)]
    procs = [(line, subprocess.Popen([str(COG_PL), *shlex.split(line)[1:], "--help"], cwd=workdir, env=_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for line in lines]
    for line, proc in procs:
        out, err = proc.communicate(timeout=300)
        _check(line, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        assert "usage: cog-pl" in out, line


@pytest.mark.parametrize("line", [pytest.param(c, marks=[pytest.mark.slow] if c.startswith(SLOW) else [])
                                  for c in COMMANDS if c.startswith(RUN)])
def test_line_runs_as_typed(line, workdir):
    """In README order: ``levels compare`` and ``levels plot`` read the file ``levels build`` wrote."""
    proc = subprocess.run([str(COG_PL), *shlex.split(line)[1:]], cwd=workdir, env=_env(), capture_output=True,
                          text=True, timeout=600)
    _check(line, proc)
