"""Zero-shot classification as a probe method (``zeroshot``): each domain's test features against the text classifier
of its concepts, no training image read.

The image features are the test feature store's: the embedding the linear probe reads (for ``clip`` and
``open_clip:<name>`` the projected image embedding the texts are compared with), so a model's zero-shot and probe rows
describe one embedding. The text classifier (:func:`cog_pl.zeroshot.zeroshot_classifier`: per concept, the
L2-normalised embeddings of its prompts averaged and renormalised) is built from the store's ``classes`` (wnids) with
a name scheme (:mod:`cog_pl.zeroshot.names`, default ``lemma``) and a template set (:mod:`cog_pl.zeroshot.prompts`,
default ``openai80``), by the text tower of the model that made the store (:func:`cog_pl.models.build_text_tower`:
the store's ``arch`` and ``weights``; ``backbone``/``checkpoint`` name another), on the probe device. A test image's
class is the column of largest cosine similarity (:func:`cog_pl.zeroshot.zeroshot_logits`).

Rows: one per domain, ``method = "zeroshot"``, ``shots = None`` (no training image). Zero-shot draws nothing at random:
the row is made once whatever the run's seeds, its key seed is :data:`~cog_pl.results.NO_SEED` and it says
``seedless: true`` (:func:`~cog_pl.results.is_seedless`); a rerun with other seeds finds it and skips it, and the
report counts it once and pairs it with every seed of the linear probe's row in the concept analyses
(:func:`cog_pl.analysis.paired.aligned`). A row written before (key seed: its run's first seed, ``seed_is_key: true``)
is read as the domain's row. Its identity: the features' (:func:`~cog_pl.results.identity.features_identity`), the names
and templates (:func:`~cog_pl.zeroshot.zeroshot_identity`) and the text tower's weights digest (``text_tower.sha256``).
A row made with other names or templates is refused in one line (:func:`~cog_pl.zeroshot.check_zeroshot_identity`),
one of other features or text weights by the results store's rule (:func:`~cog_pl.results.identity.cells_todo`);
``overwrite`` makes them again. A row of the same identity is skipped. The test predictions are stored with the row
(:mod:`cog_pl.results.predictions`), as the linear probe's are. The classifier is cached beside the results file
(``<results stem>.zeroshot/<model>/<domain>/<key>.npy``, key: the tower's digest, names, templates and classes), so
a rerun encodes no prompt again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cog_pl.device import resolve_device
from cog_pl.errors import CogError
from cog_pl.features.pair import StorePair, open_pair
from cog_pl.io import atomic_open
from cog_pl.metrics import accuracy, topk_first
from cog_pl.probe.data import load_store
from cog_pl.provenance import versions
from cog_pl.results import (
    FORMAT_VERSION,
    NO_SEED,
    StoredRows,
    append_row,
    delete_row,
    is_seedless,
    read_rows,
    read_stored,
    row_key,
)
from cog_pl.results.identity import cells_todo, digest, features_identity, format_key, remove_stale
from cog_pl.results.predictions import Predictions

__all__ = ["DEFAULT_NAMES", "DEFAULT_TEMPLATES", "METHOD", "ZeroShotOptions", "check_zeroshot_grid", "classifier_path",
           "require_text_tower", "run_zeroshot", "text_tower", "tower_model"]

log = logging.getLogger(__name__)
METHOD = "zeroshot"
#: The defaults of ``--zeroshot-names`` and ``--zeroshot-templates``: WordNet's first lemma (every domain has one;
#: OpenAI's curated names cover IN-1K only) and OpenAI's 80 ImageNet templates.
DEFAULT_NAMES, DEFAULT_TEMPLATES = "lemma", "openai80"
#: Test rows scored per matrix product.
BATCH = 8192


@dataclass(frozen=True)
class ZeroShotOptions:
    """The zero-shot method's options: ``names`` (a name scheme), ``templates`` (a template set or a CLIP_benchmark
    file ``PATH[#KEY]``), and the text tower's model (``backbone``, default: the one that made the features) and
    weights (``checkpoint``, default: the file the features were extracted with); refused at once when unknown."""

    names: str = DEFAULT_NAMES
    templates: str = DEFAULT_TEMPLATES
    backbone: str | None = None
    checkpoint: str | None = None

    def __post_init__(self) -> None:
        from cog_pl.zeroshot import zeroshot_identity

        zeroshot_identity(self.names, self.templates)  # an unknown name or a bad file: one line, before any work


def require_text_tower(model: str) -> None:
    """Refuse, in one line, a model without a text tower (naming those that have one)."""
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
        require_text_tower(backbone)
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


def text_tower(meta: dict[str, Any], options: ZeroShotOptions, device: torch.device) -> tuple[Any, dict[str, Any]]:
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


def zeroshot_want(pair: StorePair, tower: dict[str, Any], options: ZeroShotOptions) -> dict[str, Any]:
    """The identity fields of the domain's row: ``zeroshot`` (names, templates, their digest), ``text_tower``,
    ``features`` and their digest ``identity``."""
    from cog_pl.zeroshot import zeroshot_identity

    values = {"zeroshot": zeroshot_identity(options.names, options.templates), "text_tower": tower,
              "features": features_identity(pair)}
    return {**values, "identity": digest(values)}


def _differences(row: dict, want: dict) -> list[tuple[str, Any, Any]]:
    if row.get("identity") == want["identity"]:
        return []
    diff = [(k, row.get(k, "<not recorded>"), want[k]) for k in ("zeroshot", "text_tower", "features")
            if row.get(k, "<not recorded>") != want[k]]
    return diff or [("identity", row.get("identity"), want["identity"])]


def classifier_path(results: str | os.PathLike, model: str, domain: str, key: str) -> Path:
    """Where a domain's classifier is cached: ``<results stem>.zeroshot/<model>/<domain>/<key>.npy``."""
    results = Path(results)
    return results.parent / f"{results.stem}.zeroshot" / model / domain / f"{key}.npy"


def domain_classifier(tower: Any, record: dict[str, Any], classes: list[str], options: ZeroShotOptions,
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


def classifier_key(record: dict[str, Any], options: ZeroShotOptions, classes: list[str]) -> str:
    """The cache key of a classifier: a digest of the tower's, the names', the templates' and the classes'."""
    from cog_pl.zeroshot import zeroshot_identity

    text = json.dumps([record["sha256"], zeroshot_identity(options.names, options.templates), classes])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _check_recorded(results: Any, rows: list[dict], options: ZeroShotOptions) -> None:
    from cog_pl.zeroshot import check_zeroshot_identity

    for row in rows:
        check_zeroshot_identity(row.get("zeroshot") or {}, options.names, options.templates,
                                what=f"{results}: row {format_key(row_key(row))}")


def _options(options: ZeroShotOptions | None, given: dict[str, Any]) -> ZeroShotOptions:
    keys = {k: given.pop(k) for k in ("names", "templates", "backbone", "checkpoint") if k in given}
    return options or ZeroShotOptions(**keys)


def zeroshot_todo(pair: StorePair, results: Any, *, model: str, domain: str, options: ZeroShotOptions,
                  want: dict[str, Any], overwrite: bool, rows: StoredRows | None, announce: bool = True) -> list:
    """The domain's cell ``[(None, NO_SEED)]`` when its row is missing (or made with other values, ``overwrite``);
    ``[]`` when it exists with the same identity (an older row keyed by its run's first seed included); a row made
    with other names or templates is refused in one line, one of other features or text weights as any other row of
    other values."""
    found = [r.values for r in read_stored(results, model=model, method=METHOD, domain=domain, reuse=rows)]
    if not overwrite:
        _check_recorded(results, found, options)
        same = [r for r in found if r["seed"] != NO_SEED and is_seedless(r) and not _differences(r, want)]
        if same and not any(r["seed"] == NO_SEED for r in found):
            if announce:
                log.info("skip %s/%s/%s: its row exists (key seed %s, written before seedless rows), made with the "
                         "same inputs", model, METHOD, domain, same[0]["seed"])
            return []
    return cells_todo(results, model=model, method=METHOD, domain=domain, seeds=(NO_SEED,), shots=(None,), want=want,
                      overwrite=overwrite, compare=_differences, announce=announce, rows=rows)


def run_zeroshot(root: str | os.PathLike | StorePair, results: str | os.PathLike, *, model: str | None = None,
                 domain: str | None = None, seeds: tuple[int, ...] | None = None, device: str | torch.device = "cpu",
                 overwrite: bool = False, options: ZeroShotOptions | None = None, rows: StoredRows | None = None,
                 protocol: Any = None, check_only: bool = False, **given: Any) -> list[dict[str, Any]]:
    """The zero-shot row of a domain into ``results`` (skipped when it exists with the same identity); returns the
    rows written. ``names``, ``templates``, ``backbone``, ``checkpoint``: :class:`ZeroShotOptions` (or ``options``).
    Arguments of the linear method that do not apply (``seeds``, ``protocol``, ``storage``, ``plan``, ``shots``) are
    accepted and ignored: the row is seedless. ``check_only``: refuse rows of other values and return the cells to
    make, without evaluating."""
    options = _options(options, given)
    device = resolve_device(device)
    pair = root if isinstance(root, StorePair) else open_pair(root)
    model, domain = pair.names(model, domain)
    meta = dict(pair.test.meta)
    classes = list(pair.classes or ())
    if not classes:
        raise CogError(f"{pair.root}: zero-shot names the concepts from the stores' meta.json classes, and these "
                       "stores have none (plain stores)")
    if int(meta.get("tokens", 1) or 1) > 1 or pair.test.features.ndim != 2:
        raise CogError(f"{pair.root}: zero-shot reads one embedding per image; these are token stores "
                       f"({meta.get('feature', '?')})")
    start = time.perf_counter()
    tower, record = text_tower(meta, options, device)
    want = zeroshot_want(pair, record, options)
    todo = zeroshot_todo(pair, results, model=model, domain=domain, options=options, want=want,
                         overwrite=overwrite, rows=rows, announce=not check_only)
    if check_only:
        return todo
    if overwrite:
        remove_stale(results, model=model, method=METHOD, domain=domain, seeds=(NO_SEED,), shots=(None,), want=want,
                     compare=_differences)
        for old in read_rows(results, model=model, method=METHOD, domain=domain):  # keyed by a seed before
            if old["seed"] != NO_SEED and is_seedless(old):
                delete_row(results, row_key(old))
    if not todo:
        return []
    key = classifier_key(record, options, classes)
    weights, cached = domain_classifier(tower, record, classes, options,
                                        classifier_path(results, model, domain, key))
    built = time.perf_counter()
    row = evaluate(pair, weights, device)
    end = time.perf_counter()
    from cog_pl.zeroshot import get_templates, shared_names

    row.update({"format_version": FORMAT_VERSION, "model": model, "method": METHOD, "domain": domain, "shots": None,
                "seed": NO_SEED, "seedless": True, **{k: want[k] for k in want},
                "templates_count": len(get_templates(options.templates).templates),
                "shared_names": {k: list(v) for k, v in shared_names(options.names, classes).items()},
                "classifier": {"key": key, "cached": cached, "classes": len(classes)},
                "device": str(device), "precision": "32-true", "seconds": round(end - start, 3),
                "classifier_seconds": round(built - start, 3), "test_seconds": round(end - built, 3),
                "versions": versions()})
    append_row(results, row)
    log.info("%s: zero-shot test top-1 %.2f (%s names, %s templates)", format_key(row_key(row)), row["test_top1"],
             options.names, options.templates)
    return [row]


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


def check_zeroshot_grid(root: str | os.PathLike, results: str | os.PathLike, **kwargs: Any) -> list:
    """:func:`run_zeroshot`'s refusals before any work (``cog-pl run`` checks every method's grid first)."""
    return run_zeroshot(root, results, check_only=True, **kwargs)
