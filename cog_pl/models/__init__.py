"""Backbones: the paper's model zoo, timm and torchvision models, checkpoint layouts, and the table users add to.

- :mod:`~cog_pl.models.zoo`: the paper's 31 models as :class:`BackboneSpec` entries of :data:`BACKBONES`.
- :mod:`~cog_pl.models.build`: :func:`build_backbone`, :func:`register_backbone`, :func:`list_backbones`.
- :mod:`~cog_pl.models.checkpoints`: reading a published file in its layout; :mod:`~cog_pl.models.download`,
  :mod:`~cog_pl.models.files`: fetching it and finding it again; :mod:`~cog_pl.models.transform`: the input pipeline.
- :mod:`~cog_pl.models.arch`: the paper's architectures that neither timm nor torchvision provide.
"""

from cog_pl.models.build import (
    Backbone,
    build_backbone,
    list_backbones,
    register_architecture,
    register_backbone,
    unregister_backbone,
)
from cog_pl.models.transform import backbone_transform
from cog_pl.models.zoo import BACKBONES, EFFICIENTNET_LITE0, PAPER_MODELS, BackboneSpec, resolve_spec

__all__ = ["BACKBONES", "EFFICIENTNET_LITE0", "PAPER_MODELS", "Backbone", "BackboneSpec", "backbone_transform",
           "build_backbone", "list_backbones", "register_architecture", "register_backbone", "resolve_spec",
           "unregister_backbone"]
