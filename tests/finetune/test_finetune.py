"""FineTuneClassifier: the recipe's pure parts, and a real fit/test on a tiny generated domain."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from cog_pl.datamodules.images import CoGLevelDataModule
from cog_pl.demo.synthetic import make_demo
from cog_pl.finetune.module import FineTuneClassifier, augment, warmup_cosine

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "finetune" / "demo.yaml"


class _Images(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return {"image": torch.randn(3, 16, 16), "label": i % 3}


def test_warmup_is_one_epoch_of_steps_also_when_max_steps_sets_the_run():
    lrs = []

    class Spy(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    net = FineTuneClassifier("external:demo_cnn", num_classes=3, lr=0.1, warmup_epochs=1.0, augment=False)
    trainer = L.Trainer(max_steps=12, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Spy()])
    trainer.fit(net, torch.utils.data.DataLoader(_Images(), batch_size=8))  # 4 steps per epoch, 12 in all
    peak = 0.1 * net.hparams.backbone_lr_scale  # the first parameter group is the backbone's
    assert lrs[:4] == pytest.approx([peak / 4, peak / 2, 3 * peak / 4, peak])  # warm-up over the first epoch's 4 steps
    assert lrs[5] < lrs[4] and lrs[-1] < lrs[5]  # then the cosine decays


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
    with pytest.raises(ValueError, match=r"crop_scale=\(1\.0, 0\.35\)"):
        FineTuneClassifier("timm:resnet10t", num_classes=3, crop_scale=(1.0, 0.35))


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 167 s; fit/test through the CLI, with its row, stays fast
def test_fine_tuning_learns_a_level(onto, tmp_path):
    bench = make_demo(tmp_path, n_seen=4, n_per_level=3, train_per_concept=24, test_per_concept=6, image_size=32,
                      onto=onto)
    from cog_pl.data.transforms import TransformConfig

    dm = CoGLevelDataModule(level="cog_l1", in21k_root=str(tmp_path / "in21k"), benchmark=str(bench), batch_size=16,
                            num_workers=0, transform=TransformConfig(crop=32, resize=32))
    torch.manual_seed(0)
    model = FineTuneClassifier("timm:resnet10t", num_classes=3, lr=0.05, warmup_epochs=0.5, augment=True)
    before = [p.detach().clone() for p in model.net.parameters()][:3]
    stats = [m.running_mean.clone() for m in model.net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    losses = []

    class EpochLoss(L.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            losses.append(float(trainer.callback_metrics["train/loss_epoch"]))

    trainer = L.Trainer(max_epochs=5, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[EpochLoss()])
    trainer.fit(model, datamodule=dm)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.net.parameters()))  # the backbone is trained
    bns = [m.running_mean for m in model.net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert stats and not any(torch.equal(a, b) for a, b in zip(stats, bns))  # BatchNorm statistics too
    assert min(losses[-2:]) < losses[0]  # and it learns
    metrics = trainer.test(model, datamodule=dm, verbose=False)[0]
    model.eval()  # what test_step logged is the model's accuracy and loss over the whole test split
    with torch.no_grad():
        batches = list(dm.test_dataloader())
        logits = torch.cat([model(b["image"]) for b in batches])
    labels = torch.cat([b["label"] for b in batches])
    assert len(labels) == 3 * 6 and set(metrics) == {"test/loss", "test/top1"}  # 3 classes: no top-5
    assert metrics["test/top1"] == pytest.approx((logits.argmax(1) == labels).float().mean().item(), abs=1e-6)
    assert metrics["test/loss"] == pytest.approx(torch.nn.functional.cross_entropy(logits, labels).item(), rel=1e-5)


def test_finetune_cli_fit_test_writes_a_row_the_report_compares(onto, tmp_path, capsys):
    from cog_pl.cli.main import main
    from cog_pl.results import append_row, read_rows

    bench = make_demo(tmp_path / "d", n_seen=4, n_per_level=3, train_per_concept=8, test_per_concept=4,
                      image_size=32, onto=onto)
    results = tmp_path / "results.sqlite"
    common = ["--model.model", "timm:resnet10t", "--data", "cog_pl.datamodules.images.CoGLevelDataModule",
              "--data.level", "cog_l2", "--data.in21k_root", str(tmp_path / "d" / "in21k"), "--data.benchmark",
              str(bench),
              "--data.num_workers", "0", "--data.batch_size", "8", "--trainer.accelerator", "cpu",
              "--trainer.max_epochs", "1", "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path)]
    assert main(["finetune", "fit", *common]) == 0
    ckpt = next(tmp_path.rglob("*.ckpt"))
    assert main(["finetune", "test", *common, "--ckpt_path", str(ckpt), "--results", str(results)]) == 0
    (row,) = read_rows(results)
    assert row["model"] == "resnet10t" and row["domain"] == "cog_l2" and row["method"] == "finetune"
    assert 0 <= row["test_top1"] <= 100 and row["recipe"]["optimizer"] == "sgd"
    assert "test_top5" not in row  # 3 concepts: top-5 is not measured, and not made up
    append_row(results, {"model": "resnet10t", "domain": "cog_l2", "shots": None, "seed": 22, "test_top1": 50.0,
                         "test_top5": 100.0})
    assert main(["report", "--results", str(results), "--out", str(tmp_path / "report")]) == 0
    assert "Linear probe relative to fine-tuning" in capsys.readouterr().out


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 146 s; the CLI's row and the run's stage options stay fast
def test_finetune_domains_adds_rows_and_skips_existing(onto, tmp_path):
    from cog_pl.data.transforms import TransformConfig
    from cog_pl.device import resolve_precision
    from cog_pl.evaluate import Inputs
    from cog_pl.evaluate.runner import evaluate_domains
    from cog_pl.results import read_rows
    from cog_pl.results.predictions import read_row_predictions

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    inputs = Inputs(label="resnet10t", model="timm:resnet10t", in1k_root=str(tmp_path / "d" / "in1k"),
                    in21k_root=str(tmp_path / "d" / "in21k"), benchmark=str(bench),
                    transform=TransformConfig(crop=32, resize=32))
    options = {"epochs": 1, "batch_size": 4, "precision": "auto", "cache_images": True}

    def finetune_domains(domains, overwrite=False, **changed):
        return evaluate_domains("finetune", inputs, domains, tmp_path / "r.sqlite", options={**options, **changed},
                                overwrite=overwrite)

    rows = finetune_domains(["in1k", "cog_l4"])
    assert [(r["model"], r["method"], r["domain"]) for r in rows] == [("resnet10t", "finetune", "in1k"),
                                                                      ("resnet10t", "finetune", "cog_l4")]
    assert finetune_domains(["in1k"]) == []
    stored = read_rows(tmp_path / "r.sqlite")
    assert len(stored) == 2
    for row in stored:  # "auto" is recorded as the precision it resolved to on this machine
        assert row["precision"] in ("bf16-mixed", "32-true") and row["precision"] == resolve_precision("auto", "cpu")
        assert row["batch_size"] == 4 and row["epochs"] == 1 and 0 <= row["test_top1"] <= 100
        assert "test_top5" not in row and row["checkpoint"] is None and row["seconds"] > 0  # as the CLI's rows
        assert row["finetune"]["epochs"] == 1 and len(row["identity"]) == 64
        preds = read_row_predictions(tmp_path / "r.sqlite", row)  # its test predictions, kept beside it
        n = 3 * len(preds.classes)  # 3 test images per concept: 3 concepts of IN-1K, 2 of L4
        assert len(preds) == n and np.array_equal(preds.image, np.arange(n)) and preds.top5.shape == (n, n // 3)
        assert preds.top1 == pytest.approx(row["test_top1"], abs=1e-4)
    # a row made with other inputs is refused before any training, naming the value; --overwrite replaces it
    with pytest.raises(ValueError, match=r"r\.sqlite: row resnet10t/finetune/in1k/shots=all/seed=22 was made with "
                                         r"epochs=1, this run has epochs=2; pass --overwrite"):
        finetune_domains(["in1k", "cog_l4"], epochs=2)
    assert read_rows(tmp_path / "r.sqlite") == stored
    redone = finetune_domains(["in1k"], overwrite=True, epochs=2)
    assert len(redone) == 1 and {r["domain"]: r["epochs"] for r in read_rows(tmp_path / "r.sqlite")} == {
        "in1k": 2, "cog_l4": 1}


def test_finetune_precision_is_checked_before_any_data_is_read():
    from cog_pl.finetune.compare import check_options

    with pytest.raises(ValueError, match="precision 'fp8'"):
        check_options("fp8", None)
    check_options(32, None)  # Lightning's integer spelling


def test_demo_config_is_the_demo_recipe(monkeypatch):
    """configs/finetune/demo.yaml spells out what `cog-pl demo --finetune` runs (cog_pl.demo.finetune)."""
    import yaml

    import cog_pl.device
    from cog_pl.demo.finetune import DemoFineTune

    cfg, recipe = yaml.safe_load(DEMO_CONFIG.read_text()), DemoFineTune()
    model = {k: v for k, v in cfg["model"].items() if k not in ("model", "checkpoint")}
    assert model == recipe.model_kwargs() and cfg["model"]["model"] == "external:demo_cnn"
    assert cfg["trainer"]["max_epochs"] == recipe.epochs
    # The Trainer has no "auto" precision: the config spells out what the recipe's "auto" resolves to on the
    # machines with native bf16 it was tuned for (its header says to pass 32-true on the others).
    monkeypatch.setattr(cog_pl.device, "fast_bf16", lambda device: True)
    assert recipe.precision == "auto"
    assert cfg["trainer"]["precision"] == cog_pl.device.resolve_precision(recipe.precision, "cpu")
    data = cfg["data"]["init_args"]
    assert data["batch_size"] == recipe.batch_size and data["cache_images"] is recipe.cache_images
    assert data["transform"] == {"crop": 32, "resize": 32}


def test_demo_config_fits_and_tests_with_the_finetune_cli(onto, tmp_path, caplog):
    from cog_pl.cli.main import main
    from cog_pl.results import read_rows

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=3, train_per_concept=8, test_per_concept=4, onto=onto)
    common = ["--config", str(DEMO_CONFIG), "--model.checkpoint", "null", "--trainer.max_epochs", "2",
              "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path / "ft"),
              "--data.level", "cog_l5", "--data.in21k_root", str(tmp_path / "d" / "in21k"),
              "--data.init_args.benchmark", str(bench)]
    assert main(["finetune", "fit", *common]) == 0
    caplog.set_level(logging.INFO)
    assert main(["finetune", "test", *common, "--ckpt_path", "last", "--results", str(tmp_path / "r.sqlite")]) == 0
    (row,) = read_rows(tmp_path / "r.sqlite")
    assert (row["model"], row["method"], row["domain"]) == ("demo_cnn", "finetune", "cog_l5")
    assert row["precision"] == "bf16-mixed"
    assert row["recipe"]["channels_last"] is True and row["recipe"]["lr"] == 0.1 and row["seed"] == 22
    assert "Restoring states from the checkpoint path at" in caplog.text and "last.ckpt" in caplog.text


RESNET50_SMALL = DEMO_CONFIG.with_name("resnet50_small.yaml")


def test_a_diverging_run_stops_with_one_line():
    from cog_pl.finetune.module import DivergedError

    torch.manual_seed(0)
    net = FineTuneClassifier("external:demo_cnn", num_classes=3, lr=1e6, warmup_epochs=0.0, augment=False)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    diverged = (r"FineTuneClassifier: the (training loss is nan|epoch's mean training loss is .*above 10 x "
                r"ln\(classes\) = [\d.]+) at epoch \d+, step \d+ \(learning rates .*\): the run diverged; "
                r"lower --model.lr")
    with pytest.raises(DivergedError, match=diverged):
        trainer.fit(net, torch.utils.data.DataLoader(_Images(), batch_size=8))


def test_validation_step_reports_val_metrics_on_loaders_the_user_gives():
    torch.manual_seed(0)
    net = FineTuneClassifier("external:demo_cnn", num_classes=3, lr=0.01, augment=False)
    loader = torch.utils.data.DataLoader(_Images(), batch_size=8)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(net, loader, loader)
    assert {"val/loss", "val/top1"} <= set(trainer.callback_metrics)
    (metrics,) = trainer.validate(net, loader, verbose=False)
    net.eval()
    with torch.no_grad():
        logits = torch.cat([net(b["image"]) for b in loader])
    labels = torch.cat([b["label"] for b in loader])
    assert metrics["val/top1"] == pytest.approx((logits.argmax(1) == labels).float().mean().item(), abs=1e-6)


def test_the_resnet50_small_image_recipe_fits_then_tests_in_one_printed_line(onto, tmp_path, capsys):
    import shlex

    import yaml

    from cog_pl.cli.main import main
    from cog_pl.results import read_rows

    cfg = yaml.safe_load(RESNET50_SMALL.read_text())
    assert cfg["model"]["model"] == "resnet50" and cfg["model"]["lr"] == 0.01  # configs/finetune/resnet50.yaml's
    assert cfg["model"]["backbone_lr_scale"] == 0.1 and cfg["data"]["init_args"]["transform"]["crop"] == 32
    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=3, train_per_concept=8, test_per_concept=4, onto=onto)
    assert main(["finetune", "fit", "--config", str(RESNET50_SMALL), "--trainer.max_epochs", "2",
                 "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path / "ft"),
                 "--data.level", "cog_l2", "--data.in21k_root", str(tmp_path / "d" / "in21k"),
                 "--data.init_args.benchmark", str(bench)]) == 0
    out = capsys.readouterr().out
    (line,) = [x.split(": ", 1)[1] for x in out.splitlines() if x.startswith("test this run with: ")]
    words = shlex.split(line)
    assert words[:3] == ["cog-pl", "finetune", "test"] and str(tmp_path / "ft" / "config.yaml") in words
    assert main([*words[1:], "--results", str(tmp_path / "r.sqlite")]) == 0  # the fit's own config, nothing repeated
    (row,) = read_rows(tmp_path / "r.sqlite")
    assert (row["model"], row["domain"], row["recipe"]["lr"]) == ("resnet50", "cog_l2", 0.01)
    assert row["test_top1"] > 0


def test_finetune_test_without_a_checkpoint_is_refused(onto, tmp_path, capsys):
    from cog_pl.cli.main import main

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=3, train_per_concept=4, test_per_concept=2, onto=onto)
    common = ["--config", str(DEMO_CONFIG), "--model.checkpoint", "null", "--trainer.accelerator", "cpu",
              "--trainer.default_root_dir", str(tmp_path / "nothing_here"), "--data.in21k_root",
              str(tmp_path / "d" / "in21k"), "--data.init_args.benchmark", str(bench)]
    assert main(["finetune", "test", *common]) == 2
    assert "test needs --ckpt_path" in capsys.readouterr().err
    assert main(["finetune", "test", *common, "--ckpt_path", "last"]) == 2
    assert "test --ckpt_path last: Lightning found no such checkpoint" in capsys.readouterr().err
