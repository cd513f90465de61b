"""What ``cog-pl`` prints around its results: each message once, progress as a bar or as plain lines, no noise from
third-party packages or from the package's own install configuration."""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from cog_pl import console
from cog_pl.progress import Progress
from cog_pl.report.tables import spread

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def console_handler():
    """A ConsoleHandler on the root logger writing to a buffer (removed afterwards)."""
    buf = io.StringIO()
    handler = console.ConsoleHandler(buf)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield buf
    finally:
        root.removeHandler(handler)


def test_a_record_a_library_handler_printed_is_not_printed_again(console_handler):
    """Lightning puts a handler of its own on the ``lightning`` logger: its records reached the console twice."""
    own = io.StringIO()
    lib = logging.getLogger("somelib")
    lib_handler = logging.StreamHandler(own)
    lib.addHandler(lib_handler)
    lib.setLevel(logging.INFO)
    try:
        logging.getLogger("somelib.sub").info("GPU available: False")
        logging.getLogger("cog_pl.anything").warning("ours")
    finally:
        lib.removeHandler(lib_handler)
    assert own.getvalue() == "GPU available: False\n"
    assert console_handler.getvalue() == "ours\n"


def test_lightning_trainer_is_quiet_and_each_message_once(tmp_path):
    """A real Trainer under the command line's console: no rank-zero chatter, no tip, no known deprecation, and a
    warning of our own printed once."""
    code = ("import logging, warnings\n"
            "from cog_pl import console\n"
            "console.setup()\n"
            "import lightning as L, torch\n"
            "from torch.utils.data import DataLoader, TensorDataset\n"
            "class M(L.LightningModule):\n"
            "    def __init__(self):\n"
            "        super().__init__(); self.l = torch.nn.Linear(2, 1)\n"
            "    def training_step(self, b, i): return self.l(b[0]).sum()\n"
            "    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.1)\n"
            "t = L.Trainer(accelerator='cpu', max_epochs=1, logger=False, enable_checkpointing=False,\n"
            "              enable_progress_bar=False, enable_model_summary=False)\n"
            "t.fit(M(), DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2, num_workers=0))\n"
            "logging.getLogger('cog_pl.x').warning('once')\n"
            "logging.getLogger('cog_pl.x').info('info of ours')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    assert "GPU available" not in text and "Tip" not in text and "LeafSpec" not in text, text
    assert text.count("once") == 1 and "info of ours" in text
    # the filter is scoped: another warning from the same module is still shown
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        console.filter_known_warnings()
        warnings.warn_explicit("something else", FutureWarning, "x.py", 1, module="lightning.pytorch.utilities._pytree")
        warnings.warn_explicit("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning, "x.py", 2,
                               module="lightning.pytorch.utilities._pytree")
        warnings.warn_explicit("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning, "y.py", 3,
                               module="mypackage")
    assert [str(w.message)[:14] for w in caught] == ["something else", "`isinstance(tr"]


def test_progress_is_plain_lines_off_a_terminal(caplog, monkeypatch):
    clock = iter(range(0, 1000, 4))
    monkeypatch.setattr("cog_pl.progress.time.monotonic", lambda: float(next(clock)))
    with caplog.at_level(logging.INFO, logger="cog_pl.progress"):
        with Progress("probes", 10, "rows", terminal=False, interval=10) as bar:
            for _ in range(10):
                bar.update()
    lines = [r.getMessage() for r in caplog.records]
    assert all("\r" not in line for line in lines) and len(lines) == len(set(lines)) >= 3
    assert "left" in lines[0] and lines[0].startswith("probes: ") and "%" in lines[0]
    assert lines[-1].startswith("probes: 10 rows in ")


def test_progress_is_a_bar_with_an_eta_on_a_terminal(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with Progress("extracting demo_cnn", 4, "batches", terminal=True) as bar:
        for _ in range(4):
            bar.update()
    text = err.getvalue()
    assert "\r" in text and "4/4 batches" in text and "<" in text and "extracting demo_cnn" in text


def test_one_seed_shows_no_spread():
    assert spread(56.9, 0.0, 1) == "56.90 (n = 1)"
    assert spread(56.9, 0.424, 2) == "56.90 ± 0.42"


def test_editable_install_prints_no_warning_from_the_package_configuration(tmp_path):
    """``pip install -e .`` builds an editable wheel with setuptools' PEP 660 hook (a plain wheel the same way): the
    package's setup.cfg gave ``Package 'cog_pl.assets' is absent from the packages configuration``. The data files
    stay in the wheel."""
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "cog_pl", tmp_path / "cog_pl", ignore=shutil.ignore_patterns("__pycache__"))
    for hook in ("build_editable", "build_wheel"):
        code = f"from setuptools.build_meta import {hook}; print({hook}('dist_{hook}'))"
        out = subprocess.run([sys.executable, "-W", "default", "-c", code], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "Warning" not in out.stdout + out.stderr, (out.stdout + out.stderr)[-3000:]
    wheel = next((tmp_path / "dist_build_wheel").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"cog_pl/assets/cog_levels.json", "cog_pl/assets/in1k_synsets.txt", "cog_pl/py.typed"} <= set(names)
