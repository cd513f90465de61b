"""Replicas of the converted SimCLR-v2 and BYOL ResNet-50 files, as their third-party converters save them.

SimCLR-v2 ``r50_1x_sk0.pth``: Separius/SimCLRv2-Pytorch (commit f4c2f41) ``convert.py`` saves
``{'resnet': model.state_dict(), 'head': head.state_dict()}`` of ``resnet.get_resnet(50, 1, 0)``: conv kernels
``permute(3, 2, 0, 1)`` of TensorFlow's HWIO arrays, ``fc`` the transposed ``head_supervised`` kernel, BN buffers
assigned (``num_batches_tracked`` stays 0), the contrastive head ``layers.{0,3,6}`` (Linear, no bias, transposed
kernels) and ``layers.{1,4,7}`` (BatchNorm1d; ``layers.7.bias`` never assigned: zeros).

BYOL ``pretrain_res50x1.pth.tar``: chigur/byol-convert (commit e527ae6) ``convert.py`` saves a plain dict with
torchvision ``resnet50`` names, no ``num_batches_tracked``: the online parameters first (conv kernels
``permute(3, 2, 0, 1)``, BN scale/offset squeezed from Haiku's (1, 1, 1, C), ``fc`` = the online ``classifier``,
``w`` transposed), then the BN ``mean_ema`` / ``var_ema`` averages (squeezed). The order within each group follows
Haiku's parameter dict, which is not reproduced here (torchvision's module order instead).

The references below are each converter's ``resnet.py`` forward written with ``torch.nn.functional`` on the file's
own key names, independent of ``cog_pl.models``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from replicas import Replica

BN_EPS = 1e-5  # SimCLRv2-Pytorch resnet.py BATCH_NORM_EPSILON; byol-convert resnet.py: nn.BatchNorm2d's default
#: ResNet-50 stages: (bottleneck width, blocks, stride); output channels are 4 x width
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))


def _blocks() -> Iterator[tuple[int, int, int, int, int]]:
    """(stage 1..4, block, input channels, width, stride) of every bottleneck of a ResNet-50."""
    channels = 64
    for stage, (width, count, stride) in enumerate(STAGES, 1):
        for block in range(count):
            yield stage, block, channels, width, stride if block == 0 else 1
            channels = 4 * width


class _Random:
    """Plausible random tensors, laid out as the converters made them from TensorFlow/Haiku arrays."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)

    def conv(self, out_ch: int, in_ch: int, k: int) -> torch.Tensor:
        hwio = torch.randn(k, k, in_ch, out_ch, generator=self.g) * (2.0 / (in_ch * k * k)) ** 0.5
        return hwio.permute(3, 2, 0, 1)  # a strided view, as the converters save it

    def linear(self, out_f: int, in_f: int) -> torch.Tensor:
        return (torch.randn(in_f, out_f, generator=self.g) / in_f**0.5).t()

    def bn(self, c: int, gamma: float = 1.0) -> dict[str, torch.Tensor]:
        u = lambda lo, hi: lo + (hi - lo) * torch.rand(c, generator=self.g)  # noqa: E731
        return {"weight": gamma * u(0.5, 1.0), "bias": 0.1 * torch.randn(c, generator=self.g),
                "running_mean": 0.1 * torch.randn(c, generator=self.g), "running_var": u(0.5, 1.5)}


