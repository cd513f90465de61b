"""A minimal stand-in for :mod:`cog_pl.probe.poolers` (interface I2 of issue 40, helper 40b's module), with its names.

Deleted when 40b's module lands: :mod:`cog_pl.probe.attentive` imports these names from one place (its
``_POOLERS`` import). Nothing here claims to follow a publisher's code: the presets only set the knobs the real
module has (queries, heads, projections, MLP), so the methods and their tests run until then.

The one contract :mod:`cog_pl.probe.attentive` relies on besides the names: every parameter of a bank
(:class:`PoolerBank`, :class:`MLPBank`) has the head index as its first dimension (``n`` heads), so an optimizer
can give each head its own learning rate and weight decay, and ``bank.pooler(i)`` / ``bank.probe(i)`` is head ``i``
alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["POOLER_PRESETS", "AttentivePooler", "MLPBank", "MLPProbe", "PoolerBank", "PoolerConfig"]


@dataclass(frozen=True)
class PoolerConfig:
    """An attentive pooler's shape: learned queries, attention heads (None: D / 64), projections, MLP ratio (0:
    none)."""

    num_queries: int = 1
    num_heads: int | None = None
    q_proj: bool = True
    kv_proj: bool = True
    o_proj: bool = True
    mlp_ratio: float = 4.0

    def heads(self, dim: int) -> int:
        h = self.num_heads or max(1, dim // 64)
        return h if dim % h == 0 else 1


POOLER_PRESETS: dict[str, PoolerConfig] = {
    "vjepa": PoolerConfig(num_queries=1, num_heads=None, mlp_ratio=4.0),
    "vjepa2": PoolerConfig(num_queries=1, num_heads=None, mlp_ratio=4.0),
    "capi": PoolerConfig(num_queries=1, num_heads=None, q_proj=False, o_proj=False, mlp_ratio=0.0),
    "ep": PoolerConfig(num_queries=32, num_heads=None, kv_proj=False, mlp_ratio=0.0),
}


def _uniform(n: int, *shape: int, fan_in: int) -> nn.Parameter:
    bound = 1.0 / math.sqrt(fan_in)
    return nn.Parameter((torch.rand(n, *shape) * 2 - 1) * bound)


class PoolerBank(nn.Module):
    """``n`` independent attentive poolers in one forward: ``[B, T, D] -> [n, B, C]``."""

    def __init__(self, dim: int, num_classes: int, config: PoolerConfig, n: int = 1) -> None:
        super().__init__()
        self.dim, self.num_classes, self.config, self.n = dim, num_classes, config, n
        hidden = int(dim * config.mlp_ratio)
        self.query = nn.Parameter(torch.randn(n, config.num_queries, dim) * 0.02)
        self.norm_w, self.norm_b = nn.Parameter(torch.ones(n, dim)), nn.Parameter(torch.zeros(n, dim))
        for name, on in (("q", config.q_proj), ("k", config.kv_proj), ("v", config.kv_proj), ("o", config.o_proj)):
            if on:
                setattr(self, f"{name}_w", _uniform(n, dim, dim, fan_in=dim))
                setattr(self, f"{name}_b", nn.Parameter(torch.zeros(n, dim)))
        if hidden:
            self.mlp_norm_w, self.mlp_norm_b = nn.Parameter(torch.ones(n, dim)), nn.Parameter(torch.zeros(n, dim))
            self.fc1_w, self.fc1_b = _uniform(n, dim, hidden, fan_in=dim), nn.Parameter(torch.zeros(n, hidden))
            self.fc2_w, self.fc2_b = _uniform(n, hidden, dim, fan_in=hidden), nn.Parameter(torch.zeros(n, dim))
        self.head_w, self.head_b = _uniform(n, dim, num_classes, fan_in=dim), _uniform(n, num_classes, fan_in=dim)

    def _proj(self, x: Tensor, name: str) -> Tensor:  # x: [n, B, L, D]
        if not hasattr(self, f"{name}_w"):
            return x
        return torch.einsum("nbld,nde->nble", x, getattr(self, f"{name}_w")) + getattr(self, f"{name}_b")[:, None, None]

    def forward(self, x: Tensor) -> Tensor:
        b, _, d = x.shape
        n, h = self.n, self.config.heads(d)
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        z = (x - mean) / torch.sqrt(var + 1e-6)
        tokens = z[None] * self.norm_w[:, None, None] + self.norm_b[:, None, None]  # [n, B, T, D]
        q = self._proj(self.query[:, None].expand(n, b, -1, -1), "q")
        k, v = self._proj(tokens, "k"), self._proj(tokens, "v")
        split = lambda a: a.reshape(n, b, a.shape[2], h, d // h).transpose(2, 3)  # noqa: E731
        att = torch.softmax(split(q) @ split(k).transpose(-1, -2) / math.sqrt(d // h), dim=-1)
        out = self._proj((att @ split(v)).transpose(2, 3).reshape(n, b, -1, d), "o")  # [n, B, Q, D]
        if hasattr(self, "fc1_w"):
            y = F.layer_norm(out, (d,))
            y = y * self.mlp_norm_w[:, None, None] + self.mlp_norm_b[:, None, None]
            y = F.gelu(torch.einsum("nbqd,ndh->nbqh", y, self.fc1_w) + self.fc1_b[:, None, None])
            out = out + torch.einsum("nbqh,nhd->nbqd", y, self.fc2_w) + self.fc2_b[:, None, None]
        pooled = out.mean(2)  # [n, B, D]
        return torch.einsum("nbd,ndc->nbc", pooled, self.head_w) + self.head_b[:, None]

    def pooler(self, i: int) -> AttentivePooler:
        one = AttentivePooler(self.dim, self.num_classes, self.config)
        with torch.no_grad():
            for (_, mine), (_, theirs) in zip(self.named_parameters(), one.bank.named_parameters()):
                theirs.copy_(mine[i : i + 1])
        return one

    @classmethod
    def from_poolers(cls, poolers: list[AttentivePooler]) -> PoolerBank:
        first = poolers[0]
        bank = cls(first.bank.dim, first.bank.num_classes, first.bank.config, len(poolers))
        with torch.no_grad():
            for name, p in bank.named_parameters():
                p.copy_(torch.cat([dict(q.bank.named_parameters())[name] for q in poolers]))
        return bank


class AttentivePooler(nn.Module):
    """One attentive pooler: ``[B, T, D] -> [B, C]``."""

    def __init__(self, dim: int, num_classes: int, config: PoolerConfig) -> None:
        super().__init__()
        self.bank = PoolerBank(dim, num_classes, config, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.bank(x)[0]


class MLPBank(nn.Module):
    """``n`` independent MLP probes in one forward: ``[B, D] -> [n, B, C]``; the input BatchNorm (no affine) is the
    same for every head, so the heads share it."""

    def __init__(self, dim: int, num_classes: int, hidden: int, n: int = 1, batchnorm: bool = True) -> None:
        super().__init__()
        self.dim, self.num_classes, self.hidden, self.n = dim, num_classes, hidden, n
        self.bn = nn.BatchNorm1d(dim, affine=False, eps=1e-6) if batchnorm else nn.Identity()
        self.fc1_w, self.fc1_b = _uniform(n, dim, hidden, fan_in=dim), _uniform(n, hidden, fan_in=dim)
        self.fc2_w, self.fc2_b = _uniform(n, hidden, num_classes, fan_in=hidden), _uniform(n, num_classes,
                                                                                          fan_in=hidden)

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(torch.einsum("bd,ndh->nbh", self.bn(x), self.fc1_w) + self.fc1_b[:, None])
        return torch.einsum("nbh,nhc->nbc", h, self.fc2_w) + self.fc2_b[:, None]

    def probe(self, i: int) -> MLPProbe:
        one = MLPProbe(self.dim, self.num_classes, self.hidden, batchnorm=isinstance(self.bn, nn.BatchNorm1d))
        with torch.no_grad():
            for (_, mine), (_, theirs) in zip(self.named_parameters(), one.bank.named_parameters()):
                theirs.copy_(mine[i : i + 1])
        one.bank.bn.load_state_dict(self.bn.state_dict())
        return one

    @classmethod
    def from_probes(cls, probes: list[MLPProbe]) -> MLPBank:
        first = probes[0].bank
        bank = cls(first.dim, first.num_classes, first.hidden, len(probes), isinstance(first.bn, nn.BatchNorm1d))
        with torch.no_grad():
            for name, p in bank.named_parameters():
                p.copy_(torch.cat([dict(q.bank.named_parameters())[name] for q in probes]))
        return bank


class MLPProbe(nn.Module):
    """One MLP probe: BatchNorm (no affine), a hidden layer with ReLU, a linear classifier: ``[B, D] -> [B, C]``."""

    def __init__(self, dim: int, num_classes: int, hidden: int, batchnorm: bool = True) -> None:
        super().__init__()
        self.bank = MLPBank(dim, num_classes, hidden, 1, batchnorm)

    def forward(self, x: Tensor) -> Tensor:
        return self.bank(x)[0]
