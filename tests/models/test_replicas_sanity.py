"""The replicas of the published files themselves: each file reads back safely and its reference gives features."""

from __future__ import annotations

import argparse
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from replicas import deit, torchvision_family
from replicas.torchvision_family import SAFE_GLOBALS

PUBLISHERS: dict[str, Callable] = torchvision_family.PUBLISHERS | deit.PUBLISHERS
#: files over ~120 MB (the ResNet-50 files are ~100 MB; every replica publishes in under ~5 s on 2 cores)
SLOW = {"resnet152", "vgg19", "moco_v2", "infomin", "mochi", "obow", "compress", "mopro", "deit_b_distilled"}
#: replicas whose publisher's learning-rate code leaves a numpy 1.x float64 in the optimizer state
NUMPY_SCALARS = {"compress", "relabel"}


def _cases() -> list:
    return [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [], id=name) for name in PUBLISHERS]


@pytest.fixture
def published(request: pytest.FixtureRequest, tmp_path: Path):
    path = tmp_path / f"{request.param}.pth"
    replica = PUBLISHERS[request.param](path, seed=0)
    yield path, replica
    path.unlink(missing_ok=True)


@pytest.mark.parametrize("published", _cases(), indirect=True)
def test_replica_reads_with_weights_only_and_gives_features(published):
    path, replica = published
    if replica.needs_trust:
        with pytest.raises(pickle.UnpicklingError):
            torch.load(path, map_location="cpu", weights_only=True)
    else:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        assert checkpoint
    images = torch.randn(1, 3, replica.image_size, replica.image_size, generator=torch.Generator().manual_seed(0))
    features = replica.reference(images)
    assert features.shape == (1, replica.feature_dim)
    assert torch.isfinite(features).all()


@pytest.mark.parametrize("name", sorted(NUMPY_SCALARS))
def test_numpy_1_scalars_need_their_old_global_name(name: str, tmp_path: Path):
    path = tmp_path / f"{name}.pth"
    PUBLISHERS[name](path, seed=0)
    with pytest.raises(pickle.UnpicklingError, match="numpy.core.multiarray.scalar"):
        with torch.serialization.safe_globals([argparse.Namespace]):
            torch.load(path, map_location="cpu", weights_only=True)
    path.unlink()


def test_dill_saved_adv_robust_reads_with_weights_only(tmp_path: Path):
    path = tmp_path / "resnet50_l2_eps0.1.ckpt"
    torchvision_family.publish_adv_robust(path)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = checkpoint["model"]
    assert list(checkpoint) == ["model", "optimizer", "schedule", "epoch", "amp"] and checkpoint["amp"] == "N/A"
    # the attacker holds the same network object: same storage in the file
    assert model["module.attacker.model.conv1.weight"].data_ptr() == model["module.model.conv1.weight"].data_ptr()
    path.unlink()


def test_legacy_files_key_the_optimizer_by_python_ids(tmp_path: Path):
    path = tmp_path / "cutmix.pth.tar"
    torchvision_family.publish_cutmix(path)
    with pytest.raises(RuntimeError, match="mmap"):
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    ids = checkpoint["optimizer"]["param_groups"][0]["params"]
    assert len(ids) == 161 and min(ids) > 2**40 and set(checkpoint["optimizer"]["state"]) <= set(ids)
    assert all(k.startswith("module.") for k in checkpoint["state_dict"])
    path.unlink()