def _bn(x: torch.Tensor, sd: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    return F.batch_norm(x, sd[p + "running_mean"], sd[p + "running_var"], sd[p + "weight"], sd[p + "bias"],
                        training=False, eps=BN_EPS)


def _with_metadata(sd: OrderedDict, bn_prefixes: set[str]) -> OrderedDict:
    """Attach the module-version ``_metadata`` that ``nn.Module.state_dict()`` carries (param-less modules left out)."""
    prefixes = set()
    for key in sd:
        parts = key.split(".")[:-1]
        prefixes.update(".".join(parts[:i]) for i in range(len(parts) + 1))
    sd._metadata = OrderedDict((p, {"version": 2 if p in bn_prefixes else 1}) for p in sorted(prefixes))
    return sd


# --- SimCLR-v2 (Separius/SimCLRv2-Pytorch) -----------------------------------------------------------------------

def _simclr_resnet(r: _Random) -> OrderedDict:
    sd: OrderedDict = OrderedDict()
    bns: set[str] = set()

    def bn(p: str, c: int, gamma: float = 1.0) -> None:
        sd.update({p + k: v for k, v in r.bn(c, gamma).items()})
        sd[p + "num_batches_tracked"] = torch.tensor(0)
        bns.add(p[:-1])

    sd["net.0.0.weight"] = r.conv(64, 3, 7)
    bn("net.0.1.0.", 64)
    for s, b, cin, w, _ in _blocks():
        p = f"net.{s}.blocks.{b}."
        if b == 0:  # Projection is registered before the residual branch
            sd[p + "projection.shortcut.weight"] = r.conv(4 * w, cin, 1)
            bn(p + "projection.bn.0.", 4 * w)
        sd[p + "net.0.weight"] = r.conv(w, cin, 1)
        bn(p + "net.1.0.", w)
        sd[p + "net.2.weight"] = r.conv(w, w, 3)
        bn(p + "net.3.0.", w)
        sd[p + "net.4.weight"] = r.conv(4 * w, w, 1)
        bn(p + "net.5.0.", 4 * w, gamma=0.3)
    sd["fc.weight"] = r.linear(1000, 2048)
    sd["fc.bias"] = 0.01 * torch.randn(1000, generator=r.g)
    return _with_metadata(sd, bns)


def _simclr_head(r: _Random) -> OrderedDict:
    sd: OrderedDict = OrderedDict()
    for i, (layer, dim) in enumerate(((0, 2048), (3, 2048), (6, 128))):
        sd[f"layers.{layer}.weight"] = r.linear(dim, 2048)
        stats = r.bn(dim)
        if i == 2:  # convert.py assigns no beta to the last BN: its zero initialisation stays
            stats["bias"] = torch.zeros(dim)
        sd.update({f"layers.{layer + 1}.{k}": v for k, v in stats.items()})
        sd[f"layers.{layer + 1}.num_batches_tracked"] = torch.tensor(0)
    return _with_metadata(sd, {"layers.1", "layers.4", "layers.7"})


def simclr_v2_features(sd: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """SimCLRv2-Pytorch ``ResNet.forward(x, apply_fc=False)`` for ``r50_1x_sk0``: symmetric padding, mean pooling."""
    x = F.relu(_bn(F.conv2d(x, sd["net.0.0.weight"], stride=2, padding=3), sd, "net.0.1.0."))
    x = F.max_pool2d(x, 3, stride=2, padding=1)
    for s, b, _, _, stride in _blocks():
        p = f"net.{s}.blocks.{b}."
        shortcut = x
        if b == 0:
            shortcut = _bn(F.conv2d(x, sd[p + "projection.shortcut.weight"], stride=stride), sd, p + "projection.bn.0.")
        h = F.relu(_bn(F.conv2d(x, sd[p + "net.0.weight"]), sd, p + "net.1.0."))
        h = F.relu(_bn(F.conv2d(h, sd[p + "net.2.weight"], stride=stride, padding=1), sd, p + "net.3.0."))
        h = _bn(F.conv2d(h, sd[p + "net.4.weight"]), sd, p + "net.5.0.")
        x = F.relu(shortcut + h)
    return x.mean(dim=(2, 3))


def publish_simclr_v2(path: str | Path, seed: int = 0) -> Replica:
    """Write ``r50_1x_sk0.pth`` as SimCLRv2-Pytorch's ``convert.py`` saves it; inputs are raw [0, 1] pixels."""
    r = _Random(seed)
    torch.save({"resnet": _simclr_resnet(r), "head": _simclr_head(r)}, path)
    sd = torch.load(path, map_location="cpu", weights_only=True)["resnet"]
    return Replica(reference=lambda x: simclr_v2_features(sd, x), image_size=224, feature_dim=2048)


# --- BYOL (chigur/byol-convert) ----------------------------------------------------------------------------------

def _tf_same(x: torch.Tensor, k: int, s: int) -> torch.Tensor:
    """byol-convert ``pad_same``: zeros making a ``k``/``s`` window TensorFlow "SAME" (the odd one after)."""
    pads = []
    for n in (x.shape[-1], x.shape[-2]):  # F.pad order: width, then height
        total = max((-(-n // s) - 1) * s + k - n, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads)


def byol_features(sd: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """naver/cog ``load_byol``'s forward through byol-convert's ``resnet.py``: every conv and the pool padded "SAME"."""
    x = F.relu(_bn(F.conv2d(_tf_same(x, 7, 2), sd["conv1.weight"], stride=2), sd, "bn1."))
    x = F.max_pool2d(_tf_same(x, 3, 2), 3, stride=2)
    for s, b, _, _, stride in _blocks():
        p = f"layer{s}.{b}."
        h = F.relu(_bn(F.conv2d(_tf_same(x, 1, 1), sd[p + "conv1.weight"]), sd, p + "bn1."))
        h = F.relu(_bn(F.conv2d(_tf_same(h, 3, stride), sd[p + "conv2.weight"], stride=stride), sd, p + "bn2."))
        h = _bn(F.conv2d(_tf_same(h, 1, 1), sd[p + "conv3.weight"]), sd, p + "bn3.")
        shortcut = x
        if b == 0:
            shortcut = F.conv2d(_tf_same(x, 1, stride), sd[p + "downsample.0.weight"], stride=stride)
            shortcut = _bn(shortcut, sd, p + "downsample.1.")
        x = F.relu(h + shortcut)
    return x.mean(dim=(2, 3))


def publish_byol(path: str | Path, seed: int = 0) -> Replica:
    """Write ``pretrain_res50x1.pth.tar`` as byol-convert's ``convert.py`` saves it; inputs ImageNet-normalised."""
    r = _Random(seed)
    params: dict[str, torch.Tensor] = {}
    stats: dict[str, torch.Tensor] = {}

    def bn(p: str, c: int, gamma: float = 1.0) -> None:
        t = {k: v.reshape(1, 1, 1, c).squeeze() for k, v in r.bn(c, gamma).items()}  # Haiku's (1, 1, 1, C)
        params.update({p + "weight": t["weight"], p + "bias": t["bias"]})
        stats.update({p + "running_mean": t["running_mean"], p + "running_var": t["running_var"]})

    params["conv1.weight"] = r.conv(64, 3, 7)
    bn("bn1.", 64)
    for s, b, cin, w, _ in _blocks():
        p = f"layer{s}.{b}."
        params[p + "conv1.weight"] = r.conv(w, cin, 1)
        bn(p + "bn1.", w)
        params[p + "conv2.weight"] = r.conv(w, w, 3)
        bn(p + "bn2.", w)
        params[p + "conv3.weight"] = r.conv(4 * w, w, 1)
        bn(p + "bn3.", 4 * w, gamma=0.3)
        if b == 0:
            params[p + "downsample.0.weight"] = r.conv(4 * w, cin, 1)
            bn(p + "downsample.1.", 4 * w)
    params["fc.weight"] = r.linear(1000, 2048)
    params["fc.bias"] = 0.01 * torch.randn(1000, generator=r.g)
    torch.save({**params, **stats}, path)
    sd = torch.load(path, map_location="cpu", weights_only=True)
    return Replica(reference=lambda x: byol_features(sd, x), image_size=224, feature_dim=2048)
