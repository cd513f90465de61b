"""Top-k counts of many heads at once: equal to ``torch.topk``'s, with NaN logits ranked above every number."""

from __future__ import annotations

import torch

from cog_pl.metrics import topk_correct


def _by_topk(logits: torch.Tensor, target: torch.Tensor, ks=(1, 5)) -> torch.Tensor:
    top = logits.topk(min(max(ks), logits.shape[-1]), dim=-1).indices
    hits = top == target.view((len(target),) + (1,) * (logits.dim() - 1))
    return torch.stack([hits[..., :k].any(-1).sum(0) for k in ks], dim=-1)


def test_counts_equal_topk_for_one_head_and_many():
    g = torch.Generator().manual_seed(0)
    for shape in ((200, 10), (200, 4, 10), (200, 3), (200, 2, 3)):
        logits = torch.randn(*shape, generator=g)
        target = torch.randint(0, shape[-1], (200,), generator=g)
        assert torch.equal(topk_correct(logits, target), _by_topk(logits, target))


def test_a_nan_logit_ranks_above_the_target_and_a_nan_target_is_never_counted():
    nan = float("nan")
    logits = torch.tensor([[0.5, nan, 0.1, 0.0, -1.0, -2.0],  # target 0: second behind the NaN
                           [nan, 0.2, 0.3, 0.0, 0.0, 0.0],  # target 0 is NaN: never counted
                           [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]])  # target 5: first
    target = torch.tensor([0, 0, 5])
    assert topk_correct(logits, target, (1, 2, 5)).tolist() == [1, 2, 2]
    assert topk_correct(logits, target, (6,)).tolist() == [3]  # k >= classes counts every row


def test_ties_go_to_the_lower_class_as_argmax_breaks_them():
    logits = torch.zeros(4, 2, 5)  # constant heads: every class tied
    target = torch.tensor([0, 1, 2, 4])
    assert topk_correct(logits, target, (1, 2, 5)).tolist() == [[1, 2, 4]] * 2
    assert topk_correct(logits[:, 0], target, (1,)).tolist() == [(logits[:, 0].argmax(-1) == target).sum().item()]


def _by_rank(logits: torch.Tensor, target: torch.Tensor, ks) -> list:
    """Row by row: the target's place among the logits, NaN first, ties in class order (argmax's)."""
    flat, heads = logits.reshape(len(target), -1, logits.shape[-1]), []
    for h in range(flat.shape[1]):
        counts = [0] * len(ks)
        for row, t in zip(flat[:, h].tolist(), target.tolist()):
            key = [(0 if v != v else 1, -v if v == v else 0, c) for c, v in enumerate(row)]  # NaN ranks first
            place = sorted(key).index(key[t]) if row[t] == row[t] else len(row)  # a NaN target: last
            counts = [n + (place < k) for n, k in zip(counts, ks)]
        heads.append(counts)
    return heads if logits.dim() == 3 else heads[0]


def test_counts_equal_a_row_by_row_ranking_with_ties_and_nan_mixed():
    g = torch.Generator().manual_seed(1)
    for shape, ties in (((300, 3, 7), True), ((300, 7), True), ((300, 2, 7), False)):
        logits = torch.randn(*shape, generator=g)
        if ties:  # coarse values: many rows hold equal logits
            logits = (logits * 2).round()
        logits[torch.rand(*shape, generator=g) < 0.03] = float("nan")
        target = torch.randint(0, shape[-1], (shape[0],), generator=g)
        ks = (1, 2, 5, 6)  # (k >= classes counts every row, NaN targets too: the test above)
        assert topk_correct(logits, target, ks).tolist() == _by_rank(logits, target, ks)
