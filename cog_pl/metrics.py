"""Top-k accuracy as pure tensor functions, one rule for every method: counts for one head or many heads side by
side (:func:`topk_correct`, the linear probe), and ranked predictions with argmax's tie rule (:func:`topk_first`,
the k-NN vote and fine-tuning) scored by :func:`accuracy`. A floor module: torch only, nothing of the package."""

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


def topk_first(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest values of each row and their columns, ordered by value (descending) and, among equal
    values, by column: lower columns win ties, also at the boundary (``torch.topk`` guarantees neither)."""
    values, cols = x.topk(k, dim=1)
    tied = (x >= values[:, -1:]).sum(dim=1) > k  # more elements reach the k-th value than fit: a tie at the cut
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(1)
        v, c = torch.sort(x[rows], dim=1, descending=True, stable=True)
        values[rows], cols[rows] = v[:, :k], c[:, :k]
    order = cols.argsort(dim=1)  # ties inside the k: by column
    values, cols = values.gather(1, order), cols.gather(1, order)
    order = values.argsort(dim=1, descending=True, stable=True)
    return values.gather(1, order), cols.gather(1, order)


def accuracy(ranked: Tensor, truth: Tensor) -> tuple[float, float]:
    """Top-1 and top-5 (%) of ranked class predictions against the true labels."""
    truth = truth.view(-1, 1).to(ranked.device)
    hit = ranked == truth
    return 100.0 * float(hit[:, :1].any(1).double().mean()), 100.0 * float(hit[:, :5].any(1).double().mean())
