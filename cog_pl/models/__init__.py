"""Backbones: the paper's model zoo, timm and torchvision models, checkpoint layouts, and the table users add to.

- :mod:`~cog_pl.models.registry`: the table :data:`BACKBONES` (each entry a :class:`BackboneSpec` carrying its
  builder), the one parser of model names, :func:`register_backbone`, :func:`list_backbones`, :func:`resolve_spec`.
- :mod:`~cog_pl.models.zoo`: the paper's 31 models, ``efficientnet_lite0`` and the demo's CNNs, registered into it.
- :mod:`~cog_pl.models.build`: :func:`build_backbone` (loaded on first use, with torch: the table and the zoo are
  plain data).
- :mod:`~cog_pl.models.checkpoints`: reading a published file in its layout; :mod:`~cog_pl.models.download`,
  :mod:`~cog_pl.models.files`: fetching it and finding it again; :mod:`~cog_pl.models.transform`: the input pipeline.
- :mod:`~cog_pl.models.text`: :func:`build_text_tower`, the text side of a vision-language backbone (``clip``,
  ``open_clip:<name>``) read from the same weights.
- :mod:`~cog_pl.models.arch`: the paper's architectures that neither timm nor torchvision provide, the demo's CNN,
  CLIP's text tower and the ``open_clip`` models.
"""

from cog_pl._lazy import lazy_exports
from cog_pl.models.registry import (
    BACKBONES,
    BackboneSpec,
    has_text_tower,
    list_backbones,
    parse_model_name,
    register_architecture,
    register_backbone,
    resolve_spec,
    unregister_backbone,
)
from cog_pl.models.zoo import EFFICIENTNET_LITE0, PAPER_MODELS  # (importing the zoo registers its entries)

#: What needs torch loads on first use: the table and the zoo are plain data (``cog-pl models list`` reads them
#: without importing torch, torchvision or timm).
_EXPORTS = {"Backbone": ".build", "build_backbone": ".build", "backbone_transform": ".transform",
            "TextTower": ".text", "build_text_tower": ".text"}
__all__ = ["BACKBONES", "EFFICIENTNET_LITE0", "PAPER_MODELS", "Backbone", "BackboneSpec", "TextTower",
           "backbone_transform", "build_backbone", "build_text_tower", "has_text_tower", "list_backbones",
           "parse_model_name", "register_architecture", "register_backbone", "resolve_spec", "unregister_backbone"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
