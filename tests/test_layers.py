"""The package's layers (pyproject.toml ``[tool.importlinter]``, docs/development.md): import-linter keeps them on the
tree, and refuses a module that imports a higher layer, a module that imports the package face, and a new cycle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")  # the venv's, installed by the test extra
#: The contracts' names (pyproject.toml).
LAYERS, FACE = "cog_pl in pipeline order", "nothing in the package imports its face"
ACYCLIC = "no cycle between modules"


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the ``cog_pl`` under ``root`` with the contracts of ``root/pyproject.toml``."""
    assert LINT.exists(), f"{LINT} is missing: pip install -e '.[test]' (import-linter)"
    env = {**os.environ, "PYTHONPATH": str(root)}  # ahead of an editable install of another tree
    return subprocess.run([str(LINT), "--no-cache", "--no-logo", str(root / "pyproject.toml")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_its_layers():
    out = lint(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in (LAYERS, FACE, ACYCLIC):
        assert f"{name} KEPT" in out.stdout


@pytest.mark.parametrize(("module", "line", "broken", "message", "kept"), [
    # the floor reaching up to the command line (which imports io: a cycle too)
    ("io.py", "import cog_pl.cli.main", LAYERS, "cog_pl.io is not allowed to import cog_pl.cli", [FACE]),
    # a lower layer reaching up through a lazy import (function-level imports count)
    ("levels/ontology.py", "def _later():\n    from cog_pl.report import build", LAYERS,
     "cog_pl.levels is not allowed to import cog_pl.report", [FACE]),
    # the version read from the face again (whose type-checking imports name every layer: the layers break too)
    ("provenance.py", "from cog_pl import __version__", FACE, "cog_pl.provenance is not allowed to import cog_pl", []),
    # a cycle inside the floor (registry imports errors): only the acyclic contract sees it
    ("errors.py", "import cog_pl.registry", ACYCLIC, "No cycles are allowed in cog_pl.", [LAYERS, FACE]),
    # a cycle inside a package (store imports paths)
    ("features/paths.py", "import cog_pl.features.store", ACYCLIC, "No cycles are allowed in cog_pl.features.",
     [LAYERS, FACE]),
])
def test_an_import_against_the_layers_fails(tmp_path, module, line, broken, message, kept):
    shutil.copytree(REPO / "cog_pl", tmp_path / "cog_pl", ignore=shutil.ignore_patterns("__pycache__", "assets",
                                                                                         "configs"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with open(tmp_path / "cog_pl" / module, "a") as f:
        f.write(f"\n{line}\n")
    out = lint(tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"{broken} BROKEN" in out.stdout and message in out.stdout, out.stdout
    for name in kept:
        assert f"{name} KEPT" in out.stdout, out.stdout


def test_no_module_imports_by_a_name_held_as_text_but_the_registry_and_none_is_too_long():
    """import-linter sees the imports written in the code only: a module imported from a string it cannot check
    (issue 46: four such strings hid the last cycles). The one loader of names held as text (entry points, the
    backbone table's ``"module:function"`` builders, the lazy exports) is ``cog_pl.registry.load_object``; and a module
    stays readable in one sitting (600 lines at most)."""
    package = REPO / "cog_pl"
    loaders = ("import_module(", "__import__(", "importlib.util.module_from_spec(", "runpy.")
    offenders = [f"{path.relative_to(REPO)}: {text}" for path in package.rglob("*.py") if path.name != "registry.py"
                 for text in loaders if text in path.read_text()]
    assert not offenders, offenders
    assert "import_module(" in (package / "registry.py").read_text()
    long = {str(p.relative_to(REPO)): n for p in package.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long
