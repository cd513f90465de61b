"""K linear probes trained side by side in one pass over the features, each with its own lr and weight decay.

The heads are one ``(K*C, D + 1)`` float32 matrix (a row per head and class: its weights, then its bias), so a training
step is two large matrix products for all heads instead of two small ones per head. Gradients of the mean cross-entropy
are written out by hand (softmax minus one-hot) and the SGD update is fused: ``g = grad + wd * p; buf = momentum * buf +
g; p -= lr * buf`` per head, which is what ``torch.optim.SGD`` does for one head (its first step stores ``g`` in the
buffer, the same as a zero buffer here). The bias is decayed too, as in the released code. Every head sees the same
batches in the same order; given the same initial weights and the same permutation sequence, head ``k`` follows the
trajectory of a single ``nn.Linear`` trained alone (tested, to float rounding). In the released loop each trial instead
draws its own shuffles from one generator shared by all trials in turn; either way a trial's shuffles are uniform random
permutations independent of its (lr, wd), so a head's result has the distribution of a published trial's. Sharing them
across a batch only correlates the noise of trials compared with each other (common random numbers), which does not bias
the search.

Precision: ``"32-true"`` runs every product in float32, as published. ``"bf16-mixed"`` keeps the weights, bias,
momentum buffers, softmax and loss in float32 and runs only the two matrix products in bfloat16 (inputs and outputs
rounded to bfloat16, float32 accumulation inside: the recipe of mixed-precision training); the features then carry
a constant-1 column, so the bias rides in the products (rounded to bfloat16 there like the weights). On GPUs and on
CPUs with AMX or AVX512-BF16 those products are several times faster, and they are the largest part of a step. On
the benchmark features the same heads end within 0.15 points of their float32 validation top-1; a tuned probe may
then pick another (lr, wd) (``benchmarks/bench_probe.py --fp32``). The evaluation always runs in float32.

A head whose loss turns non-finite stops learning, in one of two ways (``on_divergence``). ``"halt"`` (exact mode)
does what the published loop does: it keeps the head as it was at the step whose loss was non-finite, before that
step's update, and evaluates that model (its accuracy is the head's result, whatever the epoch). ``"rollback"`` (fast
mode) returns the head to its state at the end of the previous epoch, where no step diverged; a head that diverged
in its first epoch has no such state and scores 0, so a search never prefers it. Heads never influence each other.
Nothing here synchronises with the device inside an epoch. The buffers and the step live in
:mod:`cog_pl.probe.workspace`; on CUDA the step runs as Triton kernels replayed from a CUDA graph, computing the same
thing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from cog_pl.device import resolve_precision
from cog_pl.errors import CogError
from cog_pl.metrics import percent, topk_correct, topk_first
from cog_pl.probe.schedule import cosine_factor
from cog_pl.probe.workspace import HeadsWorkspace, on_device_of_first_argument, stepper

#: The precisions the heads run (:func:`cog_pl.device.resolve_precision`'s ``allowed`` for the probes).
PRECISIONS = ("32-true", "bf16-mixed")
#: What a head whose loss turns non-finite does: exact mode halts (the published loop), fast mode rolls back.
ON_DIVERGENCE = ("halt", "rollback")


def init_heads(dim: int, classes: int, k: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Initial (weight ``(D, K, C)``, bias ``(K, C)``) drawn like ``nn.Linear``: uniform in +-1/sqrt(D)."""
    bound = 1.0 / math.sqrt(dim)
    weight = (torch.rand(k, classes, dim, generator=generator) * 2 - 1) * bound
    bias = (torch.rand(k, classes, generator=generator) * 2 - 1) * bound
    return weight.permute(2, 0, 1).contiguous(), bias


@dataclass
class HeadsResult:
    """Outcome of training K heads: final evaluation, per-epoch history (if evaluated) and divergence epochs."""

    top1: Tensor  # (K,) percent on the evaluation set; rollback: 0 for a head that diverged in its first epoch
    top5: Tensor  # (K,)
    history: list[Tensor]  # per evaluated epoch, (K,) top-1
    diverged_epoch: list[int | None]  # epoch in which the loss became non-finite, per head
    weight: Tensor  # (D, K, C)
    bias: Tensor  # (K, C)


@torch.no_grad()
def evaluate_heads(weight: Tensor, bias: Tensor, x: Tensor, y: Tensor, chunk: int = 8192) -> Tensor:
    """Top-1 and top-5 accuracy (percent) of every head: ``(K, 2)``."""
    dim, k, classes = weight.shape
    w = weight.reshape(dim, k * classes)
    correct = torch.zeros(k, 2, dtype=torch.long, device=weight.device)
    for i in range(0, len(y), chunk):
        logits = torch.addmm(bias.reshape(-1), x[i : i + chunk], w).view(-1, k, classes)
        correct += topk_correct(logits, y[i : i + chunk], (1, 5))
    return percent(correct, len(y)).float()


