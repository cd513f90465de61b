"""The closed-form ridge probe's numerics: least squares with an L2 penalty, every penalty of a grid solved from one
eigendecomposition of a train sample, as big_vision's few-shot evaluator computes it.

Source: google-research/big_vision, ``big_vision/evaluators/fewshot_lsr.py`` (commit 1475d53d, the file's last
change; read in the snapshot at 0127fb6b), ``_precompute_cache`` and ``_eig_fewshot_acc_fn``: targets ``2 * onehot
- 1``; a constant feature :data:`BIAS_CONSTANT` appended (a bias the penalty hardly touches); with N rows of
dimension D (the constant included), the eigendecomposition ``q diag(e) q^T`` of ``X^T X`` when N >= D, else of
``X X^T``; for any penalty ``l``, ``W = lhs diag(1 / (e + l)) rhs`` with ``lhs = q``, ``rhs = q^T X^T Y`` (N >= D)
or ``lhs = X^T q``, ``rhs = q^T Y`` (N < D), which is ``(X^T X + l I)^-1 X^T Y``; the prediction is the argmax of
``X W``.

Where this benchmark's protocol differs from big_vision's evaluator (docs/probes.md):

- **features**: the rows as the linear probe reads them (L2-normalised under ``protocol.normalize``), where
  big_vision standardises each feature by the train sample's mean and standard deviation;
- **penalty**: a grid (:data:`REGS` by default), the one of the best top-1 on the protocol's 20 % held-out split
  chosen (the larger among equals) and the head refitted with it on the cell's final train sample; big_vision fits
  one fixed ``l2_reg`` (``2 ** 10``, ``configs/common_fewshot.py``) on its sample, with no held-out choice;
- **samples**: the linear probe's (:func:`cog_pl.data.sampling.tuning_indices` for the choice,
  :func:`~cog_pl.data.sampling.final_indices` for the refit), where big_vision takes the first N rows of each class
  in a seeded permutation;
- **precision**: float64 throughout (the moments, their eigendecomposition, the weights and the scores), where
  big_vision runs in JAX's default float32 on the host. The constant column makes the largest eigenvalue about
  ``1e4 N`` while the smallest penalty scanned is ``2 ** -10``: float32's relative error of about ``6e-8`` on the
  moments would shift the small eigenvalues by about ``6e-4 N``, more than the small penalties themselves.

Everything here is a function of tensors, labels and an explicit seed (the samples'); the test features enter only
:meth:`RidgeProbe.test`, after the penalty is chosen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from cog_pl.data.sampling import final_indices, tuning_indices
from cog_pl.errors import CogError
from cog_pl.metrics import accuracy, topk_first

__all__ = ["BIAS_CONSTANT", "DTYPE", "REGS", "Choice", "Moments", "RidgeProbe", "RidgeSystem", "check_regs",
           "choose_reg", "design", "moments", "solve", "targets"]

#: big_vision's constant feature (``fewshot_lsr.BIAS_CONSTANT``): large, so the bias is almost free of the penalty.
BIAS_CONSTANT = 100.0
#: The precision of every product and of the eigendecomposition (the module's docstring says why).
DTYPE = torch.float64
PRECISION = "64-true"
#: The penalties tried by default: 2^-10, 2^-8, ..., 2^20 (big_vision's fixed 2^10 among them).
REGS = tuple(2.0 ** e for e in range(-10, 21, 2))
#: Rows per float64 chunk of the moments and the scores (a chunk's products, not the features, live in float64).
CHUNK_ROWS = 8192
#: Bytes of one chunk's scores of every penalty (float64, penalties x rows x classes): the rows per chunk follow.
SCORE_BYTES = 1 << 27


def check_regs(regs: Sequence[float], what: str = "ridge regs") -> tuple[float, ...]:
    """The penalties, ascending; none, a repeated one, or one not finite and above 0 refused in one line."""
    values = tuple(float(r) for r in regs)
    bad = [r for r in values if not (math.isfinite(r) and r > 0)]
    if not values or bad:
        raise CogError(f"{what} {list(regs)}: give one or more finite penalties above 0"
                       + (f" ({', '.join(map(str, bad))} is not)" if bad else ""))
    if len(set(values)) != len(values):
        raise CogError(f"{what} {list(regs)}: a penalty is given twice")
    return tuple(sorted(values))


def design(x: Tensor) -> Tensor:
    """``x`` in float64 with big_vision's constant column appended: the rows the ridge solution multiplies."""
    x = x.to(DTYPE)
    return torch.cat([x, x.new_full((x.shape[0], 1), BIAS_CONSTANT)], dim=1)


