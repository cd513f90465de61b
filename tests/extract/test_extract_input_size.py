"""A ``timm:<name>`` backbone is read at the input size timm configures it for (its ``pretrained_cfg``), not at
224 px: built and measured there, its images resized and cropped to it, its stores naming it; a network of one input
size (a ViT's fixed position embeddings) refuses another before any image is read, and one built with timm's
``dynamic_img_size`` or a CNN takes any."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import timm
import torch
from conftest_data import tiny  # noqa: F401 - fixture

from cog_pl.errors import CogError
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.module import FeatureExtractor
from cog_pl.features.store import open_store
from cog_pl.models import build_backbone
from cog_pl.models.build import RANDOM_SEED
from cog_pl.models.transform import resolve_transform

VIT_384 = "vit_tiny_patch16_384"


def _timm_reference(name: str) -> torch.nn.Module:
    """The network as timm builds it (``random_weights``: the fixed seed), for the reference features."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_SEED)
        return timm.create_model(name, pretrained=False, num_classes=0).eval()


def test_a_timm_vit_of_384_px_is_built_measured_and_extracted_at_384(tiny, tmp_path):  # noqa: F811
    cfg = timm.get_pretrained_cfg(VIT_384)  # timm's own facts: 384 px, fixed, crop_pct 1.0, mean/std 0.5
    size = cfg.input_size[-1]
    assert size == 384 and cfg.fixed_input_size
    backbone = build_backbone(f"timm:{VIT_384}", random_weights=True)  # failed at 224 px before
    ref = _timm_reference(VIT_384)
    assert backbone.spec.image_size == size and backbone.fixed_input
    assert backbone.spec.feature_dim == ref.num_features == 192
    transform = backbone.transform_config
    assert (transform.crop, transform.resize) == (size, int(size / cfg.crop_pct))
    assert transform.mean == tuple(cfg.mean) and transform.std == tuple(cfg.std)

    root = tiny.make_in1k(tmp_path / "in1k", n_train=1, n_val=1)
    model = FeatureExtractor(f"timm:{VIT_384}", random_weights=True)
    dm = ExtractionDataModule(out=str(tmp_path / "f"), model_name="m", in1k_root=str(root), domains=("in1k",),
                              splits=("test",), batch_size=3, num_workers=0)  # transform "auto": the model's
    L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
              enable_model_summary=False).predict(model, datamodule=dm, return_predictions=False)
    store = open_store(tmp_path / "f" / "m" / "in1k" / "test")
    assert store.meta["transform"]["crop"] == size and store.meta["transform"]["resize"] == size
    assert f", {size} px RGB, " in store.meta["definition"]  # the row's features identity names the size
    dataset, _ = dm.datasets("in1k")["test"]
    images = torch.stack([dataset[i]["image"] for i in range(len(dataset))])
    assert images.shape[-2:] == (size, size)
    with torch.inference_mode():
        np.testing.assert_allclose(np.asarray(store.features, np.float32), ref(images).numpy(), rtol=1e-2, atol=1e-2)

    tokens = FeatureExtractor(f"timm:{VIT_384}", random_weights=True, feature="tokens_full")
    grid = ref.patch_embed.grid_size[0]  # timm's patch grid at its 384 px: 24 x 24
    assert tokens.token_layout() == {"cls": 1, "grid": [grid, grid]} and tokens.feature_shape == (1 + grid**2, 192)
    assert tokens.store_meta(precision="32-true")["tokens"] == 1 + grid**2


def test_a_fixed_size_vit_refuses_another_input_size_before_reading_an_image(tmp_path):
    with pytest.raises(CogError, match=r"vit_tiny_patch16_384 \(timm:vit_tiny_patch16_384\) takes 384 px images "
                                       r"only .*not 224 px: .*dynamic_img_size=True"):
        FeatureExtractor(f"timm:{VIT_384}", random_weights=True, transform=224)
    model = FeatureExtractor(f"timm:{VIT_384}", random_weights=True)
    with pytest.raises(CogError, match="takes 384 px images only"):  # a datamodule's transform of another size
        model.store_meta(precision="32-true", transform=resolve_transform(224))


def test_run_image_size_of_another_size_is_refused_before_extraction(tmp_path):
    from cog_pl.pipeline import RunConfig
    from cog_pl.pipeline.stages import extract as run_extract

    (tmp_path / "in1k").mkdir()
    cfg = RunConfig(model=f"timm:{VIT_384}", random_weights=True, in1k_root=str(tmp_path / "in1k"), in21k_root=None,
                    out=str(tmp_path / "run"), domains=("in1k",), progress=False, transform=resolve_transform(224))
    cfg.extract.accelerator, cfg.extract.devices = "cpu", 1
    with pytest.raises(CogError, match="takes 384 px images only"):
        run_extract(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "features").exists()


def test_a_dynamic_size_vit_and_a_cnn_of_their_own_size_take_another():
    vit = timm.get_pretrained_cfg("test_vit")  # timm's test ViT: 160 px, built with dynamic_img_size=True
    assert vit.input_size[-1] == 160 and _timm_reference("test_vit").dynamic_img_size
    model = FeatureExtractor("timm:test_vit", random_weights=True, transform=224, feature="tokens_full")
    assert model.backbone.spec.image_size == 160 and not model.backbone.fixed_input
    assert model.token_layout() == {"cls": 1, "grid": [224 // 16, 224 // 16]}
    with torch.inference_mode():
        assert model(torch.zeros(2, 3, 224, 224)).shape == (2, 1 + 14 * 14, 64)

    from cog_pl.models.registry import USER_LAYOUT, BackboneSpec, register_backbone, unregister_backbone

    register_backbone("vit384_at224", BackboneSpec(  # the docs' way to read a fixed-size ViT at another size
        "vit384_at224", f"timm:{VIT_384}", feature_dim=-1, image_size=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
        layout=USER_LAYOUT, timm_kwargs={"dynamic_img_size": True}))
    try:
        model = FeatureExtractor("vit384_at224", random_weights=True)
        assert model.transform_config.crop == 224 and not model.backbone.fixed_input
        with torch.inference_mode():
            assert model(torch.zeros(1, 3, 224, 224)).shape == (1, 192)
    finally:
        unregister_backbone("vit384_at224")

    cnn = timm.get_pretrained_cfg("test_resnet")  # a CNN whose own input is 160 px
    backbone = build_backbone("timm:test_resnet", random_weights=True)
    assert backbone.spec.image_size == cnn.input_size[-1] == 160 and not backbone.fixed_input
    assert backbone.transform_config.crop == 160
    assert ", 160 px RGB, " in backbone.spec.definition()
    model = FeatureExtractor("timm:test_resnet", random_weights=True, transform=224)
    assert model.store_meta(precision="32-true")["transform"]["crop"] == 224


def test_models_check_measures_a_384_px_file_at_384(tmp_path):
    from cog_pl.cli.models import check_file

    file = tmp_path / "vit384.pth"
    torch.save(_timm_reference(VIT_384).state_dict(), file)
    facts = check_file(f"timm:{VIT_384}", file)
    assert facts["image_size"] == 384 and facts["feature_dim"] == 192 and ", 384 px RGB, " in facts["definition"]
