"""Top-k accuracy as pure tensor functions, for one head or many heads side by side."""

from __future__ import annotations

import torch
from torch import Tensor


def topk_correct(logits: Tensor, target: Tensor, ks: tuple[int, ...] = (1, 5)) -> Tensor:
    """Number of rows whose target is among the ``k`` largest logits, for each ``k``.

    ``logits`` is ``(B, C)`` for one head or ``(B, K, C)`` for ``K`` heads; the result is ``(len(ks),)`` or
    ``(K, len(ks))``. ``k`` larger than ``C`` counts every row.
    """
    kmax = min(max(ks), logits.shape[-1])
    top = logits.topk(kmax, dim=-1).indices  # (..., kmax)
    shape = (target.shape[0],) + (1,) * (logits.dim() - 1)
    hits = top == target.view(shape)
    out = torch.stack([hits[..., : min(k, kmax)].any(-1).sum(0) for k in ks], dim=-1)
    return out


def percent(correct: Tensor, total: int) -> Tensor:
    """Counts as percentages of ``total``."""
    return 100.0 * correct.double() / max(total, 1)
