"""Fine-tuning as an evaluation method of the method table (:mod:`cog_pl.methods`): name ``finetune``, label
"fine-tuned". It reads a domain's images, not its features, so ``--finetune`` (not ``--methods``) chooses it; its
run is :func:`~cog_pl.finetune.compare.finetune_domains` over a model's domains. Light: the fine-tuning code loads
when it runs."""

from __future__ import annotations

import importlib
from typing import Any

from cog_pl.methods import Method, register_method

#: The ``method`` of a fine-tuned model's rows (also :data:`cog_pl.finetune.rows.METHOD`).
METHOD = "finetune"


def finetune(model: str, checkpoint: str | None, results: str, domains: Any, **options: Any) -> list[dict[str, Any]]:
    """Fine-tune ``model`` on every domain of ``domains``, rows that exist skipped
    (:func:`~cog_pl.finetune.compare.finetune_domains`, which takes ``options``); returns the rows written.

    The fine-tuning code (Lightning) loads here, by name: it imports this module's :data:`METHOD` (through
    :mod:`~cog_pl.finetune.rows`), so an import of it would close a cycle."""
    compare = importlib.import_module("cog_pl.finetune.compare")  # heavy (lightning): loaded when it runs
    return compare.finetune_domains(model, checkpoint, results, domains, **options)


register_method(Method(METHOD, finetune, label="fine-tuned", order=10, probe=False, frozen=False,
                       description="the backbone fine-tuned on each domain's images (chosen by --finetune)"))


#: The ``method`` of the attentive probe trained on augmented images (:mod:`cog_pl.finetune.attentive_images`).
ATTENTIVE_IMAGES = "attentive_images"


def attentive_images(model: str, checkpoint: str | None, results: str, domains: Any,
                     **options: Any) -> list[dict[str, Any]]:
    """Train the attentive probe on every domain's augmented images, rows that exist skipped
    (:func:`~cog_pl.finetune.attentive_images.attentive_images_domains`, which takes ``options``); returns the rows
    written. Loaded by name when it runs, as :func:`finetune` is."""
    module = importlib.import_module("cog_pl.finetune.attentive_images")  # heavy (lightning, optuna)
    return module.attentive_images_domains(model, checkpoint, results, domains, **options)


register_method(Method(ATTENTIVE_IMAGES, attentive_images, label="attentive probe (images, augmented)", order=10.5,
                       probe=False, description="an attentive probe trained on augmented images, the backbone run "
                                                "every epoch (chosen by --attentive-images PRESET)"))
