#!/usr/bin/env python3
"""One domain's probe grid with one worker and with ``--workers auto``: wall time of each, the ratio, and whether the
rows are the same (lr, wd, best trial, validation and test top-1 of every cell).

Both sides run ``cog-pl probe protocol`` as a process (``python -m cog_pl.cli.main``) on the same generated features
(Gaussian class clusters, float16, ``--classes`` x ``--per-class`` train rows of ``--dim``), each on a fresh journal
storage and results file. The one-worker side runs with torch's default threads, as a user would; the other side
with the plan of :func:`cog_pl.probe.workers.plan_workers`. With ``--repeat N`` the sides take turns N times and the
best wall time of each is compared. Goal: at least 1.3x faster than one worker, never slower.

    python benchmarks/bench_probe_grid.py --seeds 22 37 45 --shots all 1 4 16 --trials 10 --epochs 10
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAME = ("lr", "wd", "best_trial", "val_top1", "test_top1", "train_rows", "identity")


def write_features(root: Path, classes: int, dim: int, per_class: int, test_per_class: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(classes, dim))
    for split, n in (("train", per_class), ("test", test_per_class)):
        y = np.repeat(np.arange(classes), n)
        x = np.maximum(means[y] + 2.0 * rng.normal(size=(len(y), dim)), 0)
        (root / split).mkdir(parents=True, exist_ok=True)
        np.save(root / split / "features.npy", x.astype(np.float16))
        np.save(root / split / "labels.npy", y.astype(np.int64))


def run(features: Path, work: Path, a: argparse.Namespace, workers: str | None) -> float:
    cmd = [sys.executable, "-m", "cog_pl.cli.main", "probe", "protocol", "--features", str(features),
           "--results", str(work / "results.sqlite"), "--storage", str(work / "optuna.log"), "--trials",
           str(a.trials), "--epochs", str(a.epochs), "--seeds", *map(str, a.seeds), "--shots", *a.shots,
           "--probe-device", a.device, "--model", "m", "--domain", "d"]
    if workers:
        cmd += ["--probe-workers", workers]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--per-class", type=int, default=300)
    p.add_argument("--test-per-class", type=int, default=50)
    p.add_argument("--seeds", type=int, nargs="+", default=[22, 37, 45])
    p.add_argument("--shots", nargs="+", default=["all", "1", "4", "16"])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--workers", default="auto")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda (one worker per GPU)")
    a = p.parse_args()

    from cog_pl.probe.workers import available_cores, plan_workers
    from cog_pl.results import read_rows

    cells = len(a.seeds) * len(a.shots)
    slots = plan_workers(a.workers if a.workers == "auto" else int(a.workers), a.device, cells)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        features = tmp / "features"
        write_features(features, a.classes, a.dim, a.per_class, a.test_per_class)
        times: dict[str, list[float]] = {"one": [], "many": []}
        rows = {}
        for r in range(a.repeat):
            for side, workers in (("one", None), ("many", a.workers)):
                work = tmp / f"{side}-{r}"
                work.mkdir()
                times[side].append(run(features, work, a, workers))
                made = read_rows(work / "results.sqlite")
                rows[side] = {(x["shots"], x["seed"]): {k: x[k] for k in SAME} for x in made}
                print(f"run {r + 1}: {side:<4} {times[side][-1]:7.1f} s", flush=True)
    one, many = min(times["one"]), min(times["many"])
    same = rows["one"] == rows["many"] and len(rows["one"]) == cells
    print(f"grid: {len(a.seeds)} seeds x {len(a.shots)} shot settings = {cells} cells, {a.trials} trials x {a.epochs} "
          f"epochs, {a.classes} classes x {a.per_class} train rows x {a.dim} dims; {available_cores()} cores, "
          f"{a.device}; fast mode, products in the precision 'auto' picks on the device")
    print(f"one worker (torch default threads): {one:.1f} s; --workers {a.workers} ({len(slots)} workers x "
          f"{slots[0].threads} thread(s)): {many:.1f} s; speed-up {one / many:.2f}x; rows identical: {same}")


if __name__ == "__main__":
    main()
