#!/usr/bin/env python3
"""The time of one attentive-probe cell and one MLP-probe cell against one linear-probe cell, on the same device.

A cell is one (seed, all data) probe of the protocol (``cog_pl.protocol.ProbeProtocol``: 30 trials x 100 epochs,
tuned on 80 % of a level's train images, then the best retrained for 100 epochs on all of them). In fast mode the
trials run as heads trained side by side (``cog_pl.probe.tuner.SearchPlan``: the 10 startup trials in one pass, then
passes of 5), so a cell is ``epochs x (0.8 N x (t10 + 4 t5) + N x t1)`` where ``tK`` is the time per image of one
training pass of K heads. The script measures ``tK`` for each kind at the full class count and width on a slice of
synthetic features (a few optimiser steps, not an epoch: what is scaled down is the number of images per
measurement), then projects the cell to every level's real train count (``cog_pl/assets``: images per Fall 2011
synset, at most 1300 per concept after the 50 test images, the split rule of ``cog_pl.data.splits``).

- linear: :func:`cog_pl.probe.multihead.train_heads` (the benchmark's own linear probe, SGD, on ``[N, D]``).
- attentive: :class:`cog_pl.probe.poolers.PoolerBank` of K heads on tokens ``[N, T, D]`` (T = 1, 5, 17, 197: the
  class token alone, + a 2x2 grid, + 4x4, + every patch of a ViT-*/16 at 224), AdamW, summed cross-entropy.
- mlp: :class:`cog_pl.probe.poolers.MLPBank` of K heads on ``[N, D]``, AdamW.

Not measured (the same for every kind, or small): reading the store, the evaluation passes, the TPE sampler, the
float16 -> float32 conversion of the features. The tuned lr/wd change nothing in the time.

    python benchmarks/bench_probe_kinds.py [--dim 768 --classes 1000 --tokens 1 5 17 197 --presets vjepa capi ep]
    python benchmarks/bench_probe_kinds.py --device cuda --precision bf16-mixed   # the GPU check's entry

``COG_PL_BENCH_TINY=1`` shrinks everything (a smoke run, as ``scripts/gpu_check.sh`` does on a CPU).
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from cog_pl.probe.multihead import init_heads, train_heads
from cog_pl.probe.poolers import POOLER_PRESETS, MLPBank, PoolerBank
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol


def level_train_counts() -> dict[str, int]:
    """Train images per level under the split rule (min(images - 50 test, 1300) per concept, Fall 2011 counts)."""
    from cog_pl.resources import fall11_image_counts, official_levels

    counts = fall11_image_counts()
    return {level: sum(min(counts[w] - 50, 1300) for w in wnids) for level, wnids in official_levels().items()}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def per_image_linear(k: int, a, device: torch.device) -> float:
    """Seconds per training image of one pass of k linear heads (one epoch over ``a.linear_images`` images)."""
    g = torch.Generator().manual_seed(0)
    n = a.linear_images
    x = F.normalize(torch.randn(n, a.dim, generator=g), dim=1).to(device)
    y = torch.randint(0, a.classes, (n,), generator=g).to(device)
    init = init_heads(a.dim, a.classes, k, g)
    protocol = ProbeProtocol()
    kwargs = dict(num_classes=a.classes, epochs=1, batch_size=protocol.batch_size, momentum=protocol.momentum,
                  init=init, eval_x=x[:1], eval_y=y[:1], precision=a.precision)
    lrs, wds = [1.0] * k, [1e-6] * k
    warm = protocol.batch_size * 2
    train_heads(x[:warm], y[:warm], lrs, wds, generator=torch.Generator().manual_seed(1),
                **kwargs)  # warm-up: kernels, allocations
    best = float("inf")
    for _ in range(a.repeat):
        sync(device)
        start = time.perf_counter()
        train_heads(x, y, lrs, wds, generator=torch.Generator().manual_seed(1), **kwargs)
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best / n


def per_image_module(bank: torch.nn.Module, shape: tuple[int, ...], a, device: torch.device,
                     batch: int) -> float:
    """Seconds per training image of AdamW steps of a bank (summed cross-entropy of its heads) at ``batch``:
    ``a.steps`` steps after one warm-up step, or fewer where the time limit per measurement is reached."""
    bank = bank.to(device).train()
    opt = torch.optim.AdamW(bank.parameters(), lr=1e-3, weight_decay=1e-4)
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(batch, *shape, generator=g, device=device)
    y = torch.randint(0, a.classes, (batch,), generator=g, device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if a.precision == "bf16-mixed" else nullcontext()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with autocast:
            logits = bank(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.repeat(logits.shape[0]), reduction="sum") / batch
        loss.backward()
        opt.step()

    step()
    best = float("inf")
    for _ in range(a.repeat):
        sync(device)
        start, done = time.perf_counter(), 0
        while done < a.steps and (done == 0 or time.perf_counter() - start < a.limit_s):
            step()
            done += 1
        sync(device)
        best = min(best, (time.perf_counter() - start) / done)
    return best / batch


def cell_seconds(per_image: dict[int, float], n_train: int, protocol: ProbeProtocol, plan: SearchPlan) -> float:
    """A cell's training time: the tuning passes on the 80 % and the retrain of the best on all train images."""
    n_tune = round(n_train * (1 - protocol.val_fraction))
    passes = [plan.startup_trials] + [plan.trial_batch] * -(-(protocol.trials - plan.startup_trials)
                                                            // plan.trial_batch)
    tune = sum(per_image[k] for k in passes) * n_tune
    return protocol.epochs * (tune + per_image[1] * n_train)


def fmt_s(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.2f} s"


def main() -> int:
    tiny = os.environ.get("COG_PL_BENCH_TINY") == "1"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, default=64 if tiny else 768, help="feature width (ViT-S 384, B 768, L 1024)")
    p.add_argument("--classes", type=int, default=10 if tiny else 1000)
    p.add_argument("--tokens", type=int, nargs="+", default=[1, 5] if tiny else [1, 5, 17, 197])
    p.add_argument("--presets", nargs="+", default=["capi"] if tiny else ["vjepa", "vjepa2", "capi", "ep"],
                   choices=list(POOLER_PRESETS))
    p.add_argument("--mlp-hidden", type=int, default=None, help="the MLP's hidden width (default: --dim)")
    p.add_argument("--batch", type=int, default=64 if tiny else 1024,
                   help="images per step of the attentive and MLP heads (the linear's is the protocol's 1024)")
    p.add_argument("--block-batch", type=int, default=16 if tiny else 64,
                   help="images per step of presets with self-attention blocks over the tokens (vjepa2: its "
                        "activations are T times a query's; V-JEPA 2 itself steps 16 per GPU, in1k.yaml l.20)")
    p.add_argument("--steps", type=int, default=2 if tiny else 3, help="timed steps per measurement (at most)")
    p.add_argument("--limit-s", type=float, default=20.0, help="stop adding steps to a measurement after this")
    p.add_argument("--linear-images", type=int, default=256 if tiny else 32768,
                   help="images of the linear heads' timed epoch")
    p.add_argument("--repeat", type=int, default=1, help="measurements per figure; the best is kept")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    hidden = a.mlp_hidden or a.dim
    protocol, plan = ProbeProtocol(), SearchPlan()
    heads = sorted({plan.startup_trials, plan.trial_batch, 1}, reverse=True)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {where}; precision {a.precision}; dim {a.dim}, {a.classes} classes, batch {a.batch} "
          f"({a.block_batch} with token blocks); "
          f"heads per pass {heads} (SearchPlan: {plan.startup_trials} startup trials, then {plan.trial_batch}); "
          f"cell = {protocol.trials} trials x {protocol.epochs} epochs on {1 - protocol.val_fraction:.0%} of train "
          f"+ the best retrained on all")
    print(f"scaled down: images per measurement ({a.steps} steps of {a.batch}; the linear: one epoch of "
          f"{a.linear_images}); not scaled: classes, width, tokens, heads per pass")
    per_image: dict[str, dict[int, float]] = {"linear": {k: per_image_linear(k, a, device) for k in heads}}
    print("linear  T=1    s/image/pass: " + ", ".join(f"K={k} {per_image['linear'][k]:.3g}" for k in heads),
          flush=True)
    per_image[f"mlp h={hidden}"] = {k: per_image_module(MLPBank(a.dim, a.classes, hidden, k), (a.dim,), a, device,
                                                        a.batch) for k in heads}
    print("mlp     T=1    s/image/pass: " + ", ".join(f"K={k} {per_image[f'mlp h={hidden}'][k]:.3g}" for k in heads),
          flush=True)
    for preset in a.presets:
        batch = a.block_batch if POOLER_PRESETS[preset].token_blocks else a.batch
        for t in a.tokens:
            name = f"{preset} T={t}"
            per_image[name] = {k: per_image_module(PoolerBank(a.dim, a.classes, preset, k), (t, a.dim), a, device,
                                                   batch) for k in heads}
            print(f"{preset:7s} T={t:<4d} s/image/pass: " + ", ".join(f"K={k} {per_image[name][k]:.3g}"
                                                                       for k in heads), flush=True)
    counts = level_train_counts()
    n_max = max(counts.values())
    print("\nprojected cell (one seed, all data) at a level's train images (L1..L5: "
          + ", ".join(f"{n:,}" for n in counts.values()) + f"; the largest, {n_max:,}, below):")
    print(f"{'kind':20s} {'cell':>10s} {'x linear':>9s}")
    linear = cell_seconds(per_image["linear"], n_max, protocol, plan)
    for name, times in per_image.items():
        cell = cell_seconds(times, n_max, protocol, plan)
        print(f"{name:20s} {fmt_s(cell):>10s} {cell / linear:9.1f}")
    grid = (1 + len(protocol.shots)) * len(protocol.seeds)
    print(f"(a level's grid is {grid} cells, {len(protocol.seeds)} seeds x (all + {len(protocol.shots)} shot "
          f"counts); the few-shot cells train on at most 128 images per class, a small part of the all-data cell)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
