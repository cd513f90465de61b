"""The modules of the feature definitions (:mod:`cog_pl.models.definitions`): a built backbone read another way.

:func:`with_feature` is the one function that turns a :class:`~cog_pl.models.build.Backbone` into one whose module
returns a named definition's features: ``[B, D]`` for a vector definition, ``[B, T, D]`` for a token definition.
A ViT-like network (timm's ``forward_intermediates`` and ``num_prefix_tokens``: timm's ViTs, DeiTs, EVA, the zoo's
DeiTs) is read through ``forward_intermediates`` (timm ``models/vision_transformer.py``, ``forward_intermediates``:
``norm=True`` applies the final norm to every block taken, ``return_prefix_tokens`` splits off the class, register
and distillation tokens). A CNN (timm's ``forward_features`` giving a feature map, else the input of the network's
last ``nn.AdaptiveAvgPool2d``: torchvision's CNNs, the demo's) has token definitions only: the last feature map's
cells are its patches and their global average its class token.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cog_pl.errors import CogError
from cog_pl.models.build import Backbone, BGRInput, ClassToken, module_device
from cog_pl.models.definitions import FeatureDefinition, parse_feature

__all__ = ["CNNTokens", "ViTFeature", "feature_map_size", "feature_module", "is_vit_like", "token_layout",
           "with_feature"]


def is_vit_like(net: nn.Module) -> bool:
    """A network :class:`ViTFeature` reads: timm's ``forward_intermediates`` and a ``num_prefix_tokens``."""
    return callable(getattr(net, "forward_intermediates", None)) and hasattr(net, "num_prefix_tokens")


def _grid_tokens(grid: torch.Tensor, size: tuple[int, int] | None) -> torch.Tensor:
    """``[B, D, H, W]`` averaged to ``size`` (None: as it is), as ``[B, h * w, D]`` row-major."""
    if size is not None:
        grid = F.adaptive_avg_pool2d(grid, size)
    return grid.flatten(2).transpose(1, 2)


class ViTFeature(nn.Module):
    """A definition's features of a ViT-like network, through timm's ``forward_intermediates``."""

    def __init__(self, vit: nn.Module, definition: FeatureDefinition) -> None:
        super().__init__()
        self.vit, self.definition = vit, definition
        self.pretrained_cfg = getattr(vit, "pretrained_cfg", None)  # timm's input config reads it (transform)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d, prefix = self.definition, int(self.vit.num_prefix_tokens)
        if d.mean_last:  # AIM's AverageLayers(reduce=True) on the blocks' raw outputs (no final norm)
            outs = self.vit.forward_intermediates(x, indices=d.mean_last, norm=False, output_fmt="NLC",
                                                 intermediates_only=True)
            return torch.stack(outs, dim=-1).mean(dim=-1).mean(dim=1)
        fmt = "NCHW" if d.tokens else "NLC"
        outs = self.vit.forward_intermediates(x, indices=d.blocks, return_prefix_tokens=prefix > 0, norm=True,
                                             output_fmt=fmt, intermediates_only=True)
        patches, firsts = zip(*outs) if prefix else (outs, None)
        if d.tokens:  # the class token (without one: the patch average), then the grid
            grid = patches[-1]
            head = firsts[-1][:, 0] if prefix else grid.mean(dim=(2, 3))
            return torch.cat([head[:, None], _grid_tokens(grid, d.grid)], dim=1)
        parts = [f[:, 0] for f in firsts[len(firsts) - d.cls_blocks:]] if d.cls_blocks else []
        if d.patch_mean:  # DINOv2's use_avgpool: the last block's patch tokens, averaged, appended last
            parts.append(patches[-1].mean(dim=1))
        return torch.cat(parts, dim=-1)


