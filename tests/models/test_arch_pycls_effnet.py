"""pycls's EfficientNet-B1 / -B4 zoo files read into timm's EfficientNets give pycls's BGR features."""

from __future__ import annotations

import pytest
import torch
from replicas.pycls_effnet import publish_efficientnet_b1, publish_efficientnet_b4

from cog_pl.models.arch.pycls_effnet import build_efficientnet_b1, build_efficientnet_b4, pycls_to_timm
from cog_pl.models.build import BGRInput


def build_pycls_efficientnet(variant: str) -> BGRInput:
    """The network as the zoo builds it for RGB input (``bgr=True``)."""
    return BGRInput({"b1": build_efficientnet_b1, "b4": build_efficientnet_b4}[variant]())

PUBLISHERS = {"b1": publish_efficientnet_b1, "b4": publish_efficientnet_b4}


def _backbone(checkpoint: dict) -> dict[str, torch.Tensor]:
    """``model_state`` without the classifier, renamed onto timm's names."""
    return pycls_to_timm({k: v for k, v in checkpoint["model_state"].items() if not k.startswith("head.fc.")})


@pytest.fixture(scope="module", params=["b1", pytest.param("b4", marks=pytest.mark.slow)])
def published(request, tmp_path_factory):
    variant = request.param
    path = tmp_path_factory.mktemp(variant) / f"EN-{variant.upper()}_dds_8gpu.pyth"
    replica = PUBLISHERS[variant](path, seed=0)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    return variant, replica, checkpoint


def test_file_is_pycls_checkpoint(published):
    _, _, checkpoint = published
    assert set(checkpoint) == {"epoch", "model_state", "optimizer_state", "cfg"}
    assert checkpoint["epoch"] == 99 and set(checkpoint["optimizer_state"]) == {"state", "param_groups"}
    assert isinstance(checkpoint["cfg"], str) and "TYPE: effnet" in checkpoint["cfg"]  # cfg.dump(): YAML text
    heads = {"head.fc.weight", "head.fc.bias"}
    assert heads | {"stem.conv.weight", "s1.b1.dwise.weight", "s2.b1.exp.weight"} <= set(checkpoint["model_state"])


def test_key_map_is_one_to_one(published):
    variant, _, checkpoint = published
    source = {k: v for k, v in checkpoint["model_state"].items() if not k.startswith("head.fc.")}
    renamed = dict(zip(pycls_to_timm(dict.fromkeys(source)), source))  # timm name -> pycls name
    model = build_pycls_efficientnet(variant).net
    own = model.state_dict()
    assert len(renamed) == len(source)  # no two pycls tensors land on one timm name
    assert set(renamed) == set(own)
    assert all(own[k].shape == source[renamed[k]].shape for k in own)
    model.load_state_dict({k: source[p] for k, p in renamed.items()}, strict=True)
    loaded = model.state_dict()
    assert all(torch.equal(loaded[k], source[p]) for k, p in renamed.items())


def test_features_equal_pycls(published):
    variant, replica, checkpoint = published
    model = build_pycls_efficientnet(variant)
    model.net.load_state_dict(_backbone(checkpoint), strict=True)
    model.eval()
    images = torch.randn(2, 3, replica.image_size, replica.image_size, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ours, ref = model(images), replica.reference(images)
        rgb = model.net(images)  # the same network fed RGB: what the flip changes
    assert ours.shape == ref.shape == (2, replica.feature_dim)
    assert ((ours - ref).abs().max() / ref.abs().max()).item() < 1e-5
    assert ((rgb - ref).abs().max() / ref.abs().max()).item() > 1e-3


def test_bare_network_takes_bgr():
    wrapped, bare = build_pycls_efficientnet("b1").eval(), build_efficientnet_b1().eval()
    bare.load_state_dict(wrapped.net.state_dict(), strict=True)
    images = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        assert torch.equal(bare(torch.flip(images, [1])), wrapped(images))
