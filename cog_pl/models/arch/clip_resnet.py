"""CLIP's ResNet-50 image tower (openai/CLIP d05afc4 ``clip/model.py`` ``ModifiedResNet``) as timm's ``resnet50_clip``.

timm's ``resnet50_clip`` (``timm/models/byobnet.py``, ``model_cfgs["resnet50_clip"]``, timm 1.0.31) is the same
network, layer for layer:

- stem: three 3x3 convs 3-32 (stride 2), 32-32, 32-64, each with BatchNorm and ReLU, then ``AvgPool2d(2)``
  (``stem_chs=(32, 32, 64)``, ``stem_pool="avg2"``);
- bottlenecks 1x1, 3x3, 1x1 of widths 64..512 x (3, 4, 6, 3); a strided block runs its 3x3 conv at stride 1 and
  average-pools after its BN-ReLU (``aa_layer="avg"``), and its shortcut average-pools before a 1x1 conv and BN
  (``downsample="avg"``; timm's ``ceil_mode=True, count_include_pad=False`` pool equals CLIP's ``AvgPool2d(2)`` on
  the even 56/28/14 maps of a 224 input); BatchNorm eps 1e-5 in both;
- head: attention pooling (``head_type="attn_abs"``): the mean token prepended to the 7x7 tokens, an absolute
  position embedding (50, 2048), 32 heads of 64, separate q/k/v projections with bias, the mean token projected to
  1024 (``c_proj`` -> ``head.proj``). timm attends from every token and keeps token 0, the same as CLIP's single
  query.

The published ``RN50.pt`` stores conv, linear and attention weights in fp16 (CLIP's ``convert_weights``):
:func:`clip_to_timm` returns float32 tensors, as ``clip.load`` does on the CPU (``model.float()``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import timm
from torch import Tensor, nn

#: OpenAI ``visual.*`` names (``visual.`` stripped) -> timm ``resnet50_clip`` names; regexes applied in order, as
#: ``cog_pl.models.checkpoints.adapt_state_dict`` applies a ``key_map``. The same renaming as timm's
#: ``byobnet._convert_openai_clip`` (which needs the ``visual.`` prefix and a model), written as a table.
CLIP_TO_TIMM: dict[str, str] = {
    r"^(conv|bn)([123])\.": r"stem.conv\2.\1.",
    r"^(layer\d\.\d+)\.(conv|bn)1\.": r"\1.conv1_1x1.\2.",
    r"^(layer\d\.\d+)\.(conv|bn)2\.": r"\1.conv2_kxk.\2.",
    r"^(layer\d\.\d+)\.(conv|bn)3\.": r"\1.conv3_1x1.\2.",
    r"^(layer\d\.\d+)\.downsample\.0\.": r"\1.shortcut.conv.conv.",
    r"^(layer\d\.\d+)\.downsample\.1\.": r"\1.shortcut.conv.bn.",
    r"^layer1\.": "stages.0.",
    r"^layer2\.": "stages.1.",
    r"^layer3\.": "stages.2.",
    r"^layer4\.": "stages.3.",
    r"^attnpool\.positional_embedding$": "head.pos_embed",
    r"^attnpool\.([qkv])_proj\.": r"head.\1.",
    r"^attnpool\.c_proj\.": "head.proj.",
}

FEATURE_DIM = 1024  # CLIP RN50's embed_dim: the attention pool's output (open_clip model_configs/RN50.json)
IMAGE_SIZE = 224  # the attention pool's position embedding is 7x7 + 1 tokens: a 224 input


def build_clip_resnet50() -> nn.Module:
    """timm's ``resnet50_clip``, random weights: images (B, 3, 224, 224) -> the 1024-d attention-pooled embedding."""
    return timm.create_model("resnet50_clip", pretrained=False, num_classes=FEATURE_DIM)


def clip_to_timm(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename OpenAI's image-tower tensors (``visual.`` stripped) to timm's, floating ones cast to float32."""
    out = {}
    for key, value in state.items():
        for pattern, repl in CLIP_TO_TIMM.items():
            key = re.sub(pattern, repl, key)
        out[key] = value.float() if value.is_floating_point() else value
    return out
