"""The attentive and MLP probes (methods ``attentive`` and ``mlp``): tuned, retrained and tested like the linear probe.

Each (seed, shots) cell follows the linear probe's discipline (:mod:`cog_pl.probe.cell`): the same held-out 20 % of
train and the same few-shot samples (:func:`cog_pl.data.sampling.tuning_indices`, :func:`~cog_pl.data.sampling.
final_indices`), TPE over (lr, wd) with the protocol's trials and epochs and the search plan's batches
(:func:`cog_pl.probe.study.ask_trials`, :func:`cog_pl.probe.tuner.best_trial`), the best (lr, wd) retrained on the
whole train sample of the cell and tested once. A batch of trials trains as one bank of heads
(:class:`PoolerBank` / :class:`MLPBank` of :mod:`cog_pl.models.poolers`) in one pass: every head sees
the same batches, and :func:`train_bank`'s AdamW gives each head its own learning rate and weight decay, so a head of
a bank follows the trajectory of the same head trained alone with ``torch.optim.AdamW`` (tested).

The optimisation is V-JEPA 2's frozen evaluation's, for every preset (facebookresearch/vjepa2 c2963a4
``evals/image_classification_frozen/eval.py`` and ``configs/eval/vitl/in1k.yaml``; line by line:
``docs/reference/sources.md``): ``torch.optim.AdamW`` with its default betas and eps over all of a head's parameters,
its learning rate warmed up linearly from ``start_lr: 0.0002`` over ``warmup: 5`` of ``num_epochs: 20``, then
cosine-annealed to ``final_lr: 0.0``, both stepped before each optimizer step, a constant weight decay
(``final_weight_decay`` equal to ``weight_decay``). The searched ranges span that config's grid of heads (lr 5e-4 to
2e-3, wd 5e-4 to 8e-3) with room on both sides: lr 1e-4 to 1e-2, wd 1e-4 to 1e-1 (:class:`HeadSettings`).

Features: a token store's ``[N, T, D]``, a vector store's ``[N, D]`` read as ``T = 1``. The attentive
probe reads every token; the MLP probe reads the class token (token 0) of a token store, or the vector. Neither
L2-normalises: the pooler's LayerNorm and the MLP's input BatchNorm normalise.

Selection optimism: every trial's head is also evaluated on test, and a row records
``oracle_test_top1``, the best trial's test top-1 (what selecting on test would have reported), beside
``selected_test_top1``, the held-out-selected trial's own head's (the same heads: at most the oracle; ``test_top1`` is
the head retrained with its (lr, wd) on the whole train sample), and every trial's (lr, wd, val and test top-1) in
``trials``.

A diverging head (its loss not finite) fails alone, as in the linear probe's fast mode: it is rolled back to the end
of its previous epoch, or scored 0 when it diverged in its first (:class:`~cog_pl.models.poolers.HeadRollback`); the
other heads of its bank end as without it. Its trial records ``diverged_epoch``, the row ``final_diverged_epoch``
(the linear probe's fields).

Precision: the search plan's (:meth:`~cog_pl.probe.tuner.SearchPlan.precision_on`, the linear probe's rule):
``"32-true"``, or ``"bf16-mixed"``, the training forward under bfloat16 autocast (:func:`train_bank`).

Rows: ``method`` ``attentive`` or ``mlp``; ``head`` records the probe's settings (kind, preset and its config, or
the hidden width, optimiser, schedule, ranges) and is part of the row's identity with the features, protocol, search
and precision: a row made with another preset, width or feature definition is refused (``overwrite``: made again).
Each cell is claimed (:mod:`cog_pl.results.claims`) while it is made and its row appended as it ends, so a killed
grid resumes with the cells it had not written and ends with the uninterrupted rows (the cells are deterministic).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
import torch
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
from torch import Tensor, nn

from cog_pl.data.sampling import final_indices, tuning_indices
from cog_pl.defaults import ATTENTIVE_PRESET, MLP_HIDDEN
from cog_pl.errors import CogError
from cog_pl.features.pair import StorePair
from cog_pl.metrics import percent, topk_correct, topk_first
from cog_pl.models import poolers as _POOLERS
from cog_pl.probe.data import load_store, sub_seed
from cog_pl.probe.multihead import PRECISIONS
from cog_pl.probe.study import ask_trials, tell_result
from cog_pl.probe.tuner import SearchPlan, best_trial
from cog_pl.protocol import ProbeProtocol, as_record
from cog_pl.provenance import versions
from cog_pl.results import FORMAT_VERSION
from cog_pl.results.claims import worker_id
from cog_pl.results.identity import digest, features_identity
from cog_pl.results.predictions import Predictions

log = logging.getLogger(__name__)

#: The two methods of this module (their rows' ``method``).
KINDS = ("attentive", "mlp")
PRECISION = "32-true"  # the heads' precision by default; the search plan's (SearchPlan.precision_on) in a grid


def presets() -> tuple[str, ...]:
    """The attentive pooler's presets (:data:`cog_pl.models.poolers.POOLER_PRESETS`)."""
    return tuple(_POOLERS.POOLER_PRESETS)


