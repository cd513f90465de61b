"""The demo's miniature benchmark, generated on the spot: real CoG concepts, synthetic images, a benchmark file.

Layout under ``root``: ``in1k/train/<wnid>/*.JPEG`` and ``in1k/val/<wnid>/*.JPEG`` for the seen concepts,
``in21k/<wnid>/*.JPEG`` for the level concepts (train and test images together, as in IN-21K), and
``benchmark.json`` (:class:`~cog_pl.benchmark.Benchmark`) naming the concepts and the test images. Concepts come
from :mod:`cog_pl.demo.concepts` (levels built by the level builder relative to the seen sample), images from
:mod:`cog_pl.demo.traits`, test images are drawn per concept by the split rule
(:func:`cog_pl.levels.benchmark_file.draw_test`). Generation is deterministic in ``seed``,
writes each concept folder atomically and resumes: ``benchmark.json``, written last, marks a finished benchmark.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
from PIL import Image

from cog_pl import resources
from cog_pl.benchmark import Benchmark
from cog_pl.data.splits import RULE
from cog_pl.demo.concepts import sample_concepts
from cog_pl.demo.traits import TraitStyle, clutter_bank, concept_images
from cog_pl.errors import CogError
from cog_pl.io import write_json
from cog_pl.levels.benchmark_file import TEST_RULE_TEXT, draw_test
from cog_pl.wordnet.ontology import Ontology

log = logging.getLogger(__name__)
BENCHMARK_FILE = "benchmark.json"
SETTINGS_FILE = ".demo-settings.json"
IMAGE_SEEDS = {"train": (0,), "val": (1,), "in21k": (2,)}


def _write_concept(folder: Path, images: np.ndarray, names: list[str], quality: int = 95) -> None:
    """Write one concept's JPEGs into ``folder`` atomically (a temporary folder renamed at the end)."""
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for img, name in zip(images, names):
        Image.fromarray(img).save(tmp / name, format="JPEG", quality=quality)
    os.replace(tmp, folder)


def _settings(n_seen: int, n_per_level: int, train_per_concept: int, test_per_concept: int, image_size: int,
              seed: int, style: TraitStyle) -> dict:
    return {"n_seen": n_seen, "n_per_level": n_per_level, "train_per_concept": train_per_concept,
            "test_per_concept": test_per_concept, "image_size": image_size, "seed": seed,
            "style": dataclasses.asdict(style)}


def _claim(root: Path, settings: dict) -> None:
    """Record the settings of a generation in ``root``; refuse a root made with other settings."""
    path = root / SETTINGS_FILE
    if path.exists():
        old = json.loads(path.read_text())
        if old != settings:
            raise CogError(f"{root} holds a demo benchmark made with other settings ({path}: {old}); "
                           "use another root or delete it")
    else:
        write_json(path, settings)


def make_demo(root: str | os.PathLike, n_seen: int = 50, n_per_level: int = 15, train_per_concept: int = 80,
              test_per_concept: int = 20, image_size: int = 32, seed: int = 0, style: TraitStyle | None = None,
              onto: Ontology | None = None) -> Path:
    """Generate (or finish) the miniature benchmark under ``root``; returns the path of its ``benchmark.json``.

    ``onto``: the IN-21K ontology (:func:`cog_pl.levels.builder.build_ontology`, built when omitted).
    """
    root, style = Path(root), style or TraitStyle()
    settings = _settings(n_seen, n_per_level, train_per_concept, test_per_concept, image_size, seed, style)
    bench_path = root / BENCHMARK_FILE
    root.mkdir(parents=True, exist_ok=True)
    _claim(root, settings)
    if bench_path.exists():
        log.info("demo benchmark complete: %s", bench_path)
        return bench_path
    t0 = time.perf_counter()
    if onto is None:
        from cog_pl.levels.builder import build_ontology

        onto = build_ontology()
    concepts = sample_concepts(onto, n_seen, n_per_level, seed)
    cache: dict[int, np.ndarray] = {}
    bank = clutter_bank(onto, seed, style, cache)

    def images(wnid: str, n: int, part: str) -> np.ndarray:
        return concept_images(onto, wnid, n, image_size, seed, IMAGE_SEEDS[part], style, bank, cache)

    for wnid in concepts.in1k:
        for part, n, tag in (("train", train_per_concept, ""), ("val", test_per_concept, "val_")):
            folder = root / "in1k" / part / wnid
            if not folder.is_dir():
                _write_concept(folder, images(wnid, n, part), [f"{wnid}_{tag}{k:04d}.JPEG" for k in range(n)])
    test = {}
    for level, wnids in concepts.levels.items():
        paths = []
        for wnid in wnids:
            n = train_per_concept + test_per_concept
            names = [f"{wnid}_{k:04d}.JPEG" for k in range(n)]
            folder = root / "in21k" / wnid
            if not folder.is_dir():
                _write_concept(folder, images(wnid, n, "in21k"), names)
            paths += [f"{wnid}/{name}" for name in draw_test(wnid, names, test_per_concept, seed)]
        test[level] = tuple(paths)
    meta = {"generator": "cog_pl.demo.synthetic.make_demo", "settings": settings,
            "levels": "cog_pl.levels.builder.build_levels relative to the seen concepts (cog_pl.demo.concepts)",
            "test_rule": {"rule": RULE, "text": TEST_RULE_TEXT, "seed": seed, "test_per_concept": test_per_concept},
            "mean_lin_similarity": concepts.mean_similarity(),
            "lin_similarity_to_seen": concepts.similarity_seen,
            "closest_seen": {w: concepts.content["closest_seen"][w] for w in concepts.similarity_seen},
            "names": {w: resources.concept_name(w) for w in (*concepts.in1k, *concepts.similarity_seen)}}
    bench = Benchmark(f"cog-demo-seed{seed}", concepts.in1k, concepts.levels, test,
                      in1k_test=f"in1k/val: {test_per_concept} generated images per seen concept",
                      protocol={"test_per_concept": test_per_concept, "min_train_per_concept": train_per_concept,
                                "max_train_per_concept": train_per_concept},
                      meta=meta)
    bench.save(bench_path)
    n_images = (n_seen + 5 * n_per_level) * (train_per_concept + test_per_concept)
    log.info("demo benchmark: %d seen concepts, %d per level, %d images of %d px in %.1f s: %s", n_seen,
             n_per_level, n_images, image_size, time.perf_counter() - t0, bench_path)
    return bench_path
