"""The weighted k-NN core against a brute-force NumPy k-NN: the same neighbours, the same ranked classes, ties
broken the same way (lower train row, then lower class), whatever the chunking, precision or subset."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cog_pl.probe.knn import KS, KNNSettings, accuracy, neighbours, plan_chunks, topk_first, vote


def brute_force(train, train_y, test, classes, k, temperature=0.07, rows=None):
    """Reference: float64 similarities, neighbours by a stable sort (lower row first among ties), weights
    exp(sim / T) added per class one neighbour at a time, classes by a stable sort (lower class first)."""
    rows = np.arange(len(train)) if rows is None else np.asarray(rows)
    sims = np.asarray(test, np.float64) @ np.asarray(train, np.float64)[rows].T
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    near = np.take_along_axis(sims, order, 1)
    scores = np.zeros((len(test), classes))
    for i in range(len(test)):
        np.add.at(scores[i], np.asarray(train_y)[rows[order[i]]], np.exp(near[i] / temperature))
    return rows[order], np.argsort(-scores, axis=1, kind="stable")[:, :5]


def _features(n, dim, classes, seed):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(classes, dim, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=g)
    return F.normalize(means[y] + 1.5 * torch.randn(n, dim, generator=g, dtype=torch.float64), dim=1), y


@pytest.mark.parametrize("chunks", [(7, 13), (64, 1000), None])
def test_neighbours_and_votes_equal_brute_force_for_every_subset_and_k(chunks):
    x, y = _features(300, 16, 6, 0)
    q, _ = _features(40, 16, 6, 1)
    rng = np.random.default_rng(0)
    subsets = [None, np.sort(rng.choice(300, 120, replace=False)), np.sort(rng.choice(300, 9, replace=False))]
    found = neighbours(q, x, 25, [None if s is None else torch.from_numpy(s) for s in subsets],
                       precision="64-true", chunks=chunks)
    for s, (sims, rows) in zip(subsets, found):
        assert rows.shape == (40, min(25, 300 if s is None else len(s)))
        for k in (1, 5, 25):
            ref_rows, ref_ranked = brute_force(x.numpy(), y.numpy(), q.numpy(), 6, k, rows=s)
            assert np.array_equal(rows[:, :k].numpy(), ref_rows)
            assert np.array_equal(vote(sims, y[rows], 6, k).numpy(), ref_ranked)


def _dyadic(n, dim, seed):
    """Unit vectors with four entries of +-0.5: similarities are exact multiples of 0.25 in any precision and any
    summation order, so many are equal."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, dim), np.float32)
    for i in range(n):
        x[i, rng.choice(dim, 4, replace=False)] = rng.choice([-0.5, 0.5], 4)
    return torch.from_numpy(x)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_ties_are_broken_like_the_brute_force_in_every_chunking(precision):
    x, q = _dyadic(200, 6, 0), _dyadic(50, 6, 1)
    x = torch.cat([x, x[:50]])  # exact duplicates, later rows, other labels
    y = torch.from_numpy(np.random.default_rng(2).integers(0, 4, len(x)))
    for chunks in [(3, 7), (50, 250), (16, 64)]:
        ((sims, rows),) = neighbours(q, x, 30, precision=precision, chunks=chunks)
        for k in (1, 10, 30):
            ref_rows, ref_ranked = brute_force(x.numpy(), y.numpy(), q.numpy(), 4, k)
            assert np.array_equal(rows[:, :k].numpy(), ref_rows)
            assert np.array_equal(vote(sims, y[rows], 4, k).numpy(), ref_ranked)


def test_topk_first_keeps_the_lower_column_among_equal_values():
    x = torch.tensor([[1.0, 3.0, 2.0, 3.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    values, cols = topk_first(x, 3)
    assert cols.tolist() == [[1, 3, 2], [5, 0, 1]] and values.tolist() == [[3, 3, 2], [1, 0, 0]]


def test_small_subsets_and_accuracy():
    x, _ = _features(50, 8, 3, 3)
    ((_, rows),) = neighbours(x[:5], x, 10, [torch.tensor([4, 9])], precision="64-true")
    assert rows.shape == (5, 2) and set(rows.flatten().tolist()) <= {4, 9}
    ranked = torch.tensor([[2, 0, 1], [1, 2, 0]])
    assert accuracy(ranked, torch.tensor([2, 0])) == (50.0, 100.0)


def test_settings_and_chunk_plan_refuse_bad_values():
    assert KNNSettings().ks == KS == (10, 20, 100, 200) and KNNSettings().temperature == 0.07
    with pytest.raises(ValueError, match="ks must be increasing"):
        KNNSettings(ks=(20, 10))
    with pytest.raises(ValueError, match="temperature must be positive"):
        KNNSettings(temperature=0)
    q, block = plan_chunks(10_000, 100_000, "cpu")
    assert q * block * 16 <= 256 << 20 and q == 512
    q, block = plan_chunks(50_000, 1_281_167, "cuda", free=100 << 30)  # a plan only: nothing is allocated
    assert q * block * 16 <= 0.45 * (100 << 30)
    with pytest.raises(MemoryError, match="not enough"):
        plan_chunks(50_000, 1_281_167, "cuda", free=10 << 20)
    with pytest.raises(ValueError, match="precision '16-mixed'"):
        neighbours(x := torch.eye(3), x, 1, precision="16-mixed")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_passes_equal_the_host_and_bf16_keeps_float32_similarities():
    x, y = _features(5000, 64, 10, 4)
    q, _ = _features(300, 64, 10, 5)
    subsets = [None, torch.arange(0, 5000, 7)]
    host = neighbours(q, x, 50, subsets, precision="64-true")
    cuda = neighbours(q, x.cuda(), 50, subsets, precision="64-true")
    for (hs, hr), (cs, cr) in zip(host, cuda):
        assert torch.equal(hr, cr) and torch.allclose(hs, cs)
    ((bs, br),) = neighbours(q.float(), x.float().cuda(), 50, precision="bf16-mixed")
    assert bs.dtype == torch.float32 and len(bs.unique()) > 0.9 * bs.numel()  # not rounded to bfloat16 values
    same = vote(bs, y[br], 10, 20)[:, 0] == vote(host[0][0], y[host[0][1]], 10, 20)[:, 0]
    assert same.double().mean() > 0.97
