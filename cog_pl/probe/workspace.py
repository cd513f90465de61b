"""Parameters, buffers and the training step of K heads, allocated once per run (:func:`train_heads`'s engine).

The weights and biases of all heads live in one float32 matrix ``params`` of ``(K*C, width)``, a row per (head, class):
its ``D`` weights, then its bias. The gradient of a row is then one product ``grad.T @ features``, and per-head learning
rates and weight decays are per-row scalars. In ``"32-true"`` the forward product adds the bias (``addmm``) and the
gradient product accumulates into the momentum buffer, as ``torch.optim.SGD`` would after autograd. In ``"bf16-mixed"``
the features carry a constant-1 column, so one bfloat16 product gives logits with the bias and one gives the gradient of
weights and bias together (rows padded with zero columns to a multiple of 16, which stay zero). Fresh multi-megabyte
tensors at every step would cost the CPU page faults that take as long as the arithmetic, hence the buffers; on the CPU
each operation beyond the two products and the softmax is a pass over megabytes the caches do not hold, hence as few
operations as the arithmetic allows (a batch's labels come gathered with the epoch's order; a non-finite loss is read
from the momentum once, at the epoch's end: :meth:`HeadsWorkspace.take_flags`).

On CUDA two things remove work that is not arithmetic: the cross-entropy gradient and the update run as Triton
kernels (:mod:`cog_pl.probe.kernels`), and :class:`GraphedStep` replays full batches from a captured CUDA graph, so
a step costs one launch instead of some twenty from Python. Both compute what the eager PyTorch step computes.
"""

from __future__ import annotations

import contextlib
import functools
from types import SimpleNamespace

import torch
from torch import Tensor

from cog_pl.probe.kernels import MAX_CLASSES, ce_grad_, fused_update_supported, sgd_update_