@torch.no_grad()
def predict_heads(weight: Tensor, bias: Tensor, x: Tensor, top: int = 5, chunk: int = 8192,
                  scored: list[bool] | None = None) -> Tensor:
    """The ``top`` classes of every row for every head, ``(K, N, min(top, C))``, best first, ranked as
    :func:`~cog_pl.metrics.topk_correct` counts (the logits of :func:`evaluate_heads`; NaN above every value,
    the lower class among equal logits), so a head's first class is right exactly where its top-1 counts it.
    ``scored``: per head, False for one that gives no prediction (-1 throughout: rolled back to no state)."""

    dim, k, classes = weight.shape
    w = weight.reshape(dim, k * classes)
    out = []
    for i in range(0, len(x), chunk):
        logits = torch.addmm(bias.reshape(-1), x[i : i + chunk], w).view(-1, k, classes)
        logits = torch.nan_to_num(logits.transpose(0, 1), nan=float("inf")).reshape(-1, classes)
        out.append(topk_first(logits, min(top, classes))[1].view(k, -1, min(top, classes)).cpu())
    ranked = torch.cat(out, dim=1) if out else torch.empty(k, 0, min(top, classes), dtype=torch.long)
    if scored is not None:
        ranked[~torch.tensor(scored, dtype=torch.bool)] = -1
    return ranked


@torch.no_grad()
@on_device_of_first_argument
def train_heads(
    x: Tensor,
    y: Tensor,
    lrs: list[float],
    wds: list[float],
    *,
    num_classes: int,
    epochs: int,
    batch_size: int,
    momentum: float,
    generator: torch.Generator,
    init: tuple[Tensor, Tensor],
    eval_x: Tensor,
    eval_y: Tensor,
    eval_every_epoch: bool = False,
    on_epoch_end: Callable[[int], None] | None = None,
    precision: str = "32-true",
    on_divergence: str = "rollback",
) -> HeadsResult:
    """Train ``len(lrs)`` heads on normalised features ``x``; evaluate on ``(eval_x, eval_y)``.

    Batches are drawn by index from a ``torch.randperm`` per epoch of ``generator`` (on the CPU, like the published
    loop). The evaluation runs after the last epoch, or after every epoch when ``eval_every_epoch``.
    ``on_divergence``: ``"halt"`` or ``"rollback"`` (:data:`ON_DIVERGENCE`, the module's docstring).
    """
    if on_divergence not in ON_DIVERGENCE:
        raise CogError(f"on_divergence must be one of {', '.join(ON_DIVERGENCE)}, got {on_divergence!r}")
    halt = on_divergence == "halt"
    device, n, dim = x.device, x.shape[0], x.shape[1]
    k, c = len(lrs), num_classes
    base_lr = torch.tensor(lrs, dtype=torch.float32, device=device).repeat_interleave(c)  # (K*C,): a row per class
    wd = torch.tensor(wds, dtype=torch.float32, device=device).repeat_interleave(c)
    ws = HeadsWorkspace(x, y, batch_size, init, momentum, resolve_precision(precision, device, PRECISIONS), wd,
                        halt=halt)
    step = stepper(ws, batch_size)
    params, buf = ws.params, ws.buf  # params: (K*C, width), a row per (head, class): weights, then bias
    weight, bias = ws.weight.T.view(dim, k, c), ws.bias.view(k, c)  # views of params
    snap = params.clone()
    active = torch.ones(k, dtype=torch.bool, device=device)
    diverged_at = torch.full((k,), -1, dtype=torch.long, device=device)
    history: list[Tensor] = []
    last = torch.zeros(k, 2)
    factors = [cosine_factor(epoch, epochs) for epoch in range(epochs)]
    order = torch.randperm(n, generator=generator)
    for epoch in range(epochs):
        # a frozen head keeps its parameters through a zero learning rate, which changes only between epochs;
        # step_lr is updated in place (a CUDA graph reads it)
        torch.mul(base_lr * factors[epoch], active.repeat_interleave(c), out=ws.step_lr)
        order = order.to(device)
        labels = y[order]  # the epoch's labels in batch order: one gather instead of one per batch
        for start in range(0, n, batch_size):
            step(order[start : start + batch_size], labels[start : start + batch_size])
        if epoch + 1 < epochs:  # drawn while an accelerator still works through the epoch's queued steps
            order = torch.randperm(n, generator=generator)
        flags = ws.take_flags()
        newly = active & (flags | ws.halted if halt else flags)
        diverged_at = torch.where(newly, epoch, diverged_at)
        active &= ~newly
        # a head that diverged returns to the state it stopped with (halt) or to the end of its previous epoch
        # (rollback), and stays there (its rows may go non-finite again within every epoch); nothing to restore
        # while all heads are active
        if not bool(active.all()):
            keep = active.repeat_interleave(c).view(-1, 1)
            stopped = torch.where(ws.halted.repeat_interleave(c).view(-1, 1), ws.halted_params, snap) if halt else snap
            params.copy_(torch.where(keep, params, stopped))
            buf.copy_(torch.where(keep, buf, 0.0))
            ws.params_changed()
        snap.copy_(params)
        if eval_every_epoch or epoch == epochs - 1:
            last = evaluate_heads(weight, bias, eval_x, eval_y).cpu()
            history.append(last[:, 0])
        if on_epoch_end is not None:
            on_epoch_end(epoch)
    # rollback: a head that diverged in its first epoch has no state without a non-finite step; it scores 0
    acc = last if halt else torch.where((diverged_at == 0).cpu().view(k, 1), 0.0, last)
    return HeadsResult(
        top1=acc[:, 0],
        top5=acc[:, 1],
        history=history,
        diverged_epoch=[None if e < 0 else int(e) for e in diverged_at.tolist()],
        weight=weight,
        bias=bias,
    )
