"""An attentive probe trained on images, with augmentation, as the published protocols train theirs (method
``attentive_images``, label "attentive probe (images, augmented)": ``cog-pl run --methods ... attentive_images`` with
its ``--attentive-images-*`` options, :mod:`cog_pl.evaluate.attentive_images`).

The stored-feature ``attentive`` method reads each image's tokens once; V-JEPA's and V-JEPA 2's frozen image
evaluations run the frozen backbone on every augmented batch of every epoch instead. This method does the latter:
a :class:`AttentiveImagesProbe` (a LightningModule) holds the frozen backbone (eval mode, no gradient: its
BatchNorm statistics never move) and a :class:`~cog_pl.models.poolers.PoolerBank` of ``n`` heads, one per (lr, wd)
trial: each batch is augmented, the backbone runs once, and all ``n`` heads train on its tokens (a token feature
definition's, :func:`cog_pl.models.features.with_feature`, or the backbone's vector as one token) in the same pass.

Augmentation (:data:`AUGMENTATION`, recorded in every row): both publishers train on timm's
``create_transform(is_training=True, auto_augment="original", interpolation="bicubic", re_prob=0.25,
re_mode="pixel", re_count=1)``, whose first steps are a RandomResizedCrop with timm's default scale (0.08, 1) and
ratio (3/4, 4/3) and a horizontal flip with p = 0.5. This method applies those two, bicubic, per sample on the
already decoded tensors (:func:`cog_pl.finetune.module.augment`, so the image datamodules are shared with
extraction); it does not apply AutoAugment or random erasing, and the record says so.

Optimisation: V-JEPA 2's: ``torch.optim.AdamW`` with its default betas and eps; the learning rate warmed up linearly
from ``start_lr`` to the trial's lr over the warm-up steps, then cosine to ``final_lr``, the schedule stepped before
each optimiser step; 20 epochs, warm-up 5, ``start_lr`` 2e-4, ``final_lr`` 0, a constant weight decay
(``final_weight_decay`` equals ``weight_decay``). :class:`BankAdamW` is ``torch.optim.AdamW`` with a learning rate
and weight decay per head of the bank (the bank's parameters carry a leading head axis), so a head of a bank follows
the trajectory of the same head trained alone (tested). The searched ranges are the stored-feature attentive
probe's (lr 1e-4 to 1e-2, wd 1e-4 to 1e-1).

The benchmark's discipline, as for the linear probe: per (seed, shots) cell, the held-out 20 % of train and the
few-shot samples of :mod:`cog_pl.data.sampling` (:func:`~cog_pl.data.sampling.tuning_indices`,
:func:`~cog_pl.data.sampling.final_indices`), TPE over (lr, wd) with the protocol's number of trials (its random
startup trials asked at once and trained as one bank, then ``trial_batch`` at a time, as the linear probe's fast
mode does), the best held-out (lr, wd) retrained on the whole train sample of the cell and tested once; every
trial's head is also tested, and the row records ``selected_test_top1`` (the selected trial's own head) and
``oracle_test_top1`` (the best trial's: what selecting on test would have reported). A diverging head fails alone
(:class:`~cog_pl.models.poolers.HeadRollback`, the linear probe's fast-mode rule): rolled back to the end of its
previous epoch, or scored 0 when it diverged in its first, its trial recording ``diverged_epoch`` and the row
``final_diverged_epoch``; the other heads of its bank train on.

Rows: ``method`` ``attentive_images``, ``features: "on-the-fly"``, ``augmentation`` (:data:`AUGMENTATION`),
``preset``, ``feature`` (the definition of the tokens) and the ``head`` record; their identity
(``attentive_images`` of the row, digest ``identity``) holds every setting, so a rerun skips the rows that exist and
refuses, in one line, a row made with other settings. The checkpoint's digest in that record
(``checkpoint_sha256``) identifies the weights (:func:`cog_pl.results.weights.row_weights`). Each row keeps its test
predictions (the retrained head's top-5 classes of every test image, :mod:`cog_pl.results.predictions`), so the
report sets it against the linear probe of the same weights on the same test images.

Sources (what was taken from which lines: ``docs/reference/sources.md``): facebookresearch/jepa 51c59d5
``evals/image_classification_frozen/eval.py`` (the transform); facebookresearch/vjepa2 c2963a4
``evals/image_classification_frozen/eval.py`` (the transform, the optimiser and schedule) and
``configs/eval/vitl/in1k.yaml`` (epochs, warm-up, learning rates); timm 1.0 ``timm/data/transforms_factory.py``
``transforms_imagenet_train`` (the crop's and flip's defaults).
"""

