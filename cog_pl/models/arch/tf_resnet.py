"""The two ResNet-50s the paper read through third-party TensorFlow/JAX converters: SimCLR-v2 and BYOL.

**SimCLR-v2** ``r50_1x_sk0``, converted by Separius/SimCLRv2-Pytorch (commit f4c2f41, ``convert.py``,
``resnet.py``) as naver/cog's ``prepare_models/prepare_simclr.sh`` does (``python convert.py
r50_1x_sk0/model.ckpt-250228``, no ``--ema``, no ``--supervised``). The file is
``torch.save({'resnet': ResNet.state_dict(), 'head': ContrastiveHead.state_dict()})``; the paper's features are
naver/cog ``load_simclrv2`` (``model_loaders.py``): ``backbone(x, apply_fc=False)``, the spatial mean of the last
stage, 2048-d, on 224 px crops in [0, 1] (``configs/simclr_v2.yaml``: mean 0, std 1; the converter's ``verify.py``
feeds ``ToTensor()`` alone). The converter's network is torchvision's ``resnet50`` under other names, layer for
layer (its ``resnet.py``): 7x7/2 stem conv padded 3, BN, ReLU, 3x3/2 max pool padded 1; bottlenecks 1x1 -> 3x3
(carrying the stride, padded 1 on each side) -> 1x1; a 1x1 strided conv + BN projection shortcut in the first block
of each of the 4 stages (layer1 included); every BN ``eps=1e-5``; no bias in any conv; mean pooling; ``fc`` 2048 ->
1000. :data:`SIMCLR_V2_TO_TORCHVISION` renames its keys onto torchvision's and :func:`build_simclr_v2_resnet50` is
torchvision's network. (The TensorFlow original pads its max pool "SAME", 0 before and 1 after, google-research/simclr
``resnet.py`` at 383d414; the converter pads 1 on each side, and the paper's features are the converter's. naver/cog
``utils.py`` reads ``configs/<model>.yaml`` for ``--model simclrv2_resnet50``, a name ``simclr_v2.yaml`` does not
match: the yaml, and the TensorFlow input in [0, 1], state the intended mean 0 and std 1.)

**BYOL** ``pretrain_res50x1.pkl`` (deepmind-research ``byol``), converted by chigur/byol-convert (commit e527ae6,
``convert.py``) as naver/cog's ``prepare_byol.sh`` does. The file is a plain ``torch.save(dict)`` with torchvision
``resnet50`` names and no prefix: every key of ``resnet50().state_dict()`` except ``num_batches_tracked``, ``fc``
included (BYOL's online linear ``classifier`` renamed ``fc``; projector and predictor skipped). The converter's
``resnet.py`` builds ``conv1`` (7x7/2), ``maxpool`` (3x3/2) and every 3x3 conv with ``padding=0`` and pads each
input in ``forward`` with ``pad_same``: TensorFlow "SAME", zeros, ``total = max((ceil(n / s) - 1) * s + k - n, 0)``
split ``total // 2`` before and the rest after. naver/cog ``load_byol`` calls that stem padding itself and the
blocks' own ``forward`` (which pads ``conv2``), then average pooling: 2048-d. Where this differs from torchvision's
symmetric padding, :func:`build_byol_resnet50` pads the TensorFlow way: the stem conv (224 -> 2 before, 3 after),
the max pool (0 before, 1 after) and the strided 3x3 ``conv2`` of layer2-4's first blocks (0 before, 1 after); a
stride-1 3x3 conv pads 1 on each side in both, a 1x1 conv never pads. BN is torch's default ``eps=1e-5`` (as Haiku's
in deepmind-research ``byol/utils/networks.py`` at 8457046). Inputs: ImageNet mean and std, 224 px (naver/cog has
no BYOL config, so ``configs/default.py``; BYOL itself normalises so, ``byol/utils/dataset.py`` ``normalize_images``,
called in ``byol_experiment.py``). naver/cog sources at 5b34ca9.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import resnet50

#: (regex, replacement) pairs, applied in order with ``re.sub``, from the SimCLR-v2 converter's ``ResNet`` names
#: (``net.0`` the stem: ``net.0.0`` conv, ``net.0.1.0`` BN; ``net.S.blocks.B`` for stage S in 1..4: ``projection
#: .shortcut`` / ``projection.bn.0`` and ``net.0`` conv, ``net.1.0`` BN, ``net.2``, ``net.3.0``, ``net.4``,
#: ``net.5.0``) onto torchvision ``resnet50``'s; ``fc`` keeps its name.
SIMCLR_V2_TO_TORCHVISION: tuple[tuple[str, str], ...] = (
    (r"^net\.0\.0\.", "conv1."),
    (r"^net\.0\.1\.0\.", "bn1."),
    (r"^net\.([1-4])\.blocks\.(\d+)\.projection\.shortcut\.", r"layer\1.\2.downsample.0."),
    (r"^net\.([1-4])\.blocks\.(\d+)\.projection\.bn\.0\.", r"layer\1.\2.downsample.1."),
    (r"^net\.([1-4])\.blocks\.(\d+)\.net\.0\.", r"layer\1.\2.conv1."),
    (r"^net\.([1-4])\.blocks\.(\d+)\.net\.1\.0\.", r"layer\1.\2.bn1."),
    (r"^net\.([1-4])\.blocks\.(\d+)\.net\.2\.", r"layer\1.\2.conv2."),
    (r"^net\.([1-4])\.blocks\.(\d+)\.net\.3\.0\.", r"layer\1.\2.bn2."),
    (r"^net\.([1-4])\.blocks\.(\d+)\.net\.4\.", r"layer\1.\2.conv3."),
    (r"^net\.([1-4])\.blocks\.(\d+)\.net\.5\.0\.", r"layer\1.\2.bn3."),
)


def _same(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow "SAME" padding of one spatial dimension: (before, after), the odd one after."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def pad_same(x: torch.Tensor, kernel: tuple[int, int], stride: tuple[int, int]) -> torch.Tensor:
    """Zero-pad ``x`` (N, C, H, W) so that a ``kernel``/``stride`` window with no padding gives TensorFlow "SAME"."""
    top, bottom = _same(x.shape[-2], kernel[0], stride[0])
    left, right = _same(x.shape[-1], kernel[1], stride[1])
    return F.pad(x, (left, right, top, bottom))


class Conv2dSame(nn.Conv2d):
    """A convolution with TensorFlow "SAME" padding, computed from each input's size (parameters as ``nn.Conv2d``)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, bias: bool = False):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=0, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(pad_same(x, self.kernel_size, self.stride))


