"""Evaluation transforms: protocol default, per-model values, timm's resolved config (one rule for a model)."""

import numpy as np
import pytest
import torch
from PIL import Image

from cog_pl.data.transforms import TransformConfig, build_transform
from cog_pl.models.transform import backbone_transform, resolve_transform, timm_transform


def test_protocol_default_resizes_crops_and_normalises():
    cfg = resolve_transform("protocol")
    assert (cfg.crop, cfg.resize, cfg.interpolation) == (224, 224, "bicubic")
    img = Image.fromarray(np.full((300, 500, 3), 255, dtype=np.uint8))
    x = build_transform(cfg)(img)
    assert x.shape == (3, 224, 224)
    expected = (1 - torch.tensor(cfg.mean)) / torch.tensor(cfg.std)
    assert torch.allclose(x[:, 100, 100], expected, atol=1e-4)


def test_center_crop_keeps_the_middle_of_the_shortest_side_resize():
    arr = np.zeros((100, 300, 3), dtype=np.uint8)
    arr[:, 100:200] = 255  # the middle third is white
    x = build_transform(TransformConfig(crop=50, resize=50, mean=(0, 0, 0), std=(1, 1, 1)))(Image.fromarray(arr))
    assert x.shape == (3, 50, 50) and x[:, :, 5:45].min() > 0.95  # resized to 50 x 150, crop = the white band


@pytest.mark.parametrize("name,size,mean0", [("inception_v3", 299, 0.485), ("deit_b_distilled", 384, 0.485),
                                             ("efficientnet_b1", 240, 0.485), ("efficientnet-b4", 380, 0.485),
                                             ("clip", 224, 0.48145466),  # naver/cog configs/clip.yaml
                                             ("simclr_v2", 224, 0.0), ("resnet50", 224, 0.485)])
def test_per_model_values_of_the_protocol(name, size, mean0):
    cfg = backbone_transform(name)
    assert cfg.crop == cfg.resize == size and cfg.mean[0] == mean0
    if name == "simclr_v2":
        assert cfg.std == (1.0, 1.0, 1.0)


def test_timm_resolved_config_keeps_its_crop_fraction():
    cfg = timm_transform("resnet50.a1_in1k")  # timm: 224 crop at crop_pct 0.95
    assert (cfg.crop, cfg.resize) == (224, 235)
    assert resolve_transform("timm:vit_base_patch16_224.augreg_in21k").mean == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match=r"resize \(200\) is smaller than crop \(224\)"):
        TransformConfig(crop=224, resize=200)
    with pytest.raises(ValueError, match="interpolation='lanczos9'"):
        TransformConfig(interpolation="lanczos9")


def test_a_built_backbone_and_its_name_get_the_same_transform():
    """The extraction (a built backbone) and a datamodule given the model's name read images the same way."""
    from cog_pl.models import build_backbone

    for name in ("inception_v3", "timm:resnet18", "torchvision:resnet18"):
        assert build_backbone(name).transform_config == resolve_transform(name), name
    assert backbone_transform("torchvision:resnet18") == resolve_transform("protocol")


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 39 s (a fresh interpreter)
def test_data_transforms_does_not_import_the_models():
    import subprocess
    import sys

    code = "import sys, cog_pl.data.transforms; print(any(m.startswith('cog_pl.models') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
