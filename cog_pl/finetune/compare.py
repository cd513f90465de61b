"""Fine-tune a backbone on a domain (paper App. C.2): the Trainer's run and what its rows' numbers depend on."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import time
from typing import Any

import lightning as L

from cog_pl.console import filter_known_warnings
from cog_pl.device import resolve_precision, trainer_options
from cog_pl.errors import CogError
from cog_pl.finetune.module import FineTuneClassifier, no_val_split
from cog_pl.finetune.rows import result_row
from cog_pl.progress.trainer import StageProgress
from cog_pl.results.identity import digest

logger = logging.getLogger(__name__)


#: Arguments of :class:`FineTuneClassifier` that :func:`finetune_domain` sets itself, hence no recipe keys.
SET_PER_DOMAIN = ("model", "num_classes", "checkpoint")


def check_options(precision: Any, recipe: dict[str, Any] | None) -> None:
    """Refuse an unknown ``precision`` (:func:`cog_pl.device.resolve_precision`'s vocabulary) or ``recipe`` key by
    name, before any data is read."""
    resolve_precision(precision, "cpu")
    allowed = [k for k in inspect.signature(FineTuneClassifier).parameters if k not in SET_PER_DOMAIN]
    bad = [k for k in recipe or {} if k not in allowed]
    if bad:
        raise CogError(f"unknown recipe key(s) {', '.join(bad)}; FineTuneClassifier takes {', '.join(allowed)}")


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it (a dataclass as its fields), for identities."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    try:
        json.dumps(value)
        return value
    except TypeError:
        return type(value).__name__


def finetune_identity(model: str, checkpoint: str | None, *, recipe: dict[str, Any] | None, epochs: int,
                      batch_size: int, precision: str, transform: Any, benchmark: str | None) -> dict[str, Any]:
    """What a fine-tuning row's numbers depend on (``finetune`` of the row) and its digest (``identity``)."""
    from cog_pl.io import file_sha256

    values = {"model": model, "checkpoint_sha256": file_sha256(checkpoint) if checkpoint else None,
              "recipe": _plain(recipe or {}), "epochs": epochs, "batch_size": batch_size, "precision": precision,
              "transform": _plain(transform), "benchmark_sha256": file_sha256(benchmark) if benchmark else None}
    return {"finetune": json.loads(json.dumps(values, sort_keys=True, default=str)),  # as stored
            "identity": digest(values)}


def finetune_domain(model: str, checkpoint: str | None, domain: str, *, in1k_root: str | None,
                    in21k_root: str | None, benchmark: str | None = None, transform: Any = None, epochs: int = 10,
                    seed: int = 22, batch_size: int = 128, recipe: dict[str, Any] | None = None,
                    precision: str = "32-true", devices: int | str = 1, accelerator: str = "auto",
                    cache_images: bool = False, num_workers: int = 0, progress: bool = False,
                    label: str | None = None) -> dict[str, Any]:
    """Fine-tune ``model`` on ``domain``'s train split and test it on its test split; returns the row's fields
    (:func:`~cog_pl.finetune.rows.result_row`: the test accuracy, recipe, epochs, precision, devices, accelerator,
    seconds, the test predictions). The rows of a model's domains, resumed and refused by their identity
    (:func:`finetune_identity`): :mod:`cog_pl.evaluate.finetune`.

    ``transform``: as the image datamodules take it; ``None``: the backbone's own
    (:func:`~cog_pl.models.transform.backbone_transform`, the transform its features are extracted with).
    ``recipe``: keyword arguments of :class:`FineTuneClassifier`. ``precision``, ``devices``, ``accelerator``: the
    Trainer's, ``"auto"`` resolved by :func:`cog_pl.device.trainer_options`. ``cache_images``: decode the domain's
    images once and serve them from memory (:class:`~cog_pl.data.imagenet.DecodedImages`), for small domains read for
    many epochs such as the demo's. ``label``: the row's model name (:mod:`cog_pl.models.label`); default: the
    model's name."""
    from cog_pl.datamodules.images import CoGLevelDataModule, ImageNetDataModule
    from cog_pl.models import backbone_transform, resolve_spec

    check_options(precision, recipe)
    transform = backbone_transform(model) if transform is None else transform
    trainer_kw = trainer_options(accelerator, devices, precision)
    name = label or resolve_spec(model).name
    common = {"transform": transform, "batch_size": batch_size, "num_workers": num_workers, "benchmark": benchmark,
              "cache_images": cache_images, "pin_memory": trainer_kw["accelerator"] == "cuda"}
    dm = (ImageNetDataModule(in1k_root=in1k_root, **common) if domain == "in1k"
          else CoGLevelDataModule(level=domain, in21k_root=in21k_root, **common))
    L.seed_everything(seed, verbose=False)
    net = FineTuneClassifier(model, dm.num_classes, checkpoint, **(recipe or {}))
    start = time.perf_counter()
    filter_known_warnings()
    trainer = L.Trainer(max_epochs=epochs, **trainer_kw, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, enable_progress_bar=False,
                        callbacks=[StageProgress(f"fine-tuning {name} on {domain}")] if progress else [])
    with no_val_split():
        trainer.fit(net, datamodule=dm)
    trainer.test(net, datamodule=dm, verbose=False)
    row = {**result_row(trainer, net, seed, time.perf_counter() - start), "model": name}
    logger.info("fine-tuned %s on %s: test top-1 %.2f (%.0f s)", name, domain, row["test_top1"], row["seconds"])
    return row
