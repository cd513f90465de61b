"""Replicas of the DeiT files the paper used (facebookresearch/deit model zoo) and the features naver/cog took.

How the files were made, from the publisher's code (facebookresearch/deit @ ab5715372db8c6cad5740714b2216d55aeae052e,
the commit naver/cog ``prepare_models/prepare_deit.sh`` checks out, on timm 0.3.2 as its README requires):

- ``models.py`` loads every released file with ``model.load_state_dict(checkpoint["model"])``: the weights sit under
  ``'model'``, as ``model_without_ddp.state_dict()`` (``main.py``), so no ``module.`` prefix. ``main.py``'s training
  checkpoint also holds ``optimizer``, ``lr_scheduler``, ``epoch``, ``model_ema``, ``scaler`` and ``args``; the
  released files keep only ``'model'`` (not confirmed from code: MODELS.md; a 22M-parameter DeiT-S at ~88 MB leaves
  no room for AdamW state).
- Names are timm 0.3.2 ``VisionTransformer``'s: ``cls_token``, ``pos_embed``, ``patch_embed.proj``,
  ``blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}``, ``norm``, ``head``; ``DistilledVisionTransformer``
  adds ``dist_token`` (a parameter after ``pos_embed``), a ``pos_embed`` with two extra tokens and ``head_dist``.
  The state dict's ``_metadata`` lists every submodule (dropouts, ``DropPath`` of the ``drop_path`` 0.1 run, GELU).
- DeiT shipped in December 2020 with torch >= 1.7: zip format; tensors on the CPU (not confirmed).

The reference is timm's own class (``timm.create_model`` of the same names, 1.0.31 here) loaded as naver/cog
``model_loaders_deit.py`` ``load_deit`` does (heads kept when their shapes match, ``pos_embed`` interpolated to the
model's grid: a no-op here), with every key checked to match, and the paper's features: ``forward_features`` of timm
0.3.2 (``x[:, 0]`` after the final norm) and, for the distilled models, ``forward_features(x)[0]`` of deit's
``DistilledVisionTransformer`` (the class token, not its mean with the distillation token). In timm 1.0.31 both are
``model.forward_features(x)[:, 0]``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import timm
import torch
import torch.nn.functional as F

from . import Replica
from .torchvision_family import plausible, save_as_published

#: paper name -> (timm / deit model name, image size, width, depth, distilled)
MODELS = {
    "deit_s": ("deit_small_patch16_224", 224, 384, 12, False),
    "deit_s_distilled": ("deit_small_distilled_patch16_224", 224, 384, 12, True),
    "deit_b_distilled": ("deit_base_distilled_patch16_384", 384, 768, 12, True),
}
PATCH, CLASSES = 16, 1000


def authors_shapes(size: int, dim: int, depth: int, distilled: bool) -> OrderedDict:
    """Keys and shapes of deit's model ``state_dict()`` on timm 0.3.2, in its order."""
    tokens = (size // PATCH) ** 2 + (2 if distilled else 1)
    shapes = OrderedDict(cls_token=(1, 1, dim), pos_embed=(1, tokens, dim))
    if distilled:
        shapes["dist_token"] = (1, 1, dim)
    shapes |= {"patch_embed.proj.weight": (dim, 3, PATCH, PATCH), "patch_embed.proj.bias": (dim,)}
    for i in range(depth):
        p = f"blocks.{i}."
        shapes |= {p + "norm1.weight": (dim,), p + "norm1.bias": (dim,)}
        shapes |= {p + "attn.qkv.weight": (3 * dim, dim), p + "attn.qkv.bias": (3 * dim,)}
        shapes |= {p + "attn.proj.weight": (dim, dim), p + "attn.proj.bias": (dim,)}
        shapes |= {p + "norm2.weight": (dim,), p + "norm2.bias": (dim,)}
        shapes |= {p + "mlp.fc1.weight": (4 * dim, dim), p + "mlp.fc1.bias": (4 * dim,)}
        shapes |= {p + "mlp.fc2.weight": (dim, 4 * dim), p + "mlp.fc2.bias": (dim,)}
    shapes |= {"norm.weight": (dim,), "norm.bias": (dim,), "head.weight": (CLASSES, dim), "head.bias": (CLASSES,)}
    if distilled:
        shapes |= {"head_dist.weight": (CLASSES, dim), "head_dist.bias": (CLASSES,)}
    return shapes


def authors_metadata(depth: int, distilled: bool) -> OrderedDict:
    """``state_dict()._metadata`` of that model: every submodule in registration order, all at version 1."""
    names = ["", "patch_embed", "patch_embed.proj", "pos_drop", "blocks"]
    for i in range(depth):
        p = f"blocks.{i}"
        names += [p, p + ".norm1", p + ".attn", p + ".attn.qkv", p + ".attn.attn_drop", p + ".attn.proj",
                  p + ".attn.proj_drop", p + ".drop_path", p + ".norm2", p + ".mlp", p + ".mlp.fc1", p + ".mlp.act",
                  p + ".mlp.fc2", p + ".mlp.drop"]
    names += ["norm", "head"] + (["head_dist"] if distilled else [])
    return OrderedDict((name, {"version": 1}) for name in names)


def _weights(shapes: OrderedDict, metadata: OrderedDict, gen: torch.Generator) -> OrderedDict:
    template = OrderedDict((k, torch.empty(s, device="meta")) for k, s in shapes.items())
    template._metadata = metadata
    weights = plausible(template, gen)
    # ViT init is fan-in (trunc_normal / xavier), not the conv fan-out default of ``plausible``
    proj = weights["patch_embed.proj.weight"]
    weights["patch_embed.proj.weight"] = proj / proj.std() * (3 * PATCH * PATCH) ** -0.5
    return weights


def _cog_deit(path: Path, name: str) -> torch.nn.Module:
    """naver/cog ``load_deit``: ``create_model(..., num_classes=1000, drop_rate=0, drop_path_rate=0)``, heads removed
    only on a shape mismatch, ``pos_embed`` bicubically resized (deit main.py), then ``load_state_dict``."""
    backbone = timm.create_model(name, pretrained=False, num_classes=CLASSES, drop_rate=0.0, drop_path_rate=0.0)
    state_dict = backbone.state_dict()
    checkpoint_model = torch.load(path, map_location="cpu", weights_only=False)["model"]
    for key in ("head.weight", "head.bias", "head_dist.weight", "head_dist.bias"):
        if key in checkpoint_model and checkpoint_model[key].shape != state_dict[key].shape:
            del checkpoint_model[key]
    pos_embed = checkpoint_model["pos_embed"]
    embedding_size = pos_embed.shape[-1]
    num_patches = backbone.patch_embed.num_patches
    num_extra_tokens = backbone.pos_embed.shape[-2] - num_patches
    orig_size = int((pos_embed.shape[-2] - num_extra_tokens) ** 0.5)
    new_size = int(num_patches**0.5)
    extra_tokens = pos_embed[:, :num_extra_tokens]
    pos_tokens = pos_embed[:, num_extra_tokens:].reshape(-1, orig_size, orig_size, embedding_size).permute(0, 3, 1, 2)
    pos_tokens = F.interpolate(pos_tokens, size=(new_size, new_size), mode="bicubic", align_corners=False)
    checkpoint_model["pos_embed"] = torch.cat((extra_tokens, pos_tokens.permute(0, 2, 3, 1).flatten(1, 2)), dim=1)
    # naver/cog loads with strict=False; the replica insists every published key lands in timm's model
    msg = backbone.load_state_dict(checkpoint_model, strict=False)
    assert not msg.missing_keys and not msg.unexpected_keys, msg
    return backbone.eval()


def _publish(paper_name: str, path: Path, seed: int) -> Replica:
    name, size, dim, depth, distilled = MODELS[paper_name]
    shapes, metadata = authors_shapes(size, dim, depth, distilled), authors_metadata(depth, distilled)
    weights = _weights(shapes, metadata, torch.Generator().manual_seed(seed))
    save_as_published({"model": weights}, path, legacy=False)
    backbone = _cog_deit(path, name)

    def reference(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return backbone.forward_features(images)[:, 0]

    return Replica(reference=reference, image_size=size, feature_dim=dim)


def publish_deit_s(path: Path, seed: int = 0) -> Replica:
    """``deit_small_patch16_224-cd65a155.pth``: ``{'model': ...}``, 384-d class token at 224 px."""
    return _publish("deit_s", path, seed)


def publish_deit_s_distilled(path: Path, seed: int = 0) -> Replica:
    """``deit_small_distilled_patch16_224-649709d9.pth``: with ``dist_token``/``head_dist``; class token, 384-d."""
    return _publish("deit_s_distilled", path, seed)


def publish_deit_b_distilled(path: Path, seed: int = 0) -> Replica:
    """``deit_base_distilled_patch16_384-d0272ac0.pth``: 384 px (24 x 24 + 2 tokens); class token, 768-d."""
    return _publish("deit_b_distilled", path, seed)


PUBLISHERS: dict[str, Callable[[Path, int], Replica]] = {
    "deit_s": publish_deit_s,
    "deit_s_distilled": publish_deit_s_distilled,
    "deit_b_distilled": publish_deit_b_distilled,
}