@dataclass(frozen=True)
class HeadSettings:
    """What an attentive or MLP probe is, besides the protocol: recorded in its rows (``head``) and their identity.

    ``start_lr``, ``warmup_fraction`` and ``final_lr``: V-JEPA 2's schedule (the module's docstring); AdamW's
    ``betas`` and ``eps``: ``torch.optim.AdamW``'s defaults, as V-JEPA 2 uses them."""

    kind: str = "attentive"
    preset: str = ATTENTIVE_PRESET
    hidden: int = MLP_HIDDEN
    lr_range: tuple[float, float] = (1e-4, 1e-2)
    wd_range: tuple[float, float] = (1e-4, 1e-1)
    start_lr: float = 2e-4
    warmup_fraction: float = 0.25  # 5 of 20 epochs
    final_lr: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise CogError(f"head kind {self.kind!r}: choose from {', '.join(KINDS)}")
        if self.kind == "attentive" and self.preset not in presets():
            raise CogError(f"--attentive-preset {self.preset!r}: choose from {', '.join(presets())}")
        if isinstance(self.hidden, bool) or not isinstance(self.hidden, int) or self.hidden < 1:
            raise CogError(f"--mlp-hidden must be an integer of at least 1, got {self.hidden!r}")

    def as_record(self) -> dict[str, Any]:
        """The JSON record of the rows: the settings that apply to this kind (an attentive probe's preset and its
        config, an MLP probe's hidden width), the optimiser and schedule."""
        record = {"kind": self.kind, "optimizer": "AdamW", "betas": list(self.betas), "eps": self.eps,
                  "schedule": {"warmup_fraction": self.warmup_fraction, "start_lr": self.start_lr,
                               "final_lr": self.final_lr, "weight_decay": "constant"},
                  "lr_range": list(self.lr_range), "wd_range": list(self.wd_range), "normalize": False}
        if self.kind == "attentive":
            record.update(preset=self.preset, config=_POOLERS.POOLER_PRESETS[self.preset].to_record())
        else:
            record.update(hidden=self.hidden, batchnorm=True, input="class token")
        if self.extra:
            record["extra"] = dict(self.extra)
        return record


# -- the bank and its optimiser -------------------------------------------------------------------------------------

def make_head(settings: HeadSettings, dim: int, num_classes: int, seed: int) -> nn.Module:
    """One head, its parameters drawn from ``seed`` (torch's global generator, forked: nothing else is moved)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if settings.kind == "attentive":
            return _POOLERS.AttentivePooler(dim, num_classes, _POOLERS.POOLER_PRESETS[settings.preset])
        return _POOLERS.MLPProbe(dim, num_classes, settings.hidden, batchnorm=True)


def make_bank(settings: HeadSettings, heads: Sequence[nn.Module]) -> nn.Module:
    """The bank of ``heads`` (each made by :func:`make_head`): one forward ``-> [n, B, C]``."""
    if settings.kind == "attentive":
        return _POOLERS.PoolerBank.from_poolers(list(heads))
    return _POOLERS.MLPBank.from_probes(list(heads))


def head_input(settings: HeadSettings, x: Tensor) -> Tensor:
    """What a head reads of ``[N, T, D]`` features: every token (attentive), the class token (MLP)."""
    return x if settings.kind == "attentive" else x[:, 0]


def lr_factor_steps(settings: HeadSettings, epochs: int, steps_per_epoch: int) -> tuple[int, int]:
    """(warmup steps, total steps): V-JEPA 2's ``int(warmup * iterations_per_epoch)`` and ``num_epochs * ipe``."""
    return int(settings.warmup_fraction * epochs * steps_per_epoch), epochs * steps_per_epoch


