"""FineTuneClassifier: the recipe's pure parts, and a real fit/test on a tiny generated domain."""

from __future__ import annotations

import itertools

import lightning as L
import pytest
import torch

from cog_pl.datamodules.images import CoGLevelDataModule
from cog_pl.demo.synthetic import make_demo
from cog_pl.finetune.module import FineTuneClassifier, augment, warmup_cosine


def test_warmup_then_cosine():
    lrs = [warmup_cosine(s, total=20, warmup=4) for s in range(20)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0] and lrs[4] == 1.0
    assert all(a >= b for a, b in itertools.pairwise(lrs[4:])) and lrs[-1] < 0.01


def test_augment_keeps_shape_and_changes_images():
    x = torch.rand(4, 3, 32, 32)
    y = augment(x, generator=torch.Generator().manual_seed(0))
    assert y.shape == x.shape and not torch.allclose(x, y)
    assert torch.equal(y, augment(x, generator=torch.Generator().manual_seed(0)))


def test_bad_optimizer_is_named():
    with pytest.raises(ValueError, match="optimizer='adam'"):
        FineTuneClassifier("timm:resnet10t", num_classes=3, optimizer="adam")


def test_fine_tuning_learns_a_level(onto, tmp_path):
    bench = make_demo(tmp_path, n_seen=4, n_per_level=3, train_per_concept=24, test_per_concept=6, image_size=32,
                      onto=onto)
    from cog_pl.data.transforms import TransformConfig

    dm = CoGLevelDataModule(level="cog_l1", root=str(tmp_path / "in21k"), benchmark=str(bench), batch_size=16,
                            num_workers=0, transform=TransformConfig(crop=32, resize=32))
    torch.manual_seed(0)
    model = FineTuneClassifier("timm:resnet10t", num_classes=3, lr=0.05, warmup_epochs=0.5, augment=True)
    before = [p.detach().clone() for p in model.net.parameters()][:3]
    trainer = L.Trainer(max_epochs=4, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=dm)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.net.parameters()))  # the backbone is trained
    metrics = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert metrics["test/top1"] > 1 / 3 + 0.1  # above chance on 3 concepts
