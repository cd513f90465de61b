"""Evaluation transforms per backbone: resize the shortest side, center crop, normalise.

Three sources of values, all giving a :class:`TransformConfig` that is recorded in every feature store:
the protocol default (:func:`protocol_transform`), the per-model values of PROTOCOL.md
(:func:`model_transform`, keys of :data:`MODEL_TRANSFORMS`), or timm's resolved data config
(:func:`timm_transform`). :func:`build_transform` turns a config into a ``PIL.Image -> FloatTensor[3,S,S]`` callable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from torchvision import transforms as T

from cog_pl.protocol import FeatureProtocol

INTERPOLATIONS = {"bicubic": T.InterpolationMode.BICUBIC, "bilinear": T.InterpolationMode.BILINEAR,
                  "nearest": T.InterpolationMode.NEAREST}


@dataclass(frozen=True)
class TransformConfig:
    """Resize the shortest side to ``resize`` (``interpolation``), center crop ``crop``, /255, normalise."""

    crop: int = 224
    resize: int = 224
    interpolation: str = "bicubic"
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)

    def __post_init__(self) -> None:
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation={self.interpolation!r}; expected one of {', '.join(INTERPOLATIONS)}")
        if self.resize < self.crop:
            raise ValueError(f"resize ({self.resize}) is smaller than crop ({self.crop})")

    def as_record(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def protocol_transform(protocol: FeatureProtocol | None = None) -> TransformConfig:
    """The protocol default: S = 224, bicubic, ImageNet mean and std."""
    p = protocol or FeatureProtocol()
    return TransformConfig(p.image_size, p.image_size, p.resize_interpolation, tuple(p.mean), tuple(p.std))


def model_transform(name: str, protocol: FeatureProtocol | None = None) -> TransformConfig:
    """The protocol transform of a model of the registry (:mod:`cog_pl.models.zoo`: input size S, mean, std).

    ``timm:<name>`` models use timm's resolved config; names the registry does not know get the protocol default.
    """
    from cog_pl.models.build import resolve_spec

    base = protocol_transform(protocol)
    if name.startswith("timm:"):
        return timm_transform(name[5:])
    try:
        spec = resolve_spec(name)
    except ValueError:
        return base
    if spec.group == "user":
        return base
    return dataclasses.replace(base, crop=spec.image_size, resize=spec.image_size, mean=tuple(spec.mean),
                               std=tuple(spec.std))


def timm_transform(model: str | torch.nn.Module) -> TransformConfig:
    """timm's resolved eval config of a model (or a model name, read from its pretrained config offline)."""
    from timm.data import resolve_data_config

    if isinstance(model, str):
        import timm

        cfg = timm.get_pretrained_cfg(model)
        if cfg is None:
            raise ValueError(f"timm knows no pretrained config for {model!r}")
        resolved = resolve_data_config(pretrained_cfg=cfg.to_dict())
    else:
        resolved = resolve_data_config({}, model=model)
    crop = int(resolved["input_size"][-1])
    crop_pct = float(resolved.get("crop_pct") or 1.0)
    interp = resolved.get("interpolation", "bicubic")
    return TransformConfig(crop=crop, resize=math.floor(crop / crop_pct),
                           interpolation=interp if interp in INTERPOLATIONS else "bicubic",
                           mean=tuple(float(v) for v in resolved["mean"]), std=tuple(float(v) for v in resolved["std"]))


def resolve_transform(spec: str | TransformConfig | None = None) -> TransformConfig:
    """``None``/``"protocol"``: the default; ``"timm:<name>"``: timm's config; any other string: a model name."""
    if isinstance(spec, TransformConfig):
        return spec
    if spec is None or spec == "protocol":
        return protocol_transform()
    if spec.startswith("timm:"):
        return timm_transform(spec[5:])
    return model_transform(spec)


def build_transform(cfg: TransformConfig) -> Callable[[Image.Image], torch.Tensor]:
    """The torchvision pipeline of a config."""
    return T.Compose([
        T.Resize(cfg.resize, interpolation=INTERPOLATIONS[cfg.interpolation], antialias=True),
        T.CenterCrop(cfg.crop),
        T.ToTensor(),
        T.Normalize(cfg.mean, cfg.std),
    ])
