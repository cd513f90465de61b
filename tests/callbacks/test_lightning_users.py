"""A Lightning user's afternoon: a third-party module written like lightly's SimCLR trains with CoGEvaluationCallback
under ``lightning.Trainer`` and ``pytorch_lightning.Trainer``, in one process and in two-process gloo DDP, with a CSV
logger; then a fresh Trainer resumes it from its checkpoint (tests/lightly_style.py is the user's script)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cog_pl.demo.synthetic import make_demo

REPO = Path(__file__).resolve().parents[2]
LEVELS = ("in1k", "l1", "l2", "l3", "l4", "l5")
#: Warnings the run may raise that are no part of the callback: Lightning's own notes on the user's frozen eval-mode
#: submodules (intended here), on resuming into the checkpoint folder of the first run, on loader workers (depends on
#: the machine's cores), and notes about this machine (SLURM's srun installed) or Lightning's own internals
#: (cog_pl.console.KNOWN_WARNINGS).
ALLOWED = ("module(s) in eval mode at the start of training", "exists and is not empty", "does not have many workers",
           "The `srun` command is available", "`isinstance(treespec, LeafSpec)` is deprecated")


@pytest.fixture(scope="module")
def bench(onto, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    make_demo(root, n_seen=4, n_per_level=3, train_per_concept=10, test_per_concept=4, image_size=32, onto=onto)
    return root


def _run(bench: Path, out: Path, package: str, devices: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": ""}
    cmd = [sys.executable, str(REPO / "tests" / "lightly_style.py"), "--package", package, "--devices", str(devices),
           "--bench", str(bench), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {**json.loads((out / "report.json").read_text()), "stderr": proc.stderr}


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.slow)], ids=["1proc", "ddp2"])
@pytest.mark.parametrize("package", ["lightning", "pytorch_lightning"])
def test_a_lightly_style_module_trains_with_the_callback_and_resumes(bench, tmp_path, package, devices):
    report = _run(bench, tmp_path, package, devices)
    assert report["trainer"].startswith(package + ".") and report["world_size"] == devices
    keys = {f"cog/{level}/top1" for level in LEVELS}
    # once per epoch, fractions, the user's own keys beside them; no seconds logged as a metric
    assert [h["epoch"] for h in report["history"]] == [0, 1]
    assert all(0 <= h[k] <= 1 for h in report["history"] for k in keys)
    assert keys | {"train_loss", "train_online_cls_loss"} <= set(report["callback_metrics"])
    assert not any("seconds" in k for k in report["callback_metrics"])
    # ModelCheckpoint monitored cog/l5/top1 and kept its best
    assert report["best_model_score"] == pytest.approx(max(h["cog/l5/top1"] for h in report["history"]))
    # no warning from the callback (DDP: sync_dist), only the allowed notes
    assert [w for w in report["warnings"] if not any(a in w for a in ALLOWED)] == []
    # the frozen teacher and the frozen BatchNorm stayed in eval mode in every step, and after fit
    assert report["modes_initial"]["teacher"] is False and report["modes_initial"]["backbone.1"] is False
    assert report["steps"] > 0 and report["steps_with_other_modes"] == 0
    assert report["modes_after_fit"] == report["modes_initial"]
    # the resumed callback has the history of the first run, then its own epoch
    assert report["resumed_history"][:2] == report["history"]
    assert [h["epoch"] for h in report["resumed_history"]] == [0, 1, 2]
    # on the console, from rank zero only: the transform once per fit, one line of top-1s per evaluation
    assert report["stderr"].count("CoGEvaluationCallback: images read at 32 px") == 2
    assert [line.split(":")[0] for line in report["stderr"].splitlines() if line.startswith("CoG top-1")] == [
        "CoG top-1 at epoch 0", "CoG top-1 at epoch 1", "CoG top-1 at epoch 2"]
    # the CSV logger got each evaluation once (one row per epoch, not one per rank)
    first, second = (sorted((tmp_path / "logs").glob("version_*")))
    for version, epochs in ((first, [0, 1]), (second, [2])):
        with open(version / "metrics.csv") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("cog/l5/top1")]
        assert [int(r["epoch"]) for r in rows] == epochs
