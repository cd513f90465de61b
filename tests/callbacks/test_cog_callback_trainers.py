"""CoGEvaluationCallback under both Lightning packages' Trainers (issue 39, items 7, 8, 9, 11): the transform it reads
with, said at setup and taken from what the module or datamodule declares, with a warning when it differs from the
training images; ``precision="bf16-true"``; the ``pytorch_lightning`` import path from a LightningCLI YAML and from
Python; one console line per evaluation. Tiny modules on random 32 px batches, one level, a probe of 2 epochs."""

from __future__ import annotations

import importlib
import sys
import warnings

import lightning.pytorch as lpl
import pytest
import pytorch_lightning as ppl
import torch
import torch.nn.functional as F
from torch import nn
from torchvision import transforms as T
from torchvision.transforms import v2

from cog_pl.callbacks.pytorch_lightning import CoGEvaluationCallback
from cog_pl.data.transforms import TransformConfig
from cog_pl.demo.synthetic import make_demo

PACKAGES = {"lightning": lpl, "pytorch_lightning": ppl}
SIZE_WARNING = "CoGEvaluationCallback: the evaluation reads images at"


@pytest.fixture(scope="module")
def bench(onto, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    return root, make_demo(root, n_seen=4, n_per_level=3, train_per_concept=10, test_per_concept=4, image_size=32,
                           onto=onto)


def _batches(size: int, n: int = 16) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [{"image": torch.randn(3, size, size, generator=g), "label": i % 4} for i in range(n)]


class _Tiny:
    """A third-party module: its own ``backbone``, its own loader of ``images`` px batches, maybe an ``input_size``
    hyperparameter (lightly's modules take one)."""

    def __init__(self, input_size: int | None = None, images: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten())
        self.head = nn.Linear(8, 4)

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.head(self.backbone(batch["image"])), batch["label"])

    def train_dataloader(self):
        return torch.utils.data.DataLoader(_batches(self.hparams.images), batch_size=8)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class LightningNet(_Tiny, lpl.LightningModule):
    pass


class PLNet(_Tiny, ppl.LightningModule):
    pass


NETS = {"lightning": LightningNet, "pytorch_lightning": PLNet}


def _callback(bench, **kw) -> CoGEvaluationCallback:
    root, path = bench
    kw = {"domains": ("l1",), "concepts": 3, "train_images": 10, "test_images": 4, "epochs": 2, **kw}
    return CoGEvaluationCallback(in1k_root=str(root / "in1k"), in21k_root=str(root / "in21k"), benchmark=str(path),
                                 **kw)


def _fit(package: str, cog, model=None, datamodule=None, epochs: int = 1, **trainer_kw):
    pl = PACKAGES[package]
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", callbacks=[cog], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         limit_train_batches=2, **trainer_kw)
    trainer.fit(model or NETS[package](), datamodule=datamodule)
    return trainer


def _transform_line(lines: list[str]) -> str:
    found = [line for line in lines if line.startswith("CoGEvaluationCallback: images read at")]
    assert len(found) == 1, lines
    return found[0]


# -- item 7: the transform, visible at setup, taken from what the run declares ----------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_auto_transform_takes_the_modules_input_size_and_says_so_at_setup(bench, package, lines):
    cog = _callback(bench)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(package, cog, NETS[package](input_size=32))
    assert cog.image_size == (32, 32)  # not the protocol's 224 px
    line = _transform_line(lines)
    assert "32 px" in line and "mean (0.485, 0.456, 0.406) std (0.229, 0.224, 0.225)" in line
    assert line.endswith("from the module's hparams.input_size")
    assert not [w for w in caught if SIZE_WARNING in str(w.message)]  # the sizes agree


class _Data:
    """A third-party datamodule with a torchvision training transform (24 px, its own normalisation)."""

    train_transform = T.Compose([T.RandomResizedCrop(24), T.ToTensor(), T.Normalize((0.5,) * 3, (0.25,) * 3)])

    def train_dataloader(self):
        return torch.utils.data.DataLoader(_batches(24), batch_size=8)


class _DataV2(_Data):
    """The same with a torchvision v2 pipeline, as torchvision now recommends (its classes are not v1's)."""

    train_transform = v2.Compose([v2.RandomResizedCrop(24), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                                  v2.Normalize((0.5,) * 3, (0.25,) * 3)])


