"""A backbone's evaluation transform: the one rule that turns a model into a :class:`TransformConfig`.

- a model of the zoo (:mod:`cog_pl.models.zoo`): its input size S (resize = crop = S), mean and std, with the
  protocol's resize interpolation (docs/protocol.md);
- ``timm:<name>``: timm's resolved eval config (crop, crop fraction, interpolation, mean, std), read from the built
  model when there is one, else from the name's pretrained config (offline);
- ``open_clip:<name>``: the size, mean and std of the model's preprocessing config, which the built spec carries
  (OpenAI's CLIP mean and std, open_clip's default, for the name alone), with the protocol's interpolation;
- ``torchvision:<name>`` and ``external:<name>``: the protocol default (S = 224, bicubic, ImageNet mean and std).

:func:`resolve_transform` also accepts ``"protocol"``, an image size, a dict of :class:`TransformConfig` fields (as a
YAML config gives it) and a ready :class:`TransformConfig`: the values a user may give where a transform is asked for
(``transform=`` of the datamodules and of the evaluation callback, ``cog-pl run``).
"""

from __future__ import annotations

import dataclasses
import math

from torch import nn

from cog_pl.data.transforms import INTERPOLATIONS, TransformConfig, protocol_transform
from cog_pl.errors import CogError
from cog_pl.models.registry import BackboneSpec, resolve_spec
from cog_pl.protocol import FeatureProtocol


def backbone_transform(model: str | BackboneSpec, module: nn.Module | None = None,
                       protocol: FeatureProtocol | None = None) -> TransformConfig:
    """The transform of a model (a name or its spec; ``module``: the built network, for timm's own config)."""
    spec = resolve_spec(model) if isinstance(model, str) else model
    base = protocol_transform(protocol)
    if spec.group != "user" and not spec.external:  # (a builder's network states no input of its own)
        return dataclasses.replace(base, crop=spec.image_size, resize=spec.image_size, mean=tuple(spec.mean),
                                   std=tuple(spec.std))
    if spec.arch.startswith("open_clip:"):  # the built spec states its preprocessing (open_clip's config)
        return dataclasses.replace(base, crop=spec.image_size, resize=spec.image_size, mean=tuple(spec.mean),
                                   std=tuple(spec.std))
    if spec.arch.startswith("timm:"):
        return timm_transform(module if module is not None else spec.arch.split(":", 1)[1])
    return base


def timm_transform(model: str | nn.Module) -> TransformConfig:
    """timm's resolved eval config of a model (or a model name, read from its pretrained config offline)."""
    from timm.data import resolve_data_config

    if isinstance(model, str):
        import timm

        cfg = timm.get_pretrained_cfg(model)
        if cfg is None:
            raise CogError(f"timm knows no pretrained config for {model!r}")
        resolved = resolve_data_config(pretrained_cfg=cfg.to_dict())
    else:
        resolved = resolve_data_config({}, model=model)
    crop = int(resolved["input_size"][-1])
    crop_pct = float(resolved.get("crop_pct") or 1.0)
    interp = resolved.get("interpolation", "bicubic")
    return TransformConfig(crop=crop, resize=math.floor(crop / crop_pct),
                           interpolation=interp if interp in INTERPOLATIONS else "bicubic",
                           mean=tuple(float(v) for v in resolved["mean"]), std=tuple(float(v) for v in resolved["std"]))


def resolve_transform(spec: str | int | dict | TransformConfig | None = None) -> TransformConfig:
    """``None``/``"protocol"``: the protocol default; a :class:`TransformConfig` as given; an int S: the protocol's
    transform at S px (resize = crop = S); a dict: those fields over the protocol default; any other string: the
    transform of that model (:func:`backbone_transform`). Anything else is refused, naming what is accepted."""
    if isinstance(spec, TransformConfig):
        return spec
    if spec is None or spec == "protocol":
        return protocol_transform()
    if isinstance(spec, int) and not isinstance(spec, bool) and spec > 0:
        return dataclasses.replace(protocol_transform(), crop=spec, resize=spec)
    if isinstance(spec, dict):
        known = {f.name for f in dataclasses.fields(TransformConfig)}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise CogError(f"{spec!r}: unknown field(s) {', '.join(unknown)}; TransformConfig has "
                           f"{', '.join(sorted(known))}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()}
        return dataclasses.replace(protocol_transform(), **values)
    if isinstance(spec, str):
        return backbone_transform(spec)
    raise CogError(f"{spec!r}: expected 'protocol', a model name, an image size, a dict of TransformConfig fields "
                   "or a TransformConfig")
