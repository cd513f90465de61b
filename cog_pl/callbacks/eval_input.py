"""What images :class:`~cog_pl.callbacks.cog_eval.CoGEvaluationCallback` reads: ``transform="auto"`` resolved against
what the run declares, the one line that says so, and the size of a training batch to compare with.

``"auto"`` takes, in this order, the first of: a :class:`TransformConfig` the datamodule or the module holds as
``transform_config`` (the package's own do); an input size either declares as an attribute or a hyperparameter
(:data:`SIZE_NAMES`: lightly's ``input_size``, timm's ``img_size``, ...); a torchvision transform the datamodule
holds (:data:`TRANSFORM_NAMES`: the evaluation transform before the training one; its crop or resize size and its
``Normalize``, from ``torchvision.transforms`` or ``torchvision.transforms.v2``, whose classes are not subclasses of
the first's); else the protocol's 224 px. Plain functions of their inputs, no Lightning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torchvision import transforms as T
from torchvision.transforms import v2

from cog_pl.data.transforms import TransformConfig, protocol_transform

#: Attributes or hyperparameters that declare the image size a module or datamodule trains at.
SIZE_NAMES = ("input_size", "image_size", "img_size", "crop_size", "resolution")
#: Datamodule attributes holding a torchvision transform, the evaluation ones first.
TRANSFORM_NAMES = ("val_transform", "test_transform", "eval_transform", "transform", "train_transform")
#: The pipeline steps whose size is the crop, the resize, and the normalisation: torchvision's v1 and v2 classes.
CROPS = (T.CenterCrop, T.RandomResizedCrop, T.RandomCrop, v2.CenterCrop, v2.RandomResizedCrop, v2.RandomCrop)
RESIZES = (T.Resize, v2.Resize)
NORMALIZES = (T.Normalize, v2.Normalize)


def declared_transform(datamodule: Any, module: Any) -> tuple[TransformConfig, str]:
    """The transform ``"auto"`` stands for, and where it was found (for the setup line)."""
    owners = (("the datamodule", datamodule), ("the module", module))
    for owner_name, owner in owners:
        found = getattr(owner, "transform_config", None) if owner is not None else None
        if isinstance(found, TransformConfig):
            return found, f"{owner_name}'s transform_config"
    for owner_name, owner in owners:
        for name, value in _declared(owner, SIZE_NAMES):
            size = _size(value)
            if size:
                return dataclasses.replace(protocol_transform(), crop=size, resize=size), f"{owner_name}'s {name}"
    for name, value in _declared(datamodule, TRANSFORM_NAMES):
        config = from_torchvision(value)
        if config is not None:
            return config, f"the datamodule's {name}"
    return protocol_transform(), "the protocol's default: nothing declared an input size; pass transform= to choose"


def _declared(owner: Any, names: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` of each name the owner has as an attribute, then as a hyperparameter."""
    if owner is None:
        return
    hparams = getattr(owner, "hparams", None)
    for name in names:
        if getattr(owner, name, None) is not None:
            yield name, getattr(owner, name)
        elif isinstance(hparams, Mapping) and hparams.get(name) is not None:
            yield f"hparams.{name}", hparams[name]


def _size(value: Any) -> int | None:
    """An image size from ``S``, ``(H, W)`` or ``(C, H, W)`` (the last entry)."""
    if isinstance(value, (list, tuple)) and value:
        value = value[-1]
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _steps(transform: Any) -> Iterator[Any]:
    """Every step of a torchvision pipeline, nested ones (a multi-view transform's views) included."""
    inner = getattr(transform, "transforms", None)
    if isinstance(inner, (list, tuple, torch.nn.ModuleList)):  # v2's RandomApply may hold a ModuleList
        for step in inner:
            yield from _steps(step)
    else:
        yield transform


def from_torchvision(transform: Any) -> TransformConfig | None:
    """The :class:`TransformConfig` of a torchvision pipeline, v1 or v2 (its crop or resize size and its
    ``Normalize``), or ``None`` where it has no size. The first of each kind counts: a multi-view transform's views
    share them."""
    crop = resize = None
    norm: Any = None
    for step in _steps(transform):
        if isinstance(step, CROPS) and crop is None:
            crop = _size(step.size)
        elif isinstance(step, RESIZES) and resize is None:
            resize = _size(step.size)
        elif isinstance(step, NORMALIZES) and norm is None:
            norm = step
    crop = crop or resize
    if crop is None:
        return None
    base = protocol_transform()
    mean, std = (tuple(norm.mean), tuple(norm.std)) if norm is not None else (base.mean, base.std)
    return dataclasses.replace(base, crop=crop, resize=max(resize or crop, crop), mean=mean, std=std)


def describe(transform: TransformConfig | Callable[[Any], torch.Tensor], size: tuple[int, ...] | None) -> str:
    """The transform in a few words: size, resize and interpolation, normalisation."""
    if isinstance(transform, TransformConfig):
        return (f"{transform.crop} px (resize {transform.resize} {transform.interpolation}, center crop "
                f"{transform.crop}), normalised with mean {_fmt(transform.mean)} std {_fmt(transform.std)}")
    norm = next((s for s in _steps(transform) if isinstance(s, NORMALIZES)), None)
    how = f"normalised with mean {_fmt(norm.mean)} std {_fmt(norm.std)}" if norm is not None else \
        "normalised as the callable does"
    return f"{px(size)} by the given {type(transform).__name__}, {how}"


def px(size: tuple[int, ...] | None) -> str:
    """``32x32 px``."""
    return "x".join(map(str, size)) + " px" if size else "an unknown size"


def _fmt(values: Any) -> str:
    return "(" + ", ".join(f"{float(v):.3g}" for v in values) + ")"


def image_size(batch: Any) -> tuple[int, int] | None:
    """The height and width of the first image tensor (floating, 4-D) in a training batch of any nesting."""
    if isinstance(batch, torch.Tensor):
        return tuple(batch.shape[-2:]) if batch.ndim == 4 and batch.is_floating_point() else None
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        found = image_size(item)
        if found:
            return found
    return None
