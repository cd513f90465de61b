"""CoGEvaluationCallback with real Trainers on CPU: metrics at the right epochs, training unchanged, mode restored."""

from __future__ import annotations

import csv
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

REPO = Path(__file__).resolve().parents[1]
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


def _fit(bench, tmp_path, callbacks, epochs=3):
    root, path = bench
    torch.manual_seed(0)
    dm = ImageNetDataModule(root=str(root / "in1k"), benchmark=str(path), transform=TF, batch_size=8, num_workers=0,
                            shuffle_train=False)
    model = Net()
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", callbacks=callbacks, enable_checkpointing=False,
                        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="logs"), enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, datamodule=dm)
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
    assert keys <= set(trainer.callback_metrics)
    assert all(0 <= cog.history[-1][k] <= 100 for k in keys)
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
           "--devices", "2", "--epochs", "2", "--seen", "4", "--per-level", "3"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(next(tmp_path.rglob("metrics.csv"))) as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("cog/l5/top1")]
    assert [int(r["epoch"]) for r in rows] == [0, 1]  # logged once per epoch, not once per rank
    assert (tmp_path / "cog_curves.png").exists()


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
