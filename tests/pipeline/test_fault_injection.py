"""Fault injection: ``cog-pl extract``, ``cog-pl probe protocol`` and ``cog-pl run`` SIGKILLed at seeded random
points, again and again, then resumed; what they leave must equal an uninterrupted run's stores and rows.

The slow tests kill each command at least ten times; the default run kills ``probe protocol`` twice. A kill lands
at a random time between the command's start-up and the length of an uninterrupted run, so it falls in imports,
extraction, tuning, a final retrain or a write. A run that ends before its kill counts no kill: the outputs are
then compared and removed, and the killing starts again from nothing.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from cog_pl.features.store import open_store
from cog_pl.results import read_rows

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
COG = [sys.executable, "-m", "cog_pl.cli.main"]


def _run(cmd: list[str]) -> float:
    """Run to the end; the wall seconds."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return time.perf_counter() - start


def _startup() -> float:
    start = time.perf_counter()
    subprocess.run([*COG, "--help"], env=ENV, capture_output=True, check=True)
    return time.perf_counter() - start


def kill_and_resume(cmd: list[str], out: Path, kills: int, seed: int, wall: float,
                    check: Callable[[], None], reset: Callable[[], None] | None = None) -> int:
    """SIGKILL ``cmd`` at seeded random times until ``kills`` kills happened, resuming after each; whenever a run
    ends by itself, ``check`` compares its outputs and ``reset`` (default: remove ``out``) starts the next round from
    nothing. The kill count."""
    rng = random.Random(seed)
    lo = _startup()
    done = 0
    while done < kills:
        proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            _, err = proc.communicate(timeout=rng.uniform(lo, lo + wall))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            done += 1
            continue
        assert proc.returncode == 0, err.decode()[-3000:]
        check()
        reset() if reset else shutil.rmtree(out)
    _run(cmd)  # the last resume
    check()
    return done


# --- probe protocol ------------------------------------------------------------------------------------------------

