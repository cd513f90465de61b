"""Comparable domains: the demo evaluates IN-1K on a fixed sample of its seen concepts, as many as a level has.

Top-1 over 50 concepts and top-1 over 15 are not comparable (chance alone differs threefold), and the paper's six
domains all have 1000 concepts. The backbones are pretrained on every seen concept (``benchmark.json``); the
benchmark the demo evaluates (``benchmark_eval.json``) has the same five levels and, as its IN-1K domain, a seeded
sample of the seen concepts of the levels' size, recorded in its ``meta["in1k_domain"]``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from cog_pl.benchmark import Benchmark
from cog_pl.demo.synthetic import BENCHMARK_FILE

EVAL_FILE = "benchmark_eval.json"


def comparable_benchmark(bench: Benchmark, seed: int = 0) -> Benchmark:
    """``bench`` with an IN-1K domain of as many concepts as its smallest level: a seeded sample of its seen
    concepts, in their label order (all of them when there are fewer)."""
    size = min(len(bench.in1k), *(len(v) for v in bench.levels.values()))
    keep = set(np.random.default_rng([seed, 0x1CC]).choice(len(bench.in1k), size, replace=False).tolist())
    in1k = tuple(w for i, w in enumerate(bench.in1k) if i in keep)
    note = f"{bench.in1k_test} (the {size} concepts of the IN-1K domain)"
    meta = {**bench.meta, "in1k_domain": {"concepts": size, "sample_of": len(bench.in1k), "seed": seed,
                                          "why": "every domain has as many concepts as a level, as in the paper"}}
    return Benchmark(f"{bench.name}-comparable", in1k, bench.levels, bench.test, note, bench.protocol, meta)


def write_comparable(root: str | os.PathLike, seed: int = 0) -> Path:
    """``<root>/benchmark_eval.json`` made from ``<root>/benchmark.json`` (rewritten only when it would differ)."""
    root = Path(root)
    bench = comparable_benchmark(Benchmark.load(root / BENCHMARK_FILE), seed)
    path = root / EVAL_FILE
    if not path.exists() or Benchmark.load(path) != bench:
        bench.save(path)
    return path