def targets(y: Tensor, num_classes: int) -> Tensor:
    """big_vision's regression targets: one-hot rows rescaled into {-1, 1}, float64."""
    return 2.0 * F.one_hot(y.long(), num_classes).to(DTYPE) - 1.0


@dataclass
class Moments:
    """``X^T X`` and ``X^T Y`` of a sample (the constant column included) and its row count: what the ridge
    solution of a sample with N >= D needs. Moments of disjoint samples add (and subtract)."""

    xx: Tensor
    xy: Tensor
    rows: int

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.xx + other.xx, self.xy + other.xy, self.rows + other.rows)

    def __sub__(self, other: Moments) -> Moments:
        return Moments(self.xx - other.xx, self.xy - other.xy, self.rows - other.rows)


def _index(rows: np.ndarray | Tensor | None, n: int, device: torch.device) -> Tensor:
    if rows is None:
        return torch.arange(n, device=device)
    if isinstance(rows, Tensor):
        return rows.long().to(device)
    return torch.from_numpy(np.asarray(rows, dtype=np.int64)).to(device)


def moments(x: Tensor, y: Tensor, num_classes: int, rows: np.ndarray | Tensor | None = None,
            chunk: int = CHUNK_ROWS) -> Moments:
    """The :class:`Moments` of ``rows`` of ``x`` (all rows: None), accumulated in float64 a chunk of rows at a time
    (``x`` stays in its own dtype)."""
    index = _index(rows, len(x), x.device)
    dim = x.shape[1] + 1
    xx = torch.zeros(dim, dim, dtype=DTYPE, device=x.device)
    xy = torch.zeros(dim, num_classes, dtype=DTYPE, device=x.device)
    labels = y.to(x.device)
    for start in range(0, len(index), chunk):
        part = index[start:start + chunk]
        xt = design(x[part])
        xx += xt.T @ xt
        xy += xt.T @ targets(labels[part], num_classes)
    return Moments(xx, xy, len(index))


@dataclass
class RidgeSystem:
    """A sample's eigendecomposition in big_vision's ``lhs diag(1 / (e + l)) rhs`` form: every penalty's weights
    (:meth:`weights`) and scores (:meth:`scores`) from it, no further decomposition."""

    eigs: Tensor  # (K,)
    lhs: Tensor  # (D + 1, K)
    rhs: Tensor  # (K, C)
    rows: int

    def scale(self, reg: float) -> Tensor:
        return 1.0 / (self.eigs + reg)

    def weights(self, reg: float) -> Tensor:
        """The ``(D + 1, C)`` ridge solution ``(X^T X + reg I)^-1 X^T Y`` (its last row: the bias, over
        :data:`BIAS_CONSTANT`)."""
        return (self.lhs * self.scale(reg)) @ self.rhs

    def project(self, x: Tensor) -> Tensor:
        """``design(x) @ lhs``: the part of the scores shared by every penalty."""
        return design(x) @ self.lhs

    def scores(self, projected: Tensor, reg: float) -> Tensor:
        """The scores ``design(x) @ weights(reg)`` of rows already :meth:`projected <project>` (the penalty's scaling
        applied to ``rhs``, K x C, rather than to the rows)."""
        return projected @ self.scaled([reg])[0]

    def scaled(self, regs: Sequence[float]) -> Tensor:
        """``diag(1 / (e + reg)) rhs`` of each penalty, ``(R, K, C)``: every penalty's scores in one product."""
        return torch.stack([self.scale(reg)[:, None] * self.rhs for reg in regs])


