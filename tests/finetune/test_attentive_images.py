"""The attentive probe trained on augmented images (method ``attentive_images``): its optimiser and schedule against
references written from V-JEPA 2's code and torch's AdamW, a bank trained in one pass against its heads trained one
by one, and the rows of a tiny demo domain (written, skipped, refused)."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest
import torch

from cog_pl.finetune.attentive_images import BankAdamW, fit_bank, vjepa2_lr


def _reference_lr(step, ref_lr, warmup_steps, t_max, start_lr, final_lr):
    """facebookresearch/vjepa2 c2963a4 evals/image_classification_frozen/eval.py l.436-456 (WarmupCosineLRSchedule
    .step after ``self._step += 1``), transcribed."""
    t_max = t_max - warmup_steps
    if step < warmup_steps:
        progress = float(step) / float(max(1, warmup_steps))
        return start_lr + progress * (ref_lr - start_lr)
    progress = float(step - warmup_steps) / float(max(1, t_max))
    return max(final_lr, final_lr + (ref_lr - final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def test_schedule_is_vjepa2s():
    for step in range(1, 41):
        assert vjepa2_lr(step, 1e-3, 10, 40) == pytest.approx(_reference_lr(step, 1e-3, 10, 40, 2e-4, 0.0), abs=1e-15)


def test_bank_adamw_is_torch_adamw_per_head():
    """Each head of the bank follows torch.optim.AdamW with its own lr (on V-JEPA 2's schedule) and weight decay."""
    g = torch.Generator().manual_seed(0)
    lrs, wds = [1e-2, 3e-3, 1e-3], [1e-1, 1e-4, 1e-2]
    bank = torch.nn.Parameter(torch.randn(3, 4, 5, generator=g))
    alone = [torch.nn.Parameter(bank.detach()[i].clone()) for i in range(3)]
    opt = BankAdamW([bank], lrs, wds, warmup_steps=2, total_steps=6)
    refs = [torch.optim.AdamW([p], lr=lr, weight_decay=wd) for p, lr, wd in zip(alone, lrs, wds, strict=True)]
    for step in range(1, 7):
        grad = torch.randn(3, 4, 5, generator=g)
        bank.grad = grad.clone()
        opt.step()
        for i, (p, ref) in enumerate(zip(alone, refs, strict=True)):
            ref.param_groups[0]["lr"] = _reference_lr(step, lrs[i], 2, 6, 2e-4, 0.0)
            p.grad = grad[i].clone()
            ref.step()
    for i in range(3):
        torch.testing.assert_close(bank.detach()[i], alone[i].detach(), rtol=1e-5, atol=1e-6)


class _Images(torch.utils.data.Dataset):
    labels: ClassVar[list[int]] = [i % 3 for i in range(24)]

    def __len__(self):
        return 24

    def __getitem__(self, i):
        x = torch.randn(3, 16, 16, generator=torch.Generator().manual_seed(i)) + self.labels[i]
        return {"image": x, "label": self.labels[i], "index": i}


def test_heads_trained_in_one_pass_equal_heads_trained_one_by_one():
    from cog_pl.models import build_backbone
    from cog_pl.models.features import with_feature

    backbone = with_feature(build_backbone("external:demo_cnn"), "tokens2x2", 16)  # the class token and 2x2 cells
    kw = {"epochs": 2, "batch_size": 8, "seed": 5, "trainer_kw": {"accelerator": "cpu", "devices": 1,
                                                                  "precision": "32-true"}}
    lrs, wds, seeds = [1e-2, 2e-3, 5e-3], [1e-1, 1e-4, 1e-2], [11, 12, 13]
    rows = np.arange(24)
    _, net = fit_bank(backbone, 3, "ep", lrs, wds, seeds, _Images(), rows, **kw)
    assert net.tokens(torch.zeros(2, 3, 16, 16)).shape == (2, 5, 96)
    frozen = {k: v.clone() for k, v in backbone.model.state_dict().items()}
    for i in range(3):
        _, one = fit_bank(backbone, 3, "ep", lrs[i:i + 1], wds[i:i + 1], seeds[i:i + 1], _Images(), rows, **kw)
        together, alone = net.bank.pooler(i).state_dict(), one.bank.pooler(0).state_dict()
        assert together.keys() == alone.keys()
        for k in together:
            torch.testing.assert_close(together[k], alone[k], rtol=1e-5, atol=1e-6)
    changed = [k for k, v in net.bank.pooler(0).state_dict().items()
               if not torch.equal(v, fit_bank(backbone, 3, "ep", lrs[:1], wds[:1], seeds[:1], _Images(), rows,
                                              **{**kw, "epochs": 0})[1].bank.pooler(0).state_dict()[k])]
    assert changed  # the heads trained
    for k, v in backbone.model.state_dict().items():  # the backbone is frozen, its BatchNorm statistics included
        assert torch.equal(v, frozen[k]), k


def test_a_diverging_head_fails_alone_and_the_bank_trains_on():
    """A head at an absurd learning rate diverges in its first epoch: it no longer stops the bank (it raised); it is
    recorded (``diverged_epoch``) and scored 0, as the linear probe's fast mode scores it, and the other heads end
    as the bank without it does."""
    from cog_pl.finetune.attentive_images import _loader, _top1
    from cog_pl.models import build_backbone
    from cog_pl.models.features import with_feature

    backbone = with_feature(build_backbone("external:demo_cnn"), "tokens2x2", 16)
    kw = {"epochs": 2, "batch_size": 8, "seed": 5, "trainer_kw": {"accelerator": "cpu", "devices": 1,
                                                                  "precision": "32-true"}}
    rows = np.arange(24)
    trainer, net = fit_bank(backbone, 3, "ep", [2e-3, 1e30, 5e-3], [1e-4] * 3, [11, 12, 13], _Images(), rows, **kw)
    _, without = fit_bank(backbone, 3, "ep", [2e-3, 5e-3], [1e-4] * 2, [11, 13], _Images(), rows, **kw)
    assert net.diverged_epoch == [None, 0, None] and without.diverged_epoch == [None, None]
    for mine, theirs in ((0, 0), (2, 1)):
        got, want = net.bank.pooler(mine).state_dict(), without.bank.pooler(theirs).state_dict()
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-7)
    top1 = _top1(trainer, net, _loader(_Images(), rows, 8, None))
    assert top1[1] == 0.0 and top1[::2] == _top1(trainer, without, _loader(_Images(), rows, 8, None))


