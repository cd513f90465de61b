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
    classes = logits.shape[-1]
    index = target.view(shape).expand(*logits.shape[:-1], 1)
    target_logit = torch.gather(logits, -1, index)
    # rank = classes - #(at or below the target): larger and NaN logits count (a NaN target ranks last); masks are
    # summed as bytes into int32 (a bool tensor summed into int64 takes several times as long as the comparison)
    rank = classes - _count(logits <= target_logit)
    equal = logits == target_logit
    if bool((_count(equal) > 1).any()):  # a tie besides the target itself: equal logits of lower classes count
        rank += _count(equal & (torch.arange(classes, device=logits.device) < index))
    out = torch.stack([(rank < min(k, classes)).sum(0) if k < classes
                       else torch.full_like(rank[0], target.shape[0], dtype=torch.long) for k in ks], dim=-1)
    return out.long()


def _count(mask: Tensor) -> Tensor:
    """True values along the last dimension, as int32."""
    return mask.view(torch.uint8).sum(-1, dtype=torch.int32)


def percent(correct: Tensor, total: int) -> Tensor:
    """Counts as percentages of ``total``."""
    return 100.0 * correct.double() / max(total, 1)
