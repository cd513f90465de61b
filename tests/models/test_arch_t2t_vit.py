"""T2T-ViT-t-14: the package's architecture against a replica of the authors' released checkpoint."""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import pytest
import torch
from replicas import Replica
from replicas.t2t_vit import authors_sinusoid_table, publish_t2t_vit_t_14

from cog_pl.models.arch.t2t_vit import build_t2t_vit_t_14


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Replica, dict]:
    path = tmp_path_factory.mktemp("t2t") / "81.7_T2T_ViTt_14.pth.tar"
    replica = publish_t2t_vit_t_14(path)
    with torch.serialization.safe_globals([argparse.Namespace]):
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    return path, replica, checkpoint


def _backbone(weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    model = build_t2t_vit_t_14()
    model.load_state_dict({k: v for k, v in weights.items() if not k.startswith("head.")}, strict=True)
    return model


def _relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got - ref).abs().max() / ref.abs().max()).item()


def test_replica_pickles_the_training_namespace(published):
    path, _, checkpoint = published
    with pytest.raises(pickle.UnpicklingError, match=r"argparse\.Namespace"):
        torch.load(path, map_location="cpu", weights_only=True)
    assert isinstance(checkpoint["args"], argparse.Namespace) and checkpoint["args"].model == "T2t_vit_t_14"
    assert list(checkpoint) == ["epoch", "arch", "state_dict", "optimizer", "version", "args", "amp_scaler",
                                "state_dict_ema", "metric"]
    assert checkpoint["state_dict_ema"]["head.weight"].shape == (1000, 384)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU-tagged storages load without map_location here")
def test_replica_is_tagged_with_the_publishers_gpu(published):
    path, _, _ = published
    with torch.serialization.safe_globals([argparse.Namespace]), pytest.raises(RuntimeError, match="CUDA"):
        torch.load(path, weights_only=True)


def test_state_dict_matches_the_authors_ema_keys(published):
    _, _, checkpoint = published
    expected = {k: tuple(v.shape) for k, v in checkpoint["state_dict_ema"].items() if not k.startswith("head.")}
    got = {k: tuple(v.shape) for k, v in build_t2t_vit_t_14().state_dict().items()}
    assert got == expected


def test_layer_norms_use_the_authors_epsilon():
    norms = [m for m in build_t2t_vit_t_14().modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 2 + 2 * 14 + 1 and {m.eps for m in norms} == {1e-5}  # nn.LayerNorm, not timm's 1e-6


def test_position_table_is_the_authors_sinusoid():
    torch.testing.assert_close(build_t2t_vit_t_14().pos_embed.detach(), authors_sinusoid_table(), atol=1e-6, rtol=0)


def test_features_of_the_ema_weights_equal_the_reference(published):
    _, replica, checkpoint = published
    images = torch.randn(2, 3, replica.image_size, replica.image_size, generator=torch.Generator().manual_seed(1))
    reference = replica.reference(images)
    with torch.no_grad():
        features = _backbone(checkpoint["state_dict_ema"])(images)
        raw_features = _backbone(checkpoint["state_dict"])(images)
    assert features.shape == (2, replica.feature_dim) and torch.isfinite(features).all()
    assert _relative_error(features, reference) < 1e-5
    assert _relative_error(raw_features, reference) > 0.1
