"""The demo's backbone: a small CNN for the miniature benchmark's tiny images, the ``demo_cnn`` and ``demo_cnn_ssl``
entries of the backbone table (:data:`cog_pl.models.zoo.DEMO_MODELS`)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["WIDTH", "DemoCNN"]

WIDTH = 24


def _block(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]


class DemoCNN(nn.Module):
    """Five 3x3 conv-BN-ReLU layers in three stages, global average pooling: ``[B, 3, S, S] -> [B, 4 * width]``."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        w = width
        self.features = nn.Sequential(
            *_block(3, w), nn.MaxPool2d(2),
            *_block(w, 2 * w), *_block(2 * w, 2 * w), nn.MaxPool2d(2),
            *_block(2 * w, 4 * w), *_block(4 * w, 4 * w),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.feature_dim = 4 * w

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.features(images)
