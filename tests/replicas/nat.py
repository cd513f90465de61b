"""NAT-M4's ``net.weights`` (``net-img@240-flops@600-top1@80.5/``, human-analysis/neural-architecture-transfer).

The file is the raw state dict of ``NATNet.build_from_config(net.config)`` (``codebase/networks/natnet.py`` at
5aca00a11b22902a9e7b2f9c33b58bc4ba686828): naver/cog ``model_loaders.py`` ``load_nat`` reads it with
``torch.load`` and ``load_state_dict(state_dict, strict=True)`` on that network, so it holds exactly NATNet's keys:
no container, no prefix, the head ``classifier.linear.weight`` / ``classifier.linear.bias`` (``LinearLayer`` of
``codebase/modules/layers.py``; its dropout has no weights), BN running statistics and ``num_batches_tracked``
(``net.state_dict()`` of torch >= 0.4.1; NAT's README asks for PyTorch >= 1.4).

NAT's layers are once-for-all's (README "Acknowledgement"). The ``ofa`` package on PyPI builds the same modules from
the same config, with two differences, both bridged here: its block calls the MBConv ``conv``
(``ofa.utils.layers.ResidualBlock``) where NAT's ``MobileInvertedResidualBlock`` calls it ``mobile_inverted_conv``,
and its ``build_activation`` has no ``mish``, which NAT's takes from timm (``codebase/utils/pytorch_modules.py``).
The reference is naver/cog's ``load_nat`` on ofa's classes: strict load, ``classifier`` = identity.
"""

from __future__ import annotations

import copy
import json
import re
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from unittest import mock

import torch

from replicas import Replica

#: the published net.config, shipped byte for byte as package data (read as a file, not through cog_pl.models)
CONFIG = "nat_m4_net.config.json"
_OFA_BLOCK = re.compile(r"^(blocks\.\d+)\.conv(?=\.|$)")
_NAT_BLOCK = re.compile(r"^(blocks\.\d+)\.mobile_inverted_conv(?=\.|$)")


def published_config() -> dict:
    """NAT-M4's ``subnets/imagenet/NAT-M4/net.config``."""
    return json.loads((resources.files("cog_pl") / "assets" / CONFIG).read_text(encoding="utf-8"))


def _ofa_network(config: dict) -> torch.nn.Module:
    """ofa's MobileNetV3 of a NAT config, with NAT's Mish (timm's) added to ofa's activations."""
    import ofa.utils.layers as ofa_layers
    from ofa.imagenet_classification.networks import MobileNetV3
    from timm.layers.activations import Mish

    ofa_activation = ofa_layers.build_activation

    def build_activation(name: str | None, inplace: bool = True) -> torch.nn.Module | None:
        return Mish(inplace=inplace) if name == "mish" else ofa_activation(name, inplace)

    with mock.patch.object(ofa_layers, "build_activation", build_activation):
        return MobileNetV3.build_from_config(copy.deepcopy(config))  # ofa pops the layers' "name"


def _random_like(key: str, value: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A plausible trained value: He-scaled convs, BN near identity with positive running variances, residual
    branches damped (their last BN scale about 0.5), so that the features stay of order 1 and depend on the image."""
    if key.endswith("num_batches_tracked"):
        return torch.tensor(int(torch.randint(10_000, 2_000_000, (), generator=gen)), dtype=torch.long)
    if key.endswith("running_var"):
        return 0.5 + torch.rand(value.shape, generator=gen)
    if value.dim() == 4:  # conv weight (out, in / groups, k, k)
        return torch.randn(value.shape, generator=gen) * (2.0 / value[0].numel()) ** 0.5
    if key.startswith("classifier."):
        return torch.randn(value.shape, generator=gen) * 0.01
    if ".bn." in key and key.endswith(".weight"):
        scale = 0.5 if "point_linear" in key else 1.0
        return scale * (1.0 + 0.1 * torch.randn(value.shape, generator=gen))
    return 0.1 * torch.randn(value.shape, generator=gen)  # BN bias and running mean, SE conv biases


def publish_nat_m4(path: Path, seed: int = 0) -> Replica:
    """Write NAT-M4's ``net.weights`` with random tensors at ``path``; the reference is ofa's network of it."""
    config = published_config()
    gen = torch.Generator().manual_seed(seed)
    ofa_state = _ofa_network(config).state_dict()
    state = OrderedDict((_OFA_BLOCK.sub(r"\1.mobile_inverted_conv", k), _random_like(k, v, gen))
                        for k, v in ofa_state.items())
    # what torch.save(net.state_dict()) keeps: the module versions, under NATNet's module names
    state._metadata = OrderedDict((_OFA_BLOCK.sub(r"\1.mobile_inverted_conv", k), v)  # type: ignore[attr-defined]
                                  for k, v in ofa_state._metadata.items() if not k.startswith("global_avg_pool"))
    torch.save(state, path)

    net = _ofa_network(config)
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    net.load_state_dict(OrderedDict((_NAT_BLOCK.sub(r"\1.conv", k), v) for k, v in loaded.items()), strict=True)
    net.classifier = torch.nn.Identity()
    net.eval()

    def reference(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return net(images)

    # S = 224: the paper (Sec. 4.1: S = 224 except Inception-v3, DeiT-B-distilled, EfficientNet-B1/-B4) and
    # naver/cog, which has no configs/nat_m4.yaml, so configs/default.py's 224; net.config's img_size 240 is NAT's own
    return Replica(reference=reference, image_size=224,
                   feature_dim=config["feature_mix_layer"]["out_channels"])
