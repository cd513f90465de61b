"""K linear probes trained side by side in one pass over the features, each with its own lr and weight decay.

The heads are one ``(D + 1, K*C)`` float32 matrix (weights, then the bias row), so a training step is two large
matrix products for all heads instead of two small ones per head. Gradients of the mean cross-entropy are written
out by hand (softmax minus one-hot) and the SGD update is fused: ``g = grad + wd * p; buf = momentum * buf + g;
p -= lr * buf`` per head, which is what ``torch.optim.SGD`` does for one head (its first step stores ``g`` in the
buffer, the same as a zero buffer here). The bias is decayed too, as in the released code. Every head sees the same
batches in the same order; given the same initial weights and the same permutation sequence, head ``k`` follows the
trajectory of a single ``nn.Linear`` trained alone (tested, to float rounding). In the released loop each trial
instead draws its own shuffles from one generator shared by all trials in turn; either way a trial's shuffles are
uniform random permutations independent of its (lr, wd), so a head's result has the distribution of a published
trial's. Sharing them across a batch only correlates the noise of trials compared with each other (common random
numbers), which does not bias the search.

Precision: ``"32-true"`` runs every product in float32, as published. ``"bf16-mixed"`` keeps the weights, bias,
momentum buffers, softmax and loss in float32 and runs only the two matrix products in bfloat16 (inputs and outputs
rounded to bfloat16, float32 accumulation inside: the recipe of mixed-precision training); the features then carry
a constant-1 column, so the bias rides in the products (rounded to bfloat16 there like the weights). On GPUs and on
CPUs with AMX or AVX512-BF16 those products are several times faster, and they are the largest part of a step. On
the benchmark features the same heads end within 0.15 points of their float32 validation top-1; a tuned probe may
then pick another (lr, wd) (``benchmarks/bench_probe.py --fp32``). The evaluation always runs in float32.

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
    """Parameters and buffers of one training run, allocated once (fresh multi-megabyte tensors at every step cost
    the CPU page faults that take as long as the arithmetic).

    The weight and bias of all heads live in one float32 matrix ``params`` of ``(rows, K*C)``: ``rows - 1`` weight
    rows and the bias as the last row. In ``"32-true"`` the forward product adds the bias row (``addmm``) and the
    gradient product accumulates into the momentum buffer, as ``torch.optim.SGD`` would after autograd. In
    ``"bf16-mixed"`` the features carry a constant-1 column, so one bfloat16 product gives logits with the bias and
    one gives the gradient of weight and bias together (rows padded with zeros to a multiple of 16, which stay zero).
    """

    def __init__(self, x: Tensor, batch_size: int, init: tuple[Tensor, Tensor], momentum: float,
                 precision: str) -> None:
        weight, bias = init
        n, dim = x.shape
        k, c = weight.shape[1:]
        columns, device = k * c, x.device
        self.low = precision == "bf16-mixed"
        self.dim, self.momentum = dim, momentum
        rows = -(-(dim + 1) // 16) * 16 if self.low else dim + 1
        self.params = torch.zeros(rows, columns, dtype=torch.float32, device=device)
        self.params[:dim] = weight.reshape(dim, columns)
        self.params[dim] = bias.reshape(columns)
        self.buf = torch.zeros_like(self.params)  # SGD momentum of weight and bias
        self.logits_buf = torch.empty(batch_size, columns, dtype=torch.float32, device=device)
        self.probs_buf = torch.empty_like(self.logits_buf)
        # flat index of (row i, head h, class 0) in the logits; + label gives the target's logit
        self.base = (torch.arange(batch_size, device=device) * columns).view(-1, 1) \
            + (torch.arange(k, device=device) * c).view(1, -1)
        self.minus_one = torch.full((batch_size * k,), -1.0, device=device)
        if self.low:
            self.x = torch.zeros(n, rows, dtype=torch.bfloat16, device=device)
            self.x[:, :dim] = x
            self.x[:, dim] = 1.0
            self.xb = torch.empty(batch_size, rows, dtype=torch.bfloat16, device=device)
            self.params_mm = torch.empty(rows, columns, dtype=torch.bfloat16, device=device)
            self.logits_mm = torch.empty(batch_size, columns, dtype=torch.bfloat16, device=device)
            self.grad_mm = torch.empty(batch_size, columns, dtype=torch.bfloat16, device=device)
            self.params_grad_mm = torch.empty(rows, columns, dtype=torch.bfloat16, device=device)
            self.params_grad = torch.empty(rows, columns, dtype=torch.float32, device=device)
        else:
            self.x = x
            self.xb = torch.empty(batch_size, dim, dtype=x.dtype, device=device)
            self.bias_grad = torch.empty(columns, dtype=torch.float32, device=device)

    @property
    def weight(self) -> Tensor:
        return self.params[: self.dim]

    @property
    def bias(self) -> Tensor:
        return self.params[self.dim]

    def logits(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        """The batch's features (matrix dtype) and float32 logits of every head, ``(nb, K*C)``."""
        nb = len(idx)
        xb = torch.index_select(self.x, 0, idx, out=self.xb[:nb])
        if not self.low:
            return xb, torch.addmm(self.bias, xb, self.weight, out=self.logits_buf[:nb])
        product = torch.mm(xb, self.params_mm.copy_(self.params), out=self.logits_mm[:nb])
        return xb, self.logits_buf[:nb].copy_(product)

    def accumulate(self, xb: Tensor, grad: Tensor) -> None:
        """``buf = momentum * buf + xb.T @ grad / nb`` for weight and bias; ``grad`` is d(summed loss)/d(logits)."""
        nb = len(grad)
        if not self.low:
            self.buf[: self.dim].addmm_(xb.T, grad, beta=self.momentum, alpha=1.0 / nb)
            self.buf[self.dim].mul_(self.momentum).add_(torch.sum(grad, 0, out=self.bias_grad), alpha=1.0 / nb)
            return
        product = torch.mm(xb.T, self.grad_mm[:nb].copy_(grad), out=self.params_grad_mm)
        self.buf.mul_(self.momentum).add_(self.params_grad.copy_(product), alpha=1.0 / nb)


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
    ws = _Workspace(x, batch_size, init, momentum, resolve_precision(precision, device))
    params, buf = ws.params, ws.buf  # (rows, K*C): weight rows, then the bias row
    base_lr = torch.tensor(lrs, dtype=torch.float32, device=device).repeat_interleave(c)  # (K*C,)
    wd = torch.tensor(wds, dtype=torch.float32, device=device).repeat_interleave(c)
    weight, bias = ws.weight.view(dim, k, c), ws.bias.view(k, c)  # views of params
    snap = params.clone()
    active = torch.ones(k, dtype=torch.bool, device=device)
    diverged_at = torch.full((k,), -1, dtype=torch.long, device=device)
    history: list[Tensor] = []
    last = torch.zeros(k, 2)
    factors = [cosine_factor(epoch, epochs) for epoch in range(epochs)]
    for epoch in range(epochs):
        # a frozen head keeps its parameters through a zero learning rate, which changes only between epochs
        step_lr = base_lr * factors[epoch] * active.repeat_interleave(c)
        bad = torch.zeros(k, dtype=torch.bool, device=device)  # loss turned non-finite in this epoch
        order = torch.randperm(n, generator=generator).to(device)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            nb = len(idx)
            xb, logits = ws.logits(idx)
            target = ws.base[:nb] + y[idx].view(nb, 1)  # flat index of each (row, head)'s target logit
            probs = ws.probs_buf[:nb]
            torch.softmax(logits.view(nb, k, c), 2, out=probs.view(nb, k, c))
            # the cross-entropy logsumexp(z) - z_y is non-finite exactly when z_y is, or when a logit is +inf or
            # NaN, which turns the row's softmax into NaN; no host synchronisation inside the epoch
            bad |= ~torch.isfinite((torch.take(logits, target) + torch.take(probs, target)).sum(0))
            # a head whose loss turned non-finite goes on with non-finite values, alone in its columns, until the
            # epoch ends and it is rolled back
            probs.view(-1).index_add_(0, target.view(-1), ws.minus_one[: nb * k])  # d(sum loss)/d(logits)
            ws.accumulate(xb, probs)  # buf = momentum * buf + mean gradient
            buf.addcmul_(params, wd)
            params.addcmul_(buf, step_lr, value=-1.0)
        newly = active & bad
        diverged_at = torch.where(newly, epoch, diverged_at)
        active &= ~newly
        # a head that diverged returns to the state the published loop last evaluated, and stays there (its
        # columns may go non-finite again within every epoch); nothing to restore while all heads are active
        if not bool(active.all()):
            keep = active.repeat_interleave(c)
            params.copy_(torch.where(keep, params, snap))
            buf.copy_(torch.where(keep, buf, 0.0))
        snap.copy_(params)
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
