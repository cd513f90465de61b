#!/usr/bin/env python3
"""One domain's whole grid (seeds x shots) by the closed-form ridge probe and by the tuned linear probe, on the same
features: the wall time of each, their ratio, and the top-1 gap (ridge minus linear) per shot setting.

The features are the project's shared synthetic benchmark set (``/work/shared/bench/make_features.py``, transcribed in
:func:`make_features`: Gaussian class clusters whose means share a low-rank structure, ReLU'd, float16; its defaults
100 classes x 512 dims, 300 train and 50 test images a class), written in the plain store layout, or the stores given
with ``--features``. Both methods run through the grid runner (:func:`cog_pl.evaluate.runner.run_on_stores`) in this
process with the same seeds and shots, each into a results file of its own: ridge, the linear probe, ridge again (the
best of the two ridge times is kept, so a warm-up is not charged to it), so the ratio comes from one run on the same
machine state. The linear probe runs the paper's search (``--trials 30 --epochs 100``, fast mode, ``auto`` precision)
unless told otherwise; ``--no-linear`` times ridge alone (e.g. at an ImageNet-like width).

    python benchmarks/bench_ridge.py --threads 2
    python benchmarks/bench_ridge.py --classes 1000 --dim 2048 --train-per-class 100 --seeds 22 --no-linear
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from cog_pl.evaluate.runner import run_on_stores
from cog_pl.probe.ridge import PRECISION, REGS
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol


def make_features(out: Path, n_classes: int, dim: int, n_train: int, n_test: int, seed: int, noise: float) -> None:
    """``/work/shared/bench/make_features.py``'s ``make`` and ``main``, as written there."""
    rng = np.random.default_rng(seed)
    n_groups = max(2, n_classes // 10)
    group_means = rng.normal(size=(n_groups, dim))
    group_of = rng.integers(0, n_groups, size=n_classes)
    means = group_means[group_of] + 0.45 * rng.normal(size=(n_classes, dim))
    basis = np.linalg.qr(rng.normal(size=(dim, dim)))[0][:, : max(8, dim // 4)]
    means = means @ basis @ basis.T

    def draw(per_class):
        y = np.repeat(np.arange(n_classes), per_class)
        x = np.maximum(means[y] + noise * rng.normal(size=(len(y), dim)), 0)
        order = rng.permutation(len(y))
        return x[order].astype(np.float16), y[order].astype(np.int64)

    for split, (x, y) in (("train", draw(n_train)), ("test", draw(n_test))):
        (out / split).mkdir(parents=True, exist_ok=True)
        np.save(out / split / "features.npy", x)
        np.save(out / split / "labels.npy", y)


def timed(method: str, root: Path, results: Path, seeds: list[int], shots: list[int | None],
          protocol: ProbeProtocol, plan: SearchPlan, device: str) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    rows = run_on_stores(method, root, results, model="m", domain="cog_l1", seeds=seeds, shots=shots,
                         protocol=protocol, plan=plan, device=device, storage=str(results.with_suffix(".db")))
    return time.perf_counter() - start, rows


def by_shots(rows: list[dict]) -> dict[int | None, float]:
    out: dict[int | None, list[float]] = {}
    for r in rows:
        out.setdefault(r["shots"], []).append(float(r["test_top1"]))
    return {n: float(np.mean(v)) for n, v in out.items()}


def cpu_model() -> str:
    try:
        found = [ln for ln in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                 if ln.startswith("Model name")]
        return found[0].split(":", 1)[1].strip() if found else platform.processor()
    except OSError:
        return platform.processor()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--features", type=Path, help="plain stores (train/ and test/) instead of generated ones")
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--train-per-class", type=int, default=300)
    p.add_argument("--test-per-class", type=int, default=50)
    p.add_argument("--noise", type=float, default=2.2)
    p.add_argument("--seeds", type=int, nargs="+", default=list(ProbeProtocol().seeds))
    p.add_argument("--shots", nargs="+", default=["all", *map(str, ProbeProtocol().shots)])
    p.add_argument("--trials", type=int, default=ProbeProtocol().trials)
    p.add_argument("--epochs", type=int, default=ProbeProtocol().epochs)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--no-linear", action="store_true", help="time ridge alone")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    shots = [None if s == "all" else int(s) for s in a.shots]
    protocol = replace(ProbeProtocol(), trials=a.trials, epochs=a.epochs)
    plan = SearchPlan()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = a.features or work / "features"
        if a.features is None:
            make_features(root, a.classes, a.dim, a.train_per_class, a.test_per_class, 0, a.noise)
        ridge_s, ridge_rows = timed("ridge", root, work / "ridge1.sqlite", a.seeds, shots, protocol, plan, a.device)
        linear_s, linear_rows = (None, [])
        if not a.no_linear:
            linear_s, linear_rows = timed("linear", root, work / "linear.sqlite", a.seeds, shots, protocol, plan,
                                          a.device)
            again, _ = timed("ridge", root, work / "ridge2.sqlite", a.seeds, shots, protocol, plan, a.device)
            ridge_s = min(ridge_s, again)
    ridge, linear = by_shots(ridge_rows), by_shots(linear_rows)
    print(f"{len(a.seeds)} seeds x {len(shots)} shot settings = {len(ridge_rows)} cells; {a.classes} classes x "
          f"{a.train_per_class} train x {a.dim} dims; {cpu_model()}, {torch.get_num_threads()} threads, "
          f"ridge {PRECISION} over {len(REGS)} penalties, linear {a.trials} trials x {a.epochs} epochs "
          f"({plan.mode}, {plan.precision_on(a.device)})")
    print("| shots | ridge top-1 | linear top-1 | gap (ridge - linear) |\n|---|---|---|---|")
    for n in ridge:
        lin = linear.get(n)
        print(f"| {'all' if n is None else n} | {ridge[n]:.2f} | {'-' if lin is None else f'{lin:.2f}'} | "
              f"{'-' if lin is None else f'{ridge[n] - lin:+.2f}'} |")
    summary = {"ridge_s": round(ridge_s, 2), "linear_s": None if linear_s is None else round(linear_s, 2),
               "ridge_over_linear": None if linear_s is None else round(ridge_s / linear_s, 5),
               "mean_gap": None if not linear else round(float(np.mean([ridge[n] - linear[n] for n in linear])), 3),
               "cells": len(ridge_rows)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