def solve(x: Tensor, y: Tensor, num_classes: int, rows: np.ndarray | Tensor | None = None, *,
          known: Moments | None = None, chunk: int = CHUNK_ROWS) -> RidgeSystem:
    """The :class:`RidgeSystem` of ``rows`` of ``x`` (all: None): with N rows of D columns (the constant included),
    one eigendecomposition of ``X^T X`` (D x D; ``known``: the sample's moments, already summed) when N >= D, else of
    ``X X^T`` (N x N), big_vision's two cases. Eigenvalues below 0 (round-off: both matrices are positive
    semi-definite) are taken as 0."""
    index = _index(rows, len(x), x.device)
    n, dim = len(index), x.shape[1] + 1
    if n == 0:
        raise CogError("ridge: a train sample with no rows")
    if n >= dim:
        m = known if known is not None else moments(x, y, num_classes, index, chunk)
        eigs, q = torch.linalg.eigh(m.xx)
        return RidgeSystem(eigs.clamp_min(0.0), q, q.T @ m.xy, n)
    xt = design(x[index])
    eigs, q = torch.linalg.eigh(xt @ xt.T)
    return RidgeSystem(eigs.clamp_min(0.0), xt.T @ q, q.T @ targets(y.to(x.device)[index], num_classes), n)


