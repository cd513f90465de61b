"""``cog-pl extract`` as users run it, in subprocesses: 2-process DDP equals 1 process row for row, and a killed
extraction resumes to the same stores as an uninterrupted one."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cog_pl.demo.synthetic import make_demo
from cog_pl.features.store import is_complete, open_store
from cog_pl.protocol import DOMAINS

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench(onto, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    path = make_demo(root, n_seen=4, n_per_level=2, train_per_concept=9, test_per_concept=3, image_size=32, onto=onto)
    return root, path


def _cmd(bench, out, *extra):
    root, path = bench
    return [sys.executable, "-m", "cog_pl.cli.main", "extract", "--model.model", "timm:resnet10t",
            "--model.random_weights", "true", "--data.in1k_root", str(root / "in1k"),
            "--data.in21k_root", str(root / "in21k"),
            "--data.benchmark", str(path), "--data.out", str(out), "--data.num_workers", "0",
            "--data.batch_size", "2", "--trainer.accelerator", "cpu", "--seed_everything", "0", *extra]


def _env():
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _stores(out, domains=DOMAINS):
    return {(d, s): out / "resnet10t@random" / d / s for d in domains for s in ("train", "test")}


def _same(a: Path, b: Path, exact: bool = True, domains=DOMAINS) -> None:
    """Every store of ``a`` equal to ``b``'s: labels and row index exactly, features exactly or up to float rounding."""
    for key, pa in _stores(a, domains).items():
        sa, sb = open_store(pa), open_store(_stores(b, domains)[key])
        assert len(sa) == len(sb) > 0, key
        np.testing.assert_array_equal(sa.labels, sb.labels)
        np.testing.assert_array_equal(sa.index, sb.index)
        fa, fb = np.asarray(sa.features, np.float32), np.asarray(sb.features, np.float32)
        if exact:
            np.testing.assert_array_equal(fa, fb, err_msg=str(key))
        else:
            np.testing.assert_allclose(fa, fb, rtol=2e-3, atol=2e-3, err_msg=str(key))


@pytest.fixture(scope="module")
def single(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    subprocess.run(_cmd(bench, out, "--trainer.devices", "1"), check=True, env=_env(), capture_output=True)
    assert all(is_complete(p) for p in _stores(out).values())
    return out


def test_two_process_ddp_equals_one_process_row_for_row(bench, single, tmp_path):
    out = tmp_path / "ddp"
    proc = subprocess.run(_cmd(bench, out, "--trainer.devices", "2", "--trainer.strategy", "ddp"),
                          env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _same(single, out, exact=False)  # other batch compositions: equal up to float rounding
    assert not list(out.rglob("*.partial"))


def test_killed_extraction_resumes_to_the_same_stores(bench, single, tmp_path):
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(bench, out, "--trainer.devices", "1"), env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:  # kill once the first store is complete and a later one is under way
        done = sum(is_complete(p) for p in _stores(out).values())
        partial = list(out.rglob("written.npy"))
        if done >= 1 and partial and np.load(partial[0]).any():
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = [p for p in _stores(out).values() if is_complete(p)]
    assert 1 <= len(finished) < 12
    mtimes = {p: (p / "features.npy").stat().st_mtime_ns for p in finished}
    resumed = subprocess.run(_cmd(bench, out, "--trainer.devices", "1"), env=_env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert mtimes == {p: (p / "features.npy").stat().st_mtime_ns for p in finished}  # finished work not redone
    _same(single, out)


def test_two_process_ddp_records_an_unreadable_image_once(bench, single, tmp_path):
    root, path = bench
    copy = tmp_path / "bench"
    shutil.copytree(root / "in21k", copy / "in21k")
    bad = sorted((copy / "in21k").rglob("*.JPEG"))[0]
    bad.write_bytes(b"not a JPEG" * 20)  # a corrupt file, as real IN-21K copies have
    out = tmp_path / "ddp"
    proc = subprocess.run(_cmd((root, path), out, "--data.in21k_root", str(copy / "in21k"), "--trainer.devices", "2",
                               "--trainer.strategy", "ddp", "--data.on_error", "skip", "--data.max_skipped", "1"),
                          env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = [(key, m) for key, p in _stores(out).items() for m in open_store(p).meta.get("missing", [])]
    assert len(found) == 1 and found[0][1]["path"] == str(bad), found  # recorded once, by whichever rank read it
    key, record = found[0]
    ref, got = open_store(_stores(single)[key]), open_store(_stores(out)[key])
    keep = got.valid
    assert keep.sum() == len(got) - 1 and not keep[record["row"]]
    np.testing.assert_array_equal(ref.labels, got.labels)
    np.testing.assert_allclose(np.asarray(ref.features, np.float32)[keep], np.asarray(got.features, np.float32)[keep],
                               rtol=2e-3, atol=2e-3)
    assert not list(out.rglob("*.partial")) and not list(out.rglob("missing.*"))
