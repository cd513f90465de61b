"""``BackboneModule``: what every LightningModule around a registry backbone shares (extraction, fine-tuning)."""

from __future__ import annotations

import lightning as L
import torch

from cog_pl.models.build import Backbone


class BackboneModule(L.LightningModule):
    """Holds ``backbone`` (a :class:`~cog_pl.models.Backbone`) and its network ``net``, optionally in NHWC memory
    format (``channels_last``: faster convolutions on GPUs with tensor cores and on CPUs with oneDNN)."""

    def set_backbone(self, backbone: Backbone, channels_last: bool) -> None:
        self.backbone = backbone
        self.net = backbone.model.to(memory_format=torch.channels_last) if channels_last else backbone.model
        self._channels_last = channels_last

    @property
    def model_name(self) -> str:
        return self.backbone.spec.name

    @property
    def feature_dim(self) -> int:
        return self.backbone.spec.feature_dim

    @property
    def transform_config(self):
        """The backbone's input pipeline (:class:`~cog_pl.data.transforms.TransformConfig`)."""
        return self.backbone.transform_config

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """The backbone's output for a batch of normalised images."""
        if self._channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.net(images)
