"""Zero-shot classification of a domain's test features: the text tower, the cached text classifier, the scores.

The image features are the test feature store's: the embedding the linear probe reads (for ``clip`` and
``open_clip:<name>`` the projected image embedding the texts are compared with), so a model's zero-shot and probe rows
describe one embedding. The text classifier (:func:`cog_pl.zeroshot.zeroshot_classifier`: per concept, the
L2-normalised embeddings of its prompts averaged and renormalised) is built from the store's ``classes`` (wnids) with
a name scheme and a template set (:mod:`cog_pl.zeroshot`), by the text tower of the model that made the store
(:func:`cog_pl.models.build_text_tower`: the store's ``arch`` and ``weights``; ``backbone``/``checkpoint`` name
another), on the probe device, and cached beside the results file (``<results stem>.zeroshot/<model>/<domain>/
<key>.npy``, key: the tower's digest, names, templates and classes), so a rerun encodes no prompt again. A test
image's class is the column of largest cosine similarity (:func:`cog_pl.zeroshot.zeroshot_logits`). The method and
its rows: :mod:`cog_pl.evaluate.zeroshot`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cog_pl.errors import CogError
from cog_pl.features.pair import StorePair
from cog_pl.io import atomic_open
from cog_pl.metrics import accuracy, topk_first
from cog_pl.probe.data import load_store
from cog_pl.results.identity import features_identity
from cog_pl.results.predictions import Predictions

__all__ = ["BATCH", "classifier_key", "classifier_path", "domain_classifier", "evaluate", "text_tower", "tower_model",
           "zeroshot_row", "zeroshot_values"]

log = logging.getLogger(__name__)
METHOD = "zeroshot"
#: Test rows scored per matrix product.
BATCH = 8192


def _require_text_tower(model: str) -> None:
    from cog_pl.models.registry import has_text_tower, list_text_towers

    if not has_text_tower(model):
        raise CogError(f"zero-shot needs a text tower and {model} has none; the models with one: "
                       f"{', '.join(list_text_towers())}, open_clip:<name> (drop zeroshot from --methods)")


def tower_model(meta: dict[str, Any], backbone: str | None = None) -> str:
    """The backbone name whose text tower goes with a store: ``backbone``, else the store's ``arch`` when it is a
    name (``open_clip:<name>``, a registered backbone), else the backbone of the table with that architecture and a
    text tower (``clip`` for ``cog:clip_resnet50``); refused in one line when none has a text tower."""
    from cog_pl.models.registry import has_text_tower, list_text_towers, resolve_spec

    if backbone:
        _require_text_tower(backbone)
        return backbone
    arch = str(meta.get("arch") or meta.get("model") or "")
    try:
        if has_text_tower(arch):
            return arch
    except CogError:
        pass
    for name in list_text_towers():
        if resolve_spec(name).arch == arch:
            return name
    raise CogError(f"zero-shot needs a text tower and the features of {meta.get('model')} (architecture {arch or '?'}) "
                   f"have none; the models with one: {', '.join(list_text_towers())}, open_clip:<name>")


_TOWERS: dict[tuple, tuple[Any, str]] = {}


def text_tower(meta: dict[str, Any], options: Any, device: torch.device) -> tuple[Any, dict[str, Any]]:
    """The text tower for a store (:func:`tower_model`, the store's weights unless ``options.checkpoint``) on
    ``device``, built once per process, and its record: ``model``, ``weights``, ``sha256`` (its tensors' digest,
    :func:`cog_pl.models.build.state_sha256`)."""
    from cog_pl.models.build import state_sha256
    from cog_pl.models.text import build_text_tower

    name = tower_model(meta, options.backbone)
    weights = options.checkpoint or meta.get("weights")
    random = weights in (None, "random")
    key = (name, None if random else str(weights), str(device))
    if key not in _TOWERS:
        tower = build_text_tower(name, None if random else weights, random_weights=random,
                                 trust_checkpoint=bool(meta.get("trusted_checkpoint", False)))
        if isinstance(tower, torch.nn.Module):
            tower = tower.to(device)
        _TOWERS[key] = (tower, state_sha256(tower) if isinstance(tower, torch.nn.Module) else "unknown")
    tower, sha = _TOWERS[key]
    return tower, {"model": name, "weights": "random" if random else str(weights), "sha256": sha}


def zeroshot_values(pair: StorePair, tower: dict[str, Any], options: Any, text: Any = None) -> dict[str, Any]:
    """The identity values of a domain's row: ``zeroshot`` (names, templates, their digest), ``text_tower`` (its
    model, weights and tensors' digest, :func:`text_tower`'s record) and ``features``; with ``text`` (the tower
    itself), how it makes tokens too (:func:`cog_pl.zeroshot.zeroshot_identity`)."""
    from cog_pl.zeroshot import zeroshot_identity

    return {"zeroshot": zeroshot_identity(options.names, options.templates, text), "text_tower": tower,
            "features": features_identity(pair)}


def classifier_path(results: str | os.PathLike, model: str, domain: str, key: str) -> Path:
    """Where a domain's classifier is cached: ``<results stem>.zeroshot/<model>/<domain>/<key>.npy``."""
    results = Path(results)
    return results.parent / f"{results.stem}.zeroshot" / model / domain / f"{key}.npy"


