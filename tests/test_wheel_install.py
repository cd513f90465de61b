"""The built wheel, installed (not editable) into a fresh virtual environment, works from outside the clone.

The wheel is built from a copy of the repository (``pip wheel --no-deps``) and installed with ``--no-deps`` into a
new venv; the pinned dependencies (torch and the rest, gigabytes) are not downloaded again but read from the
environment running the tests, whose site-packages the new venv appends to its path with a ``.pth`` file (a folder
a ``.pth`` names is searched, its own ``.pth`` files are not run, so that environment's editable ``cog_pl`` stays out).
Every command runs in a folder outside the clone, without ``PYTHONPATH``: ``cog_pl`` is the wheel's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: What a copy of the clone leaves out: environments, build outputs, caches, runs.
IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "site", "*.egg-info", "__pycache__", ".*_cache",
                                "cog_demo", "cog_run", "cog_example", "out")
#: `cog-pl demo` at its smallest: both probe methods and the report, without fine-tuning, the second backbone and the
#: variants, on a handful of images (5 per concept: the k-NN's validation split is 20 % of each class).
SMALLEST_DEMO = ["--seen", "2", "--per-level", "2", "--train-per-concept", "5", "--test-per-concept", "2",
                 "--image-size", "16", "--pretrain-epochs", "1", "--ssl-epochs", "0", "--no-finetune",
                 "--seeds", "22", "--shots", "all", "--trials", "2", "--epochs", "2", "--variants"]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of this repository (the copy keeps the clone free of build outputs)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=IGNORE)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
          str(root / "dist"), str(src)], root, {**os.environ, "PIP_NO_INDEX": "1"})
    (found,) = (root / "dist").glob("cog_pl-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """A fresh venv holding the wheel; its environment for subprocesses; a folder outside the clone."""
    root = tmp_path_factory.mktemp("venv")
    env_dir = root / "venv"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # no clone on the path
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], root, clean)
    python = env_dir / "bin" / "python"
    # --ignore-installed: the cog_pl of the environment running pip is not the new venv's to replace
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
          "--ignore-installed", str(wheel)], root, clean)
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root,
                        clean).stdout.strip())
    assert (purelib / "cog_pl" / "__init__.py").is_file()
    (purelib / "_pinned_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**clean, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PATH": f"{env_dir / 'bin'}{os.pathsep}{clean['PATH']}"}
    away = root / "user"
    away.mkdir()
    return env_dir, env, away


def test_the_wheel_holds_the_configs_assets_and_console_script(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    for folder in ("configs", "assets"):
        files = {f"cog_pl/{p.relative_to(REPO / 'cog_pl').as_posix()}" for p in (REPO / "cog_pl" / folder).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
        assert files and files <= names, sorted(files - names)
    assert "cog-pl = cog_pl.cli.main:entry" in entry_points
    assert not any(n.startswith(("tests/", "configs/", "benchmarks/")) for n in names)


def test_installed_package_is_the_wheel_and_reads_its_configs(venv):
    env_dir, env, away = venv
    where = _run([str(env_dir / "bin" / "python"), "-c", "import cog_pl; print(cog_pl.__file__)"], away, env)
    assert Path(where.stdout.strip()).is_relative_to(env_dir)
    cog = str(env_dir / "bin" / "cog-pl")
    from cog_pl import __version__

    assert _run([cog, "--version"], away, env).stdout.strip() == f"cog-pl {__version__}"
    listed = _run([cog, "configs", "list"], away, env).stdout
    assert "extract/resnet50" in listed and "probe/linear_probe" in listed and "finetune/demo" in listed
    shown = _run([cog, "configs", "show", "extract/resnet50"], away, env).stdout
    assert shown == (REPO / "configs" / "extract" / "resnet50.yaml").read_text()
    helped = _run([cog, "extract", "--config", "resnet50", "--help"], away, env).stdout  # the packaged file parses
    assert "usage: cog-pl extract" in helped


@pytest.mark.slow
def test_smallest_demo_runs_from_the_wheel(venv):
    env_dir, env, away = venv
    proc = _run([str(env_dir / "bin" / "cog-pl"), "demo", "--out", "demo", *SMALLEST_DEMO], away, env, timeout=900)
    assert (away / "demo" / "report" / "report.md").is_file() and "demo_cnn" in proc.stdout


@pytest.mark.slow
def test_callback_example_runs_from_the_wheel(venv):
    env_dir, env, away = venv
    script = away / "train_with_cog_callback.py"
    shutil.copy(REPO / "examples" / "train_with_cog_callback.py", script)
    _run([str(env_dir / "bin" / "python"), str(script), "--out", "example", "--epochs", "1", "--seen", "4",
          "--per-level", "3"], away, env, timeout=900)
    assert (away / "example" / "cog_curves.png").is_file()
    assert next((away / "example").rglob("metrics.csv")).read_text().count("cog/l5/top1") == 1