class CNNTokens(nn.Module):
    """A CNN's token definition: its last feature map's global average as the class token, then its cells averaged
    to the grid (``None``: every cell)."""

    def __init__(self, net: nn.Module, grid: tuple[int, int] | None) -> None:
        super().__init__()
        self.net, self.grid = net, grid
        self.pretrained_cfg = getattr(net, "pretrained_cfg", None)
        self._pool = None if _timm_map(net) else _last_pool(net)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """The last feature map, ``[B, D, H, W]``."""
        if self._pool is None:
            return self.net.forward_features(x)
        seen: list[torch.Tensor] = []
        hook = self._pool.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
        try:
            self.net(x)
        finally:
            hook.remove()
        return seen[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = self.feature_map(x)
        return torch.cat([grid.mean(dim=(2, 3))[:, None], _grid_tokens(grid, self.grid)], dim=1)


def _timm_map(net: nn.Module) -> bool:
    return callable(getattr(net, "forward_features", None)) and type(net).__module__.startswith("timm.")


def _last_pool(net: nn.Module) -> nn.Module | None:
    pools = [m for m in net.modules() if isinstance(m, nn.AdaptiveAvgPool2d)]
    return pools[-1] if pools else None


def feature_module(net: nn.Module, name: str, model: str = "the backbone") -> nn.Module:
    """The module returning definition ``name``'s features of the network ``net`` (without its feature wrapper);
    a definition the network cannot give is refused in one line naming ``model``."""
    definition = parse_feature(name)
    if is_vit_like(net):
        if definition.needs_class_token and not int(net.num_prefix_tokens):
            raise CogError(f"feature {name!r}: {model} has no class token; use patch_mean, mean_last<k> or tokens")
        depth = len(getattr(net, "blocks", ())) or definition.blocks
        if definition.blocks > depth:
            raise CogError(f"feature {name!r}: {model} has {depth} blocks")
        return ViTFeature(net, definition)
    if not definition.tokens:
        raise CogError(f"feature {name!r} reads a ViT's blocks (timm's forward_intermediates); {model} is not "
                       "ViT-like: a CNN takes the token definitions only (tokens<h>x<w>, tokens_full)")
    if not (_timm_map(net) or _last_pool(net) is not None):
        raise CogError(f"feature {name!r}: {model} has no feature map to read (no timm forward_features, no "
                       "nn.AdaptiveAvgPool2d)")
    return CNNTokens(net, definition.grid)


def with_feature(backbone: Backbone, name: str, image_size: int | None = None) -> Backbone:
    """``backbone`` reading definition ``name`` instead of its spec's feature: its module replaced, its spec's
    ``feature`` the name and ``feature_dim`` the width D measured at ``image_size`` (default: the spec's), so that
    the spec's :meth:`~cog_pl.models.registry.BackboneSpec.definition` (every store's ``definition``) states it."""
    spec, model = backbone.spec, backbone.model
    bgr = isinstance(model, BGRInput)
    net = model.net if bgr else model
    net = net.vit if isinstance(net, ClassToken) else net
    module = feature_module(net, name, spec.name)
    module = BGRInput(module) if bgr else module
    module.eval().requires_grad_(False)
    size = image_size or spec.image_size
    token_layout(module, size, spec.name)  # a grid larger than the feature map is refused here
    with torch.inference_mode():
        out = module(torch.zeros(1, 3, size, size, device=module_device(module)))
    return replace(backbone, model=module, spec=replace(spec, feature=name, feature_dim=int(out.shape[-1])))


def token_layout(module: nn.Module, image_size: int, model: str = "the backbone") -> dict[str, Any] | None:
    """A token module's ``{"cls": 1, "grid": [h, w]}`` at ``image_size`` (the full grid measured); None for a
    vector module. A grid larger than the feature map at that size (``tokens9x9`` of a 4 x 4 map: pooling would
    repeat its cells, each token standing several times in the store) is refused in one line naming the
    definition, ``model`` and the map, before any image is read."""
    inner = module.net if isinstance(module, BGRInput) else module
    definition = inner.definition if isinstance(inner, ViTFeature) else None
    if isinstance(inner, CNNTokens):
        grid = inner.grid
    elif definition is not None and definition.tokens:
        grid = definition.grid
    else:
        return None
    full = feature_map_size(inner, image_size)
    if grid is None:
        grid = full
    elif grid[0] > full[0] or grid[1] > full[1]:
        what = "last feature map" if isinstance(inner, CNNTokens) else "patch grid"
        raise CogError(f"feature 'tokens{grid[0]}x{grid[1]}': {model}'s {what} is {full[0]} x {full[1]} at "
                       f"{image_size} px, smaller than the {grid[0]} x {grid[1]} grid (its cells would be "
                       f"repeated); choose tokens<h>x<w> with h <= {full[0]} and w <= {full[1]}, or tokens_full")
    return {"cls": 1, "grid": [int(grid[0]), int(grid[1])]}


def feature_map_size(inner: nn.Module, image_size: int) -> tuple[int, int]:
    """The (H, W) of the patch grid or last feature map a token module (:class:`CNNTokens`, or a token
    :class:`ViTFeature`) reads at ``image_size``: measured once per size (a forward pass of zeros for a CNN)."""
    sizes = inner.__dict__.setdefault("_map_sizes", {})
    if image_size not in sizes:
        embed = getattr(getattr(inner, "vit", None), "patch_embed", None)
        if callable(getattr(embed, "dynamic_feat_size", None)):  # timm's PatchEmbed: the grid without a forward
            found = tuple(embed.dynamic_feat_size((image_size, image_size)))
        else:
            with torch.inference_mode():
                x = torch.zeros(1, 3, image_size, image_size, device=module_device(inner))
                if isinstance(inner, CNNTokens):
                    found = tuple(inner.feature_map(x).shape[2:])
                else:
                    found = tuple(inner.vit.forward_intermediates(x, indices=1, norm=False, output_fmt="NCHW",
                                                                  intermediates_only=True)[-1].shape[2:])
        sizes[image_size] = (int(found[0]), int(found[1]))
    return sizes[image_size]