def scheduled_lr(step: int, ref_lr: Tensor, settings: HeadSettings, warmup: int, total: int) -> Tensor:
    """V-JEPA 2's ``WarmupCosineLRSchedule`` at ``step`` (1-based: it steps before the optimizer), per head."""
    if step < warmup:
        return settings.start_lr + (step / max(1, warmup)) * (ref_lr - settings.start_lr)
    progress = (step - warmup) / max(1, total - warmup)
    cos = settings.final_lr + (ref_lr - settings.final_lr) * 0.5 * (1.0 + np.cos(np.pi * progress))
    return torch.clamp(cos, min=settings.final_lr)


def adamw_step(params: list[nn.Parameter], state: list[tuple[Tensor, Tensor]], step: int, lr: Tensor, wd: Tensor,
               settings: HeadSettings) -> None:
    """One ``torch.optim.AdamW`` step (its single-tensor update) for every head at once: ``lr`` and ``wd`` are
    ``(n,)``, each parameter's first dimension is the head."""
    b1, b2 = settings.betas
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    for p, (m, v) in zip(params, state):
        if p.grad is None:
            continue
        shape = (-1,) + (1,) * (p.dim() - 1)
        g = p.grad
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        p.mul_(1 - (lr * wd).view(shape))
        denom = (v.sqrt() / bc2 ** 0.5).add_(settings.eps)
        p.sub_((lr / bc1).view(shape) * m / denom)


@dataclass
class BankResult:
    """Per head: top-1 and top-5 (percent) on each evaluation set, and the top-5 classes of the last set's rows;
    the epoch in which its loss turned non-finite (None: never; :class:`~cog_pl.models.poolers.HeadRollback`)."""

    top1: dict[str, Tensor]
    top5: dict[str, Tensor]
    ranked: Tensor | None = None  # (n, N, k) of the last evaluation set, with ``rank_last``; -1 for a head not scored
    bank: nn.Module | None = None  # the trained bank, in eval mode
    diverged_epoch: list[int | None] = field(default_factory=list)


@torch.no_grad()
def evaluate_bank(bank: nn.Module, x: Tensor, y: Tensor, chunk: int = 1024,
                  rank: bool = False) -> tuple[Tensor, Tensor | None]:
    """``(n, 2)`` top-1/top-5 percent of every head on ``(x, y)`` and, with ``rank``, their top-5 classes."""
    bank.eval()
    correct, ranked = None, []
    for i in range(0, len(y), chunk):
        logits = bank(x[i : i + chunk]).transpose(0, 1)  # [B, n, C]
        hit = topk_correct(logits, y[i : i + chunk].to(logits.device), (1, 5))
        correct = hit if correct is None else correct + hit
        if rank:
            classes = logits.shape[-1]
            flat = torch.nan_to_num(logits.transpose(0, 1), nan=float("inf")).reshape(-1, classes)
            ranked.append(topk_first(flat, min(5, classes))[1].view(logits.shape[1], -1, min(5, classes)).cpu())
    return percent(correct, len(y)).float().cpu(), (torch.cat(ranked, dim=1) if rank else None)


