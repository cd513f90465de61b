"""Streamed sources (Hugging Face's gzipped tars, IN-21K's gzip whole tar) read by several readers: two loader
workers, two DDP processes (gloo, CPU), and an extraction SIGKILLed half-way then resumed. Each row is read once and
the stores equal those of the folder layout (or of an uninterrupted run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest_data import tiny  # noqa: F401 - fixture
from conftest_sources import assert_same_stores, extract, hf_tars, in1k_images, whole_tar, write_folders
from test_extract_ddp import _same as same_stores
from test_extract_ddp import _stores as store_paths

from cog_pl.demo.synthetic import make_demo
from cog_pl.features.store import is_complete, open_store

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
DOMAINS = ("in1k", "cog_l1")


def test_two_loader_workers_stream_each_row_once_to_the_folder_layouts_stores(tiny, tmp_path):  # noqa: F811
    images = in1k_images(tiny.in1k, n_train=5)
    folders21 = tiny.make_in21k(tmp_path / "in21k")
    hf = hf_tars(tmp_path / "hf", images, train_tars=3)  # three train tars for two readers: uneven shares
    whole = whole_tar(folders21, tmp_path / "whole" / "winter21_whole.tar.gz")
    got = extract(tmp_path / "got", DOMAINS, in1k_root=hf, in21k_root=whole.parent, num_workers=2)
    ref = extract(tmp_path / "ref", DOMAINS, in1k_root=write_folders(tmp_path / "f", images), in21k_root=folders21)
    assert_same_stores(got, ref)
    assert {got[d, "train"][3]["source"]["images"] for d in DOMAINS} == {"hf_tars", "whole_tar"}


# --- in subprocesses: DDP and kills ----------------------------------------------------------------------------------

def _folders(root: Path) -> dict[str, dict[str, dict[str, bytes]]]:
    """``{split: {wnid: {filename: bytes}}}`` of an IN-1K folder copy."""
    return {split: {w.name: {f.name: f.read_bytes() for f in sorted(w.iterdir())}
                    for w in sorted((root / sub).iterdir())} for split, sub in (("train", "train"), ("test", "val"))}


@pytest.fixture(scope="module")
def bench(onto, tmp_path_factory):
    """The demo benchmark as folders, and the same images as HF tars (IN-1K) and a gzip whole tar (IN-21K)."""
    root = tmp_path_factory.mktemp("streamed")
    path = make_demo(root / "demo", n_seen=4, n_per_level=2, train_per_concept=9, test_per_concept=3, image_size=32,
                     onto=onto)
    hf = hf_tars(root / "hf", _folders(root / "demo" / "in1k"), train_tars=3)
    whole = whole_tar(root / "demo" / "in21k", root / "whole" / "winter21_whole.tar.gz")
    return {"benchmark": path, "folders": (root / "demo" / "in1k", root / "demo" / "in21k"),
            "streamed": (hf, whole.parent)}


def _cmd(bench, layout: str, out: Path, *extra: str) -> list[str]:
    in1k, in21k = bench[layout]
    return [sys.executable, "-m", "cog_pl.cli.main", "extract", "--model.model", "timm:resnet10t",
            "--model.random_weights", "true", "--data.in1k_root", str(in1k), "--data.in21k_root", str(in21k),
            "--data.benchmark", str(bench["benchmark"]),
            "--data.domains", f"[{','.join(DOMAINS)}]", "--data.out", str(out), "--data.num_workers", "0",
            "--data.batch_size", "2", "--trainer.accelerator", "cpu", "--seed_everything", "0", *extra]


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_two_ddp_processes_stream_each_row_once_to_the_folder_layouts_stores(bench, tmp_path):
    _run(_cmd(bench, "folders", tmp_path / "ref", "--trainer.devices", "1"))
    _run(_cmd(bench, "streamed", tmp_path / "ddp", "--trainer.devices", "2", "--trainer.strategy", "ddp"))
    # other batch compositions: equal up to float rounding
    same_stores(tmp_path / "ref", tmp_path / "ddp", exact=False, domains=DOMAINS)
    assert open_store(store_paths(tmp_path / "ddp", DOMAINS)["in1k", "train"]).meta["source"]["images"] == "hf_tars"
    assert open_store(store_paths(tmp_path / "ddp", DOMAINS)["cog_l1", "test"]).meta["source"]["images"] == "whole_tar"
    assert not list((tmp_path / "ddp").rglob("*.partial"))


def test_an_extraction_from_streamed_tars_killed_half_way_resumes_to_the_uninterrupted_stores(bench, tmp_path):
    _run(_cmd(bench, "streamed", tmp_path / "ref", "--trainer.devices", "1"))
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(bench, "streamed", out, "--trainer.devices", "1"), env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline, half = time.time() + 300, None
    while time.time() < deadline and proc.poll() is None:  # kill once a store is part written
        for written in out.rglob("written.npy"):
            try:
                done = np.load(written)
            except (OSError, ValueError):  # being written
                continue
            if 0 < done.sum() < len(done):
                half = written.parent
        if half is not None:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert half is not None, "the extraction ended before a store was part written"
    assert not all(is_complete(p) for p in store_paths(out, DOMAINS).values())
    _run(_cmd(bench, "streamed", out, "--trainer.devices", "1"))  # resumes the rows left, streamed again
    same_stores(tmp_path / "ref", out, domains=DOMAINS)
    assert not list(out.rglob("*.partial*"))