class HeadsWorkspace:
    """One training run's state: parameters, momentum, per-row lr and wd, the divergence flags, step buffers."""

    def __init__(self, x: Tensor, y: Tensor, batch_size: int, init: tuple[Tensor, Tensor], momentum: float,
                 precision: str, wd: Tensor, fused: bool | None = None, halt: bool = False) -> None:
        """``init``: weight ``(D, K, C)`` and bias ``(K, C)``; ``wd``: ``(K*C,)``, a head's value repeated over its
        classes. ``fused``: use the Triton kernels (default: where they run, :mod:`cog_pl.probe.kernels`).
        ``halt``: keep each head's parameters as they were at the first step whose loss was non-finite, before that
        step's update (:attr:`halted`, :attr:`halted_params`): the model the published loop stops with."""
        weight, bias = init
        n, dim = x.shape
        k, c = weight.shape[1:]
        outputs, device = k * c, x.device
        self.k, self.c, self.y = k, c, y.contiguous()
        self.low = precision == "bf16-mixed"
        fused = fused_update_supported(device) if fused is None else fused
        self.fused = self.low and fused  # the update kernel (keeps params_mm, the bfloat16 weights, itself)
        self.fused_grad = fused and c <= MAX_CLASSES  # the cross-entropy gradient kernel
        self.dim, self.momentum = dim, momentum
        width = -(-(dim + 1) // 16) * 16 if self.low else dim + 1
        self.params = torch.zeros(outputs, width, dtype=torch.float32, device=device)
        self.params[:, :dim] = weight.reshape(dim, outputs).T
        self.params[:, dim] = bias.reshape(outputs)
        self.buf = torch.zeros_like(self.params)  # SGD momentum of weights and biases (scaled: see update)
        self.step_lr = torch.zeros(outputs, dtype=torch.float32, device=device)  # this epoch's lr per row
        self.wd = wd.contiguous()
        self._lr_rows, self._wd_rows = self.step_lr.view(-1, 1), self.wd.view(-1, 1)  # views: broadcast per row
        self.bad = torch.zeros(k, dtype=torch.bool, device=device)  # loss turned non-finite in this epoch
        self.halt = halt
        if halt:  # a step's check and a masked copy, on the device: no synchronisation
            self.halted = torch.zeros(k, dtype=torch.bool, device=device)
            self.halted_params = torch.zeros_like(self.params)
        self._views: dict = {}
        # the batch size the CPU's eager bfloat16 update keeps buf scaled by (see update); None: buf unscaled
        self._buf_rows = batch_size if device.type == "cpu" and self.low and not self.fused else None
        if not (self.fused_grad and self.low):  # float32 logits and gradient (the kernel reads and writes bfloat16)
            self.logits_buf = torch.empty(batch_size, outputs, dtype=torch.float32, device=device)
            # the CPU's softmax reads a row before it writes it, so it may overwrite the logits (a smaller working set
            # for the caches); elsewhere the probabilities get a buffer of their own
            in_place = device.type == "cpu" and not self.fused_grad
            self.probs_buf = self.logits_buf if in_place else torch.empty_like(self.logits_buf)
        if not self.fused_grad:
            self.minus_one = torch.full((batch_size, k, 1), -1.0, device=device)
        if self.low:
            self.x = torch.empty(n, width, dtype=torch.bfloat16, device=device)
            self.x[:, :dim] = x
            self.x[:, dim] = 1.0
            self.x[:, dim + 1 :] = 0.0
            self.xb = torch.empty(batch_size, width, dtype=torch.bfloat16, device=device)
            self.params_mm = torch.empty(outputs, width, dtype=torch.bfloat16, device=device)
            self.logits_mm = torch.empty(batch_size, outputs, dtype=torch.bfloat16, device=device)
            if self.fused_grad or self.fused:  # the kernels read one buffer while writing the other
                self.grad_mm = torch.empty(batch_size, outputs, dtype=torch.bfloat16, device=device)
                self.params_grad_mm = torch.empty(outputs, width, dtype=torch.bfloat16, device=device)
            else:  # the eager step is done with the logits (and the weights) when it writes the gradient (and its
                # product): sharing their memory keeps a step's working set smaller, which the CPU's caches notice
                self.grad_mm, self.params_grad_mm = self.logits_mm, self.params_mm
            self.params_changed()
        else:
            self.x = x
            self.xb = torch.empty(batch_size, dim, dtype=x.dtype, device=device)
            self.bias_grad = torch.empty(outputs, dtype=torch.float32, device=device)

    @property
    def weight(self) -> Tensor:
        """``(K*C, D)``, a view of ``params``."""
        return self.params[:, : self.dim]

    @property
    def bias(self) -> Tensor:
        """``(K*C,)``, a view of ``params``."""
        return self.params[:, self.dim]

    def params_changed(self) -> None:
        """Call after writing ``params`` from outside a step (the fused update keeps their bfloat16 copy itself)."""
        if self.fused:
            self.params_mm.copy_(self.params)

    def take_flags(self) -> Tensor:
        """The heads whose loss turned non-finite since the last call, ``(K,)`` bool; resets the flags.

        The kernel flags a head at the step. The eager step leaves it to the momentum: a non-finite loss is a row
        whose softmax is NaN (a logit +inf or NaN), which makes the head's whole gradient, hence its momentum, NaN
        until the head is rolled back. Weights that merely overflowed to inf make no NaN until the next step's
        softmax does, as the published loop stops only at that step's loss. (A loss that is +inf only because the
        target's logit is -inf while the rest of its row is finite needs weights near the float32 limit, which the
        protocol's ranges of lr and wd on unit-norm features never reach.)"""
        flags = self.bad.clone()
        if not self.fused_grad:
            momentum = self.buf.view(self.k, -1)
            # one reduction: a sum is NaN when a value is (or when +inf meets -inf: then look closer)
            if bool(torch.isnan(momentum.sum(1)).any()):
                flags |= torch.isnan(momentum).any(1)
        self.bad.zero_()
        return flags

    def _loss_not_finite(self, logits: Tensor, labels: Tensor) -> Tensor:
        """``(K,)``: the heads whose mean cross-entropy over the batch is not finite, the published loop's test
        (an overflow of the sum included, which the flags of :meth:`take_flags` do not see). One more pass over the
        logits per step: for exact mode only."""
        logits = logits.view(len(labels), self.k, self.c).float()
        target = labels.view(-1, 1, 1).expand(-1, self.k, 1)
        loss = torch.logsumexp(logits, 2) - logits.gather(2, target).squeeze(2)
        return ~torch.isfinite(loss.sum(0))

    def _halt(self, bad: Tensor) -> None:
        """Keep the parameters of the heads whose loss turned non-finite at this step for the first time (``bad``:
        ``(K,)``), before the step's update."""
        newly = bad & ~self.halted
        rows = newly.repeat_interleave(self.c).view(-1, 1)
        torch.where(rows, self.params, self.halted_params, out=self.halted_params)
        self.halted.logical_or_(newly)

    def forward(self, xb: Tensor, out: Tensor) -> Tensor:
        """Logits of every head on the batch's features into ``out``, ``(nb, K*C)``: bfloat16 in ``"bf16-mixed"``."""
        if not self.low:
            return torch.addmm(self.bias, xb, self.weight.T, out=out)
        weights = self.params_mm if self.fused else self.params_mm.copy_(self.params)
        return torch.mm(xb, weights.T, out=out)

    def update(self, xb: Tensor, grad: Tensor) -> None:
        """One SGD step from ``grad`` = d(summed loss)/d(logits): ``g = grad.T @ xb / nb + wd * p``,
        ``buf = momentum * buf + g``, ``p -= lr * buf``.

        On the CPU the eager bfloat16 path keeps ``nb * buf`` in ``buf`` instead (for the batch size of its last
        step), which takes the product as it comes: ``nb*buf = momentum * nb*buf + grad.T @ xb + nb*wd * p`` is one
        pass fewer over the buffer than scaling the product, and ``p -= lr/nb * nb*buf`` is the same step. Only a
        change of batch size (the last, smaller batch of an epoch, and the next full one) rescales the buffer.
        Zeroing a head's buffer and reading NaN from it (:meth:`take_flags`) hold at any scale. Not on CUDA: a
        captured graph replays full batches without the Python that tracks the scale (:class:`GraphedStep`)."""
        nb = len(grad)
        params, buf = self.params, self.buf
        if not self.low:
            buf[:, : self.dim].addmm_(grad.T, xb, beta=self.momentum, alpha=1.0 / nb)
            buf[:, self.dim].mul_(self.momentum).add_(torch.sum(grad, 0, out=self.bias_grad), alpha=1.0 / nb)
        else:
            product = torch.mm(grad.T, xb, out=self.params_grad_mm)
            if self.fused:
                sgd_update_(params, buf, product, self.params_mm, self.step_lr, self.wd, self.momentum, 1.0 / nb)
                return
            if self._buf_rows is not None:  # buf holds nb * momentum: the product as it comes
                if nb != self._buf_rows:
                    buf.mul_(nb / self._buf_rows)
                    self._buf_rows = nb
                torch.add(product, buf, alpha=self.momentum, out=buf)  # the bfloat16 product, added in float32
                buf.addcmul_(params, self._wd_rows, value=float(nb))
                params.addcmul_(buf, self._lr_rows, value=-1.0 / nb)
                return
            buf.mul_(self.momentum).add_(product, alpha=1.0 / nb)
        buf.addcmul_(params, self._wd_rows)
        params.addcmul_(buf, self._lr_rows, value=-1.0)

    def step(self, idx: Tensor, labels: Tensor | None = None) -> None:
        """Train every head on the batch ``idx`` (``labels``: ``y[idx]``, if at hand)."""
        nb, k = len(idx), self.k
        v = self._views.get(nb) or self._make_views(nb)
        xb = torch.index_select(self.x, 0, idx, out=v.xb)
        logits = self.forward(xb, v.logits_mm if self.low else v.logits)
        if self.halt:
            self._halt(self._loss_not_finite(logits, self.y[idx] if labels is None else labels))
        if self.fused_grad:  # the gradient in the products' dtype, the flags, in one kernel
            ce_grad_(logits, v.grad, self.y, idx, self.bad, k)
            self.update(xb, v.grad)
            return
        if self.low:
            v.logits.copy_(logits)
        torch.softmax(v.logits3, 2, out=v.probs3)
        target = (self.y[idx] if labels is None else labels).view(nb, 1, 1).expand(nb, k, 1)
        v.probs3.scatter_add_(2, target, v.minus_one)  # d(sum loss)/d(logits)
        self.update(xb, v.grad.copy_(v.probs) if self.low else v.probs)

    def _make_views(self, nb: int) -> SimpleNamespace:
        """The step's buffers cut to ``nb`` rows, made once per batch size (not a dozen views each step)."""
        k, c = self.k, self.c
        v = SimpleNamespace(xb=self.xb[:nb])
        if self.low:
            v.logits_mm, v.grad = self.logits_mm[:nb], self.grad_mm[:nb]
        if hasattr(self, "logits_buf"):  # float32 logits and probabilities
            v.logits, v.probs = self.logits_buf[:nb], self.probs_buf[:nb]
            v.logits3, v.probs3 = v.logits.view(nb, k, c), v.probs.view(nb, k, c)
            if not self.low:
                v.grad = v.probs
        if not self.fused_grad:
            v.minus_one = self.minus_one[:nb]
        self._views[nb] = v
        return v


class GraphedStep:
    """:meth:`HeadsWorkspace.step` for full batches replayed from a CUDA graph captured on the third one (after two
    eager warm-up steps on a side stream, as CUDA graphs require); other batch sizes run eagerly. The graph reads the
    batch's indices from a fixed buffer and every other input from the workspace's fixed tensors, which the caller
    updates in place (``step_lr``; the flags through :meth:`HeadsWorkspace.take_flags`)."""

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

    def __call__(self, idx: Tensor, labels: Tensor | None = None) -> None:
        if len(idx) != self.batch_size:
            self.ws.step(idx, labels)
            return
        if self.graph is None:
            if self.warm < self.WARMUP:
                current = torch.cuda.current_stream(self.side.device)
                self.side.wait_stream(current)
                with torch.cuda.stream(self.side):
                    self.ws.step(idx, labels)
                current.wait_stream(self.side)
                self.warm += 1
                return
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=self.side):
                self.ws.step(self.idx)  # labels, where needed, gathered inside the graph
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
