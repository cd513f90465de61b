"""Evaluation transforms: resize the shortest side, center crop, normalise.

A :class:`TransformConfig` holds the values and is recorded in every feature store; :func:`build_transform` turns it
into a ``PIL.Image -> FloatTensor[3,S,S]`` callable. The protocol default is :func:`protocol_transform`; a model's own
values are computed by :func:`cog_pl.models.transform.backbone_transform`, the one rule for them.

Extraction splits the same pipeline in two so that batches travel as bytes (a quarter of float32's): the geometry
(resize, crop) on ``uint8`` pixels in the loader workers or on the device, with PIL (:func:`pil_resize_crop`, the
reference) or torch's antialiased kernels (:func:`tensor_resize_crop`), and :func:`normalize_images` on the device,
which gives bit for bit what ``ToTensor`` + ``Normalize`` give. Both geometries take torchvision's output size and
crop box, so every decode path makes tensors of the same shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms.v2 import functional as F

from cog_pl.errors import CogError
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
            raise CogError(f"interpolation={self.interpolation!r}; expected one of {', '.join(INTERPOLATIONS)}")
        if self.resize < self.crop:
            raise CogError(f"resize ({self.resize}) is smaller than crop ({self.crop})")

    def as_record(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


# A datamodule's hyperparameters (saved in every Lightning checkpoint) may hold one: plain values, so it is safe for
# torch.load(weights_only=True), with which Lightning resumes a fit.
torch.serialization.add_safe_globals([TransformConfig])


def protocol_transform(protocol: FeatureProtocol | None = None) -> TransformConfig:
    """The protocol default: S = 224, bicubic, ImageNet mean and std."""
    p = protocol or FeatureProtocol()
    return TransformConfig(p.image_size, p.image_size, p.resize_interpolation, tuple(p.mean), tuple(p.std))


def build_transform(cfg: TransformConfig) -> Callable[[Image.Image], torch.Tensor]:
    """The torchvision pipeline of a config."""
    return T.Compose([
        T.Resize(cfg.resize, interpolation=INTERPOLATIONS[cfg.interpolation], antialias=True),
        T.CenterCrop(cfg.crop),
        T.ToTensor(),
        T.Normalize(cfg.mean, cfg.std),
    ])


def pil_resize_crop(image: Image.Image, cfg: TransformConfig) -> torch.Tensor:
    """The reference geometry (:func:`build_transform`'s resize and crop, with PIL) as ``uint8 [3,S,S]``."""
    image = T.CenterCrop(cfg.crop)(T.Resize(cfg.resize, interpolation=INTERPOLATIONS[cfg.interpolation],
                                            antialias=True)(image))
    return F.pil_to_tensor(image)


def tensor_resize_crop(image: torch.Tensor, cfg: TransformConfig) -> torch.Tensor:
    """The same geometry on a ``uint8 [3,H,W]`` tensor (any device) with torch's antialiased kernels (on the CPU
    the uint8 kernels written to match PIL's; within 1 grey level of :func:`pil_resize_crop`)."""
    image = F.resize(image, [cfg.resize], interpolation=INTERPOLATIONS[cfg.interpolation], antialias=True)
    return F.center_crop(image, [cfg.crop])


def normalize_images(images: torch.Tensor, cfg: TransformConfig) -> torch.Tensor:
    """``uint8 [B,3,S,S]`` pixels to the normalised float32 batch, the same operations as ``ToTensor`` then
    ``Normalize`` (hence the same bits), on the pixels' device."""
    mean = torch.as_tensor(cfg.mean, dtype=torch.float32, device=images.device).view(-1, 1, 1)
    std = torch.as_tensor(cfg.std, dtype=torch.float32, device=images.device).view(-1, 1, 1)
    return images.to(torch.float32).div(255).sub_(mean).div_(std)
