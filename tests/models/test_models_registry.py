"""Backbones on the shared registry: a name registered once is built by every caller (the API, a LightningCLI config,
an installed package's entry point), and an unknown name is refused in one line that suggests the closest."""

from __future__ import annotations

import sys

import pytest
import torch
import yaml
from conftest_data import tiny  # noqa: F401 - fixture
from torch import nn

from cog_pl import FeatureExtractor, build_backbone, list_backbones, register_backbone
from cog_pl.cli.main import main
from cog_pl.errors import UnknownNameError
from cog_pl.features.store import is_complete
from cog_pl.models import PAPER_MODELS, registry, resolve_spec, unregister_backbone, zoo


def _cnn(width: int = 6) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, width, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())


@pytest.fixture
def my_cnn():
    spec = register_backbone("my_cnn", _cnn, image_size=32)
    yield spec
    unregister_backbone("my_cnn")


def test_the_table_holds_the_paper_models_first():
    names = list_backbones()
    assert names[:31] == list(PAPER_MODELS) and "efficientnet_lite0" in names
    assert list_backbones("self-supervised")[:2] == ["simclr_v2", "moco_v2"]


def test_every_listed_name_is_built_and_an_unlisted_one_is_refused(my_cnn):
    """``list_backbones()`` lists exactly what ``build_backbone`` accepts by name: each listed name is its table
    entry, whose builder is found (the paper's models' too, without building them); the demo's CNNs and a registered
    builder build by name; a name not listed is refused, suggesting the closest listed one."""
    from cog_pl.models.build import find_builder

    names = list_backbones()
    assert {"demo_cnn", "demo_cnn_ssl", "efficientnet_lite0", "my_cnn"} <= set(names) and len(set(names)) == len(names)
    for name in names:
        spec = resolve_spec(name)
        assert spec is zoo.BACKBONES.get(name) and spec.name == name
        assert callable(find_builder(spec)), name
    for name in ("demo_cnn", "demo_cnn_ssl", "my_cnn"):
        backbone = build_backbone(name)
        assert backbone.spec.name == name and backbone.spec.feature_dim > 0
    assert build_backbone("demo_cnn").spec.definition() == build_backbone("external:demo_cnn").spec.definition()
    assert type(build_backbone("demo_cnn").model).__name__ == "DemoCNN"
    for unlisted, close in (("demo_cnm", "demo_cnn"), ("cog:nat_m4", "nat_m4"), ("my_cnn2", "my_cnn")):
        with pytest.raises(UnknownNameError, match=f"unknown model '{unlisted}'; did you mean '{close}'\\?"):
            build_backbone(unlisted)


def test_a_registered_builder_is_built_by_name(my_cnn):
    assert "my_cnn" in list_backbones() and list_backbones("user") == ["my_cnn"]
    backbone = build_backbone("my_cnn")
    assert backbone.spec.feature_dim == 6 and backbone.spec.image_size == 32 and not backbone.model.training
    extractor = FeatureExtractor(model="my_cnn")
    assert extractor.feature_dim == 6 and extractor(torch.zeros(2, 3, 32, 32)).shape == (2, 6)
    assert build_backbone("external:my_cnn").spec.feature_dim == 6  # the architecture's name works too


def test_a_taken_or_prefixed_name_is_refused(my_cnn):
    with pytest.raises(ValueError, match="'my_cnn' is already registered"):
        register_backbone("my_cnn", _cnn)
    with pytest.raises(ValueError, match="has no prefix"):
        register_backbone("timm:mine", _cnn)
    register_backbone("my_cnn", lambda: _cnn(4), replace=True)
    assert build_backbone("my_cnn").spec.feature_dim == 4


def test_a_spec_registers_under_its_new_name():
    register_backbone("resnet50_alias", PAPER_MODELS["resnet50"])
    try:
        assert resolve_spec("resnet50_alias").arch == "torchvision:resnet50"
    finally:
        unregister_backbone("resnet50_alias")


def test_an_unknown_name_suggests_the_closest(my_cnn):
    with pytest.raises(UnknownNameError, match="unknown model 'resnet51'; did you mean 'resnet50'\\?"):
        resolve_spec("resnet51")
    with pytest.raises(UnknownNameError, match="did you mean 'my_cnn'\\?"):
        build_backbone("my_ccn")
    assert main(["models", "check", "dnio", __file__]) == 2


def test_an_unknown_name_on_the_command_line_is_one_line(capsys):
    assert main(["extract", "--model.model", "deit_ss", "--data.out", "unused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cog-pl extract: error: unknown model 'deit_ss'; did you mean 'deit_s'?")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """An installed package whose ``cog_pl.backbones`` entry point names a builder."""
    site = tmp_path / "site"
    (site / "cog_plugin_demo-0.1.dist-info").mkdir(parents=True)
    (site / "cog_plugin_demo-0.1.dist-info" / "METADATA").write_text("Name: cog-plugin-demo\nVersion: 0.1\n")
    (site / "cog_plugin_demo-0.1.dist-info" / "entry_points.txt").write_text(
        "[cog_pl.backbones]\nplugin_cnn = cog_plugin_demo:build\n")
    (site / "cog_plugin_demo.py").write_text(
        "from torch import nn\n\n\ndef build():\n"
        "    return nn.Sequential(nn.Conv2d(3, 5, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    yield "plugin_cnn"
    if "plugin_cnn" in zoo.BACKBONES:
        unregister_backbone("plugin_cnn")
    sys.modules.pop("cog_plugin_demo", None)


def test_an_entry_point_backbone_is_found_on_first_use(plugin):
    assert build_backbone(plugin).spec.feature_dim == 5
    assert plugin in list_backbones("user")


def test_a_registered_backbone_extracts_from_a_cli_config(plugin, tiny, tmp_path):  # noqa: F811
    in1k, in21k = tiny.make_in1k(tmp_path / "in1k", n_val=3), tiny.make_in21k(tmp_path / "in21k", layout="tar")
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"model": plugin},
        "data": {"in1k_root": str(in1k), "in21k_root": str(in21k), "out": str(tmp_path / "features"),
                 "num_workers": 0, "batch_size": 4, "domains": ["in1k", "cog_l1"]},
        "trainer": {"accelerator": "cpu", "devices": 1}}))
    assert main(["extract", "--config", str(config)]) == 0
    assert is_complete(tmp_path / "features" / plugin / "cog_l1" / "train")
