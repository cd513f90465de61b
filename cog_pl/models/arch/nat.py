"""NAT-M4 (Lu et al., "Neural Architecture Transfer", TPAMI 2021) without its classifier, built from its ``net.config``.

The network is the authors' ``NATNet`` (a MobileNetV3 variant) as ``NATNet.build_from_config`` builds it, with the
same module names, so the state dict of their ``net.weights`` loads unchanged once ``classifier.*`` is dropped. Its
output is the paper's feature: ``feature_mix_layer`` after global average pooling (naver/cog 5b34ca9
``model_loaders.py`` ``load_nat`` sets ``classifier`` to identity). Facts from
human-analysis/neural-architecture-transfer at commit 5aca00a11b22902a9e7b2f9c33b58bc4ba686828, the one naver/cog
``prepare_models/prepare_nat.sh`` checks out:

- ``codebase/networks/natnet.py``: ``NATNet`` runs ``first_conv``, ``blocks``, ``final_expand_layer``, a mean over
  width then height, ``feature_mix_layer``, ``classifier``; ``MobileInvertedResidualBlock`` adds its identity
  ``shortcut`` (no weights) to ``mobile_inverted_conv``; BN momentum and eps come from the config's ``bn``
  (0.1 and 1e-3 without one);
- ``codebase/modules/layers.py``: ``ConvLayer`` holds ``conv`` ("same" padding ``k // 2``), ``bn``, ``act`` in
  ``ops_order``, a dropout before ``conv`` when ``dropout_rate`` > 0; ``MBInvertedConvLayer`` holds
  ``inverted_bottleneck`` (1x1 conv, bn, act; none when ``expand_ratio`` is 1), ``depth_conv`` (depthwise conv, bn,
  act, then ``se``) and ``point_linear`` (1x1 conv, bn, no activation);
- ``codebase/utils/pytorch_modules.py``: ``SEModule`` is ``fc.reduce`` (with bias), ReLU, ``fc.expand`` (with bias),
  h-sigmoid on the spatial mean, reduction 4 and ``make_divisible(c // 4, 8)`` mid channels; ``build_activation``
  takes ``mish`` from timm (``x * tanh(softplus(x))``) and ``h_swish`` as ``x * relu6(x + 3) / 6``.

``cog_pl/assets/nat_m4_net.config.json`` is ``subnets/imagenet/NAT-M4/net.config`` of that commit, byte for byte
(git blob 88c9e0e1ffc1d39cab879b6d77d61f6848ac270b): Mish throughout, ``img_size`` 240, a 1536-d
``feature_mix_layer`` without BN, a 1000-way ``classifier.linear``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from importlib import resources
from typing import Any

import torch
from torch import nn

from cog_pl.errors import CogError

#: the shipped ``net.config`` of NAT-M4 (package data, see the module docstring)
NAT_M4_CONFIG = "nat_m4_net.config.json"

# codebase/utils/pytorch_modules.py build_activation; torch's modules compute the same functions
_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU, "relu6": nn.ReLU6, "h_swish": nn.Hardswish, "h_sigmoid": nn.Hardsigmoid, "swish": nn.SiLU,
    "mish": nn.Mish, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh,
}


def nat_m4_config() -> dict[str, Any]:
    """A fresh copy of NAT-M4's published ``net.config``."""
    return json.loads((resources.files("cog_pl") / "assets" / NAT_M4_CONFIG).read_text(encoding="utf-8"))