def test_rows_written_skipped_and_refused(onto, tmp_path):
    from dataclasses import replace

    from cog_pl.data.transforms import TransformConfig
    from cog_pl.datamodules.images import CoGLevelDataModule
    from cog_pl.demo.synthetic import make_demo
    from cog_pl.evaluate import is_probe, method_label
    from cog_pl.evaluate.runner import run_methods
    from cog_pl.finetune.attentive_images import AUGMENTATION
    from cog_pl.pipeline import ProbeOptions, RunConfig
    from cog_pl.results import read_rows
    from cog_pl.results.predictions import read_row_predictions

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=3, train_per_concept=10, test_per_concept=3,
                      image_size=16, onto=onto)
    results = tmp_path / "results.sqlite"
    transform = TransformConfig(crop=16, resize=16)
    own = {"epochs": 1, "batch_size": 8, "startup_trials": 2, "trial_batch": 1, "cache_images": True,
           "accelerator": "cpu"}

    def run(preset: str) -> int:  # the run's images stage, as cog-pl run calls it (the extraction's transform)
        cfg = RunConfig(model="external:demo_cnn", in1k_root=None, in21k_root=str(tmp_path / "d" / "in21k"),
                        domains=("cog_l1",), benchmark=str(bench), seeds=(22,), shots=(None, 2), random_weights=True,
                        name="demo_cnn", out=str(tmp_path), feature="tokens2x2", methods=("attentive_images",),
                        probe=ProbeOptions(trials=3, trial_batch=1), progress=False,
                        method_options={"attentive_images": {"preset": preset, **own}})
        inputs = replace(cfg.inputs, transform=transform)
        return run_methods(cfg.methods_of("finetune"), inputs, cfg.grids(), cfg.evaluation_plan())

    assert run("ep") == 2
    rows = read_rows(results)
    assert [(r["method"], r["domain"], r["shots"], r["seed"]) for r in rows] == [
        ("attentive_images", "cog_l1", None, 22), ("attentive_images", "cog_l1", 2, 22)]
    assert not is_probe("attentive_images")
    assert method_label("attentive_images") == "attentive probe (images, augmented)"
    for row in rows:
        assert row["features"] == "on-the-fly" and row["preset"] == "ep" and row["augmentation"] == AUGMENTATION
        assert row["feature"] == "tokens2x2" and row["attentive_images"]["feature"] == "tokens2x2"
        assert row["augmentation"]["RandomResizedCrop"]["scale"] == [0.08, 1.0]
        assert len(row["trials"]) == 3 and 0 <= row["test_top1"] <= 100
        assert row["attentive_images"]["trials"] == 3  # the probe protocol's trials
        tests = [t["test_top1"] for t in row["trials"]]
        assert row["oracle_test_top1"] == max(tests)  # from the trials run
        best = max(row["trials"], key=lambda t: (t["val_top1"], -t["number"]))
        assert row["selected_test_top1"] == best["test_top1"] <= row["oracle_test_top1"]
        assert row["attentive_images"]["preset"] == "ep" and len(row["identity"]) == 64
    for row in rows:  # the retrained head's test predictions, kept beside the row (issue 46)
        preds = read_row_predictions(results, row)
        assert len(preds) == 9 and np.array_equal(preds.image, np.arange(9))  # the test split's dataset rows
        assert preds.top1 == pytest.approx(row["test_top1"]) and preds.classes == tuple(CoGLevelDataModule(
            level="cog_l1", in21k_root=str(tmp_path / "d" / "in21k"), benchmark=str(bench)).classes)
        assert (preds.label == np.repeat(np.arange(3), 3)).all()
    assert run("ep") == 0  # a rerun skips
    with pytest.raises(ValueError, match=r"row demo_cnn/attentive_images/cog_l1/shots=all/seed=22 was made with "
                                         r".*preset=ep.*, this run has .*preset=capi.*; pass --overwrite"):
        run("capi")
    assert read_rows(results) == rows


