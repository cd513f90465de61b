"""Weighted k-nearest-neighbour classification on frozen features (DINO's rule), in chunks, for many train subsets.

The rule (Wu et al. 2018, as DINO's ``knn_classifier``): features are L2-normalised, a query's ``k`` nearest train
features by cosine similarity vote for their class with weight ``exp(sim / T)``, ``T = 0.07``; the classes are
ranked by their summed weight. Ties are broken one way everywhere, so results do not depend on chunking, threads or
the number of ranks: among equal similarities the lower train row comes first, among equal class scores the lower
class.

:func:`neighbours` computes, in one pass over the train features, the ``k`` nearest train rows of every query within
each of several train subsets (all rows, each few-shot sample): the similarity of a query chunk and a train block is
one matrix product (bfloat16 inputs where the precision says so, float32 accumulation), shared by every subset; each
subset takes its own columns of it and keeps a running top-``k`` per query. The ``k`` of a smaller setting is a
prefix of the largest, so one pass serves every ``k``. Memory is bounded by the chunk sizes (:func:`plan_chunks`:
from the device's free memory). Under ``torch.distributed`` each rank holds a contiguous shard of the train rows and
the ranks' top-``k`` lists are merged (all_gather), giving what one process gives.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from cog_pl.device import FIT_FRACTION, free_bytes
from cog_pl.errors import CogError
from cog_pl.metrics import accuracy as accuracy  # the one top-k rule is the floor's; both stay importable here
from cog_pl.metrics import topk_first as topk_first

log = logging.getLogger(__name__)

#: DINO's temperature and the k values of the protocol (the best is chosen on the validation split).
TEMPERATURE = 0.07
KS = (10, 20, 100, 200)
#: Similarity-block bytes a CPU pass plans to use (the host has no "free memory" the plan can trust).
CPU_BLOCK_BYTES = 256 << 20
#: Bytes per element of a similarity block a plan counts: the float32 block, a subset's gathered columns, top-k's
#: temporaries.
BYTES_PER_BLOCK_ELEMENT = 16
#: The precisions a pass runs in and the dtype its matrix product takes (accumulation in float32 or wider).
DTYPES = {"32-true": torch.float32, "bf16-mixed": torch.bfloat16, "bf16-true": torch.bfloat16,
          "64-true": torch.float64}


@dataclass(frozen=True)
class KNNSettings:
    """The classifier's values: the ``ks`` tried (the best chosen on validation) and the temperature."""

    ks: tuple[int, ...] = KS
    temperature: float = TEMPERATURE

    def __post_init__(self) -> None:
        if not self.ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.ks):
            raise CogError(f"k-NN: ks must be integers of at least 1, got {list(self.ks)}")
        if list(self.ks) != sorted(set(self.ks)):
            raise CogError(f"k-NN: ks must be increasing and distinct, got {list(self.ks)}")
        if not self.temperature > 0:
            raise CogError(f"k-NN: temperature must be positive, got {self.temperature}")

    def ks_within(self, rows: int, what: str) -> tuple[int, ...]:
        """The ks that run in a search among ``rows`` train rows (``what``: which, for the log): a k above them lets
        every row vote, which is k = ``rows``, and is tried and recorded as that, never as the k asked for."""
        ks = tuple(sorted({min(k, rows) for k in self.ks}))
        over = [k for k in self.ks if k > rows]
        if over:
            log.info("%s holds %d rows: k %s run as k %d (every row votes)", what, rows, ", ".join(map(str, over)),
                     rows)
        return ks

    def as_record(self) -> dict:
        return {"ks": list(self.ks), "temperature": self.temperature}


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype of the similarity product for a Lightning precision string."""
    try:
        return DTYPES[precision]
    except KeyError:
        raise CogError(f"k-NN precision {precision!r}; expected one of {', '.join(DTYPES)}") from None


def plan_chunks(n_query: int, n_train: int, device: torch.device | str, free: int | None = None) -> tuple[int, int]:
    """(query chunk, train block) of a pass: a block of ``query chunk x train block`` similarities and its
    temporaries (:data:`BYTES_PER_BLOCK_ELEMENT` each) fill at most half of what :func:`cog_pl.device.fits` allows
    of the device's free memory (measured when ``free`` is None; the features must already be on the device), or
    :data:`CPU_BLOCK_BYTES` on the host."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free = free_bytes(dev) if free is None else free
        budget, q = int(FIT_FRACTION * free / 2), 4096
    else:
        budget, q = CPU_BLOCK_BYTES, 512
    q = max(1, min(q, n_query))
    block = max(1, min(n_train, budget // (BYTES_PER_BLOCK_ELEMENT * q)))
    if block < 256 and n_train >= 256:
        raise MemoryError(f"k-NN: {budget / 1e6:.0f} MB free on {dev} is not enough for a similarity block")
    return q, block


def merge(values: Tensor, rows: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The first ``k`` of candidate lists laid side by side in row order (each sorted, each list's rows below the
    next's): a stable sort keeps lower rows first among equal similarities."""
    order = values.argsort(dim=1, descending=True, stable=True)[:, :k]
    return values.gather(1, order), rows.gather(1, order)


def _local_subsets(subsets: Sequence[Tensor | None], offset: int, n: int) -> list[Tensor | None]:
    """Each subset's rows within this shard, as local positions (None: all rows)."""
    out = []
    for s in subsets:
        if s is None:
            out.append(None)
            continue
        s = torch.as_tensor(s, dtype=torch.int64)
        out.append(s[(s >= offset) & (s < offset + n)] - offset)
    return out


def neighbours(queries: Tensor, train: Tensor, k: int, subsets: Sequence[Tensor | None] = (None,), *,
               precision: str = "32-true", offset: int = 0, chunks: tuple[int, int] | None = None,
               group: object | None = None) -> list[tuple[Tensor, Tensor]]:
    """The ``k`` nearest train rows of every query within each subset: per subset, ``(similarities, rows)`` of
    shape ``(queries, min(k, subset size))`` on the CPU, ordered by similarity, lower rows first among ties.

    ``queries`` and ``train``: L2-normalised features (``train`` on the device the pass runs on, ``queries``
    anywhere). ``subsets``: sorted train row indices (int64), or None for all rows. ``offset``: the global row of
    ``train``'s first row (a shard under DDP); rows returned are global. ``group``: a ``torch.distributed`` process
    group (or True for the default one) whose ranks hold consecutive shards: their lists are merged.
    """
    device, dtype = train.device, compute_dtype(precision)
    n = len(train)
    distributed = group is not None
    group = None if group is True else group
    totals = [n if s is None else len(s) for s in subsets]
    local = _local_subsets(subsets, offset, n)
    if distributed:
        import torch.distributed as dist

        sizes = torch.tensor([n, *(0 if s is None else len(s) for s in local)], dtype=torch.int64)
        dist.all_reduce(sizes, group=group)  # every subset's size over all shards
        totals = [int(sizes[0]) if s is None else int(c) for s, c in zip(subsets, sizes[1:])]
    want = [min(k, t) for t in totals]
    q_chunk, block = chunks or plan_chunks(len(queries), n, device)
    data = train.to(dtype)
    blocks = [(b0, min(n, b0 + block)) for b0 in range(0, n, block)]
    cols = [[None if s is None else (s[(s >= b0) & (s < b1)] - b0).to(device) for b0, b1 in blocks] for s in local]
    out_v: list[list[Tensor]] = [[] for _ in subsets]
    out_i: list[list[Tensor]] = [[] for _ in subsets]
    for q0 in range(0, len(queries), q_chunk):
        q = queries[q0:q0 + q_chunk].to(device=device, dtype=dtype)
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        best = [(torch.empty(len(q), 0, dtype=acc, device=device),
                 torch.empty(len(q), 0, dtype=torch.int64, device=device)) for _ in subsets]
        for bi, (b0, b1) in enumerate(blocks):
            sims = _product(q, data[b0:b1], acc)
            for si, c in enumerate(cols):
                part = sims if c[bi] is None else sims[:, c[bi]]
                kk = min(want[si], part.shape[1])
                if kk == 0:
                    continue
                v, j = topk_first(part, kk)
                rows = (j if c[bi] is None else c[bi][j]) + (offset + b0)
                best[si] = merge(torch.cat([best[si][0], v], 1), torch.cat([best[si][1], rows], 1), want[si])
        if distributed:
            best = [_merge_ranks(v, i, w, group) for (v, i), w in zip(best, want)]
        for si, (v, i) in enumerate(best):
            out_v[si].append(v.cpu())
            out_i[si].append(i.cpu())
    return [(torch.cat(v), torch.cat(i)) for v, i in zip(out_v, out_i)]


def _product(q: Tensor, block: Tensor, acc: torch.dtype) -> Tensor:
    """``q @ block.T`` as ``acc``: from bfloat16 inputs, float32 out of the product itself on CUDA (no bfloat16
    rounding of the similarities); the host's product rounds its output to bfloat16 (no ``out_dtype`` there)."""
    if q.dtype == torch.bfloat16 and q.is_cuda:
        return torch.mm(q, block.T, out_dtype=acc)
    return (q @ block.T).to(acc)


def _merge_ranks(values: Tensor, rows: Tensor, k: int, group: object | None) -> tuple[Tensor, Tensor]:
    """Every rank's list merged (the ranks' shards in rank order): padded to ``k`` with -inf, gathered, merged."""
    import torch.distributed as dist

    pad = k - values.shape[1]
    if pad:
        values = torch.cat([values, values.new_full((len(values), pad), float("-inf"))], 1)
        rows = torch.cat([rows, rows.new_full((len(rows), pad), -1)], 1)
    world = dist.get_world_size(group)
    all_v, all_r = [torch.empty_like(values) for _ in range(world)], [torch.empty_like(rows) for _ in range(world)]
    dist.all_gather(all_v, values.contiguous(), group=group)
    dist.all_gather(all_r, rows.contiguous(), group=group)
    return merge(torch.cat(all_v, 1), torch.cat(all_r, 1), k)


def vote(similarities: Tensor, labels: Tensor, num_classes: int, k: int,
         temperature: float = TEMPERATURE, top: int = 5) -> Tensor:
    """The ``top`` classes of each query by the weighted vote of its first ``k`` neighbours (``labels``: theirs,
    shaped like ``similarities``): weight ``exp(sim / T)`` summed per class in float64, classes ranked by score,
    lower class first among equal scores. Returns ``(queries, min(top, num_classes))`` class indices."""
    k = min(k, similarities.shape[1])
    weights = (similarities[:, :k].double() / temperature).exp()
    scores = torch.zeros(len(similarities), num_classes, dtype=torch.float64, device=similarities.device)
    scores.scatter_add_(1, labels[:, :k], weights)
    return topk_first(scores, min(top, num_classes))[1]