class MaxPool2dSame(nn.MaxPool2d):
    """A max pool with TensorFlow "SAME" padding, zeros as the BYOL converter pads (the input follows a ReLU)."""

    def __init__(self, kernel_size: int, stride: int):
        super().__init__(kernel_size, stride=stride, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s = self.kernel_size, self.stride
        return super().forward(pad_same(x, (k, k), (s, s)))


def build_simclr_v2_resnet50() -> nn.Module:
    """torchvision ``resnet50`` with ``fc`` = identity (2048-d): the converter's network, read with the key map."""
    model = resnet50()
    model.fc = nn.Identity()
    return model


def build_byol_resnet50() -> nn.Module:
    """torchvision ``resnet50`` (``fc`` = identity: 2048-d) with the BYOL converter's TensorFlow "SAME" padding.

    Parameter and buffer names are torchvision's, so the converted file loads as it is (less ``fc``).
    """
    model = resnet50()
    model.conv1 = Conv2dSame(3, 64, 7, stride=2)
    model.maxpool = MaxPool2dSame(3, 2)
    for stage in (model.layer2, model.layer3, model.layer4):
        block = stage[0]
        conv = block.conv2
        block.conv2 = Conv2dSame(conv.in_channels, conv.out_channels, 3, stride=conv.stride[0])
    model.fc = nn.Identity()
    return model
