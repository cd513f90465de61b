"""The SGD update of all heads as one Triton kernel, for CUDA devices.

With batch 1024 a head's weights are as large as the batch's logits, so on a GPU a step spends most of its memory
traffic in the update: six element-wise passes over the parameters in PyTorch (bfloat16 gradient to float32,
momentum, weight decay, step, float32 parameters to bfloat16 for the next product). The kernel reads the parameters,
the momentum buffer and the bfloat16 gradient once and writes the buffer, the parameters and their bfloat16 copy
once: 20 bytes per parameter instead of 56. It computes what :meth:`cog_pl.probe.workspace.HeadsWorkspace.update`
computes in PyTorch, in the same order:

    buf = momentum * buf + alpha * grad;  buf = buf + wd * p;  p = p - lr * buf;  p_low = bfloat16(p)

with ``wd`` and ``lr`` per column (one value per head, repeated over its classes). Triton is a dependency of
PyTorch's CUDA builds; without it, or off CUDA, the PyTorch path runs. ``TRITON_INTERPRET=1`` runs the kernel on the
CPU (the tests do).
"""

from __future__ import annotations

import importlib.util
import os

import torch
from torch import Tensor

BLOCK = 1024


def fused_update_supported(device: torch.device | str) -> bool:
    """True where :func:`sgd_update_` can run: CUDA with Triton installed, or Triton's interpreter on the CPU."""
    device = torch.device(device)
    if importlib.util.find_spec("triton") is None:
        return False
    if device.type == "cuda":
        return True
    return device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


_kernel = None


def _compile():
    import triton
    import triton.language as tl

    @triton.jit
    def sgd_kernel(p_ptr, buf_ptr, grad_ptr, low_ptr, lr_ptr, wd_ptr, n, columns, momentum, alpha,
                   BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        col = offs % columns
        p = tl.load(p_ptr + offs, mask=mask)
        buf = tl.load(buf_ptr + offs, mask=mask)
        grad = tl.load(grad_ptr + offs, mask=mask).to(tl.float32)
        lr = tl.load(lr_ptr + col, mask=mask)
        wd = tl.load(wd_ptr + col, mask=mask)
        buf = buf * momentum + grad * alpha
        buf = buf + p * wd
        p = p - buf * lr
        tl.store(buf_ptr + offs, buf, mask=mask)
        tl.store(p_ptr + offs, p, mask=mask)
        tl.store(low_ptr + offs, p.to(tl.bfloat16, fp_downcast_rounding="rtne"), mask=mask)

    return sgd_kernel


def sgd_update_(params: Tensor, buf: Tensor, grad: Tensor, low: Tensor, lr: Tensor, wd: Tensor, momentum: float,
                alpha: float) -> None:
    """In place: ``buf``, ``params`` (float32, ``(rows, columns)``) and ``low`` (their bfloat16 copy) after one step
    with gradient ``alpha * grad`` (``grad`` bfloat16), per-column ``lr`` and ``wd``."""
    global _kernel
    if _kernel is None:
        _kernel = _compile()
    for t in (params, buf, grad, low):
        if not t.is_contiguous() or t.shape != params.shape:
            raise ValueError("sgd_update_ needs contiguous tensors of one shape")
    n, columns = params.numel(), params.shape[-1]
    _kernel[(-(-n // BLOCK),)](params, buf, grad, low, lr, wd, n, columns, float(momentum), float(alpha),
                               BLOCK=BLOCK)
