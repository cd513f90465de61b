"""Backbones: the paper's model zoo, timm and torchvision models, checkpoint layouts."""

from cog_pl.models.build import Backbone, build_backbone, register_architecture
from cog_pl.models.transform import backbone_transform
from cog_pl.models.zoo import EFFICIENTNET_LITE0, PAPER_MODELS, BackboneSpec, resolve_spec

__all__ = ["EFFICIENTNET_LITE0", "PAPER_MODELS", "Backbone", "BackboneSpec", "backbone_transform", "build_backbone",
           "register_architecture", "resolve_spec"]
