"""A benchmark file from built levels: their concepts, their seen set, and test images drawn per concept.

``cog-pl levels build --benchmark FILE --in21k-root ROOT`` writes it beside the level file and ``cog-pl run
--benchmark FILE`` evaluates on it (:class:`cog_pl.benchmark.Benchmark`). Test images (rule ``sha256-rank-v1``, the
official split's, :func:`cog_pl.data.splits.select_train`): a level concept's images under ROOT ranked by
``sha256(f"{seed}/{wnid}/{filename}")`` hex digest ascending, the first ``test_per_concept`` kept; the split then
ranks the rest by the same hash for its train images. The list and the rule are both recorded (``test``,
``meta.test_rule``): every copy of the images with the same file names gives the same benchmark.

The benchmark's ``in1k`` domain is the seen set's IN-1K concepts in IN-1K label order (IN-1K's val images as its
test set). Its protocol counts are ``test_per_concept`` and ``min_train_per_concept = min_images - test_per_concept``
where they differ from the paper's 50 and 732.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cog_pl import resources
from cog_pl.benchmark import Benchmark
from cog_pl.data.sources import ImageSource, open_source
from cog_pl.data.splits import RULE, select_train
from cog_pl.errors import CogError, MissingFileError
from cog_pl.levels.seen import NAMED
from cog_pl.protocol import FeatureProtocol

logger = logging.getLogger(__name__)

TEST_RULE_TEXT = ("test = the concept's first test_per_concept images ranked by sha256('{seed}/{wnid}/{filename}') "
                  "hex digest ascending, listed by filename; train = the rest under the split rule")


def draw_test(wnid: str, filenames: Sequence[str], n: int, seed: int = 0) -> list[str]:
    """The ``n`` test images of one concept under the rule (sorted by filename)."""
    if len(set(filenames)) <= n:
        raise CogError(f"{wnid} has {len(set(filenames))} images, not more than the {n} test images to draw")
    return select_train(wnid, filenames, (), n, seed)


def draw_level_tests(levels: Mapping[str, Sequence[str]], source: ImageSource, n: int, seed: int = 0,
                     min_images: int = 0) -> dict[str, tuple[str, ...]]:
    """``{level: ("wnid/filename", ...)}``: ``n`` test images per concept drawn from ``source``; a missing synset,
    or one with at most ``n`` (or fewer than ``min_images``) images, is an error naming them all."""
    test: dict[str, tuple[str, ...]] = {}
    missing, small = [], []
    for level, wnids in levels.items():
        paths = []
        for wnid in sorted(wnids):
            if not source.has(wnid):
                missing.append(wnid)
                continue
            names = source.list(wnid)
            if len(names) <= n or len(names) < min_images:
                small.append(f"{wnid} ({len(names)})")
                continue
            paths += [f"{wnid}/{name}" for name in draw_test(wnid, names, n, seed)]
        test[level] = tuple(paths)
    where = source.root
    if missing:
        raise CogError(f"{len(missing)} level concept(s) are missing under {where}: {', '.join(missing[:10])}"
                       + (" ..." if len(missing) > 10 else ""))
    if small:
        raise CogError(f"{len(small)} level concept(s) under {where} have too few images for {n} test images "
                       f"and at least {min_images} in all: {', '.join(small[:10])}"
                       + (" ..." if len(small) > 10 else "")
                       + "; build the levels with --in21k-root to count the images there")
    return test


def benchmark_protocol(min_images: int, test_per_concept: int) -> dict[str, int]:
    """The FeatureProtocol counts that differ from the paper's, for a level protocol's ``min_images``."""
    base = FeatureProtocol()
    if test_per_concept < 1:
        raise CogError(f"test_per_concept must be at least 1, got {test_per_concept}")
    if min_images <= test_per_concept:
        raise CogError(f"min_images ({min_images}) must exceed the {test_per_concept} test images per concept: "
                       "a concept needs train images too")
    wanted = {"test_per_concept": test_per_concept, "min_train_per_concept": min_images - test_per_concept}
    return {k: v for k, v in wanted.items() if getattr(base, k) != v}


def level_benchmark(content: Mapping[str, Any], in21k_root: str | os.PathLike, test_per_concept: int = 50,
                    seed: int = 0, name: str | None = None) -> Benchmark:
    """The benchmark of a level file's content (:func:`cog_pl.levels.builder.build_levels`) with test images drawn
    from ``in21k_root`` (any layout :func:`cog_pl.data.sources.open_source` reads)."""
    settings = content.get("settings", {})
    seen = settings.get("seen") or {"name": "in1k", "wnids": list(resources.in1k_wnids())}
    held = set(seen["wnids"])
    in1k = [w for w in resources.in1k_wnids() if w in held]
    if not in1k:
        raise CogError(f"the seen set {seen['name']} holds no IN-1K concept; a benchmark file needs the seen "
                       "IN-1K concepts for its in1k domain")
    min_images = settings.get("protocol", {}).get("min_images", 782)
    protocol = benchmark_protocol(min_images, test_per_concept)
    root = Path(in21k_root)
    if not root.is_dir():
        raise MissingFileError(f"IN-21K root {root} is not a folder")
    levels = {lv: list(content["levels"][lv]) for lv in resources.LEVELS}
    test = draw_level_tests(levels, open_source(root), test_per_concept, seed, min_images)
    concepts = [w for lv in resources.LEVELS for w in levels[lv]]
    sim, closest = content.get("similarity", {}), content.get("closest_seen", {})
    meta = {"generator": "cog-pl levels build --benchmark",
            "seen": seen,
            "levels": {k: settings[k] for k in ("protocol", "discard", "image_counts") if k in settings},
            "similarity": {w: sim[w] for w in concepts if w in sim},
            "closest_seen": {w: closest[w] for w in concepts if w in closest},
            "test_rule": {"rule": RULE, "text": TEST_RULE_TEXT, "seed": seed, "test_per_concept": test_per_concept}}
    label = seen["name"] if seen["name"] in NAMED else Path(seen["name"]).stem
    return Benchmark(name or f"cog-seen-{label}", in1k, levels, test,
                     in1k_test=f"the official IN-1K val set of the {len(in1k)} seen IN-1K concepts",
                     protocol=protocol, meta=meta)