from __future__ import annotations

import json
import logging
import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np
import optuna
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset

from cog_pl.console import filter_known_warnings
from cog_pl.data.imagenet import collate_images
from cog_pl.data.sampling import final_indices, tuning_indices
from cog_pl.errors import CogError
from cog_pl.finetune.module import augment, no_val_split
from cog_pl.metrics import topk_first
from cog_pl.models.build import Backbone
from cog_pl.models.module import BackboneModule
from cog_pl.models.poolers import POOLER_PRESETS, AttentivePooler, HeadRollback, PoolerBank
from cog_pl.provenance import versions
from cog_pl.results.identity import digest
from cog_pl.results.predictions import Predictions

logger = logging.getLogger(__name__)

#: The ``method`` of its rows.
METHOD = "attentive_images"
#: The augmentation of the training batches, recorded in every row and part of its identity: its ``source`` keeps
#: the line citations it was first recorded with, so rows made before resume.
AUGMENTATION: dict[str, Any] = {
    "RandomResizedCrop": {"scale": [0.08, 1.0], "ratio": [0.75, 4 / 3], "interpolation": "bicubic"},
    "RandomHorizontalFlip": {"p": 0.5},
    "applied_to": "decoded tensors, per sample (cog_pl.finetune.module.augment)",
    "published_also": ["AutoAugment 'original'", "RandomErasing p=0.25 pixel"],
    "source": "facebookresearch/jepa evals/image_classification_frozen/eval.py l.392-403; facebookresearch/vjepa2 "
              "evals/image_classification_frozen/eval.py l.369-381 (timm create_transform, is_training=True)",
}
#: V-JEPA 2's schedule constants (configs/eval/vitl/in1k.yaml: warmup 5 of num_epochs 20, start_lr 2e-4, final 0).
START_LR, FINAL_LR, WARMUP_FRACTION = 2e-4, 0.0, 0.25
LR_RANGE, WD_RANGE = (1e-4, 1e-2), (1e-4, 1e-1)
#: Lightning's notice about modules in eval mode at the start of a fit: the frozen backbone's, by design.
FROZEN_NOTICE = r"Found \d+ module\(s\) in eval mode at the start of training"


def vjepa2_lr(step: int, ref_lr: float, warmup_steps: int, total_steps: int, start_lr: float = START_LR,
              final_lr: float = FINAL_LR) -> float:
    """V-JEPA 2's ``WarmupCosineLRSchedule`` at its ``step``-th call (1 for the first optimiser step: its frozen
    evaluation steps the schedule before each)."""
    if step < warmup_steps:
        return start_lr + step / max(1, warmup_steps) * (ref_lr - start_lr)
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return max(final_lr, final_lr + (ref_lr - final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress)))


