"""A backbone added by a user's package, through an entry point only: an installed distribution names a builder under
the group ``cog_pl.backbones``; the installed ``cog-pl`` then lists it (``cog-pl models list``), runs it by name on the
demo's miniature benchmark (``--model plugin_cnn --random-weights``), skips its rows when run again, and reports them
under its name, as it does for a paper model."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from bad_input_cases import COG_PL

from cog_pl.results import read_rows, row_times

REPO = Path(__file__).resolve().parents[2]

#: The user's package: a builder of a network mapping images to features (no registration call: the entry point).
PLUGIN = '''
from torch import nn


def build():
    return nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
'''


def _plugin(site: Path) -> None:
    """``cnn_plugin`` installed into ``site`` as a package would be: the package and a dist-info naming its builder."""
    (site / "cnn_plugin").mkdir(parents=True)
    (site / "cnn_plugin" / "__init__.py").write_text(PLUGIN)
    info = site / "cnn_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cnn-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[cog_pl.backbones]\nplugin_cnn = cnn_plugin:build\n")


def _cog_pl(site: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(COG_PL), *argv], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow  # 2026-12-02, shared 2 cores at load 8: 190 s (three cog-pl processes); fast, in one process:
# tests/models/test_models_registry.py::test_an_entry_point_backbone_is_found_on_first_use
def test_a_backbone_of_an_installed_package_is_listed_run_resumed_and_reported(onto, tmp_path):
    from cog_pl.demo.synthetic import make_demo

    site, out = tmp_path / "site", tmp_path / "out"
    _plugin(site)
    listed = _cog_pl(site, "models", "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.split("other backbones built by name")[1].splitlines()]
    assert ["plugin_cnn", "user", "external:plugin_cnn"] in [r[:3] for r in rows], listed.stdout

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    argv = ["run", "--model", "plugin_cnn", "--random-weights", "--in21k-root", str(tmp_path / "d" / "in21k"),
            "--benchmark", str(bench), "--out", str(out), "--domains", "cog_l2", "--no-check",
            "--num-workers", "0", "--seeds", "22", "--shots", "all", "--trials", "1", "--epochs", "1",
            "--accelerator", "cpu", "--probe-device", "cpu"]
    first = _cog_pl(site, *argv)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = read_rows(out / "results.sqlite")
    assert [(r["model"], r["method"], r["domain"]) for r in rows] == [("plugin_cnn", "linear", "cog_l2")]
    for split in ("train", "test"):  # its stores, filed under its name and recording its architecture
        meta = (out / "features" / "plugin_cnn" / "cog_l2" / split / "meta.json").read_text()
        assert '"arch": "external:plugin_cnn"' in meta
    times = row_times(out / "results.sqlite")

    again = _cog_pl(site, *argv)  # resumed: the stores and the row are kept, none made again
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(0 new, 1 in all)" in again.stdout + again.stderr
    assert row_times(out / "results.sqlite") == times

    report = (out / "report" / "report.md").read_text()
    linear = report.split("## Linear probes on all training data")[1].split("\n## ")[0]
    assert "\n| plugin_cnn | " in linear  # its row of the results table
    assert "| plugin_cnn | external:plugin_cnn | random |" in report  # the models table: its architecture, weights
    page = (out / "report" / "report.html").read_text()
    assert "<td>plugin_cnn</td>" in page and "external:plugin_cnn" in page
