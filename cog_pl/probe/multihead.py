"""K linear probes trained side by side in one pass over the features, each with its own lr and weight decay.

The heads are one ``(D, K*C)`` weight matrix, so a training step is two large matrix products for all heads instead
of two small ones per head. Gradients of the mean cross-entropy are written out by hand and the SGD update is fused:
``g = grad + wd * p; buf = momentum * buf + g; p -= lr * buf`` per head, which is what ``torch.optim.SGD`` does for
one head (its first step stores ``g`` in the buffer, the same as a zero buffer here). The bias is decayed too, as in
the released code. Every head sees the same batches in the same order; given the same initial weights and the same
permutation sequence, head ``k`` follows the trajectory of a single ``nn.Linear`` trained alone (tested, to float
rounding). In the released loop each trial instead draws its own shuffles from one generator shared by all trials in
turn; either way a trial's shuffles are uniform random permutations independent of its (lr, wd), so a head's result
has the distribution of a published trial's. Sharing them across a batch only correlates the noise of trials
compared with each other (common random numbers), which does not bias the search.

Precision: ``"32-true"`` runs every product in float32, as published. ``"bf16-mixed"`` keeps the weights, momentum
buffers, softmax and loss in float32 and runs only the two matrix products in bfloat16 (inputs and outputs rounded
to bfloat16, float32 accumulation inside: the recipe of mixed-precision training); on GPUs and on CPUs with AMX or
AVX512-BF16 those products are several times faster, and they are the largest part of a step. On the benchmark
features the same heads end within 0.15 points of their float32 validation top-1; a tuned probe may then pick
another (lr, wd) (``benchmarks/bench_probe.py --fp32``: test top-1 52.50 with bf16, 52.18 with float32 products).
The evaluation always runs in float32.

A head whose loss turns non-finite is frozen at the state it had at the end of the previous epoch, which is the
state the published loop last evaluated; heads never influence each other. Nothing here synchronises with the
device inside an epoch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from cog_pl.probe.metrics import percent, topk_correct
from cog_pl.probe.schedule import cosine_factor

PRECISIONS = ("32-true", "bf16-mixed")


def fast_bf16(device: torch.device | str) -> bool:
    """True where bfloat16 matrix products are much faster than float32 ones: recent GPUs, CPUs with AMX/BF16."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # private, hence looked up with a default
        return any(getattr(torch.cpu, name, lambda: False)() for name in probes)
    return False


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """``"auto"`` becomes ``"bf16-mixed"`` where :func:`fast_bf16` holds, else ``"32-true"``."""
    if precision == "auto":
        return "bf16-mixed" if fast_bf16(device) else "32-true"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'auto' or one of {PRECISIONS}, got {precision!r}")
    return precision


