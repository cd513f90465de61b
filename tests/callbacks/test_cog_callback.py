"""CoGEvaluationCallback with real Trainers on CPU: metrics at the right epochs, training unchanged, every
submodule's mode restored, what would fail at the first evaluation refused at setup, the transform in any form, its
state in checkpoints, monitoring its keys (tests/callbacks/test_lightning_users.py: a lightly-style module, both
Lightning packages, DDP)."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cog_pl.callbacks.cog_eval import CoGEvaluationCallback
from cog_pl.data.transforms import TransformConfig
from cog_pl.datamodules.images import ImageNetDataModule
from cog_pl.demo.synthetic import make_demo

REPO = Path(__file__).resolve().parents[2]
TF = TransformConfig(crop=32, resize=32)


@pytest.fixture(scope="module")
def bench(onto, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    return root, make_demo(root, n_seen=4, n_per_level=3, train_per_concept=10, test_per_concept=4, image_size=32,
                           onto=onto)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten())
        self.head = nn.Linear(8, 4)
        self.modes = []

    def training_step(self, batch, batch_idx):
        self.modes.append(self.training)
        return F.cross_entropy(self.head(self.backbone(batch["image"])), batch["label"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _fit(bench, tmp_path, callbacks, epochs=3, model=None, ckpt_path=None):
    root, path = bench
    torch.manual_seed(0)
    dm = ImageNetDataModule(in1k_root=str(root / "in1k"), benchmark=str(path), transform=TF, batch_size=8,
                            num_workers=0, shuffle_train=False)
    model = model or Net()
    checkpointing = any(isinstance(c, L.pytorch.callbacks.ModelCheckpoint) for c in callbacks)
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", callbacks=callbacks, enable_checkpointing=checkpointing,
                        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="logs"), enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model, trainer


def _callback(bench, **kw):
    root, path = bench
    return CoGEvaluationCallback(in1k_root=str(root / "in1k"), in21k_root=str(root / "in21k"), benchmark=str(path),
                                 transform=TF, concepts=3, train_images=10, test_images=4, epochs=5, **kw)


def test_metrics_logged_at_the_right_epochs_and_training_unchanged(bench, tmp_path):
    cog = _callback(bench, every_n_epochs=2, at_fit_end=True)
    model, trainer = _fit(bench, tmp_path / "with", [cog])
    assert [h["epoch"] for h in cog.history] == [1, 2]  # every 2nd epoch, and the last one
    keys = {"cog/in1k/top1", "cog/l1/top1", "cog/l2/top1", "cog/l3/top1", "cog/l4/top1", "cog/l5/top1"}
    assert keys <= set(trainer.callback_metrics) and "cog/seconds" not in trainer.callback_metrics
    assert all(0 <= cog.history[-1][k] <= 1 for k in keys) and cog.history[-1]["seconds"] > 0  # fractions
    with open(next((tmp_path / "with").rglob("metrics.csv"))) as fh:
        logged = [r for r in csv.DictReader(fh) if r.get("cog/l1/top1")]
    assert [int(r["epoch"]) for r in logged] == [1, 2]
    assert all(model.modes)  # every training step ran in train mode: the callback restored it
    plain, _ = _fit(bench, tmp_path / "without", [])
    for a, b in zip(model.parameters(), plain.parameters()):
        torch.testing.assert_close(a, b)  # the callback does not change training


def test_bad_configuration_is_named(bench):
    with pytest.raises(ValueError, match="needs in1k_root"):
        CoGEvaluationCallback(in21k_root="x")
    cog = _callback(bench, backbone="encoder")
    with pytest.raises(AttributeError, match="no callable attribute 'encoder'"):
        cog.evaluate(Net())


@pytest.mark.slow
def test_two_process_ddp_example(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(REPO / "examples" / "train_with_cog_callback.py"), "--out", str(tmp_path),
           "--devices", "2", "--epochs", "3", "--every", "2", "--seen", "4", "--per-level", "3"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(next(tmp_path.rglob("metrics.csv"))) as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("cog/l5/top1")]
    assert [int(r["epoch"]) for r in rows] == [1, 2]  # every 2nd epoch and the last, once each, not once per rank
    # on the console, once for both ranks: how the images are read, then one line per evaluation, epochs from 0
    assert proc.stderr.count("CoGEvaluationCallback: images read at 32 px") == 1
    assert [line.split(":")[0] for line in proc.stderr.splitlines() if line.startswith("CoG top-1")] == [
        "CoG top-1 at epoch 1", "CoG top-1 at epoch 2"]
    assert [p.name.split("-")[0] for p in (tmp_path / "best").glob("*.ckpt")] == ["epoch=1"]  # its only check
    assert (tmp_path / "cog_curves.png").exists()


def test_the_examples_plot_counts_epochs_as_the_console_and_the_csv(tmp_path):
    spec = importlib.util.spec_from_file_location("example", REPO / "examples" / "train_with_cog_callback.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    history = [{"epoch": 1, "cog/l1/top1": 0.5, "seconds": 1.0}, {"epoch": 2, "cog/l1/top1": 0.6, "seconds": 1.0}]
    fig = example.plot(history, tmp_path / "curves.png")
    assert [list(line.get_xdata()) for line in fig.axes[0].lines] == [[1, 2]]  # as logged: from 0, not from 1
    assert fig.axes[0].get_xlabel().startswith("epoch (from 0")


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 50 s; the callback's own test stays fast
def test_configurable_from_a_lightningcli_yaml(bench, tmp_path):
    from lightning.pytorch.cli import LightningCLI

    root, path = bench
    cfg = tmp_path / "cog.yaml"
    cfg.write_text(f"""