def train_bank(settings: HeadSettings, heads: Sequence[nn.Module], x: Tensor, y: Tensor, lrs: Sequence[float],
               wds: Sequence[float], *, epochs: int, batch_size: int, generator: torch.Generator,
               evaluate: dict[str, tuple[Tensor, Tensor]], rank_last: bool = False,
               precision: str = PRECISION) -> BankResult:
    """Train ``heads`` (their :func:`make_bank`) on ``(x, y)`` in one pass, head ``i`` with ``lrs[i]`` and
    ``wds[i]``, batches from a ``torch.randperm`` per epoch of ``generator``; evaluate every head on each set of
    ``evaluate`` (name: (x, y)) after the last epoch. A head whose loss turns non-finite fails alone, as in the linear
    probe's fast mode (:class:`~cog_pl.models.poolers.HeadRollback`): rolled back to the end of its previous epoch,
    scored 0 (top-1, top-5; ranked -1) when it diverged in its first; the other heads end as without it.
    ``precision``: ``"32-true"``, or ``"bf16-mixed"`` as the linear probe's (:mod:`cog_pl.probe.multihead`): the
    training forward under bfloat16 autocast, the parameters, AdamW's moments and the loss in float32; the evaluation
    always in float32."""
    if precision not in PRECISIONS:
        raise CogError(f"precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    device = x.device
    bank = make_bank(settings, heads).to(device)
    params = [p for p in bank.parameters() if p.requires_grad]
    bad = [tuple(p.shape) for p in params if p.dim() == 0 or p.shape[0] != len(heads)]
    if bad:  # a bank's every parameter has the head first: what the per-head update below relies on
        raise CogError(f"a bank of {len(heads)} heads has parameters of shapes {bad[:3]}: each must have the head "
                       "as its first dimension")
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    guard = _POOLERS.HeadRollback([*params, *bank.buffers(), *(t for pair in state for t in pair)], len(heads))
    ref_lr = torch.tensor(list(lrs), dtype=torch.float32, device=device)
    wd = torch.tensor(list(wds), dtype=torch.float32, device=device)
    n = len(y)
    steps_per_epoch = -(-n // batch_size)
    warmup, total = lr_factor_steps(settings, epochs, steps_per_epoch)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    for epoch in range(epochs):
        bank.train()
        order = torch.randperm(n, generator=generator).to(device)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            step += 1
            lr = scheduled_lr(step, ref_lr, settings, warmup, total)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                logits = bank(x[idx]).float()  # [n, B, C]
            target = y[idx].to(device)
            losses = torch.stack([loss_fn(logits[i], target) for i in range(len(heads))])
            guard.observe(losses)
            for p in params:
                p.grad = None
            losses.sum().backward()  # heads independent: each head's gradient is its own loss's
            with torch.no_grad():
                adamw_step(params, state, step, lr, wd, settings)
        guard.end_epoch(epoch)
    top1, top5, ranked = {}, {}, None
    names, unscored = list(evaluate), ~torch.tensor(guard.scored, dtype=torch.bool)
    for name in names:
        ex, ey = evaluate[name]
        acc, r = evaluate_bank(bank, ex, ey, rank=rank_last and name == names[-1])
        acc[unscored] = 0.0
        top1[name], top5[name] = acc[:, 0], acc[:, 1]
        if r is not None:
            r[unscored] = -1
            ranked = r
    return BankResult(top1, top5, ranked, bank, guard.diverged_epoch)


# -- a cell ---------------------------------------------------------------------------------------------------------

@dataclass
class TokenSplits:
    """A domain's train and test features as ``[N, T, D]`` float32 (a vector store's as ``T = 1``), labels, and
    what the rows record of the stores."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    features: dict | None = None
    test_images: np.ndarray | None = None
    classes: tuple[str, ...] | None = None
    feature: str | None = None  # the feature definition named by the stores' meta, if any

    @classmethod
    def load(cls, pair: StorePair, device: torch.device | str = "cpu") -> TokenSplits:
        (tx, ty), (sx, sy) = load_store(pair.train, device), load_store(pair.test, device)
        tx, sx = (a if a.dim() == 3 else a[:, None] for a in (tx, sx))
        meta = getattr(pair.train, "meta", None) or {}
        feature = meta.get("feature") or meta.get("definition")
        return cls(tx, ty, sx, sy, pair.num_classes, features_identity(pair), pair.test_images, pair.classes,
                   feature if isinstance(feature, str) else None)


def search_space(settings: HeadSettings) -> dict[str, FloatDistribution]:
    """The head's (lr, wd) space, both log-uniform."""
    return {"lr": FloatDistribution(*settings.lr_range, log=True), "wd": FloatDistribution(*settings.wd_range,
                                                                                          log=True)}


def head_identity(features: dict | None, settings: HeadSettings, protocol: ProbeProtocol, plan: SearchPlan,
                  precision: str = PRECISION) -> dict:
    """The identity fields of a row (``head``, ``protocol``, ``search``, ``precision``, ``features``) and their
    digest (``identity``); ``precision``: the heads' (:meth:`~cog_pl.probe.tuner.SearchPlan.precision_on`)."""
    search = {k: plan.as_record()[k] for k in ("mode", "startup_trials", "trial_batch")}
    values = {"head": settings.as_record(), "protocol": as_record(protocol), "search": search,
              "precision": precision, "features": features}
    return {**values, "identity": digest(values)}


def probe_cell(splits: TokenSplits, *, settings: HeadSettings, seed: int, shots: int | None, model: str,
               domain: str, protocol: ProbeProtocol, plan: SearchPlan, device: str | torch.device = "cpu",
               want: dict | None = None, on_trials: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Tune, retrain and test one (seed, shots) cell; returns its row. The test rows enter no choice: each trial's
    test top-1 is only recorded (``selected_test_top1``: the selected trial's, ``oracle_test_top1``: the best)."""
    start = time.perf_counter()
    want = want or head_identity(splits.features, settings, protocol, plan, plan.precision_on(device))
    precision = want["precision"]
    labels = splits.train_y.numpy()
    train_idx, val_idx = tuning_indices(labels, protocol.val_fraction, seed, shots)
    x = head_input(settings, splits.train_x).to(device)
    y = splits.train_y.to(device)
    test_x, test_y = head_input(settings, splits.test_x).to(device), splits.test_y.to(device)
    tx, ty = x[torch.from_numpy(train_idx).to(device)], y[torch.from_numpy(train_idx).to(device)]
    evaluate = {"val": (x[torch.from_numpy(val_idx).to(device)], y[torch.from_numpy(val_idx).to(device)]),
                "test": (test_x, test_y)}
    dim, classes = x.shape[-1], splits.num_classes
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")  # in memory: a cell starts over when resumed, as a linear
    space = search_space(settings)                      # probe's unfinished study does
    while (done := len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))) < protocol.trials:
        n = min(plan.batch_size(done), protocol.trials - done)
        trials = ask_trials(study, n, space, seed, plan.startup_trials)
        heads = [make_head(settings, dim, classes, sub_seed(seed, 10, t.number)) for t in trials]
        result = train_bank(settings, heads, tx, ty, [t.params["lr"] for t in trials],
                            [t.params["wd"] for t in trials], epochs=protocol.epochs, batch_size=protocol.batch_size,
                            generator=torch.Generator().manual_seed(sub_seed(seed, 11, trials[0].number)),
                            evaluate=evaluate, precision=precision)
        if on_trials is not None:  # a bank of trials trained: progress within the cell
            on_trials(len(trials))
        for i, t in enumerate(trials):
            tell_result(study, t, float(result.top1["val"][i]), {"result": {
                "val_top5": float(result.top5["val"][i]), "test_top1": float(result.top1["test"][i]),
                "diverged_epoch": result.diverged_epoch[i],
                "batch_heads": len(trials), "init_seed": sub_seed(seed, 10, t.number),
                "perm_seed": sub_seed(seed, 11, trials[0].number)}})
    best = best_trial(study)
    trials = [{"number": t.number, "lr": t.params["lr"], "wd": t.params["wd"], "val_top1": t.value,
               "test_top1": t.user_attrs["result"]["test_top1"], "init_seed": t.user_attrs["result"]["init_seed"],
               "perm_seed": t.user_attrs["result"]["perm_seed"],
               "diverged_epoch": t.user_attrs["result"]["diverged_epoch"]}
              for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    tuned = time.perf_counter()
    final_idx = torch.from_numpy(final_indices(labels, seed, shots)).to(device)
    lr, wd = best.params["lr"], best.params["wd"]
    head = make_head(settings, dim, classes, sub_seed(seed, 20))
    final = train_bank(settings, [head], x[final_idx], y[final_idx], [lr], [wd], epochs=protocol.epochs,
                       batch_size=protocol.batch_size, generator=torch.Generator().manual_seed(sub_seed(seed, 21)),
                       evaluate={"test": (test_x, test_y)}, rank_last=True, precision=precision)
    end = time.perf_counter()
    images = np.arange(len(splits.test_y)) if splits.test_images is None else splits.test_images
    test_top1 = float(final.top1["test"][0])
    log.info("%s/%s/%s shots=%s seed=%d: lr %.4g wd %.3g -> test top-1 %.2f (oracle %.2f)", model, settings.kind,
             domain, shots or "all", seed, lr, wd, test_top1, max(t["test_top1"] for t in trials))
    return {
        "format_version": FORMAT_VERSION, "model": model, "method": settings.kind, "domain": domain,
        "shots": shots, "seed": seed, "lr": lr, "wd": wd, "best_trial": best.number, "val_top1": best.value,
        "val_top5": best.user_attrs["result"]["val_top5"], "test_top1": test_top1,
        "test_top5": float(final.top5["test"][0]), "final_diverged_epoch": final.diverged_epoch[0],
        "selected_test_top1": best.user_attrs["result"]["test_top1"],
        "oracle_test_top1": max(t["test_top1"] for t in trials), "trials": trials,
        "preset": settings.preset if settings.kind == "attentive" else None,
        "hidden": settings.hidden if settings.kind == "mlp" else None, "feature": splits.feature,
        "tokens": int(splits.train_x.shape[1]),
        "train_rows": len(final_idx), "tuning_rows": len(train_idx), "val_rows": len(val_idx), "mode": plan.mode,
        **want, "worker": worker_id(), "device": str(device), "seconds": round(end - start, 3),
        "tune_seconds": round(tuned - start, 3), "final_seconds": round(end - tuned, 3), "versions": versions(),
        "predictions": Predictions.of(final.ranked[0], splits.test_y, images, splits.classes),
    }
