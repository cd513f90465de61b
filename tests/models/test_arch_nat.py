"""NAT-M4 built by cog_pl: the published config shipped unchanged, the published file's names, the paper's features."""

from __future__ import annotations

import hashlib

import pytest
import torch
import torch.nn.functional as F
from replicas.nat import CONFIG, publish_nat_m4, published_config

from cog_pl.models.arch.nat import build_nat_m4

#: git blob of subnets/imagenet/NAT-M4/net.config at human-analysis/neural-architecture-transfer@5aca00a1
PUBLISHED_BLOB = "88c9e0e1ffc1d39cab879b6d77d61f6848ac270b"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    path = tmp_path_factory.mktemp("nat") / "net.weights"
    return path, publish_nat_m4(path)


def _images(size: int, n: int = 2) -> torch.Tensor:
    """Normalised-looking images with coarse structure (pure noise pools to the same features for every image)."""
    gen = torch.Generator().manual_seed(size)
    coarse = F.interpolate(torch.randn(n, 3, 6, 6, generator=gen), size=(size, size), mode="bilinear")
    return 1.5 * coarse + 0.3 * torch.randn(n, 3, size, size, generator=gen)


def test_shipped_config_is_the_published_file():
    from importlib import resources

    data = (resources.files("cog_pl") / "assets" / CONFIG).read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == PUBLISHED_BLOB
    config = published_config()
    assert (config["img_size"], config["feature_mix_layer"]["out_channels"]) == (240, 1536)


def test_keys_and_shapes_are_the_published_ones_without_the_classifier(published):
    path, _ = published
    state = torch.load(path, map_location="cpu", weights_only=True)
    heads = [k for k in state if k.startswith("classifier.")]
    assert heads == ["classifier.linear.weight", "classifier.linear.bias"]
    body = {k: tuple(v.shape) for k, v in state.items() if k not in heads}
    assert {k: tuple(v.shape) for k, v in build_nat_m4().state_dict().items()} == body


@pytest.mark.parametrize("size", [240, 224])  # net.config's img_size; naver/cog's default crop (no nat_m4.yaml)
def test_features_equal_the_reference(published, size):
    path, replica = published
    state = torch.load(path, map_location="cpu", weights_only=True)
    model = build_nat_m4()
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith("classifier.")}, strict=True)
    model.eval()
    images = _images(size)
    with torch.no_grad():
        features = model(images)
    reference = replica.reference(images)
    assert features.shape == (2, replica.feature_dim) == (2, model.num_features)
    assert (features - reference).abs().max() / reference.abs().max() < 1e-5
    assert (reference[0] - reference[1]).abs().max() > 1e-2 * reference.abs().max()  # the images are told apart


def test_an_unsupported_layer_is_refused_by_name():
    config = published_config()
    config["blocks"][3]["mobile_inverted_conv"]["act_func"] = "gelu"
    with pytest.raises(ValueError, match=r"blocks\[3\]\.mobile_inverted_conv: activation 'gelu'"):
        build_nat_m4(config)
