"""A results store of simulated models whose rows carry test predictions, written through the real row writer, with a
level file giving each concept's similarity: what the concept analyses and the report read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cog_pl import resources
from cog_pl.io import write_json
from cog_pl.protocol import DOMAINS, LEVEL_OF_DOMAIN
from cog_pl.results import append_row
from cog_pl.results.predictions import Predictions, noise_relative_path, predictions_root, write_predictions

#: Each level's similarity to the seen concepts, roughly (the official levels' means).
LEVEL_SIM = {"L1": 0.85, "L2": 0.69, "L3": 0.57, "L4": 0.44, "L5": 0.2}


def level_concepts(n: int) -> dict[str, list[str]]:
    """The first ``n`` concepts (by wnid) of each official level."""
    return {lv: sorted(ws)[:n] for lv, ws in resources.official_levels().items()}


def write_level_file(path: Path, n: int, seed: int = 0) -> dict[str, float]:
    """A level file (cog-pl-levels v1) of :func:`level_concepts` with made-up Lin similarities and closest seen
    concepts; returns the similarities."""
    rng = np.random.default_rng(seed)
    levels = level_concepts(n)
    in1k = resources.in1k_wnids()
    sim = {w: float(np.clip(LEVEL_SIM[lv] + rng.normal(0, 0.04), 0.01, 0.99)) for lv, ws in levels.items() for w in ws}
    closest = {w: in1k[int(rng.integers(len(in1k)))] for w in sim}
    write_json(path, {"format": "cog-pl-levels", "version": 1, "levels": levels, "similarity": sim,
                      "closest_seen": closest, "settings": {"protocol": {"measure": "lin"}}})
    return sim


def simulate(classes: list[str], label: np.ndarray, p_right: np.ndarray, rng: np.random.Generator,
             confuse: int = 1) -> np.ndarray:
    """Top-5 classes per image: the label first with probability ``p_right`` (of its concept), else the concept
    ``confuse`` places further (the level's most frequent confusion), then the next classes."""
    c = len(classes)
    right = rng.random(len(label)) < p_right[label]
    first = np.where(right, label, (label + confuse) % c)
    return np.stack([(first + k) % c for k in range(min(5, c))], axis=1)


def simulated_results(tmp: Path, models: dict[str, float], seeds=(22, 37), n: int = 12, images: int = 10,
                      seed: int = 0, legacy: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """``results.sqlite`` with linear all-data rows of every model on the six domains and ``seeds``, each with its
    predictions: a concept's chance of being right rises with its similarity, plus the model's offset (``models``:
    name -> offset); ``legacy`` models' rows are written without predictions (as before they were kept). Also the
    label-noise predictions of the first model's IN-1K probe (seed ``seeds[0]``). Returns (results, level file)."""
    levels_path = tmp / "levels.json"
    sim = write_level_file(levels_path, n, seed)
    results = tmp / "results.sqlite"
    concepts = {"in1k": list(resources.in1k_wnids()[:n]),
                **{d: level_concepts(n)[lv] for d, lv in LEVEL_OF_DOMAIN.items()}}
    rng = np.random.default_rng(seed)
    for model, offset in models.items():
        for domain in DOMAINS:
            classes = concepts[domain]
            label = np.repeat(np.arange(len(classes)), images)
            base = np.array([sim.get(w, 0.95) for w in classes])
            p_right = np.clip(0.1 + 0.8 * base + offset, 0.02, 0.98)
            for s in seeds:
                top5 = simulate(classes, label, p_right, rng)
                preds = Predictions.of(top5, label, np.arange(len(label)), classes)
                row = {"model": model, "method": "linear", "domain": domain, "shots": None, "seed": s,
                       "test_top1": preds.top1, "test_top5": 100.0, "lr": 1.0, "wd": 1e-6}
                if model not in legacy:
                    row["predictions"] = preds
                append_row(results, row)
    first = next(iter(models))
    if first not in legacy:
        _noise(results, first, seeds[0], concepts, images, rng)
    return results, levels_path


def _noise(results: Path, model: str, seed: int, concepts: dict[str, list[str]], images: int,
           rng: np.random.Generator) -> None:
    """Label-noise predictions as :func:`cog_pl.analysis.label_noise.store_noise_predictions` writes them: concept
    ``i`` of each level mostly taken for seen concept ``i``."""
    from cog_pl.results import read_rows

    row = next(r for r in read_rows(results) if r["model"] == model and r["domain"] == "in1k" and r["seed"] == seed)
    seen = concepts["in1k"]
    for domain in LEVEL_OF_DOMAIN:
        label = np.repeat(np.arange(len(concepts[domain])), images)
        first = np.where(rng.random(len(label)) < 0.7, label % len(seen), rng.integers(0, len(seen), len(label)))
        top5 = np.stack([(first + k) % len(seen) for k in range(5)], axis=1)
        preds = Predictions.of(top5, label, np.arange(len(label)), seen, label_classes=concepts[domain],
                               source={"kind": "label-noise", "domain": "in1k", "agreement": 1.0,
                                       "row_predictions_sha256": row["predictions"]["sha256"]},
                               model=model, method="linear", domain=domain, shots=None, seed=seed)
        write_predictions(predictions_root(results), noise_relative_path(model, "in1k", domain, seed), preds)
