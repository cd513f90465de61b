"""Parameters, buffers and the training step of K heads, allocated once per run (:func:`train_heads`'s engine).

The weight and bias of all heads live in one float32 matrix ``params`` of ``(rows, K*C)``: ``rows - 1`` weight rows
and the bias as the last row. In ``"32-true"`` the forward product adds the bias row (``addmm``) and the gradient
product accumulates into the momentum buffer, as ``torch.optim.SGD`` would after autograd. In ``"bf16-mixed"`` the
features carry a constant-1 column, so one bfloat16 product gives logits with the bias and one gives the gradient of
weight and bias together (rows padded with zeros to a multiple of 16, which stay zero). Fresh multi-megabyte
tensors at every step would cost the CPU page faults that take as long as the arithmetic, hence the buffers.

On CUDA two things remove work that is not arithmetic: the cross-entropy gradient and the update run as Triton
kernels (:mod:`cog_pl.probe.kernels`), and :class:`GraphedStep` replays full batches from a captured CUDA graph, so
a step costs one launch instead of some twenty from Python. Both compute what the eager PyTorch step computes.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import Tensor

from cog_pl.probe.kernels import MAX_CLASSES, ce_grad_, fused_update_supported, sgd_update_


class HeadsWorkspace:
    """One training run's state: parameters, momentum, per-column lr and wd, the divergence flags, step buffers."""

    def __init__(self, x: Tensor, y: Tensor, batch_size: int, init: tuple[Tensor, Tensor], momentum: float,
                 precision: str, wd: Tensor, fused: bool | None = None) -> None:
        """``fused``: use the Triton kernels (default: where they run, :mod:`cog_pl.probe.kernels`)."""
        weight, bias = init
        n, dim = x.shape
        k, c = weight.shape[1:]
        columns, device = k * c, x.device
        self.k, self.c, self.y, self.wd = k, c, y.contiguous(), wd
        self.low = precision == "bf16-mixed"
        fused = fused_update_supported(device) if fused is None else fused
        self.fused = self.low and fused  # the update kernel (keeps params_mm, the bfloat16 weights, itself)
        self.fused_grad = fused and c <= MAX_CLASSES  # the cross-entropy gradient kernel
        self.dim, self.momentum = dim, momentum
        rows = -(-(dim + 1) // 16) * 16 if self.low else dim + 1
        self.params = torch.zeros(rows, columns, dtype=torch.float32, device=device)
        self.params[:dim] = weight.reshape(dim, columns)
        self.params[dim] = bias.reshape(columns)
        self.buf = torch.zeros_like(self.params)  # SGD momentum of weight and bias
        self.step_lr = torch.zeros(columns, dtype=torch.float32, device=device)  # this epoch's lr per column
        self.bad = torch.zeros(k, dtype=torch.bool, device=device)  # loss turned non-finite in this epoch
        if not (self.fused_grad and self.low):  # float32 logits and gradient (the kernel reads and writes bfloat16)
            self.logits_buf = torch.empty(batch_size, columns, dtype=torch.float32, device=device)
            self.probs_buf = torch.empty_like(self.logits_buf)
        if not self.fused_grad:
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
            if not self.fused:
                self.params_grad = torch.empty(rows, columns, dtype=torch.float32, device=device)
            self.params_changed()
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

    def params_changed(self) -> None:
        """Call after writing ``params`` from outside a step (the fused update keeps their bfloat16 copy itself)."""
        if self.fused:
            self.params_mm.copy_(self.params)

    def forward(self, xb: Tensor) -> Tensor:
        """Logits of every head on the batch's features, ``(nb, K*C)``: bfloat16 in ``"bf16-mixed"``."""
        nb = len(xb)
        if not self.low:
            return torch.addmm(self.bias, xb, self.weight, out=self.logits_buf[:nb])
        weights = self.params_mm if self.fused else self.params_mm.copy_(self.params)
        return torch.mm(xb, weights, out=self.logits_mm[:nb])

    def update(self, xb: Tensor, grad: Tensor) -> None:
        """One SGD step from ``grad`` = d(summed loss)/d(logits): ``g = xb.T @ grad / nb + wd * p``,
        ``buf = momentum * buf + g``, ``p -= lr * buf``."""
        nb = len(grad)
        params, buf = self.params, self.buf
        if not self.low:
            buf[: self.dim].addmm_(xb.T, grad, beta=self.momentum, alpha=1.0 / nb)
            buf[self.dim].mul_(self.momentum).add_(torch.sum(grad, 0, out=self.bias_grad), alpha=1.0 / nb)
        else:
            low_grad = grad if grad.dtype == torch.bfloat16 else self.grad_mm[:nb].copy_(grad)
            product = torch.mm(xb.T, low_grad, out=self.params_grad_mm)
            if self.fused:
                sgd_update_(params, buf, product, self.params_mm, self.step_lr, self.wd, self.momentum, 1.0 / nb)
                return
            buf.mul_(self.momentum).add_(self.params_grad.copy_(product), alpha=1.0 / nb)
        buf.addcmul_(params, self.wd)
        params.addcmul_(buf, self.step_lr, value=-1.0)

    def step(self, idx: Tensor) -> None:
        """Train every head on the batch ``idx``; flags in ``bad`` the heads whose loss turned non-finite."""
        nb, k, c = len(idx), self.k, self.c
        xb = torch.index_select(self.x, 0, idx, out=self.xb[:nb])
        logits = self.forward(xb)
        if self.fused_grad:  # the gradient in the products' dtype, the flags, in one kernel
            grad = self.grad_mm[:nb] if self.low else self.probs_buf[:nb]
            ce_grad_(logits, grad, self.y, idx, self.bad, k)
            self.update(xb, grad)
            return
        if self.low:
            logits = self.logits_buf[:nb].copy_(logits)
        target = self.base[:nb] + self.y[idx].view(nb, 1)  # flat index of each (row, head)'s target logit
        probs = self.probs_buf[:nb]
        torch.softmax(logits.view(nb, k, c), 2, out=probs.view(nb, k, c))
        # a row's cross-entropy logsumexp(z) - z_y is non-finite exactly when z_y is, or when a logit is +inf or NaN,
        # which turns the row's softmax into NaN (as in the kernel, row by row); no host synchronisation inside the
        # epoch
        self.bad |= ~torch.isfinite(torch.take(logits, target) + torch.take(probs, target)).all(0)
        # a head whose loss turned non-finite goes on with non-finite values, alone in its columns, until the epoch
        # ends and it is rolled back
        probs.view(-1).index_add_(0, target.view(-1), self.minus_one[: nb * k])  # d(sum loss)/d(logits)
        self.update(xb, probs)


class GraphedStep:
    """:meth:`HeadsWorkspace.step` for full batches replayed from a CUDA graph captured on the third one (after two
    eager warm-up steps on a side stream, as CUDA graphs require); other batch sizes run eagerly. The graph reads the
    batch's indices from a fixed buffer and every other input from the workspace's fixed tensors, which the caller
    updates in place (``step_lr``, ``bad``)."""

    WARMUP = 2

    def __init__(self, ws: HeadsWorkspace, batch_size: int) -> None:
        self.ws, self.batch_size = ws, batch_size
        device = ws.params.device
        self.idx = torch.zeros(batch_size, dtype=torch.long, device=device)
        # warm-up and capture on a stream of the workspace's device (torch.cuda.graph's default capture stream is
        # made once per process, on whichever device was current then)
        self.side = torch.cuda.Stream(device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.warm = 0

    def __call__(self, idx: Tensor) -> None:
        if len(idx) != self.batch_size:
            self.ws.step(idx)
            return
        if self.graph is None:
            if self.warm < self.WARMUP:
                current = torch.cuda.current_stream(self.side.device)
                self.side.wait_stream(current)
                with torch.cuda.stream(self.side):
                    self.ws.step(idx)
                current.wait_stream(self.side)
                self.warm += 1
                return
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=self.side):
                self.ws.step(self.idx)
        self.idx.copy_(idx)
        self.graph.replay()


def stepper(ws: HeadsWorkspace, batch_size: int, graphs: bool | None = None):
    """The step function of a run: a :class:`GraphedStep` on CUDA (unless ``graphs`` is False), else ``ws.step``."""
    if graphs is None:
        graphs = ws.params.device.type == "cuda"
    return GraphedStep(ws, batch_size) if graphs else ws.step


def on_device_of_first_argument(fn):
    """Run ``fn`` with the CUDA device of its first (tensor) argument current: Triton kernels, streams and graph
    captures use the current device, which is not the data's on ``cuda:1``."""

    @functools.wraps(fn)
    def wrapper(x: Tensor, *args, **kwargs):
        context = torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()
        with context:
            return fn(x, *args, **kwargs)

    return wrapper