def _activation(name: str | None, where: str) -> nn.Module | None:
    if name is None:
        return None
    if name not in _ACTIVATIONS:
        raise CogError(f"NAT config {where}: activation {name!r} is not one of {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]()


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Channels rounded to a multiple of ``divisor``, never below 90% of ``value`` (the authors' ``make_divisible``)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _check(cfg: Mapping[str, Any], name: str, where: str) -> None:
    if cfg.get("name") != name:
        raise CogError(f"NAT config {where}: expected a {name}, got {cfg.get('name')!r}")
    if cfg.get("ops_order", "weight_bn_act") != "weight_bn_act":
        raise CogError(f"NAT config {where}: only ops_order 'weight_bn_act' is supported, got {cfg['ops_order']!r}")


def _conv_layer(cfg: Mapping[str, Any], where: str) -> nn.Sequential:
    """The authors' ``ConvLayer``: ``conv``, then ``bn`` and ``act`` where the config has them."""
    _check(cfg, "ConvLayer", where)
    if cfg.get("has_shuffle") and cfg.get("groups", 1) > 1:
        raise CogError(f"NAT config {where}: channel shuffle is not supported")
    kernel, dilation = cfg.get("kernel_size", 3), cfg.get("dilation", 1)
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    if cfg.get("dropout_rate", 0) > 0:
        layers["dropout"] = nn.Dropout2d(cfg["dropout_rate"])
    layers["conv"] = nn.Conv2d(cfg["in_channels"], cfg["out_channels"], kernel, stride=cfg.get("stride", 1),
                               padding=kernel // 2 * dilation, dilation=dilation, groups=cfg.get("groups", 1),
                               bias=cfg.get("bias", False))
    if cfg.get("use_bn", True):
        layers["bn"] = nn.BatchNorm2d(cfg["out_channels"])
    act = _activation(cfg.get("act_func", "relu"), where)
    if act is not None:
        layers["act"] = act
    return nn.Sequential(layers)


class SqueezeExcite(nn.Module):
    """The authors' ``SEModule``: channels gated by an h-sigmoid of two 1x1 convs on their spatial mean."""

    def __init__(self, channels: int, reduction: int = 4) -> None:
        super().__init__()
        mid = _make_divisible(channels // reduction)
        self.fc = nn.Sequential(OrderedDict([
            ("reduce", nn.Conv2d(channels, mid, 1)), ("relu", nn.ReLU()),
            ("expand", nn.Conv2d(mid, channels, 1)), ("h_sigmoid", nn.Hardsigmoid()),
        ]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.fc(x.mean(3, keepdim=True).mean(2, keepdim=True))


class MBInvertedConv(nn.Module):
    """The authors' ``MBInvertedConvLayer``: 1x1 expansion, depthwise conv (with SE), linear 1x1 projection."""

    def __init__(self, cfg: Mapping[str, Any], where: str) -> None:
        super().__init__()
        if cfg.get("name") != "MBInvertedConvLayer":
            raise CogError(f"NAT config {where}: expected an MBInvertedConvLayer, got {cfg.get('name')!r}")
        c_in, c_out, kernel = cfg["in_channels"], cfg["out_channels"], cfg.get("kernel_size", 3)
        expand, act = cfg.get("expand_ratio", 6), cfg.get("act_func", "relu6")
        mid = cfg.get("mid_channels") or round(c_in * expand)
        self.inverted_bottleneck = None if expand == 1 else nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(c_in, mid, 1, bias=False)), ("bn", nn.BatchNorm2d(mid)),
            ("act", _activation(act, where)),
        ]))
        depth: list[tuple[str, nn.Module]] = [
            ("conv", nn.Conv2d(mid, mid, kernel, cfg.get("stride", 1), kernel // 2, groups=mid, bias=False)),
            ("bn", nn.BatchNorm2d(mid)), ("act", _activation(act, where)),
        ]
        if cfg.get("use_se", False):
            depth.append(("se", SqueezeExcite(mid)))
        self.depth_conv = nn.Sequential(OrderedDict(depth))
        self.point_linear = nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(mid, c_out, 1, bias=False)), ("bn", nn.BatchNorm2d(c_out)),
        ]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inverted_bottleneck is not None:
            x = self.inverted_bottleneck(x)
        return self.point_linear(self.depth_conv(x))


class MobileInvertedResidualBlock(nn.Module):
    """The authors' block of the same name: an MBConv plus, where the config has an identity shortcut, its input."""

    def __init__(self, cfg: Mapping[str, Any], where: str) -> None:
        super().__init__()
        self.mobile_inverted_conv = MBInvertedConv(cfg["mobile_inverted_conv"], f"{where}.mobile_inverted_conv")
        shortcut = cfg.get("shortcut")
        if shortcut is not None:
            _check(shortcut, "IdentityLayer", f"{where}.shortcut")
            if shortcut.get("use_bn") or shortcut.get("act_func"):
                raise CogError(f"NAT config {where}.shortcut: only a plain identity shortcut is supported")
        self.residual = shortcut is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.mobile_inverted_conv(x)
        return out + x if self.residual else out


class NATBackbone(nn.Module):
    """``NATNet`` without its classifier: images to the ``feature_mix_layer`` output of the pooled features."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        self.first_conv = _conv_layer(config["first_conv"], "first_conv")
        self.blocks = nn.ModuleList(MobileInvertedResidualBlock(block, f"blocks[{i}]")
                                    for i, block in enumerate(config["blocks"]))
        self.final_expand_layer = _conv_layer(config["final_expand_layer"], "final_expand_layer")
        self.feature_mix_layer = _conv_layer(config["feature_mix_layer"], "feature_mix_layer")
        self.num_features: int = config["feature_mix_layer"]["out_channels"]
        bn = config.get("bn", {"momentum": 0.1, "eps": 1e-3})
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.momentum, module.eps = bn["momentum"], bn["eps"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first_conv(x)
        for block in self.blocks:
            x = block(x)
        x = self.final_expand_layer(x)
        x = x.mean(3, keepdim=True).mean(2, keepdim=True)
        return self.feature_mix_layer(x).flatten(1)


def build_nat_m4(config: Mapping[str, Any] | None = None) -> NATBackbone:
    """NAT-M4's feature network (1536-d; fully convolutional: the paper fed it 224 px, its own evaluation 240), or
    that of another NAT ``net.config`` given as ``config``."""
    return NATBackbone(nat_m4_config() if config is None else config)
