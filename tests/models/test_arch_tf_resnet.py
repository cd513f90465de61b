"""The SimCLR-v2 and BYOL ResNet-50s read from replicas of their converted files give the paper's features."""

from __future__ import annotations

import re

import pytest
import torch
from replicas.tf_resnet import publish_byol, publish_simclr_v2
from torch import nn
from torchvision.models import resnet50

from cog_pl.models.arch.tf_resnet import (
    SIMCLR_V2_TO_TORCHVISION,
    build_byol_resnet50,
    build_simclr_v2_resnet50,
    pad_same,
)

pytestmark = pytest.mark.slow  # two ResNet-50 files of ~100 MB and a few CPU forwards: about half a minute


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a - ref).abs().max() / ref.abs().max()).item()


def _images(n: int = 2, size: int = 224, seed: int = 1) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _load(model: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    model.load_state_dict(state, strict=True)
    return model.eval()


def _rename(key: str) -> str:
    for pattern, repl in SIMCLR_V2_TO_TORCHVISION:
        key = re.sub(pattern, repl, key)
    return key


@pytest.fixture(scope="module")
def simclr(tmp_path_factory):
    path = tmp_path_factory.mktemp("simclr") / "r50_1x_sk0.pth"
    replica = publish_simclr_v2(path)
    resnet = torch.load(path, map_location="cpu", weights_only=True)["resnet"]
    backbone = {_rename(k): v for k, v in resnet.items() if not k.startswith("fc.")}
    return replica, resnet, backbone, _load(build_simclr_v2_resnet50(), backbone)


@pytest.fixture(scope="module")
def byol(tmp_path_factory):
    path = tmp_path_factory.mktemp("byol") / "pretrain_res50x1.pth.tar"
    replica = publish_byol(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    backbone = {k: v for k, v in state.items() if not k.startswith("fc.")}
    return replica, state, backbone, _load(build_byol_resnet50(), backbone)


def test_simclr_key_map_reaches_every_backbone_tensor(simclr):
    _, resnet, backbone, model = simclr
    assert len(backbone) == len(resnet) - 2  # only fc.weight and fc.bias are left out
    assert all(k.startswith(("conv1.", "bn1.", "layer")) for k in backbone)
    loaded = model.state_dict()
    assert set(loaded) == set(backbone)
    for key, value in backbone.items():
        assert torch.equal(loaded[key], value), key


def test_simclr_features_equal_the_converters_forward(simclr):
    replica, _, _, model = simclr
    x = _images()  # raw [0, 1] pixels: SimCLR-v2 takes no normalisation
    with torch.no_grad():
        ours, ref = model(x), replica.reference(x)
    assert ours.shape == ref.shape == (2, replica.feature_dim)
    assert _rel(ours, ref) <= 1e-5


def test_byol_file_loads_into_the_builder(byol):
    _, state, backbone, model = byol
    assert {"fc.weight", "fc.bias"} <= set(state) and not any("num_batches_tracked" in k for k in state)
    loaded = model.state_dict()
    assert set(loaded) - set(backbone) == {k for k in loaded if k.endswith("num_batches_tracked")}
    for key, value in backbone.items():
        assert torch.equal(loaded[key], value), key


@pytest.mark.parametrize("size", [224, 97])  # 97: odd sizes pad differently, the padding follows the input
def test_byol_features_equal_the_converters_forward(byol, size):
    replica, _, _, model = byol
    x = (_images(size=size) - torch.tensor([0.485, 0.456, 0.406])[:, None, None]) / torch.tensor(
        [0.229, 0.224, 0.225])[:, None, None]
    with torch.no_grad():
        ours, ref = model(x), replica.reference(x)
    assert ours.shape == ref.shape == (2, replica.feature_dim)
    assert _rel(ours, ref) <= 1e-5


def test_byol_symmetric_padding_gives_other_features(byol):
    """Plain torchvision padding is not what the paper computed: the TensorFlow SAME spec is needed."""
    replica, _, backbone, _ = byol
    plain = resnet50()
    plain.fc = nn.Identity()
    _load(plain, backbone)
    x = _images()
    with torch.no_grad():
        assert _rel(plain(x), replica.reference(x)) > 1e-2


def test_pad_same_is_tensorflows():
    x = torch.ones(1, 1, 224, 224)
    assert pad_same(x, (7, 7), (2, 2)).shape[-2:] == (229, 229)  # 2 before, 3 after
    y = pad_same(torch.ones(1, 1, 112, 112), (3, 3), (2, 2))
    assert y.shape[-2:] == (113, 113) and y[0, 0, :112, :112].all()  # 0 before, 1 after
    assert y[0, 0, -1].sum() == 0 and y[0, 0, :, -1].sum() == 0
    assert pad_same(torch.ones(1, 1, 7, 7), (1, 1), (2, 2)).shape[-2:] == (7, 7)  # 1x1 never pads