def score(system: RidgeSystem, x: Tensor, y: Tensor, regs: Sequence[float], rows: np.ndarray | Tensor | None = None,
          rank: float | None = None, chunk: int = CHUNK_ROWS) -> tuple[dict[float, float], Tensor | None]:
    """Top-1 (%) of every penalty of ``regs`` on ``rows`` of ``x`` (all: None) against ``y`` (ties to the lower
    class: argmax's rule, which :func:`cog_pl.metrics.topk_correct` follows) and, with ``rank`` (a penalty), that
    penalty's ranked top-5 classes of each row (:func:`cog_pl.metrics.topk_first`, the same tie rule)."""
    if rank is not None and rank not in regs:
        raise CogError(f"ridge: penalty {rank} is not among those scored ({list(regs)})")
    index = _index(rows, len(x), x.device)
    labels = y.to(x.device)
    scaled = system.scaled(regs)
    at = None if rank is None else list(regs).index(rank)
    correct = torch.zeros(len(regs), dtype=torch.long, device=x.device)
    ranked: list[Tensor] = []
    step = max(1, min(chunk, SCORE_BYTES // (8 * len(regs) * scaled.shape[2])))  # a chunk's (R, rows, C) scores
    for start in range(0, len(index), step):
        part = index[start:start + step]
        logits = system.project(x[part]) @ scaled  # (R, rows, C): every penalty's in one product
        correct += (logits.argmax(2) == labels[part]).sum(1)  # the first of equal scores: topk_correct's rule
        if at is not None:
            ranked.append(topk_first(logits[at], min(5, logits.shape[2]))[1].cpu())
    top1 = {reg: 100.0 * c / max(len(index), 1) for reg, c in zip(regs, correct.tolist())}
    if rank is None:
        return top1, None
    return top1, torch.cat(ranked) if ranked else torch.empty(0, min(5, system.rhs.shape[1]), dtype=torch.long)


def choose_reg(val_top1: Mapping[float, float]) -> float:
    """The penalty of the best validation top-1; the larger (the more regularised solution) among equals."""
    return max(val_top1, key=lambda r: (val_top1[r], r))


@dataclass(frozen=True)
class Choice:
    """A cell's penalty chosen on held-out data: every penalty's validation top-1, the chosen one, the rows used."""

    reg: float
    val_top1_by_reg: dict[float, float]
    tuning_rows: np.ndarray
    val_rows: np.ndarray


@dataclass(frozen=True)
class Tested:
    """A cell's refitted head on test: every penalty's test top-1 on the same refitted solutions (``oracle``: the best
    of them), the chosen one's top-1, top-5 and ranked classes, and the final train rows."""

    test_top1_by_reg: dict[float, float]
    test_top1: float
    test_top5: float
    ranked: Tensor
    train_rows: np.ndarray

    @property
    def oracle_reg(self) -> float:
        """The penalty of the best test top-1 (the larger among equals, as :func:`choose_reg`)."""
        return choose_reg(self.test_top1_by_reg)


class RidgeProbe:
    """One domain's train features (on their device) and labels, and the penalties to try.

    :meth:`choose` takes a cell's penalty on the protocol's held-out split (one eigendecomposition of its tuning
    sample serves every penalty); :meth:`test` refits on the cell's final sample (one more) and scores the test rows.
    The all-data sample's moments are summed once and shared by every seed: its final system is the same for all of
    them, and a seed's tuning moments are those minus its held-out rows'."""

    def __init__(self, x: Tensor, y: Tensor, num_classes: int, regs: Sequence[float] = REGS,
                 chunk: int = CHUNK_ROWS) -> None:
        self.x, self.y, self.num_classes, self.chunk = x, y.cpu(), num_classes, chunk
        self.regs = check_regs(regs)
        self._all: Moments | None = None
        self._all_system: RidgeSystem | None = None

    @property
    def dim(self) -> int:
        """Columns of the solution: the features' and the constant."""
        return self.x.shape[1] + 1

    def _all_moments(self) -> Moments:
        if self._all is None:
            self._all = moments(self.x, self.y, self.num_classes, None, self.chunk)
        return self._all

    def _system(self, rows: np.ndarray, everything: bool = False, held_out: np.ndarray | None = None) -> RidgeSystem:
        """The system of ``rows``: every row (``everything``) from the shared moments, all but ``held_out`` from the
        shared moments minus those rows' (when both samples take the D x D form), else of its own."""
        if everything and len(rows) >= self.dim:
            if self._all_system is None:
                self._all_system = solve(self.x, self.y, self.num_classes, rows, known=self._all_moments())
            return self._all_system
        if held_out is not None and len(rows) >= self.dim:
            rest = self._all_moments() - moments(self.x, self.y, self.num_classes, held_out, self.chunk)
            return solve(self.x, self.y, self.num_classes, rows, known=rest)
        return solve(self.x, self.y, self.num_classes, rows, chunk=self.chunk)

    def choose(self, seed: int, shots: int | None, val_fraction: float) -> Choice:
        """The penalty of ``(shots, seed)``: fitted on the tuning sample, every penalty scored on the held-out rows
        (:func:`~cog_pl.data.sampling.tuning_indices`: train labels only)."""
        labels = self.y.numpy()
        tune, val = tuning_indices(labels, val_fraction, seed, shots)
        if len(val) == 0:
            raise CogError(f"ridge: the {val_fraction:.0%} validation split of seed {seed} holds no row; the penalty "
                           "is chosen on it (give each class more train rows)")
        system = self._system(tune, held_out=val if shots is None else None)
        top1, _ = score(system, self.x, self.y, self.regs, val, chunk=self.chunk)
        return Choice(choose_reg(top1), top1, tune, val)

    def test(self, seed: int, shots: int | None, reg: float, test_x: Tensor, test_y: Tensor) -> Tested:
        """The head of penalty ``reg`` refitted on the final sample of ``(shots, seed)``
        (:func:`~cog_pl.data.sampling.final_indices`), and every penalty's on the same sample, scored on test."""
        rows = final_indices(self.y.numpy(), seed, shots)
        system = self._system(rows, everything=shots is None)
        top1, ranked = score(system, test_x, test_y, self.regs, rank=reg, chunk=self.chunk)
        _, top5 = accuracy(ranked, test_y)
        return Tested(top1, top1[reg], top5, ranked, rows)  # top-1 as every penalty's: the oracle's unit exactly

    def test_top1(self, seed: int, shots: int | None, reg: float, test_x: Tensor, test_y: Tensor) -> float:
        """The test top-1 (%) of penalty ``reg`` alone, refitted on the final sample of ``(shots, seed)``: where the
        sample takes the D x D form, one Cholesky solve of ``X^T X + reg I`` in place of :meth:`test`'s
        eigendecomposition for every penalty (the same solution to round-off; no oracle, no ranked classes: what
        the callback needs)."""
        rows = final_indices(self.y.numpy(), seed, shots)
        if len(rows) < self.dim:
            return self.test(seed, shots, reg, test_x, test_y).test_top1
        m = self._all_moments() if shots is None else moments(self.x, self.y, self.num_classes, rows, self.chunk)
        system = m.xx + reg * torch.eye(self.dim, dtype=DTYPE, device=m.xx.device)
        factor, info = torch.linalg.cholesky_ex(system)
        if int(info) != 0:  # not positive definite in float64 round-off: the eigendecomposition's path
            return self.test(seed, shots, reg, test_x, test_y).test_top1
        weights = torch.cholesky_solve(m.xy, factor)
        labels = test_y.to(test_x.device)
        correct = 0
        for start in range(0, len(test_x), self.chunk):
            logits = design(test_x[start:start + self.chunk]) @ weights
            correct += int((logits.argmax(1) == labels[start:start + self.chunk]).sum())
        return 100.0 * correct / max(len(test_x), 1)
