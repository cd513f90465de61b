"""EfficientNet-B1 / -B4 of the pycls model zoo as timm's ``efficientnet_b1`` / ``efficientnet_b4`` fed BGR images.

The paper's EfficientNets are pycls's ``EN-B1_dds_8gpu.pyth`` and ``EN-B4_dds_8gpu.pyth``; naver/cog
``model_loaders.py`` ``load_efficientnet`` (5b34ca9) built ``pycls.models.effnet("B1", pretrained=True)``, set
``head.fc`` to identity and flipped the normalised RGB input to BGR (``torch.flip(image, [1])``). timm's models are
the same network, so the file loads into them with :data:`PYCLS_TO_TIMM`. Sources (facebookresearch/pycls at
4449e4a, the code of PyPI ``pycls==0.1.1``, unless named):

- file: ``pycls/core/checkpoint.py`` ``save_checkpoint`` writes ``{"epoch": int, "model_state": state_dict,
  "optimizer_state": SGD state_dict, "cfg": cfg.dump()}``; yacs ``CfgNode.dump()`` returns the YAML *string*, so
  the file reads with ``torch.load(weights_only=True)`` (same dict since the initial commit 996cb1d,
  ``pycls/utils/checkpoint.py``). ``load_checkpoint`` loads ``model_state`` strictly into pycls's ``EffNet``, so
  its keys are ``pycls/models/effnet.py``'s: ``stem.{conv,bn}``, ``s{1..7}.b{1..}.{exp,exp_bn,dwise,dwise_bn,
  se.f_ex.0,se.f_ex.2,lin_proj,lin_proj_bn}`` (no ``exp`` where the expansion is 1), ``head.{conv,conv_bn,fc}``.
- files and configs: ``pycls/models/model_zoo.py``: ``dds_baselines/161304979/EN-B1_dds_8gpu.pyth`` and
  ``dds_baselines/161305098/EN-B4_dds_8gpu.pyth``, built from ``configs/dds_baselines/effnet/EN-B{1,4}_dds_8gpu.yaml``
  (b3260e7): stem 32 / 48, depths [2,3,3,4,4,5,2] / [2,4,4,6,6,8,2], widths [16,24,40,80,112,192,320] /
  [24,32,56,112,160,272,448], expansions [1,6,6,6,6,6,6], kernels [3,3,5,3,5,5,3], strides [1,2,2,2,1,2,1], head
  1280 / 1792, train size 240 / 380; ``pycls/core/config.py``: ``EN.SE_R`` 0.25, ``BN.EPS`` 1e-5, no dropout.
- equal layers (timm 1.0.31 ``models/efficientnet.py`` ``_gen_efficientnet``, (width, depth) multipliers (1.0, 1.1) /
  (1.4, 1.8); ``_efficientnet_builder.py``, ``_efficientnet_blocks.py``): depths by ceil and widths rounded to
  multiples of 8 give the yaml's numbers; convolutions pad symmetrically, ``(k - 1) // 2`` for these odd kernels at
  stride 1 and 2, as pycls; BatchNorm eps 1e-5 in both; swish (SiLU) = pycls ``Swish`` ``x * sigmoid(x)``; SE on the
  expanded width, reduced to a quarter of the *block input* width (timm ``se_from_exp=False``; pycls ``SE(w_exp,
  int(w_in * se_r))``), swish inside, sigmoid gate, biased 1x1 convs; stage 1 (expansion 1) is timm's
  ``DepthwiseSeparableConv`` = pycls's ``MBConv`` without ``exp``; skip iff stride 1 and equal widths in both; head:
  1x1 conv, BN, swish, global average pool. tests/models/test_arch_pycls_effnet.py checks the features against pycls.
- BGR: ``pycls/datasets/imagenet.py`` reads images with ``cv2`` (BGR) and normalises with mean [0.406, 0.456,
  0.485] and std [0.225, 0.224, 0.229] "in BGR order", i.e. ImageNet's RGB statistics reversed, so an image
  normalised in RGB with ImageNet mean and std and flipped on the channel axis is exactly pycls's input.

Flip once: :func:`build_pycls_efficientnet` returns the network wrapped in :class:`BGRInput` (RGB in);
:func:`build_efficientnet_b1` / :func:`build_efficientnet_b4` return the bare networks (BGR in) for a caller that
flips itself (the zoo's ``bgr`` flag).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import nn

from cog_pl.errors import CogError

#: (regex, replacement) pairs, applied in order with ``re.sub`` to each ``model_state`` key, that turn pycls's
#: EffNet names into timm's EfficientNet names. ``head.fc.*`` (the 1000-way classifier) is left as it is: drop it.
PYCLS_TO_TIMM: tuple[tuple[str, str], ...] = (
    (r"^stem\.conv\.", "conv_stem."),
    (r"^stem\.bn\.", "bn1."),
    (r"^head\.conv\.", "conv_head."),
    (r"^head\.conv_bn\.", "bn2."),
    # stage 1 (expansion 1): timm's DepthwiseSeparableConv names its layers conv_dw, bn1, se, conv_pw, bn2
    (r"^(s1\.b\d+)\.dwise_bn\.", r"\1.bn1."),
    (r"^(s1\.b\d+)\.lin_proj\.", r"\1.conv_pw."),
    (r"^(s1\.b\d+)\.lin_proj_bn\.", r"\1.bn2."),
    # stages 2-7: timm's InvertedResidual names them conv_pw, bn1, conv_dw, bn2, se, conv_pwl, bn3
    (r"\.exp\.", ".conv_pw."),
    (r"\.exp_bn\.", ".bn1."),
    (r"\.dwise\.", ".conv_dw."),
    (r"\.dwise_bn\.", ".bn2."),
    (r"\.lin_proj\.", ".conv_pwl."),
    (r"\.lin_proj_bn\.", ".bn3."),
    (r"\.se\.f_ex\.0\.", ".se.conv_reduce."),
    (r"\.se\.f_ex\.2\.", ".se.conv_expand."),
    # pycls counts stages s1..s7 and blocks b1.. from 1, timm's nn.Sequentials count from 0
    *((rf"^s{s}\.", f"blocks.{s - 1}.") for s in range(1, 8)),
    *((rf"^(blocks\.\d+)\.b{b}\.", rf"\1.{b - 1}.") for b in range(1, 17)),
)

#: pycls model zoo name -> timm architecture of the same network.
PYCLS_EFFICIENTNETS = {"b1": "efficientnet_b1", "b4": "efficientnet_b4"}

def pycls_to_timm(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``model_state`` (``head.fc.*`` already dropped) renamed by :data:`PYCLS_TO_TIMM`."""
    out = {}
    for key, value in state.items():
        for pattern, repl in PYCLS_TO_TIMM:
            key = re.sub(pattern, repl, key)
        out[key] = value
    return out


def _timm_efficientnet(variant: str) -> nn.Module:
    import timm

    key = variant.lower().replace("-", "_").removeprefix("efficientnet_").removeprefix("en_")
    if key not in PYCLS_EFFICIENTNETS:
        raise CogError(f"pycls EfficientNet {variant!r} is not one of {', '.join(PYCLS_EFFICIENTNETS)}")
    return timm.create_model(PYCLS_EFFICIENTNETS[key], pretrained=False, num_classes=0)


def build_efficientnet_b1() -> nn.Module:
    """The bare network of ``EN-B1_dds_8gpu.pyth`` (timm ``efficientnet_b1``, no classifier): it takes *BGR* input;
    the zoo's ``bgr`` flag flips RGB images once (:class:`cog_pl.models.build.BGRInput`)."""
    return _timm_efficientnet("b1")


def build_efficientnet_b4() -> nn.Module:
    """The bare network of ``EN-B4_dds_8gpu.pyth`` (timm ``efficientnet_b4``): BGR input, as
    :func:`build_efficientnet_b1`."""
    return _timm_efficientnet("b4")