def test_run_option_chooses_the_method_and_refuses_a_bad_preset(tmp_path):
    """``cog-pl run --methods attentive_images --attentive-images-preset PRESET`` sets its options, checked before
    any work."""
    from cog_pl.cli.main import build_parser
    from cog_pl.cli.run import _config
    from cog_pl.evaluate.attentive_images import AttentiveImagesOptions
    from cog_pl.pipeline import ExtractOptions, RunConfig

    kw = {"model": "resnet50", "in1k_root": None, "in21k_root": str(tmp_path), "domains": ("cog_l1",),
          "random_weights": True}
    for flags, preset in ((["--methods", "attentive_images"], "vjepa"),
                          (["--methods", "attentive_images", "--attentive-images-preset", "capi"], "capi")):
        args = build_parser().parse_args(["run", "--model", "resnet50", *flags])
        cfg = _config(args, ExtractOptions(), args.methods, **kw)
        assert cfg.method_options["attentive_images"] == AttentiveImagesOptions(preset=preset)
    with pytest.raises(ValueError, match=r"--attentive-images-preset 'nope': choose from vjepa, vjepa2, capi, ep"):
        RunConfig(**kw, methods=("attentive_images",), method_options={"attentive_images": {"preset": "nope"}})
    with pytest.raises(ValueError, match=r"attentive_images: unknown option\(s\) seed;"):  # the run sets it
        RunConfig(**kw, methods=("attentive_images",), method_options={"attentive_images": {"seed": 3}})


def test_augmentation_is_the_publishers_crop_and_flip():
    """The recorded crop and flip are those of the transform V-JEPA and V-JEPA 2 train their image probes with:
    timm's create_transform as jepa evals/image_classification_frozen/eval.py l.394-403 calls it."""
    from timm.data import create_transform

    from cog_pl.finetune.attentive_images import AUGMENTATION

    published = create_transform(input_size=224, is_training=True, auto_augment="original", interpolation="bicubic",
                                 re_prob=0.25, re_mode="pixel", re_count=1, mean=(0.485, 0.456, 0.406),
                                 std=(0.229, 0.224, 0.225))
    crop, flip = published.transforms[0], published.transforms[1]
    assert type(crop).__name__ == "RandomResizedCropAndInterpolation" and type(flip).__name__ == "RandomHorizontalFlip"
    rrc = AUGMENTATION["RandomResizedCrop"]
    assert list(crop.scale) == rrc["scale"] and list(crop.ratio) == pytest.approx(rrc["ratio"])
    assert rrc["interpolation"] == "bicubic" and flip.p == AUGMENTATION["RandomHorizontalFlip"]["p"]
    names = [type(t).__name__ for t in published.transforms]
    assert "AutoAugment" in names and "RandomErasing" in names  # what the rows record as published, not applied