class BankAdamW(torch.optim.Optimizer):
    """``torch.optim.AdamW`` (default betas and eps) over a bank's parameters, whose first axis is the head: head
    ``i`` has learning rate ``lrs[i]`` on V-JEPA 2's schedule (:func:`vjepa2_lr`) and weight decay ``wds[i]``."""

    def __init__(self, params, lrs: Sequence[float], wds: Sequence[float], warmup_steps: int, total_steps: int,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(list(params), {"betas": betas, "eps": eps})
        self.lrs, self.wds = list(lrs), list(wds)
        self.warmup_steps, self.total_steps, self.steps = warmup_steps, total_steps, 0
        for group in self.param_groups:  # the moments exist from the start: a HeadRollback saves them with the heads
            for p in group["params"]:
                self.state[p].update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))

    def moments(self) -> list[torch.Tensor]:
        """Every parameter's first and second moments (the head first, as the parameters)."""
        return [self.state[p][k] for group in self.param_groups for p in group["params"] for k in ("m", "v")]

    def current_lrs(self) -> list[float]:
        """Each head's learning rate at the next step."""
        return [vjepa2_lr(self.steps + 1, lr, self.warmup_steps, self.total_steps) for lr in self.lrs]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        lrs_now = self.current_lrs()
        self.steps += 1
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                shape = (len(self.lrs),) + (1,) * (p.dim() - 1)
                lr = torch.tensor(lrs_now, dtype=p.dtype, device=p.device).view(shape)
                wd = torch.tensor(self.wds, dtype=p.dtype, device=p.device).view(shape)
                state = self.state[p]
                state["t"] += 1
                t, m, v = state["t"], state["m"], state["v"]
                p.mul_(1 - lr * wd)  # decoupled weight decay, torch's AdamW order: before the moment update
                m.lerp_(p.grad, 1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = (v / (1 - b2 ** t)).sqrt_().add_(group["eps"])
                p.sub_(lr / (1 - b1 ** t) * m / denom)
        return loss


class AttentiveImagesProbe(BackboneModule):
    """A frozen backbone feeding a bank of ``len(lrs)`` attentive poolers, trained on augmented images.

    Args:
        backbone: a registry backbone (:func:`cog_pl.models.build_backbone`), kept frozen and in eval mode.
        num_classes: the domain's concepts.
        preset: a key of :data:`~cog_pl.models.poolers.POOLER_PRESETS`.
        lrs: each head's peak learning rate.
        wds: each head's weight decay.
        init_seeds: each head's initialisation seed (a head is the same whatever bank it is in).
        augment_seed: the seed of the augmentation's draws (per sample crops and flips).
        augmentation: False to train on the images as given (tests).
    """

    def __init__(self, backbone: Backbone, num_classes: int, preset: str, lrs: Sequence[float],
                 wds: Sequence[float], init_seeds: Sequence[int], augment_seed: int = 0,
                 augmentation: bool = True) -> None:
        super().__init__()
        if preset not in POOLER_PRESETS:
            raise CogError(f"--attentive-images-preset {preset!r}: choose a preset from {', '.join(POOLER_PRESETS)}")
        self.set_backbone(backbone, channels_last=False)
        self.net.requires_grad_(False)
        self.lrs, self.wds, self.preset, self.augmentation = list(lrs), list(wds), preset, augmentation
        heads = []
        for s in init_seeds:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(s)
                heads.append(AttentivePooler(self.feature_dim, num_classes, POOLER_PRESETS[preset]))
        self.bank = PoolerBank.from_poolers(heads)
        self._augment_gen = torch.Generator().manual_seed(augment_seed)
        self.rollback: HeadRollback | None = None  # made when training starts, over the heads and their moments

    def train(self, mode: bool = True) -> AttentiveImagesProbe:
        """Heads in ``mode``; the backbone stays in eval mode (frozen: its BatchNorm statistics never move)."""
        super().train(mode)
        self.net.eval()
        return self

    @torch.no_grad()
    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """The frozen backbone's tokens ``[B, T, D]`` of a batch: a token definition's (a backbone made by
        :func:`cog_pl.models.features.with_feature`), or a vector ``[B, D]`` read as one token."""
        out = self.features(images)
        return out[:, None, :] if out.dim() == 2 else out

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Every head's logits ``[n, B, C]``."""
        return self.bank(self.tokens(images).float())

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x = batch["image"]
        if self.augmentation:
            crop = AUGMENTATION["RandomResizedCrop"]
            x = augment(x.cpu(), tuple(crop["scale"]), flip=True, generator=self._augment_gen,
                        mode=crop["interpolation"]).to(x.device)
        logits = self(x)
        losses = torch.stack([F.cross_entropy(logits[i], batch["label"]) for i in range(len(logits))])
        self.rollback.observe(losses)  # a diverging head fails alone (HeadRollback), not the bank
        # the sum of the heads' own mean losses: each head's gradient is its own loss's
        return torch.where(torch.isfinite(losses), losses, 0.0).sum()

    def on_train_start(self) -> None:
        optimizer = self.trainer.optimizers[0]
        self.rollback = HeadRollback([*self.bank.parameters(), *self.bank.buffers(), *optimizer.moments()],
                                     len(self.lrs))

    def on_train_epoch_end(self) -> None:
        self.rollback.end_epoch(self.current_epoch)

    @property
    def diverged_epoch(self) -> list[int | None]:
        """Per head, the epoch in which its loss turned non-finite (None: never, or not trained)."""
        return self.rollback.diverged_epoch if self.rollback is not None else [None] * len(self.lrs)

    def predict_step(self, batch: dict[str, torch.Tensor],
                     batch_idx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every head's top-5 classes ``[n, B, k]`` (ties to the lower class, as ``argmax``), the labels and the
        images' dataset rows."""
        logits = self(batch["image"]).float()
        n, b, c = logits.shape
        flat = torch.nan_to_num(logits, nan=float("inf")).reshape(n * b, c)
        return topk_first(flat, min(5, c))[1].view(n, b, -1), batch["label"], batch["index"]

    def configure_optimizers(self) -> BankAdamW:
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = int(WARMUP_FRACTION * total)
        return BankAdamW(self.bank.parameters(), self.lrs, self.wds, warmup, total)


# -- one cell: search, retrain, test ---------------------------------------------------------------------------------

def _loader(dataset, rows: np.ndarray | None, batch_size: int, shuffle_seed: int | None) -> DataLoader:
    data = dataset if rows is None else Subset(dataset, rows.tolist())
    gen = None if shuffle_seed is None else torch.Generator().manual_seed(shuffle_seed)
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle_seed is not None, generator=gen,
                      collate_fn=collate_images, num_workers=0)


def _trainer(epochs: int, trainer_kw: dict[str, Any]) -> L.Trainer:
    filter_known_warnings()
    return L.Trainer(max_epochs=epochs, **trainer_kw, logger=False, enable_checkpointing=False,
                     enable_model_summary=False, enable_progress_bar=False, deterministic=False)


def _predict(trainer: L.Trainer, net: AttentiveImagesProbe,
             loader: DataLoader) -> tuple[list[float], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Each head's top-1 (percent) on ``loader``'s images (no augmentation), 0 for a head rolled back to no state
    (diverged in its first epoch), as the linear probe scores it; and the first head's predictions: each image's top-5
    classes (-1 for such a head), its label and its dataset row, in the loader's order."""
    out = trainer.predict(net, dataloaders=loader)
    ranked = torch.cat([r for r, _, _ in out], dim=1).cpu()
    labels = torch.cat([y for _, y, _ in out]).cpu()
    index = torch.cat([i for _, _, i in out]).cpu()
    unscored = torch.tensor([e == 0 for e in net.diverged_epoch], dtype=torch.bool)
    ranked[unscored] = -1
    top1 = (100.0 * (ranked[:, :, 0] == labels).float().mean(dim=1)).tolist()
    return top1, (ranked[0], labels, index)


def _top1(trainer: L.Trainer, net: AttentiveImagesProbe, loader: DataLoader) -> list[float]:
    """Each head's top-1 (percent) on ``loader``'s images (:func:`_predict`)."""
    return _predict(trainer, net, loader)[0]


def fit_bank(backbone: Backbone, num_classes: int, preset: str, lrs: Sequence[float], wds: Sequence[float],
             init_seeds: Sequence[int], train_data, rows: np.ndarray, *, epochs: int, batch_size: int, seed: int,
             trainer_kw: dict[str, Any], augmentation: bool = True) -> tuple[L.Trainer, AttentiveImagesProbe]:
    """Train a bank of heads (one per (lr, wd)) on ``rows`` of ``train_data`` in one pass per epoch: batches
    shuffled from ``seed``, augmentation drawn from ``seed``."""
    net = AttentiveImagesProbe(backbone, num_classes, preset, lrs, wds, init_seeds, augment_seed=seed,
                               augmentation=augmentation)
    trainer = _trainer(epochs, trainer_kw)
    with no_val_split(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FROZEN_NOTICE)  # the frozen backbone is in eval mode by design
        trainer.fit(net, _loader(train_data, rows, batch_size, seed))
    return trainer, net


def run_cell(backbone: Backbone, num_classes: int, train_data, test_data, *, preset: str, seed: int,
             shots: int | None, epochs: int, batch_size: int, trials: int, startup_trials: int, trial_batch: int,
             val_fraction: float, trainer_kw: dict[str, Any],
             classes: Sequence[str] | None = None) -> dict[str, Any]:
    """One (seed, shots) cell: TPE on the held-out split, the best (lr, wd) retrained on the cell's train sample,
    tested; returns the row's numbers and its test predictions (``classes``: the wnids of the class indices)."""
    labels = np.asarray(train_data.labels)
    tr, va = tuning_indices(labels, val_fraction, seed, shots)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials, multivariate=True,
                                         constant_liar=True)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    space = {"lr": optuna.distributions.FloatDistribution(*LR_RANGE, log=True),
             "wd": optuna.distributions.FloatDistribution(*WD_RANGE, log=True)}
    test_loader = _loader(test_data, None, batch_size, None)
    record = []
    while len(record) < trials:
        n = min(startup_trials if not record else trial_batch, trials - len(record)) or 1
        asked = [study.ask(space) for _ in range(n)]
        lrs, wds = [t.params["lr"] for t in asked], [t.params["wd"] for t in asked]
        trainer, net = fit_bank(backbone, num_classes, preset, lrs, wds, [seed * 1000 + t.number for t in asked],
                                train_data, tr, epochs=epochs, batch_size=batch_size, seed=seed * 1000 + len(record),
                                trainer_kw=trainer_kw)
        val = _top1(trainer, net, _loader(train_data, va, batch_size, None))
        test = _top1(trainer, net, test_loader)
        for t, v, s, e in zip(asked, val, test, net.diverged_epoch, strict=True):
            study.tell(t, v)
            record.append({"number": t.number, "lr": t.params["lr"], "wd": t.params["wd"], "val_top1": v,
                           "test_top1": s, "diverged_epoch": e})
    best = max(record, key=lambda r: (r["val_top1"], -r["number"]))
    oracle = max(record, key=lambda r: (r["test_top1"], -r["number"]))
    trainer, net = fit_bank(backbone, num_classes, preset, [best["lr"]], [best["wd"]], [seed * 1000 + trials],
                            train_data, final_indices(labels, seed, shots), epochs=epochs, batch_size=batch_size,
                            seed=seed * 1000 + trials, trainer_kw=trainer_kw)
    top1, tested = _predict(trainer, net, test_loader)
    return {"test_top1": top1[0], "final_diverged_epoch": net.diverged_epoch[0],
            "val_top1": best["val_top1"], "lr": best["lr"],
            "wd": best["wd"], "best_trial": best["number"], "selected_test_top1": best["test_top1"],
            "oracle_test_top1": oracle["test_top1"], "oracle_trial": oracle["number"], "trials": record,
            "predictions": Predictions.of(*tested, classes=classes)}


# -- a model's domains, rows resumable -------------------------------------------------------------------------------

def identity(model: str, checkpoint: str | None, *, feature: str | None, preset: str, epochs: int,
             batch_size: int, trials: int, startup_trials: int, trial_batch: int, val_fraction: float,
             transform: Any, precision: str, benchmark: str | None) -> dict[str, Any]:
    """What a row's numbers depend on (``attentive_images`` of the row) and its digest (``identity``)."""
    from cog_pl.finetune.compare import _plain
    from cog_pl.io import file_sha256

    values = {"model": model, "checkpoint_sha256": file_sha256(checkpoint) if checkpoint else None,
              "feature": feature, "preset": preset, "config": POOLER_PRESETS[preset].to_record(),
              "features": "on-the-fly",
              "augmentation": AUGMENTATION, "optimizer": "AdamW",
              "schedule": {"start_lr": START_LR, "final_lr": FINAL_LR, "warmup_fraction": WARMUP_FRACTION,
                           "weight_decay": "constant"},
              "lr_range": list(LR_RANGE), "wd_range": list(WD_RANGE), "epochs": epochs, "batch_size": batch_size,
              "trials": trials, "startup_trials": startup_trials, "trial_batch": trial_batch,
              "val_fraction": val_fraction, "transform": _plain(transform), "precision": precision,
              "benchmark_sha256": file_sha256(benchmark) if benchmark else None}
    return {METHOD: json.loads(json.dumps(values, sort_keys=True, default=str)), "identity": digest(values)}


def images_backbone(model: str, checkpoint: str | None, *, reading: dict[str, Any] | None = None,
                    feature: str | None = None, transform: Any = None) -> Backbone:
    """The frozen backbone whose tokens the heads read: ``model`` with ``checkpoint`` read as ``reading`` says
    (:func:`~cog_pl.models.build_backbone`'s keywords), giving the ``feature`` definition's tokens (None: its own
    output as one token)."""
    from cog_pl.models import build_backbone
    from cog_pl.models.features import with_feature

    backbone = build_backbone(model, checkpoint, **(reading or {}))
    return backbone if feature is None else with_feature(backbone, feature, getattr(transform, "crop", None))


def domain_datasets(domain: str, *, in1k_root: str | None, in21k_root: str | None, benchmark: str | None,
                    transform: Any, batch_size: int, cache_images: bool = False,
                    num_workers: int = 0) -> tuple[int, Any, Any, list[str]]:
    """A domain's class count, its train and test image datasets, as the image datamodules read them, and its
    concepts (the wnid of each class index)."""
    from cog_pl.datamodules.images import CoGLevelDataModule, ImageNetDataModule

    common = {"transform": transform, "batch_size": batch_size, "num_workers": num_workers, "benchmark": benchmark,
              "cache_images": cache_images}
    dm = (ImageNetDataModule(in1k_root=in1k_root, **common) if domain == "in1k"
          else CoGLevelDataModule(level=domain, in21k_root=in21k_root, **common))
    return dm.num_classes, dm.dataset("train"), dm.dataset("test"), list(dm.classes)


def cell_row(backbone: Backbone, num_classes: int, train_data, test_data, *, preset: str, seed: int,
             shots: int | None, epochs: int, batch_size: int, trials: int, startup_trials: int, trial_batch: int,
             val_fraction: float, trainer_kw: dict[str, Any], feature: str | None, checkpoint: str | None,
             classes: Sequence[str] | None = None) -> dict[str, Any]:
    """One (seed, shots) cell's row fields (:func:`run_cell`, its test predictions of ``classes``), with the settings
    a reader needs beside them."""
    start = time.perf_counter()
    L.seed_everything(seed, verbose=False)
    cell = run_cell(backbone, num_classes, train_data, test_data, preset=preset, seed=seed, shots=shots,
                    epochs=epochs, batch_size=batch_size, trials=trials, startup_trials=startup_trials,
                    trial_batch=trial_batch, val_fraction=val_fraction, trainer_kw=trainer_kw, classes=classes)
    logger.info("%s on %s (seed %s, shots %s): test top-1 %.2f", METHOD, getattr(train_data, "domain", "?"), seed,
                shots, cell["test_top1"])
    return {**cell, "preset": preset, "feature": feature, "features": "on-the-fly", "augmentation": AUGMENTATION,
            "head": {"kind": "attentive", "preset": preset, "config": POOLER_PRESETS[preset].to_record()},
            "checkpoint": checkpoint, "accelerator": trainer_kw["accelerator"],
            "seconds": round(time.perf_counter() - start, 2), "versions": versions()}