DATA = {(name, api): type(f"Data_{name}_{api}", (base, pl.LightningDataModule), {})
        for name, pl in PACKAGES.items() for api, base in (("v1", _Data), ("v2", _DataV2))}


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize("package", PACKAGES)
def test_auto_transform_takes_the_datamodules_torchvision_transform(bench, package, api, lines):
    cog = _callback(bench)
    trainer = _fit(package, cog, datamodule=DATA[package, api]())
    assert cog.image_size == (24, 24)  # not the protocol's 224 px
    assert cog.eval_transform(trainer, trainer.lightning_module) == TransformConfig(24, 24, mean=(0.5,) * 3,
                                                                                    std=(0.25,) * 3)
    line = _transform_line(lines)
    assert "24 px" in line and "mean (0.5, 0.5, 0.5) std (0.25, 0.25, 0.25)" in line
    assert line.endswith("from the datamodule's train_transform")


@pytest.mark.parametrize("package", PACKAGES)
def test_a_transform_other_than_the_training_images_is_warned_about(bench, package, lines):
    cog = _callback(bench, every_n_epochs=0, at_fit_end=False)  # the warning needs no evaluation
    with pytest.warns(UserWarning, match=f"{SIZE_WARNING} 224x224 px but the training batches are 32x32 px; pass "
                                         "transform=32"):
        _fit(package, cog)  # declares nothing: the protocol's 224 px
    assert "the protocol's default" in _transform_line(lines)


# -- item 8: precision="bf16-true" ------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_bf16_true_precision_evaluates_in_the_modules_dtype(bench, package):
    cog = _callback(bench, transform=32)
    model = NETS[package]()
    trainer = _fit(package, cog, model, precision="bf16-true")
    assert next(model.backbone.parameters()).dtype == torch.bfloat16  # the Trainer cast the weights
    assert [h["epoch"] for h in cog.history] == [0] and 0 <= cog.history[0]["cog/l1/top1"] <= 1
    assert "cog/l1/top1" in trainer.callback_metrics


# -- item 9: the pytorch_lightning import path, from YAML and from Python -----------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_a_lightningcli_of_either_package_takes_the_callback_from_yaml(bench, package, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py"])  # the CLI reads its args= only
    root, path = bench
    cfg = tmp_path / "cog.yaml"
    cfg.write_text(f"""
trainer:
  max_epochs: 1
  limit_train_batches: 2
  accelerator: cpu
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  enable_model_summary: false
  callbacks:
    - class_path: cog_pl.callbacks.pytorch_lightning.CoGEvaluationCallback
      init_args:
        in1k_root: {root / "in1k"}
        in21k_root: {root / "in21k"}
        benchmark: {path}
        domains: [l1]
        concepts: 3
        train_images: 10
        test_images: 4
        epochs: 2
model:
  class_path: test_cog_callback_trainers.{NETS[package].__name__}
  init_args:
    input_size: 32
""")
    cli = importlib.import_module(f"{package}.cli" if package != "lightning" else "lightning.pytorch.cli")
    run = cli.LightningCLI(args=["fit", "--config", str(cfg)], save_config_callback=None)
    assert type(run.trainer).__module__.startswith(package + ".")
    assert "cog/l1/top1" in run.trainer.callback_metrics


@pytest.mark.parametrize("package", PACKAGES)
def test_the_pytorch_lightning_import_trains_under_either_trainer_from_python(bench, package):
    cog = _callback(bench, transform=32)
    assert isinstance(cog, PACKAGES[package].Callback)
    trainer = _fit(package, cog)
    assert "cog/l1/top1" in trainer.callback_metrics


# -- item 11: one console line per evaluation ---------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_each_evaluation_prints_one_line_of_the_levels_top1(bench, package, lines):
    cog = _callback(bench, transform=32, domains=("in1k", "l1", "l5"))
    _fit(package, cog, epochs=2)
    printed = [line for line in lines if line.startswith("CoG ")]
    assert len(printed) == 2 == len(cog.history)
    for line, h in zip(printed, cog.history):
        assert line.startswith(f"CoG top-1 at epoch {h['epoch']}: in1k {h['cog/in1k/top1']:.3f}  "
                               f"l1 {h['cog/l1/top1']:.3f}  l5 {h['cog/l5/top1']:.3f} (")


def test_the_line_names_the_knn_when_only_the_knn_ran():
    from cog_pl.callbacks.cog_eval import summary_line

    line = summary_line(3, {"cog/l1/knn_top1": 0.5, "cog/l5/knn_top1": 0.25}, 1.25, method="knn")
    assert line == "CoG k-NN top-1 at epoch 3: l1 0.500  l5 0.250 (1.2 s)"
    both = {"cog2/l1/top1": 0.75, "cog2/l1/knn_top1": 0.5}
    assert summary_line(4, both, 2.0, "linear", name="cog2", when="end of fit") == (
        "CoG top-1 at epoch 4 (cog2, end of fit): l1 0.750 (2.0 s)")
