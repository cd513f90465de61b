"""What ``transform="auto"`` finds (cog_pl.callbacks.eval_input): plain functions, no Trainer."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torchvision import transforms as T
from torchvision.transforms import v2

from cog_pl.callbacks.eval_input import declared_transform, describe, from_torchvision, image_size
from cog_pl.data.transforms import TransformConfig, protocol_transform

NORM = T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def test_a_torchvision_pipeline_gives_its_sizes_and_normalisation():
    evaluation = T.Compose([T.Resize(36), T.CenterCrop(32), T.ToTensor(), NORM])
    assert from_torchvision(evaluation) == TransformConfig(32, 36, mean=(0.5,) * 3, std=(0.25,) * 3)
    views = T.Compose([T.Compose([T.RandomResizedCrop((24, 24)), T.ToTensor()]), T.Compose([T.RandomCrop(24)])])
    assert from_torchvision(views) == TransformConfig(24, 24)  # lightly's multi-view: the first view's, ImageNet's
    assert from_torchvision(T.Compose([T.ToTensor(), NORM])) is None  # no size: not a declaration


def test_a_torchvision_v2_pipeline_gives_its_sizes_and_normalisation():
    evaluation = v2.Compose([v2.Resize(36), v2.CenterCrop(32), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                             v2.Normalize((0.5,) * 3, (0.25,) * 3)])
    assert from_torchvision(evaluation) == TransformConfig(32, 36, mean=(0.5,) * 3, std=(0.25,) * 3)
    jitter = v2.RandomApply(torch.nn.ModuleList([v2.ColorJitter(0.4)]), p=0.8)  # a step holding a ModuleList
    assert from_torchvision(v2.Compose([v2.RandomResizedCrop((24, 24)), jitter, v2.ToImage()])) == \
        TransformConfig(24, 24)
    assert declared_transform(SimpleNamespace(transform=evaluation), None)[1] == "the datamodule's transform"
    assert describe(evaluation, (32, 32)) == (
        "32x32 px by the given Compose, normalised with mean (0.5, 0.5, 0.5) std (0.25, 0.25, 0.25)")


def test_the_order_transform_config_then_input_size_then_datamodule_transform():
    config = TransformConfig(40, 48)
    module = SimpleNamespace(hparams={"input_size": (3, 64, 64)})
    data = SimpleNamespace(val_transform=T.Compose([T.Resize(28), T.CenterCrop(28)]), img_size=None)
    assert declared_transform(SimpleNamespace(transform_config=config), module) == (
        config, "the datamodule's transform_config")
    assert declared_transform(data, module)[1] == "the module's hparams.input_size"
    assert declared_transform(data, module)[0].crop == 64
    assert declared_transform(data, SimpleNamespace()) == (TransformConfig(28, 28), "the datamodule's val_transform")
    default, source = declared_transform(None, SimpleNamespace(input_size=lambda: 3))  # a method: not a size
    assert default == protocol_transform() and source.startswith("the protocol's default")


def test_the_training_image_size_of_any_batch_layout():
    x = torch.zeros(2, 3, 24, 20)
    assert image_size({"image": x, "label": torch.zeros(2)}) == (24, 20)
    assert image_size(([x, x[..., :10, :10]], torch.zeros(2), ["a.jpg"])) == (24, 20)  # lightly: (views, y, names)
    assert image_size((torch.zeros(2, 5), torch.zeros(2))) is None


def test_the_setup_line_names_size_and_normalisation():
    assert describe(TransformConfig(32, 36), (32, 32)) == (
        "32 px (resize 36 bicubic, center crop 32), normalised with mean (0.485, 0.456, 0.406) "
        "std (0.229, 0.224, 0.225)")
    assert describe(T.Compose([T.Resize(24), T.ToTensor(), NORM]), (24, 24)) == (
        "24x24 px by the given Compose, normalised with mean (0.5, 0.5, 0.5) std (0.25, 0.25, 0.25)")
