"""What keeping test predictions costs at full scale: the bytes per result row and the report's time.

Generates, for ``--models`` models, the predictions of every all-data linear row of the protocol (6 domains of 1000
concepts x 50 test images = 50,000 test images each, 5 seeds) with the official level concepts and the IN-1K
classes, writes them through the real row writer (:func:`cog_pl.results.append_row`, one ``.npz`` per row beside
the results file), plus the label-noise predictions of one model's IN-1K probe (one seed, the five levels), and
times ``cog-pl report --html`` on them (the default similarity: Lin to IN-1K from WordNet, built in the report).

Generated predictions, not a model's: a concept's top-1 chance falls with its level and differs per model; a
wrong first class is one of 20 fixed "neighbours" of the concept (a skewed choice, as real confusions concentrate),
the other four of the top 5 likewise, the true class among them with a chance. Their compressibility is what a
real probe's top 5 would give only roughly: the figures are the order of magnitude, stated as measured.

    python benchmarks/bench_report_concepts.py [--models 4] [--seeds 5] [--per-concept 50] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cog_pl import resources
from cog_pl.protocol import DOMAINS, LEVEL_OF_DOMAIN, ProbeProtocol
from cog_pl.results import append_row, read_rows
from cog_pl.results.predictions import (
    Predictions,
    noise_relative_path,
    predictions_root,
    read_row_predictions,
    write_predictions,
)

NEIGHBOURS = 20
LEVEL_TOP1 = {"in1k": 0.76, "cog_l1": 0.70, "cog_l2": 0.64, "cog_l3": 0.58, "cog_l4": 0.52, "cog_l5": 0.42}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def generate(rng: np.random.Generator, classes: int, per_concept: int, p_right: np.ndarray,
             neighbours: np.ndarray, truth_in_top5: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """``(top5, labels)`` of ``classes x per_concept`` test images (see the module's docstring)."""
    labels = np.repeat(np.arange(classes), per_concept)
    n = len(labels)
    weights = np.log(1.0 / np.arange(1, NEIGHBOURS + 1))  # Zipf-like: the first neighbours are the usual mistakes
    keys = weights + rng.gumbel(size=(n, NEIGHBOURS))
    picks = np.argsort(-keys, axis=1)[:, :5]  # 5 distinct neighbours, the usual ones first
    top5 = np.take_along_axis(neighbours[labels], picks, axis=1)
    right = rng.random(n) < p_right[labels]
    top5[right, 1:] = top5[right, :4]
    top5[right, 0] = labels[right]
    in5 = ~right & (rng.random(n) < truth_in_top5)  # wrong first, the truth among the other four
    top5[in5, 1 + rng.integers(0, 4, in5.sum())] = labels[in5]
    return top5, labels


def write_rows(results: Path, models: int, seeds: tuple[int, ...], per_concept: int,
               rng: np.random.Generator) -> tuple[list[int], list[float]]:
    level = resources.official_levels()
    concepts = {"in1k": list(resources.in1k_wnids()), **{d: list(level[lv]) for d, lv in LEVEL_OF_DOMAIN.items()}}
    sizes, seconds = [], []
    for m in range(models):
        offset = 0.04 * m
        for domain in DOMAINS:
            classes = concepts[domain]
            c = len(classes)  # a concept's neighbours: 20 other concepts (a shift of 1..c-1 each)
            shifts = 1 + np.argsort(rng.random((c, c - 1)), axis=1)[:, :NEIGHBOURS]  # distinct, never 0
            neighbours = (np.arange(c)[:, None] + shifts) % c
            p_right = np.clip(LEVEL_TOP1[domain] + offset + rng.normal(0, 0.15, len(classes)), 0.02, 0.99)
            for seed in seeds:
                top5, labels = generate(rng, len(classes), per_concept, p_right, neighbours)
                preds = Predictions.of(top5, labels, np.arange(len(labels)), classes)
                row = {"model": f"model_{m}", "method": "linear", "domain": domain, "shots": None, "seed": seed,
                       "test_top1": preds.top1, "test_top5": 100.0, "lr": 1.0, "wd": 1e-8, "predictions": preds}
                t = time.perf_counter()
                append_row(results, row)
                seconds.append(time.perf_counter() - t)
                sizes.append(row["predictions"]["bytes"])
    return sizes, seconds


def write_noise(results: Path, seeds: tuple[int, ...], per_concept: int, rng: np.random.Generator) -> None:
    """The label-noise predictions of model_0's IN-1K probe (first seed) on the five levels."""
    row = next(r for r in read_rows(results) if r["model"] == "model_0" and r["domain"] == "in1k"
               and r["seed"] == seeds[0])
    seen = list(resources.in1k_wnids())
    for domain, lv in LEVEL_OF_DOMAIN.items():
        level = list(resources.official_levels()[lv])
        neighbours = rng.integers(0, len(seen), (len(level), NEIGHBOURS))
        top5, labels = generate(rng, len(level), per_concept, np.zeros(len(level)), neighbours, 0.0)
        preds = Predictions.of(top5, labels, np.arange(len(labels)), seen, label_classes=level,
                               source={"kind": "label-noise", "domain": "in1k", "agreement": 1.0,
                                       "row_predictions_sha256": row["predictions"]["sha256"]},
                               model="model_0", method="linear", domain=domain, shots=None, seed=seeds[0])
        write_predictions(predictions_root(results), noise_relative_path("model_0", "in1k", domain, seeds[0]), preds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--per-concept", type=int, default=50, help="test images per concept (the protocol's 50)")
    p.add_argument("--out", type=Path, default=None, help="folder to keep (default: a temporary one)")
    args = p.parse_args()
    seeds = ProbeProtocol().seeds[: args.seeds]
    print(f"date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores visible, {len(os.sched_getaffinity(0))} usable; "
          f"load average {os.getloadavg()[0]:.2f} at start (a shared machine: others' jobs run too)")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"python {platform.python_version()}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        results = out / "results.sqlite"
        rng = np.random.default_rng(0)
        t = time.perf_counter()
        sizes, seconds = write_rows(results, args.models, seeds, args.per_concept, rng)
        write_noise(results, seeds, args.per_concept, rng)
        made = time.perf_counter() - t
        rows = read_rows(results)
        t = time.perf_counter()
        for row in rows:
            read_row_predictions(results, row)
        read_s = (time.perf_counter() - t) / len(rows)
        images = 1000 * args.per_concept
        print(f"\nrows: {len(rows)} ({args.models} models x 6 domains x {len(seeds)} seeds), {images:,} test images "
              f"each; generated and written in {made:.1f} s")
        print(f"predictions per row: {statistics.mean(sizes) / 1024:.1f} KiB mean (min {min(sizes) / 1024:.1f}, "
              f"max {max(sizes) / 1024:.1f}), {statistics.mean(sizes) / images:.2f} bytes per test image; raw "
              f"arrays {images * 20 / 1024:.0f} KiB (int16 top 5 and label, int64 image rows)")
        db = results.stat().st_size / len(rows)
        print(f"the row itself in results.sqlite: {db / 1024:.1f} KiB; writing a row's predictions "
              f"{1000 * statistics.median(seconds):.0f} ms (median), reading and checking them "
              f"{1000 * read_s:.0f} ms")
        grid = 6 * len(ProbeProtocol().seeds) * (1 + len(ProbeProtocol().shots))
        print(f"a model's whole linear grid ({grid} rows: 6 domains x 5 seeds x all data and "
              f"{len(ProbeProtocol().shots)} shot settings): {grid * statistics.mean(sizes) / 2**20:.0f} MiB "
              f"(k-NN rows: as many again)")
        from cog_pl.report.build import write_report

        t = time.perf_counter()
        files = write_report(results, out / "report", baseline="model_0", html=True)
        total = time.perf_counter() - t
        import cog_pl.report.concepts as concepts

        t = time.perf_counter()
        concepts.concept_report(results, rows, "model_0")  # again, the ontology now cached in this process
        analyses = time.perf_counter() - t
        print(f"\ncog-pl report --html, {len(rows)} rows: {total:.1f} s in all (WordNet ontology built and Lin "
              f"similarity of 5000 level concepts to IN-1K included), of which the concept analyses without the "
              f"ontology {analyses:.1f} s (reading {len(rows)} prediction files, per-concept top-1, curves, "
              f"{args.models - 1} x 6 paired bootstraps and permutation tests of 10,000 replicates, confusions)")
        print(f"report.html: {files['html'].stat().st_size / 2**20:.1f} MiB; concepts.csv: "
              f"{files['concepts'].stat().st_size / 2**20:.1f} MiB; load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