def init_heads(dim: int, classes: int, k: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Initial (weight ``(D, K, C)``, bias ``(K, C)``) drawn like ``nn.Linear``: uniform in +-1/sqrt(D)."""
    bound = 1.0 / math.sqrt(dim)
    weight = (torch.rand(k, classes, dim, generator=generator) * 2 - 1) * bound
    bias = (torch.rand(k, classes, generator=generator) * 2 - 1) * bound
    return weight.permute(2, 0, 1).contiguous(), bias


@dataclass
class HeadsResult:
    """Outcome of training K heads: final evaluation, per-epoch history (if evaluated) and divergence epochs."""

    top1: Tensor  # (K,) percent on the evaluation set, 0 for a head that diverged in its first epoch
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


class _Workspace:
    """Buffers of one training step, allocated once: fresh multi-megabyte tensors at every step cost the CPU
    page faults that take as long as the arithmetic. Holds the features in the matrix products' dtype."""

    def __init__(self, x: Tensor, batch_size: int, columns: int, precision: str) -> None:
        self.low = precision == "bf16-mixed"
        mm_dtype = torch.bfloat16 if self.low else torch.float32
        self.x = x.to(mm_dtype)
        dim, device = x.shape[1], x.device
        self.xb = torch.empty(batch_size, dim, dtype=mm_dtype, device=device)
        self.logits_buf = torch.empty(batch_size, columns, dtype=torch.float32, device=device)
        self.weight_grad_buf = torch.empty(dim, columns, dtype=mm_dtype, device=device)
        self.bias_grad = torch.empty(columns, dtype=torch.float32, device=device)
        if self.low:
            self.weight_mm = torch.empty(dim, columns, dtype=mm_dtype, device=device)
            self.logits_mm = torch.empty(batch_size, columns, dtype=mm_dtype, device=device)
            self.grad_mm = torch.empty(batch_size, columns, dtype=mm_dtype, device=device)

    def logits(self, idx: Tensor, weight: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
        """The batch's features (matrix dtype) and float32 logits ``x @ weight + bias`` of every head."""
        nb = len(idx)
        xb = torch.index_select(self.x, 0, idx, out=self.xb[:nb])
        if not self.low:
            return xb, torch.addmm(bias, xb, weight, out=self.logits_buf[:nb])
        product = torch.mm(xb, self.weight_mm.copy_(weight), out=self.logits_mm[:nb])
        return xb, self.logits_buf[:nb].copy_(product).add_(bias)

    def weight_grad(self, xb: Tensor, grad: Tensor) -> Tensor:
        """``xb.T @ grad`` in the matrix dtype (added to float32 buffers by the caller)."""
        if self.low:
            grad = self.grad_mm[: len(grad)].copy_(grad)
        return torch.mm(xb.T, grad, out=self.weight_grad_buf)


@torch.no_grad()
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
) -> HeadsResult:
    """Train ``len(lrs)`` heads on normalised features ``x``; evaluate on ``(eval_x, eval_y)``.

    Batches are drawn by index from a ``torch.randperm`` per epoch of ``generator`` (on the CPU, like the published
    loop). The evaluation runs after the last epoch, or after every epoch when ``eval_every_epoch``.
    """
    device, n, dim = x.device, x.shape[0], x.shape[1]
    k, c = len(lrs), num_classes
    ws = _Workspace(x, batch_size, k * c, resolve_precision(precision, device))
    base_lr = torch.tensor(lrs, dtype=torch.float32, device=device).repeat_interleave(c)  # (K*C,)
    wd = torch.tensor(wds, dtype=torch.float32, device=device).repeat_interleave(c)
    weight, bias = (t.to(device=device, dtype=torch.float32).clone() for t in init)
    w2, b1 = weight.view(dim, k * c), bias.view(k * c)
    buf_w, buf_b = torch.zeros_like(w2), torch.zeros_like(b1)
    snap_w, snap_b = w2.clone(), b1.clone()
    active = torch.ones(k, dtype=torch.bool, device=device)
    diverged_at = torch.full((k,), -1, dtype=torch.long, device=device)
    history: list[Tensor] = []
    last = torch.zeros(k, 2)
    factors = [cosine_factor(epoch, epochs) for epoch in range(epochs)]
    for epoch in range(epochs):
        # frozen heads get a zero gradient and a zero learning rate; both change only between epochs
        step_lr = base_lr * factors[epoch] * active.repeat_interleave(c)
        scale = active.float() / batch_size  # d(mean loss)/d(logits) = (softmax - onehot) / batch
        bad = torch.zeros(k, dtype=torch.bool, device=device)  # loss turned non-finite in this epoch
        order = torch.randperm(n, generator=generator).to(device)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            yb, nb = y[idx], len(idx)
            if nb != batch_size:
                scale = active.float() / nb
            xb, logits = ws.logits(idx, w2, b1)
            logits = logits.view(nb, k, c)
            logits.sub_(logits.amax(dim=2, keepdim=True))  # shifted: every softmax pass below is stable
            target = yb.view(nb, 1, 1).expand(nb, k, 1)
            target_logit = logits.gather(2, target)
            probs = logits.exp_()
            total = probs.sum(dim=2, keepdim=True)
            bad |= ~torch.isfinite((total.log() - target_logit).sum(0).view(k))  # cross-entropy of each head
            # a head whose loss turned non-finite goes on with non-finite values, alone in its columns, until the
            # epoch ends and it is rolled back; no host synchronisation inside the epoch
            probs.mul_(scale.view(1, k, 1) / total)
            probs.scatter_add_(2, target, (-scale).view(1, k, 1).expand(nb, k, 1))  # - onehot / batch
            grad = probs.view(nb, k * c)
            buf_w.mul_(momentum).add_(ws.weight_grad(xb, grad)).addcmul_(w2, wd)
            w2.addcmul_(buf_w, step_lr, value=-1.0)
            buf_b.mul_(momentum).add_(torch.sum(grad, 0, out=ws.bias_grad)).addcmul_(b1, wd)
            b1.addcmul_(buf_b, step_lr, value=-1.0)
        newly = active & bad
        diverged_at = torch.where(newly, epoch, diverged_at)
        active &= ~newly
        # a head that diverged this epoch returns to the state the published loop last evaluated, and stays there
        keep = active.repeat_interleave(c)
        for param, snap, buf in ((w2, snap_w, buf_w), (b1, snap_b, buf_b)):
            param.copy_(torch.where(keep, param, snap))
            buf.copy_(torch.where(keep, buf, 0.0))
            snap.copy_(param)
        if eval_every_epoch or epoch == epochs - 1:
            last = evaluate_heads(weight, bias, eval_x, eval_y).cpu()
            history.append(last[:, 0])
        if on_epoch_end is not None:
            on_epoch_end(epoch)
    acc = torch.where((diverged_at == 0).cpu().view(k, 1), 0.0, last)  # the published loop returns 0 then
    return HeadsResult(
        top1=acc[:, 0],
        top5=acc[:, 1],
        history=history,
        diverged_epoch=[None if e < 0 else int(e) for e in diverged_at.tolist()],
        weight=weight,
        bias=bias,
    )
