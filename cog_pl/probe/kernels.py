"""The probe's training step as two Triton kernels around the two matrix products, for CUDA devices.

``ce_grad_`` turns one batch's logits into the gradient of the summed cross-entropy (softmax minus one-hot) and flags
the heads whose loss is non-finite, in one pass over the logits; PyTorch takes some twelve kernels for it (a float32
copy, the softmax, the target gathers, the finiteness test, the one-hot subtraction, the bfloat16 copy), each a
launch that costs more than its arithmetic at small head counts.

``sgd_update_`` is the update. With batch 1024 a head's weights are as large as the batch's logits, so on a GPU a
step spends most of its memory traffic in the update: six element-wise passes over the parameters in PyTorch
(bfloat16 gradient to float32, momentum, weight decay, step, float32 parameters to bfloat16 for the next product).
The kernel reads the parameters, the momentum buffer and the bfloat16 gradient once and writes the buffer, the
parameters and their bfloat16 copy once: 20 bytes per parameter instead of 56. It computes what
:meth:`cog_pl.probe.workspace.HeadsWorkspace.update` computes in PyTorch, in the same order:

    buf = momentum * buf + alpha * grad;  buf = buf + wd * p;  p = p - lr * buf;  p_low = bfloat16(p)

with ``wd`` and ``lr`` per row (a row per (head, class); a head's value repeated over its classes). Triton is a
dependency of PyTorch's CUDA builds; without it, or off CUDA, the PyTorch step runs. Under ``TRITON_INTERPRET=1`` the
kernels run on the CPU when asked for explicitly (the tests do).
"""

from __future__ import annotations

import contextlib
import importlib.util

import torch
from torch import Tensor

BLOCK = 1024
MAX_CLASSES = 16384  # ce_grad_ holds a head's logits of one row in registers


def fused_update_supported(device: torch.device | str) -> bool:
    """True where the kernels run by default: CUDA devices with Triton installed. (On the CPU they run only when
    asked for, under ``TRITON_INTERPRET=1``: slowly, for tests.)"""
    return torch.device(device).type == "cuda" and importlib.util.find_spec("triton") is not None


def _on_device(t: Tensor):
    """Triton launches on the current CUDA device: make it ``t``'s (``cuda:1`` data from a ``cuda:0`` thread)."""
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


_compiled = None


def _compile():
    import triton
    import triton.language as tl

    @triton.jit
    def sgd_kernel(p_ptr, buf_ptr, grad_ptr, low_ptr, lr_ptr, wd_ptr, n, width, momentum, alpha,
                   BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        row = offs // width
        p = tl.load(p_ptr + offs, mask=mask)
        buf = tl.load(buf_ptr + offs, mask=mask)
        grad = tl.load(grad_ptr + offs, mask=mask).to(tl.float32)
        lr = tl.load(lr_ptr + row, mask=mask)
        wd = tl.load(wd_ptr + row, mask=mask)
        buf = buf * momentum + grad * alpha
        buf = buf + p * wd
        p = p - buf * lr
        tl.store(buf_ptr + offs, buf, mask=mask)
        tl.store(p_ptr + offs, p, mask=mask)
        tl.store(low_ptr + offs, p.to(tl.bfloat16, fp_downcast_rounding="rtne"), mask=mask)

    @triton.jit
    def ce_grad_kernel(logits_ptr, grad_ptr, y_ptr, idx_ptr, bad_ptr, k, classes, BLOCK_C: tl.constexpr):
        row, head = tl.program_id(0), tl.program_id(1)
        offs = tl.arange(0, BLOCK_C)
        mask = offs < classes
        start = row.to(tl.int64) * k * classes + head * classes
        z = tl.load(logits_ptr + start + offs, mask=mask, other=-float("inf")).to(tl.float32)
        label = tl.load(y_ptr + tl.load(idx_ptr + row))
        z_max = tl.max(z, axis=0)
        e = tl.exp(z - z_max)
        p = e / tl.sum(e, axis=0)
        is_target = offs == label
        # as the eager step: the loss logsumexp(z) - z_y is non-finite exactly when z_y + p_y is
        check = tl.sum(tl.where(is_target, z + p, 0.0), axis=0)
        tl.store(bad_ptr + head, 1, mask=(check != check) | (tl.abs(check) == float("inf")))
        grad = tl.where(is_target, p - 1.0, p)
        tl.store(grad_ptr + start + offs, grad.to(grad_ptr.dtype.element_ty), mask=mask)

    return sgd_kernel, ce_grad_kernel


def ce_grad_(logits: Tensor, grad: Tensor, y: Tensor, idx: Tensor, bad: Tensor, k: int) -> None:
    """``grad`` (``(nb, K*C)``) = softmax(logits) - one-hot(y[idx]) per head; ``bad[h]`` set to True where head
    ``h``'s loss is non-finite on some row (never reset here). Up to ``MAX_CLASSES`` classes."""
    kernels = _kernels()
    nb, columns = logits.shape
    classes = columns // k
    tensors = (logits, grad, y, idx, bad)
    if not (all(t.is_contiguous() and t.device == logits.device for t in tensors) and grad.shape == logits.shape
            and bad.dtype == torch.bool):
        raise ValueError("ce_grad_ needs contiguous tensors on one device, logits and gradient of one shape and a "
                         "bool flag per head")
    with _on_device(logits):
        kernels[1][(nb, k)](logits, grad, y, idx, bad.view(torch.uint8), k, classes,
                            BLOCK_C=max(16, 1 << (classes - 1).bit_length()))


def _kernels():
    global _compiled
    if _compiled is None:
        _compiled = _compile()
    return _compiled


def sgd_update_(params: Tensor, buf: Tensor, grad: Tensor, low: Tensor, lr: Tensor, wd: Tensor, momentum: float,
                alpha: float) -> None:
    """In place: ``buf``, ``params`` (float32, ``(rows, width)``) and ``low`` (their bfloat16 copy) after one step
    with gradient ``alpha * grad`` (``grad`` bfloat16), per-row ``lr`` and ``wd``."""
    for t in (params, buf, grad, low):
        if not t.is_contiguous() or t.shape != params.shape:
            raise ValueError("sgd_update_ needs contiguous tensors of one shape")
    if not (lr.is_contiguous() and wd.is_contiguous() and lr.numel() == wd.numel() == params.shape[0]):
        raise ValueError("sgd_update_ needs contiguous lr and wd with a value per row")
    n, width = params.numel(), params.shape[-1]
    with _on_device(params):
        _kernels()[0][(-(-n // BLOCK),)](params, buf, grad, low, lr, wd, n, width, float(momentum), float(alpha),
                                         BLOCK=BLOCK)
