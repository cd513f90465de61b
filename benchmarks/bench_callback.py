#!/usr/bin/env python3
"""What one ``CoGEvaluationCallback`` call costs at given sizes, in its two parts, without data on disk.

A call runs the backbone over ``len(domains) x concepts x (train_images + test_images)`` images and trains one probe
per domain (:meth:`CoGEvaluationCallback.evaluate`). This script times (1) the forward of a torchvision model
(random weights: the cost is the same) over ``--sample`` images at ``--size`` px in the callback's batches, scaled
to the call's image count, and (2) each of ``--methods`` (the callback's score functions,
:data:`~cog_pl.callbacks.eval_methods.EVAL_METHODS`: the linear probe, the k-NN, the ridge probe) on the same random
L2-normalised features of the model's width with the call's class and image counts, times the number of domains, the
methods taking turns ``--repeat`` times (best of). It prints one JSON line: wall seconds and CPU seconds of each part,
and each method's time as a fraction of the linear probe's (on a shared machine the wall time depends on the load;
the CPU time much less; a ratio of one run, the methods interleaved, much less again).

    python benchmarks/bench_callback.py --model resnet50 --size 224 --concepts 100 --train-images 50 \\
        --test-images 20 --threads 1 --methods linear ridge
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision

from cog_pl.callbacks.cog_eval import CoGEvaluationCallback
from cog_pl.callbacks.eval_methods import EVAL_METHODS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50", help="a torchvision model name")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--concepts", type=int, default=20)
    p.add_argument("--train-images", type=int, default=20)
    p.add_argument("--test-images", type=int, default=10)
    p.add_argument("--domains", type=int, default=6)
    p.add_argument("--sample", type=int, default=128, help="images actually run through the model")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--methods", nargs="+", default=["linear"], choices=list(EVAL_METHODS))
    p.add_argument("--repeat", type=int, default=1, help="turns of the methods (best of)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = torchvision.models.get_model(a.model, num_classes=1000).eval()
    model.fc = torch.nn.Identity()  # the features, as a backbone gives them (ResNets)
    cog = CoGEvaluationCallback(in21k_root="unused", domains=("l1",), concepts=a.concepts,
                                train_images=a.train_images, test_images=a.test_images)
    images = torch.randn(a.sample, 3, a.size, a.size)
    start, cpu = time.perf_counter(), time.process_time()
    feats = cog._features(model, images, torch.device("cpu"), torch.float32)
    per_image, cpu_per_image = (time.perf_counter() - start) / a.sample, (time.process_time() - cpu) / a.sample
    n_images = a.domains * a.concepts * (a.train_images + a.test_images)
    ytr = torch.arange(a.concepts).repeat_interleave(a.train_images)
    yte = torch.arange(a.concepts).repeat_interleave(a.test_images)
    xtr = F.normalize(torch.randn(len(ytr), feats.shape[1]), dim=1)
    xte = F.normalize(torch.randn(len(yte), feats.shape[1]), dim=1)
    wall: dict[str, float] = {}
    cpu_s: dict[str, float] = {}
    for _ in range(a.repeat):
        for method in a.methods:
            start, cpu = time.perf_counter(), time.process_time()
            EVAL_METHODS[method].score(cog.settings, xtr, ytr, xte, yte)
            took, cpu_took = time.perf_counter() - start, time.process_time() - cpu
            if took < wall.get(method, float("inf")):
                wall[method], cpu_s[method] = took, cpu_took
    out = {"model": a.model, "size": a.size, "threads": a.threads, "images": n_images, "dim": feats.shape[1],
           "forward_s": round(per_image * n_images, 1), "forward_cpu_s": round(cpu_per_image * n_images, 1)}
    for method in a.methods:
        out[f"{method}_probes_s"] = round(wall[method] * a.domains, 2)
        out[f"{method}_probes_cpu_s"] = round(cpu_s[method] * a.domains, 2)
        if "linear" in wall:
            out[f"{method}_vs_linear"] = round(wall[method] / wall["linear"], 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
