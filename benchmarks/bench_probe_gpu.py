#!/usr/bin/env python3
"""One tuned probe at full scale on a GPU: 1.1M x 2048 synthetic features, 1000 classes, 30 trials x 100 epochs.

Writes features with the recipe of ``../shared/bench/make_features.py`` (Gaussian class clusters whose means share a
low-rank structure, ReLU, float16 store), drawn on the GPU with torch's generator since NumPy takes minutes at this
size, then times ``cog-pl probe tune`` on them as a subprocess (imports, loading and the final retrain included) and
prints its result row and wall seconds. Before that, ``--steps`` times the training step alone at the tune's head
counts (10 startup heads, batches of 5, the final single head): eager PyTorch, then with the fused Triton update,
then replayed from a CUDA graph as ``train_heads`` runs it, in one process, side by side.

    python benchmarks/bench_probe_gpu.py --steps --workdir /tmp/probe_gpu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


@torch.no_grad()
def make_features(out: Path, classes: int, dim: int, train_per_class: int, test_per_class: int, noise: float,
                  seed: int, device: str) -> None:
    g = torch.Generator(device=device).manual_seed(seed)
    groups = max(2, classes // 10)
    group_means = torch.randn(groups, dim, generator=g, device=device)
    group_of = torch.randint(0, groups, (classes,), generator=g, device=device)
    means = group_means[group_of] + 0.45 * torch.randn(classes, dim, generator=g, device=device)
    basis = torch.linalg.qr(torch.randn(dim, dim, generator=g, device=device))[0][:, : max(8, dim // 4)]
    means = means @ basis @ basis.T
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        n = classes * per_class
        y = torch.arange(classes, device=device).repeat_interleave(per_class)
        y = y[torch.randperm(n, generator=g, device=device)]
        (out / split).mkdir(parents=True, exist_ok=True)
        x = np.lib.format.open_memmap(out / split / "features.npy", mode="w+", dtype=np.float16, shape=(n, dim))
        for i in range(0, n, 65536):
            yb = y[i : i + 65536]
            xb = (means[yb] + noise * torch.randn(len(yb), dim, generator=g, device=device)).clamp_min_(0)
            x[i : i + len(yb)] = xb.half().cpu().numpy()
        x.flush()
        del x
        np.save(out / split / "labels.npy", y.cpu().numpy().astype(np.int64))


def time_steps(n: int, dim: int, classes: int, heads: int, batch: int, steps: int) -> dict[str, float]:
    """Milliseconds per training step of ``heads`` heads: eager, fused update, fused update + CUDA graph."""
    from cog_pl.probe.multihead import init_heads
    from cog_pl.probe.workspace import GraphedStep, HeadsWorkspace

    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.rand(n, dim, device="cuda"), dim=1)
    y = torch.randint(0, classes, (n,), device="cuda")
    init = init_heads(dim, classes, heads, g)
    wd = torch.full((heads * classes,), 1e-6, device="cuda")
    order = torch.randperm(n, device="cuda")
    out = {}
    for name, fused, graphed in (("eager", False, False), ("fused", True, False), ("fused+graph", True, True)):
        ws = HeadsWorkspace(x, y, batch, init, 0.9, "bf16-mixed", wd, fused=fused)
        ws.step_lr.fill_(0.1)
        step = GraphedStep(ws, batch) if graphed else ws.step
        for i in range(5):
            step(order[i * batch : (i + 1) * batch])
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(steps):
            j = (i % (n // batch)) * batch
            step(order[j : j + batch])
        torch.cuda.synchronize()
        out[name] = round((time.perf_counter() - start) / steps * 1e3, 4)
        del ws, step
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--train-per-class", type=int, default=1100)
    p.add_argument("--test-per-class", type=int, default=50)
    p.add_argument("--noise", type=float, default=2.2)
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--seed", type=int, default=22)
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", action="store_true", help="also time the training step alone (CUDA only)")
    p.add_argument("--json", type=Path, help="write the figures here")
    a = p.parse_args()
    figures: dict = {"device": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"}
    if a.steps:
        n = a.classes * a.train_per_class * 9 // 10
        for heads in (10, 5, 1):
            figures[f"step_ms_{heads}_heads"] = ms = time_steps(n, a.dim, a.classes, heads, 1024, 300)
            print(f"step, {heads} heads: {ms} ms", flush=True)
        torch.cuda.empty_cache()
    feats = a.workdir / "features"
    start = time.perf_counter()
    make_features(feats, a.classes, a.dim, a.train_per_class, a.test_per_class, a.noise, 0, a.device)
    print(f"features written in {time.perf_counter() - start:.1f}s: {feats}", flush=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "cog_pl.cli.main", "probe", "tune", "--features", str(feats),
           "--trials", str(a.trials), "--epochs", str(a.epochs), "--seed", str(a.seed), "--probe-device", a.device,
           "--workdir", str(a.workdir)]
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    wall = time.perf_counter() - start
    row = json.loads(out.strip().splitlines()[-1])
    figures.update(wall_seconds=round(wall, 1), **{k: row[k] for k in (
        "test_top1", "test_top5", "val_top1", "lr", "wd", "seconds", "tune_seconds", "final_seconds", "precision",
        "train_rows", "tuning_rows", "val_rows")})
    print(json.dumps(figures, indent=1))
    print(f"one tuned probe ({a.trials} trials x {a.epochs} epochs, {row['train_rows']} x {a.dim}, {a.classes} "
          f"classes) on {figures['device']}: {wall:.1f}s wall ({row['tune_seconds']:.1f}s tuning, "
          f"{row['final_seconds']:.1f}s final), test top-1 {row['test_top1']:.2f}")
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