def _features(root: Path, classes: int = 8, dim: int = 24, train: int = 30, test: int = 10) -> Path:
    """A plain train/test store pair of separable Gaussian clusters."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(classes, dim)).astype(np.float32) * 2
    for split, n in (("train", train), ("test", test)):
        labels = np.repeat(np.arange(classes), n)
        (root / split).mkdir(parents=True)
        np.save(root / split / "features.npy", centres[labels] + rng.normal(size=(len(labels), dim)).astype(np.float32))
        np.save(root / split / "labels.npy", labels.astype(np.int64))
    return root


def _rows(path: Path) -> dict:
    return {(r["model"], r["method"], r["domain"], r["shots"], r["seed"]): (r["test_top1"], r.get("lr"), r.get("wd"))
            for r in read_rows(path)}


def _protocol_cmd(features: Path, out: Path) -> list[str]:
    return [*COG, "probe", "protocol", "--features", str(features), "--model", "m", "--domain", "d",
            "--results", str(out / "results.sqlite"), "--workdir", str(out), "--trials", "6", "--epochs", "8",
            "--seeds", "22", "37", "--shots", "all", "1", "2", "--threads", "1", "--stale-after", "2"]


@pytest.fixture(scope="module")
def probe_reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe_faults")
    features = _features(root / "features")
    wall = _run(_protocol_cmd(features, root / "ref"))
    return features, _rows(root / "ref" / "results.sqlite"), wall


def _kill_probe_protocol(probe_reference, tmp_path, kills: int, seed: int) -> None:
    features, reference, wall = probe_reference
    out = tmp_path / "killed"
    cmd = _protocol_cmd(features, out)

    def check():
        assert _rows(out / "results.sqlite") == reference

    assert kill_and_resume(cmd, out, kills, seed, wall, check) == kills


def test_probe_protocol_killed_twice_resumes_to_the_uninterrupted_rows(probe_reference, tmp_path):
    _kill_probe_protocol(probe_reference, tmp_path, kills=2, seed=1)


@pytest.mark.slow
def test_probe_protocol_killed_ten_times_resumes_to_the_uninterrupted_rows(probe_reference, tmp_path):
    _kill_probe_protocol(probe_reference, tmp_path, kills=10, seed=2)


# --- extract -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_data(tmp_path_factory, onto):
    """A small prepared demo benchmark (images in IN-1K and IN-21K layouts, a benchmark file)."""
    from cog_pl.demo.prepare import prepare

    return prepare(tmp_path_factory.mktemp("demo_data"), n_seen=6, n_per_level=3, train_per_concept=10,
                   test_per_concept=4, epochs=1, onto=onto)


def _extract_cmd(assets, checkpoint: Path, out: Path) -> list[str]:
    return [*COG, "extract", "--model.model", "timm:resnet10t", "--model.checkpoint", str(checkpoint),
            "--data.in1k_root", str(assets.in1k_root), "--data.in21k_root", str(assets.in21k_root),
            "--data.benchmark", str(assets.benchmark), "--data.out", str(out), "--data.num_workers", "0",
            "--data.batch_size", "8", "--trainer.accelerator", "cpu", "--trainer.devices", "1"]


def _stores(out: Path) -> dict[str, tuple]:
    found = {}
    for meta in sorted(out.rglob("meta.json")):
        store = open_store(meta.parent)
        found[str(meta.parent.relative_to(out))] = (np.asarray(store.features), np.asarray(store.labels),
                                                    np.asarray(store.index))
    return found


@pytest.mark.slow
def test_extract_killed_ten_times_resumes_to_the_uninterrupted_stores(demo_data, tmp_path):
    import timm
    import torch

    torch.manual_seed(0)
    checkpoint = tmp_path / "resnet10t.pt"
    torch.save(timm.create_model("resnet10t", pretrained=False, num_classes=0).state_dict(), checkpoint)
    wall = _run(_extract_cmd(demo_data, checkpoint, tmp_path / "ref"))
    reference = _stores(tmp_path / "ref")
    assert len(reference) == 12  # six domains, train and test
    out = tmp_path / "killed"

    def check():
        got = _stores(out)
        assert got.keys() == reference.keys()
        for key, arrays in reference.items():
            for a, b in zip(arrays, got[key], strict=True):
                np.testing.assert_array_equal(a, b, err_msg=key)
        assert not list(out.rglob("*.partial*")), "a finished extraction left partial stores"

    assert kill_and_resume(_extract_cmd(demo_data, checkpoint, out), out, 10, 3, wall, check) == 10


# --- run -----------------------------------------------------------------------------------------------------------

SMALL = ["--seen", "6", "--per-level", "3", "--train-per-concept", "10", "--test-per-concept", "4",
         "--pretrain-epochs", "1", "--trials", "3", "--epochs", "3", "--seeds", "22", "--shots", "all", "1",
         "--no-finetune", "--variants"]


@pytest.mark.slow
def test_run_killed_ten_times_resumes_to_the_uninterrupted_results(tmp_path):
    ref = tmp_path / "ref"
    _run([*COG, "demo", "--out", str(ref), *SMALL])  # prepares the demo data once
    _clear(ref)
    wall = _run([*COG, "demo", "--out", str(ref), *SMALL])  # the uninterrupted run on prepared data
    reference, stores = _rows(ref / "results.sqlite"), _stores(ref / "features")
    out = tmp_path / "killed"
    cmd = [*COG, "demo", "--out", str(out), *SMALL]

    def check():
        assert _rows(out / "results.sqlite") == reference
        got = _stores(out / "features")
        assert got.keys() == stores.keys()
        for key, arrays in stores.items():
            for a, b in zip(arrays, got[key], strict=True):
                np.testing.assert_array_equal(a, b, err_msg=key)
        assert (out / "report" / "report.md").exists()

    shutil.copytree(ref / "data", out / "data")
    assert kill_and_resume(cmd, out, 10, 4, wall, check, lambda: _clear(out)) == 10


def _clear(out: Path) -> None:
    """Everything of a run but its prepared data: the kills are for the run, not for generating the demo's data."""
    for name in ("features", "report", "results.sqlite", "optuna.db"):
        path = out / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
