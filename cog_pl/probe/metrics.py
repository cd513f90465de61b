"""Top-k accuracy as pure tensor functions, for one head or many heads side by side."""

from __future__ import annotations

import torch
from torch import Tensor


def topk_correct(logits: Tensor, target: Tensor, ks: tuple[int, ...] = (1, 5)) -> Tensor:
    """Number of rows whose target is among the ``k`` largest logits, for each ``k``.

    ``logits`` is ``(B, C)`` for one head or ``(B, K, C)`` for ``K`` heads; the result is ``(len(ks),)`` or
    ``(K, len(ks))``. ``k`` larger than ``C`` counts every row. The target's rank is the number of logits above it:
    larger ones, NaN ones (a NaN target is last) and equal ones of a lower class, the order ``argmax`` breaks ties in.
    """
    shape = (target.shape[0],) + (1,) * (logits.dim() - 1)
    index = target.view(shape).expand(*logits.shape[:-1], 1)
    target_logit = torch.gather(logits, -1, index)
    lower = torch.arange(logits.shape[-1], device=logits.device) < index  # classes before the target
    above = (~(logits <= target_logit) | ((logits == target_logit) & lower)).sum(-1)  # (B,) or (B, K)
    out = torch.stack([(above < min(k, logits.shape[-1])).sum(0) if k < logits.shape[-1]
                       else torch.full_like(above[0], target.shape[0]) for k in ks], dim=-1)
    return out


def percent(correct: Tensor, total: int) -> Tensor:
    """Counts as percentages of ``total``."""
    return 100.0 * correct.double() / max(total, 1)