def domain_classifier(tower: Any, record: dict[str, Any], classes: list[str], options: Any,
                      cache: Path | None) -> tuple[torch.Tensor, bool]:
    """The text classifier ``[E, C]`` of ``classes`` (wnids) under the options' names and templates, read from
    ``cache`` when there (``cached`` True), else encoded and written there."""
    from cog_pl.zeroshot import class_names, get_templates, zeroshot_classifier

    if cache is not None and cache.is_file():
        return torch.from_numpy(np.load(cache)), True
    names = class_names(options.names, classes)
    weights = zeroshot_classifier(tower.encode_text, names, get_templates(options.templates)).cpu()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(cache, "wb") as fh:
            np.save(fh, weights.numpy())
    return weights, False


def classifier_key(record: dict[str, Any], options: Any, classes: list[str], tower: Any = None) -> str:
    """The cache key of a classifier: a digest of the tower's, the names', the templates' and the classes'."""
    from cog_pl.zeroshot import zeroshot_identity

    text = json.dumps([record["sha256"], zeroshot_identity(options.names, options.templates, tower), classes])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def zeroshot_row(pair: StorePair, results: str | os.PathLike, *, model: str, domain: str, options: Any,
                 device: torch.device) -> dict[str, Any]:
    """A domain's zero-shot row fields: the classifier (cached beside ``results``) on the test features."""
    from cog_pl.zeroshot import get_templates, shared_names

    start = time.perf_counter()
    classes = list(pair.classes or ())
    tower, record = text_tower(dict(pair.test.meta), options, device)
    key = classifier_key(record, options, classes, tower)
    weights, cached = domain_classifier(tower, record, classes, options, classifier_path(results, model, domain, key))
    built = time.perf_counter()
    row = evaluate(pair, weights, device)
    end = time.perf_counter()
    row.update({"templates_count": len(get_templates(options.templates).templates),
                "shared_names": {k: list(v) for k, v in shared_names(options.names, classes).items()},
                "classifier": {"key": key, "cached": cached, "classes": len(classes)},
                "device": str(device), "precision": "32-true", "seconds": round(end - start, 3),
                "classifier_seconds": round(built - start, 3), "test_seconds": round(end - built, 3)})
    log.info("%s/%s: zero-shot test top-1 %.2f (%s names, %s templates)", model, domain, row["test_top1"],
             options.names, options.templates)
    return row


def evaluate(pair: StorePair, weights: torch.Tensor, device: torch.device) -> dict[str, Any]:
    """Test top-1/top-5 of the classifier ``weights`` ``[E, C]`` on the pair's test features, and their
    predictions (float32 products on ``device``)."""
    from cog_pl.zeroshot import zeroshot_logits

    x, y = load_store(pair.test, "cpu")
    w = weights.to(device)
    k = min(5, w.shape[1])
    ranked = torch.cat([topk_first(zeroshot_logits(x[i:i + BATCH].to(device), w), k)[1].cpu()
                        for i in range(0, len(x), BATCH)]) if len(x) else torch.zeros(0, k, dtype=torch.long)
    top1, top5 = accuracy(ranked, y)
    return {"test_top1": top1, "test_top5": top5, "test_rows": len(y),
            "predictions": Predictions.of(ranked, y, pair.test_images, pair.classes)}