trainer:
  max_epochs: 1
  accelerator: cpu
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  callbacks:
    - class_path: cog_pl.callbacks.CoGEvaluationCallback
      init_args:
        in1k_root: {root / "in1k"}
        in21k_root: {root / "in21k"}
        benchmark: {path}
        domains: [in1k, cog_l1, cog_l5]
        concepts: 3
        train_images: 10
        test_images: 4
        epochs: 5
model:
  class_path: test_cog_callback.Net
data:
  class_path: cog_pl.datamodules.images.ImageNetDataModule
  init_args:
    root: {root / "in1k"}
    benchmark: {path}
    batch_size: 8
    num_workers: 0
""")
    cli = LightningCLI(args=["fit", "--config", str(cfg)], save_config_callback=None)
    assert {"cog/in1k/top1", "cog/l1/top1", "cog/l5/top1"} <= set(cli.trainer.callback_metrics)


def test_metric_keys_name_every_domain_and_unknown_domains_are_refused_at_once(tmp_path):
    from cog_pl.callbacks.cog_eval import metric_key
    from cog_pl.protocol import DOMAINS

    assert [metric_key(d) for d in DOMAINS] == ["in1k", "l1", "l2", "l3", "l4", "l5"]
    with pytest.raises(ValueError, match="unknown domain\\(s\\) cog_l3@wup, cog_l9"):
        CoGEvaluationCallback(in21k_root=str(tmp_path), domains=("cog_l3@wup", "cog_l9"))


class FrozenParts(Net):
    """A module with a frozen teacher and a frozen BatchNorm, both kept in eval mode by the user."""

    def __init__(self):
        super().__init__()
        self.teacher = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).requires_grad_(False).eval()
        self.backbone[1].eval()
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append({n: m.training for n, m in self.named_modules()})
        return super().training_step(batch, batch_idx)


def _modes(module):
    return {n: m.training for n, m in module.named_modules()}


def test_every_submodules_mode_is_restored_as_found(bench, tmp_path):
    model = FrozenParts()
    before = _modes(model)
    assert before["teacher"] is False and before["backbone.1"] is False and before["backbone.0"] is True
    cog = _callback(bench, domains=("in1k", "l2"))
    cog.evaluate(model)
    assert _modes(model) == before
    other = FrozenParts()  # a backbone given as a bound method of another module: that module's modes too
    other.backbone[2].eval()
    held = _modes(other)
    _callback(bench, domains=("l2",), backbone=other.backbone.forward).evaluate(model)
    assert _modes(other) == held and _modes(model) == before
    trained = FrozenParts()
    _fit(bench, tmp_path, [_callback(bench, domains=("l1",))], epochs=2, model=trained)
    assert trained.seen and all(m == before for m in trained.seen)  # each step of the second epoch too


@pytest.mark.parametrize("wrong", ["missing_root", "root_without_the_synsets", "no_backbone"])
def test_what_would_fail_at_the_first_evaluation_is_refused_at_setup(bench, tmp_path, wrong):
    root, path = bench
    kw = {"every_n_epochs": 5, "at_fit_end": False}
    cog = {"missing_root": lambda: CoGEvaluationCallback(
               in1k_root=str(root / "in1k"), in21k_root=str(tmp_path / "nowhere"), benchmark=str(path), **kw),
           "root_without_the_synsets": lambda: CoGEvaluationCallback(
               in1k_root=str(root / "in21k"), in21k_root=str(root / "in21k"), benchmark=str(path), **kw),
           "no_backbone": lambda: _callback(bench, backbone="encoder", **kw)}[wrong]()
    match = {"missing_root": "in21k_root .*nowhere does not exist",
             "root_without_the_synsets": "in21k/train is not a directory",
             "no_backbone": "no callable attribute 'encoder'"}[wrong]
    model = Net()
    with pytest.raises((FileNotFoundError, AttributeError), match=match):
        _fit(bench, tmp_path, [cog], epochs=1, model=model)
    assert model.modes == []  # before the first training step


def test_sharding_strategies_are_refused():
    from types import SimpleNamespace

    from lightning.pytorch.strategies import FSDPStrategy

    cog = CoGEvaluationCallback(in21k_root="x", domains=("l1",))
    with pytest.raises(ValueError, match="FSDPStrategy shards the model across processes.*train with DDP"):
        cog.setup(SimpleNamespace(strategy=FSDPStrategy()), Net(), "fit")


def test_the_transform_in_every_form_reads_the_same_images(bench, tmp_path):
    from torchvision import transforms as T
    from torchvision.transforms import v2

    from cog_pl.data.transforms import build_transform

    forms = {"config": TF, "size": 32, "dict": {"crop": 32, "resize": 32}, "compose": build_transform(TF),
             "compose_by_hand": T.Compose([T.Resize(32), T.CenterCrop(32), T.ToTensor(),
                                           T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]),
             "compose_v2": v2.Compose([v2.Resize(32), v2.CenterCrop(32), v2.ToImage(),
                                       v2.ToDtype(torch.float32, scale=True),
                                       v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])}
    loaded = {}
    for name, form in forms.items():
        cog = _callback(bench, domains=("l3",))
        cog.transform = CoGEvaluationCallback(in21k_root="x", domains=("l3",), transform=form).transform
        loaded[name] = cog._load(cog.eval_transform())["cog_l3"]
    for name, tensors in loaded.items():
        assert tensors[0].shape[-1] == 32, name
        for a, b in zip(tensors, loaded["config"]):
            torch.testing.assert_close(a, b, atol=1e-2, rtol=0)  # PIL's resize of a 32 px image: identity
    with pytest.raises(ValueError, match="CoGEvaluationCallback: transform .*unknown field.*size"):
        CoGEvaluationCallback(in21k_root="x", domains=("l1",), transform={"size": 32})
    with pytest.raises(ValueError, match="expected 'protocol', a model name, an image size"):
        CoGEvaluationCallback(in21k_root="x", domains=("l1",), transform=3.5)


def test_auto_transform_is_the_training_datamodules(bench, tmp_path):
    cog = CoGEvaluationCallback(in1k_root=str(bench[0] / "in1k"), in21k_root=str(bench[0] / "in21k"),
                                benchmark=str(bench[1]), domains=("l1",), concepts=3, train_images=10, test_images=4,
                                epochs=2)
    assert cog.transform == "auto"
    _, trainer = _fit(bench, tmp_path, [cog], epochs=1)
    assert cog.eval_transform(trainer, trainer.lightning_module) == TF  # the ImageNetDataModule's, not 224 px
    assert cog._data["cog_l1"][0].shape[-1] == 32
    assert cog.eval_transform(None, Net()).crop == 224  # nothing to take it from: the protocol's, logged


def test_domains_by_metric_key_and_fractions(bench):
    cog = _callback(bench, domains=("l5", "L1", "in1k"))
    assert cog.domains == ("cog_l5", "cog_l1", "in1k")
    metrics = cog.evaluate(Net())
    assert set(metrics) == {"cog/l5/top1", "cog/l1/top1", "cog/in1k/top1"}
    assert all(0 <= v <= 1 for v in metrics.values()) and cog.last_seconds > 0


def test_history_is_checkpointed_and_restored(bench, tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    cog = _callback(bench, domains=("l1", "l5"))
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    _fit(bench, tmp_path, [cog, ckpt], epochs=2)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["callbacks"][cog.state_key]
    assert saved["history"] == cog.history and [h["epoch"] for h in cog.history] == [0, 1]
    resumed = _callback(bench, domains=("l1", "l5"))
    _fit(bench, tmp_path, [resumed, ModelCheckpoint(dirpath=tmp_path / "ckpt2")], epochs=3,
         ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert resumed.history[:2] == cog.history and [h["epoch"] for h in resumed.history] == [0, 1, 2]


def test_a_cog_key_is_monitored_with_every_n_epochs_above_one(bench, tmp_path):
    """docs/lightning.md: ModelCheckpoint on the callback's epochs (every_n_epochs equal, at the train epoch's end)."""
    import warnings

    from lightning.pytorch.callbacks import ModelCheckpoint

    cog = _callback(bench, domains=("l5",), every_n_epochs=2, at_fit_end=False)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="cog/l5/top1", mode="max", every_n_epochs=2,
                           save_on_train_epoch_end=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(bench, tmp_path, [cog, ckpt], epochs=4)
    assert not [w for w in caught if "monitored key" in str(w.message)]
    assert [h["epoch"] for h in cog.history] == [1, 3]
    assert float(ckpt.best_model_score) == pytest.approx(max(h["cog/l5/top1"] for h in cog.history))
    assert "epoch=1" in ckpt.best_model_path or "epoch=3" in ckpt.best_model_path
