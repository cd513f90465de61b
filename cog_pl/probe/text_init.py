"""The few-shot bridge from zero-shot to the linear probe (``linear_text_init``): the linear probe with every head
starting from the domain's zero-shot text classifier, as ELEVATER's ``TRAIN.INIT_HEAD_WITH_TEXT_ENCODER``.

ELEVATER builds the classifier as its zero-shot evaluation does (per class, the L2-normalised prompt embeddings
averaged and renormalised, stacked as ``[E, C]``) and, when ``INIT_HEAD_WITH_TEXT_ENCODER`` is set, copies its
transpose into the head's weight and fills the bias with 0. The logits are multiplied by ``exp(logit_scale)``, and
``logit_scale`` is 0 under the default ``TRAIN.LOGIT_SCALE_INIT = 'none'``, so the head starts at the classifier
itself, scale 1 (:data:`INIT_SCALE`). ELEVATER does not L2-normalise the image features by default
(``TRAIN.NORMALIZE_VISUAL_FEATURE = False``) but passes them through a ``BatchNorm1d(affine=False)``
(``TRAIN.USE_CHANNEL_BN = True``) fitted with the head; here the features are the linear probe's (L2-normalised rows
when ``protocol.normalize``, the paper's), so at the start a head's logits are the zero-shot cosine similarities and
its first choice the zero-shot method's. No channel BatchNorm is applied: the two methods differ only in the heads'
start.

Everything else is the linear probe's (:mod:`cog_pl.evaluate.text_init`): the same split, samples, TPE over (lr, wd),
trials, epochs, seeds, shots, modes and oracle fields. The classifier is built exactly as the zero-shot
method builds it (:func:`cog_pl.probe.zeroshot.domain_classifier`, the same names and templates options, the same
cache beside the results file). Rows: ``method = "linear_text_init"``, with ``init`` (``from: "text"``, the names, the
templates and their digest, the text tower's model and ``sha256``, ``scale``, ``bias``) in their identity (the search
record's ``init``, so their studies are never the linear probe's).

Source (what was taken from which lines: ``docs/reference/sources.md``): Computer-Vision-in-the-Wild/Elevater_Toolkit_IC
00d0af7 ``vision_benchmark/evaluation/feature.py``, ``vision_benchmark/evaluation/full_model_finetune.py``,
``vision_benchmark/config/default.py``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from cog_pl.errors import CogError
from cog_pl.features.pair import StorePair
from cog_pl.probe.tuner import HeadStart

__all__ = ["INIT_SCALE", "METHOD", "text_start"]

METHOD = "linear_text_init"
#: The factor on the text classifier in the heads' start: ELEVATER's ``exp(logit_scale)`` with its default
#: ``LOGIT_SCALE_INIT = 'none'`` (logit_scale 0).
INIT_SCALE = 1.0


def text_start(pair: StorePair, results: str | os.PathLike, *, model: str, domain: str, device: torch.device,
               options: Any, classifier: bool = True) -> HeadStart:
    """The heads' start for a domain: weight ``INIT_SCALE * classifier.T`` ``(C, E)``, bias 0, and its record;
    ``classifier=False``: the record only (the weight left empty), for the grid check."""
    from cog_pl.probe.zeroshot import classifier_key, classifier_path, domain_classifier, text_tower
    from cog_pl.zeroshot import zeroshot_identity

    classes = list(pair.classes or ())
    if not classes:
        raise CogError(f"{pair.root}: the text-initialised probe names the concepts from the stores' meta.json "
                       "classes, and these stores have none (plain stores)")
    tower, tower_record = text_tower(dict(pair.test.meta), options, device)
    record = {"from": "text", **zeroshot_identity(options.names, options.templates, tower),
              "tower": {"model": tower_record["model"], "sha256": tower_record["sha256"]},
              "scale": INIT_SCALE, "bias": 0.0,
              # the linear probe's L2-normalised features, not ELEVATER's default BatchNorm1d(affine=False)
              "features": "l2-normalised"}
    if not classifier:
        return HeadStart(torch.empty(0), torch.empty(0), METHOD, record)
    key = classifier_key(tower_record, options, classes, tower)
    weights, _ = domain_classifier(tower, tower_record, classes, options, classifier_path(results, model, domain, key))
    dim = pair.train.features.shape[1]
    if weights.shape[0] != dim:
        raise CogError(f"{pair.root}: the text tower of {tower_record['model']} embeds in {weights.shape[0]} "
                       f"dimensions and the features have {dim}: the heads cannot start from its classifier")
    weight = (INIT_SCALE * weights.float().T).contiguous()
    return HeadStart(weight, torch.zeros(weight.shape[0]), METHOD, record)
