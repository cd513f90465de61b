"""Attentive poolers and MLP probes on frozen features: the published heads, and many of them trained in one pass.

An attentive pooler reads a bag of tokens ``[B, T, D]`` (a token store's rows: the class token and pooled patch
tokens) through learned queries and a cross-attention, then a linear classifier gives ``[B, C]`` logits.
:class:`PoolerConfig` names every published choice (queries, heads, self-attention blocks before or after the
cross-attention, q/k/v/o projections, norms, residual and MLP, EP's split values and BatchNorm, the initialisation);
:data:`POOLER_PRESETS` holds the four published heads, each built as its publisher's code builds it:

- ``vjepa``: V-JEPA's ``AttentiveClassifier`` as its frozen evaluation builds it (depth 1, the encoder's heads): one
  query, a cross-attention block (LayerNorm on the tokens, q and kv projections, residual, LayerNorm + MLP 4x,
  residual), a linear layer. Its ``CrossAttention`` defines an output projection that its forward never applies, so
  the pooler has none. Depth > 1 adds self-attention blocks over the queries *after* the cross-attention.
- ``vjepa2``: V-JEPA 2's (16 heads, ``num_probe_blocks: 4`` in its ImageNet evaluation config): depth 4 is three
  self-attention blocks over the *tokens* before the cross-attention block; its cross-attention has no output
  projection either.
- ``capi``: CAPI's ``AttnPoolClassifier``: one query, heads = D / 64, keys and values projected (one ``kv`` linear
  with bias), no q and no output projection, no norm, residual or MLP, then a linear layer.
- ``ep``: Efficient Probing's: 32 queries, one head, keys are the raw tokens, a value projection without bias whose
  channels are split among the queries (query ``q`` reads the ``q``-th ``D/32`` slice), the slices concatenated to
  ``D``, then ``BatchNorm1d(D, affine=False, eps=1e-6)`` and a linear layer.

Where the sources stop: with more than one query and without EP's split, the queries' outputs are averaged into one
vector (V-JEPA's classifier squeezes its single query; this average is ours).

:class:`PoolerBank` holds ``n`` independent poolers as stacked parameters (a leading ``n`` axis) and computes all of
them in one forward of batched products: ``[B, T, D] -> [n, B, C]``, so a grid of learning rates and weight decays
trains in one pass as the linear probe's multi-head mode does (:mod:`cog_pl.probe.multihead`). The cross-attention
is computed without materialising keys or values per token: a query's logits against ``W_k x + b_k`` are its
``W_k``-transposed query against ``x`` (the bias adds the same constant to every token, which the softmax drops), and
the attention-weighted sum of ``W_v x + b_v`` is ``W_v`` applied to the weighted sum of ``x`` plus ``b_v`` (the
weights sum to one); a LayerNorm's scale and shift fold into the same products. That costs ``O(T * D)`` per query
and head instead of ``O(T * D^2)`` per token, and is the same function (tested against the publishers' modules to
1e-5). The key bias, which can change nothing, is left out (it would be a parameter without a gradient).

:class:`MLPProbe` is MAE's linear-probe input, ``BatchNorm1d(D, affine=False, eps=1e-6)``, followed by VISSL's
``eval_mlp`` classifier with a ReLU hidden layer (a BatchNorm, then ``Linear -> ReLU -> Linear`` for
``dims=[D, hidden, C]``, PyTorch's default initialisation); ``hidden=0`` is MAE's BatchNorm + linear.
:class:`MLPBank` stacks ``n`` of them likewise.

:class:`HeadRollback` gives a bank the linear probe's fast-mode rule for a diverging head
(:mod:`cog_pl.probe.multihead`, ``on_divergence="rollback"``): it fails alone, the other heads train on as if it were
not there.

Sources (what was taken from which lines: ``docs/reference/sources.md``; each preset is tested against its
publisher's module, ``tests/models/test_poolers.py``):

- facebookresearch/jepa 51c59d5: ``src/models/attentive_pooler.py``, ``src/models/utils/modules.py``,
  ``src/utils/tensors.py``, ``evals/image_classification_frozen/eval.py``;
- facebookresearch/vjepa2 c2963a4: ``src/models/attentive_pooler.py``, ``src/models/utils/modules.py``,
  ``configs/eval/vitl/in1k.yaml``;
- facebookresearch/capi 98b4fa1: ``eval_classification.py``;
- billpsomas/efficient-probing b8f4fb8: ``poolings/ep.py``, ``probe_heads.py``, ``main_linprobe.py``;
- facebookresearch/mae efb2a80: ``main_linprobe.py``;
- facebookresearch/vissl 09270ed: ``vissl/models/heads/linear_eval_mlp.py``, ``vissl/models/heads/mlp.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cog_pl.errors import CogError

__all__ = [
    "INITS",
    "POOLER_PRESETS",
    "AttentivePooler",
    "HeadRollback",
    "MLPBank",
    "MLPProbe",
    "PoolerBank",
    "PoolerConfig",
    "fitting_presets",
]

#: The initialisations :class:`PoolerConfig` knows, each its publisher's (see :func:`_init_pooler`).
INITS = ("vjepa", "vjepa2", "capi", "ep")
#: BatchNorm's epsilon in EP's head and MAE's linear probe (both ``BatchNorm1d(D, affine=False, eps=1e-6)``);
#: momentum is torch's default 0.1 in both.
BN_EPS = 1e-6
BN_MOMENTUM = 0.1
LN_EPS = 1e-5  # nn.LayerNorm's default, which jepa, vjepa2 use (norm_layer=nn.LayerNorm)


@dataclass(frozen=True)
class PoolerConfig:
    """One attentive pooler's architecture (:data:`POOLER_PRESETS` holds the published ones)."""

    num_queries: int = 1
    #: Attention heads; ``None``: ``dim // head_dim`` (CAPI's D / 64; a ViT's own heads, which V-JEPA uses).
    num_heads: int | None = None
    head_dim: int = 64
    #: Self-attention blocks over the tokens before the cross-attention (V-JEPA 2: depth - 1).
    token_blocks: int = 0
    #: Self-attention blocks over the queries after the cross-attention (V-JEPA: depth - 1).
    query_blocks: int = 0
    q_proj: bool = True
    k_proj: bool = True
    v_proj: bool = True
    #: An output projection after the heads are concatenated (no published pooler here applies one).
    o_proj: bool = False
    qkv_bias: bool = True
    #: LayerNorm on the tokens before the cross-attention, and on the query before the MLP.
    norm: bool = True
    #: The query token added to the attention's output (V-JEPA's cross-attention block).
    residual: bool = True
    #: The MLP's hidden width over the dimension (0: no MLP), GELU, residual.
    mlp_ratio: float = 4.0
    #: EP: one head; query ``q`` reads the ``q``-th slice of the value channels, the slices concatenated.
    value_split: bool = False
    #: EP: ``BatchNorm1d(affine=False, eps=1e-6)`` between the pooled vector and the classifier.
    out_batchnorm: bool = False
    #: Whose initialisation: one of :data:`INITS`.
    init: str = "vjepa"

    def __post_init__(self) -> None:
        for name in ("num_queries", "head_dim"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise CogError(f"pooler config: {name} must be an integer >= 1, got {getattr(self, name)!r}")
        for name in ("token_blocks", "query_blocks"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 0:
                raise CogError(f"pooler config: {name} must be an integer >= 0, got {getattr(self, name)!r}")
        if self.num_heads is not None and (not _is_int(self.num_heads) or self.num_heads < 1):
            raise CogError(f"pooler config: num_heads must be an integer >= 1 or None (dim // head_dim), got "
                           f"{self.num_heads!r}")
        if not self.mlp_ratio >= 0:
            raise CogError(f"pooler config: mlp_ratio must be >= 0, got {self.mlp_ratio!r}")
        if self.init not in INITS:
            raise CogError(f"pooler config: init {self.init!r}; choose from {', '.join(INITS)}")
        if self.value_split and self.num_heads != 1:
            raise CogError("pooler config: value_split (EP) needs num_heads=1, got "
                           f"{self.num_heads!r}")

    def heads(self, dim: int) -> int:
        """The number of attention heads at width ``dim``, checked (``dim`` must split evenly)."""
        heads = dim // self.head_dim if self.num_heads is None else self.num_heads
        if heads < 1 or dim % heads or (self.num_heads is None and dim % self.head_dim):
            raise CogError(f"pooler config: dim {dim} does not split into {heads} heads"
                           + (f" of head_dim {self.head_dim}" if self.num_heads is None else ""))
        if self.value_split and dim % self.num_queries:
            raise CogError(f"pooler config: value_split needs dim {dim} divisible by num_queries {self.num_queries}")
        return heads

    def to_record(self) -> dict:
        """The fields as a JSON-ready dict (for a row's identity)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The published poolers (module docstring; each value's source line by line: docs/reference/sources.md).
POOLER_PRESETS: dict[str, PoolerConfig] = {
    # V-JEPA's AttentiveClassifier defaults, built by its frozen evaluation with depth 1 and the encoder's heads
    "vjepa": PoolerConfig(),
    # V-JEPA 2's in1k.yaml: num_heads 16, num_probe_blocks 4 (three token blocks); no output projection
    "vjepa2": PoolerConfig(num_heads=16, token_blocks=3, init="vjepa2"),
    # CAPI: heads D / 64, kv = nn.Linear(D, 2D) (bias), no q/o projection, no norm, residual or MLP
    "capi": PoolerConfig(q_proj=False, norm=False, residual=False, mlp_ratio=0.0, init="capi"),
    # EP: num_heads 1, qkv_bias False, v only; 32 queries; BatchNorm1d(affine=False, eps=1e-6) before the classifier
    "ep": PoolerConfig(num_queries=32, num_heads=1, q_proj=False, k_proj=False, qkv_bias=False,
                       norm=False, residual=False, mlp_ratio=0.0, value_split=True, out_batchnorm=True, init="ep"),
}

_BLOCK = ("norm1_weight", "norm1_bias", "qkv_weight", "qkv_bias", "proj_weight", "proj_bias", "norm2_weight",
          "norm2_bias", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias")


def _shapes(dim: int, num_classes: int, c: PoolerConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's shape (without the bank's leading axis); linear weights are ``[out, in]`` as nn.Linear's."""
    hidden = int(dim * c.mlp_ratio)
    s: dict[str, tuple[int, ...]] = {"query": (c.num_queries, dim)}
    for blocks, count in (("token_blocks", c.token_blocks), ("query_blocks", c.query_blocks)):
        widths = {"norm1": (dim,), "qkv": (3 * dim, dim), "proj": (dim, dim), "norm2": (dim,), "fc1": (hidden, dim),
                  "fc2": (dim, hidden)}
        for name in _BLOCK if count else ():
            layer, kind = name.rsplit("_", 1)
            if name != "qkv_bias" or c.qkv_bias:  # as V-JEPA's Block: its qkv takes qkv_bias
                s[f"{blocks}_{name}"] = (count, *(widths[layer] if kind == "weight" else widths[layer][:1]))
    if c.norm:
        s["norm_x_weight"] = s["norm_x_bias"] = (dim,)
    for proj, on in (("q", c.q_proj), ("k", c.k_proj), ("v", c.v_proj)):
        if on:
            s[f"{proj}_weight"] = (dim, dim)
            if c.qkv_bias and proj != "k":  # a key bias adds one constant to a query's logits: the softmax drops it
                s[f"{proj}_bias"] = (dim,)
    if c.o_proj:
        s["o_weight"], s["o_bias"] = (dim, dim), (dim,)
    if hidden:
        if c.norm:
            s["norm_q_weight"] = s["norm_q_bias"] = (dim,)
        s["fc1_weight"], s["fc1_bias"], s["fc2_weight"], s["fc2_bias"] = (hidden, dim), (hidden,), (dim, hidden), (dim,)
    s["head_weight"], s["head_bias"] = (num_classes, dim), (num_classes,)
    return s


def _lin(x: Tensor, w: Tensor, b: Tensor | None, shared: bool = False) -> Tensor:
    """``x @ w.T + b`` per bank member: ``x`` ``[n, ..., in]`` (``shared``: ``[..., in]``, the same input for every
    member), ``w`` ``[n, out, in]``, ``b`` ``[n, out]`` -> ``[n, ..., out]``."""
    out = torch.einsum("...i,noi->n...o" if shared else "n...i,noi->n...o", x, w)
    return out if b is None else out + _bcast(b, out.dim())


def _bcast(p: Tensor, ndim: int) -> Tensor:
    """A per-member vector ``[n, D]`` shaped to broadcast against ``[n, ..., D]`` of ``ndim`` dimensions."""
    return p.view(p.shape[0], *([1] * (ndim - 2)), p.shape[-1])


def _layer_norm(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    y = F.layer_norm(x, x.shape[-1:], eps=LN_EPS)
    return y * _bcast(w, y.dim()) + _bcast(b, y.dim())


def _mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    return _lin(F.gelu(_lin(x, w1, b1)), w2, b2)  # V-JEPA's MLP: fc1, GELU, fc2 (dropout 0)


def _self_block(x: Tensor, p: dict[str, Tensor], heads: int) -> Tensor:
    """A pre-norm transformer block on ``[n, B, S, D]`` (jepa/vjepa2 ``modules.py`` ``Block``: attention with a qkv
    linear and an output projection, then an MLP, each residual)."""
    n, b, s, d = x.shape
    qkv = _lin(_layer_norm(x, p["norm1_weight"], p["norm1_bias"]), p["qkv_weight"], p.get("qkv_bias"))
    q, k, v = qkv.view(n, b, s, 3, heads, d // heads).permute(3, 0, 1, 4, 2, 5)  # each [n, B, H, S, dh]
    y = F.scaled_dot_product_attention(q, k, v).transpose(2, 3).reshape(n, b, s, d)
    x = x + _lin(y, p["proj_weight"], p["proj_bias"])
    return x + _mlp(_layer_norm(x, p["norm2_weight"], p["norm2_bias"]), p["fc1_weight"], p["fc1_bias"],
                    p["fc2_weight"], p["fc2_bias"])


def _blocks(p: dict[str, Tensor], prefix: str) -> list[dict[str, Tensor]]:
    if f"{prefix}_qkv_weight" not in p:
        return []
    return [{name: p[f"{prefix}_{name}"][:, i] for name in _BLOCK if f"{prefix}_{name}" in p}
            for i in range(p[f"{prefix}_qkv_weight"].shape[1])]


def _batchnorm(x: Tensor, mean: Tensor, var: Tensor, training: bool) -> Tensor:
    """``BatchNorm1d(affine=False)`` per bank member on ``[n, B, D]``; running statistics ``[n, D]`` updated in
    place in training (torch's rule: momentum 0.1, the unbiased batch variance kept)."""
    if training:
        mu, sigma2 = x.mean(1), x.var(1, unbiased=False)
        with torch.no_grad():
            mean.mul_(1 - BN_MOMENTUM).add_(BN_MOMENTUM * mu)
            var.mul_(1 - BN_MOMENTUM).add_(BN_MOMENTUM * sigma2 * x.shape[1] / max(x.shape[1] - 1, 1))
    else:
        mu, sigma2 = mean, var
    return (x - mu.unsqueeze(1)) * torch.rsqrt(sigma2.unsqueeze(1) + BN_EPS)


def _pool(p: dict[str, Tensor], x: Tensor, c: PoolerConfig, heads: int, bn: tuple[Tensor, Tensor] | None,
          training: bool) -> Tensor:
    """Logits ``[n, B, C]`` of ``n`` poolers (``p``: parameters with a leading ``n``) on tokens ``[B, T, D]``."""
    n, (_, nq, d) = p["query"].shape[0], p["query"].shape
    dh = d // heads
    blocks = _blocks(p, "token_blocks")
    if blocks:  # V-JEPA 2: self-attention over the tokens first
        x = x.unsqueeze(0).expand(n, *x.shape)
        for blk in blocks:
            x = _self_block(x, blk, heads)
    xs = "nbtd" if x.dim() == 4 else "btd"
    if c.norm:  # the LayerNorm's normalisation on the tokens; its scale and shift fold into the products below
        x = F.layer_norm(x, x.shape[-1:], eps=LN_EPS)
        gain, shift = p["norm_x_weight"], p["norm_x_bias"]
    query = p["query"]  # [n, Q, D]
    qh = (_lin(query, p["q_weight"], p.get("q_bias")) if c.q_proj else query).view(n, nq, heads, dh)
    # r[n, q, h, :]: the key-space vector whose product with a token is query q's head-h logit (+ a constant)
    if c.k_proj:
        r = torch.einsum("nqhe,nhed->nqhd", qh, p["k_weight"].view(n, heads, dh, d))
    else:
        r = torch.einsum("nqhe,hg->nqhge", qh, torch.eye(heads, dtype=qh.dtype, device=qh.device)).reshape(
            n, nq, heads, d)
    if c.norm:
        r = r * gain.view(n, 1, 1, d)
    attn = torch.einsum(f"nqhd,{xs}->nbqht", r * dh ** -0.5, x).softmax(-1)
    pooled = torch.einsum(f"nbqht,{xs}->nbqhd", attn, x)  # the attention-weighted tokens, per query and head
    if c.norm:
        pooled = pooled * gain.view(n, 1, 1, 1, d) + shift.view(n, 1, 1, 1, d)
    if c.value_split:  # EP: query q's output is the q-th slice of W_v (sum_t a_qt x_t)
        w = p["v_weight"].view(n, nq, d // nq, d) if c.v_proj else None
        pooled = pooled[:, :, :, 0]  # [n, B, Q, D]: one head
        out = torch.einsum("nbqd,nqed->nbqe", pooled, w) if w is not None else torch.diagonal(
            pooled.view(*pooled.shape[:3], nq, d // nq), dim1=2, dim2=3).transpose(2, 3)
        if p.get("v_bias") is not None:
            out = out + p["v_bias"].view(n, 1, nq, d // nq)
        return _classify(p, out.reshape(n, -1, d), bn, training)
    if c.v_proj:
        out = torch.einsum("nbqhd,nhed->nbqhe", pooled, p["v_weight"].view(n, heads, dh, d))
        if p.get("v_bias") is not None:
            out = out + p["v_bias"].view(n, 1, 1, heads, dh)
    else:
        out = torch.diagonal(pooled.view(*pooled.shape[:4], heads, dh), dim1=3, dim2=4).transpose(3, 4)
    y = out.reshape(n, -1, nq, d)  # heads concatenated
    if c.o_proj:
        y = _lin(y, p["o_weight"], p["o_bias"])
    q = query.unsqueeze(1) + y if c.residual else y  # V-JEPA's cross-attention block adds the query back
    if "fc1_weight" in p:
        h = _layer_norm(q, p["norm_q_weight"], p["norm_q_bias"]) if c.norm else q
        q = q + _mlp(h, p["fc1_weight"], p["fc1_bias"], p["fc2_weight"], p["fc2_bias"])
    for blk in _blocks(p, "query_blocks"):  # V-JEPA: self-attention over the queries after
        q = _self_block(q, blk, heads)
    return _classify(p, q.mean(2), bn, training)


def _classify(p: dict[str, Tensor], z: Tensor, bn: tuple[Tensor, Tensor] | None, training: bool) -> Tensor:
    if bn is not None:
        z = _batchnorm(z, *bn, training)
    return _lin(z, p["head_weight"], p["head_bias"])


def _trunc_normal(t: Tensor, std: float = 0.02) -> None:
    nn.init.trunc_normal_(t, std=std, a=-2.0, b=2.0)  # V-JEPA's trunc_normal_: the same bounds


def _torch_linear(w: Tensor, b: Tensor | None) -> None:
    """nn.Linear's default draw (kaiming_uniform a=sqrt(5)): U(+-1/sqrt(fan_in)) for weight and bias."""
    bound = 1.0 / math.sqrt(w.shape[-1])
    nn.init.uniform_(w, -bound, bound)
    if b is not None:
        nn.init.uniform_(b, -bound, bound)


@torch.no_grad()
def _init_pooler(p: dict[str, Tensor], c: PoolerConfig) -> None:
    """Initialise stacked parameters (a leading ``n``) in place as the publisher of ``c.init`` does."""
    for name, t in p.items():  # zero biases, unit norm scales (V-JEPA's and CAPI's init)
        t.fill_(1.0 if "norm" in name and name.endswith("weight") else 0.0)
    if c.init == "ep":
        p["query"].normal_().mul_(0.02)  # EP's queries: torch.randn(...) * 0.02
        for name in ("v", "head"):  # EP's value layer and classifier: fresh nn.Linear
            if f"{name}_weight" in p:
                _torch_linear(p[f"{name}_weight"], p.get(f"{name}_bias"))
        return
    for name, t in p.items():  # every linear weight of the pooler and the query: trunc_normal(std=0.02)
        if name == "query" or (name.endswith("weight") and "norm" not in name and name != "head_weight"):
            _trunc_normal(t)
    if c.init == "capi":  # CAPI initialises the classifier too
        _trunc_normal(p["head_weight"])
        return
    # V-JEPA's AttentiveClassifier makes its linear layer outside the pooler's init: nn.Linear's default
    _torch_linear(p["head_weight"], p["head_bias"])

    def rescale(name: str, layer_id: int, index: int | None = None) -> None:  # _rescale_blocks' helper, in both
        if name in p:
            (p[name] if index is None else p[name][:, index]).div_(math.sqrt(2.0 * layer_id))

    if c.init == "vjepa":  # V-JEPA's _rescale_blocks
        rescale("fc2_weight", 1)  # (and the cross-attention's proj, which it never applies)
        for i in range(c.query_blocks):
            rescale("query_blocks_proj_weight", i + 2, i)
            rescale("query_blocks_fc2_weight", i + 2, i)
    else:  # V-JEPA 2's: the blocks by their index, then the cross block's MLP by the last one
        layer_id = 0
        for layer_id in range(c.token_blocks):
            rescale("token_blocks_proj_weight", layer_id + 1, layer_id)
            rescale("token_blocks_fc2_weight", layer_id + 1, layer_id)
        rescale("fc2_weight", layer_id + 1)


class _Stacked(nn.Module):
    """Parameters of one head (``n=None``) or of ``n`` stacked heads, held flat under their names."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], n: int | None, bn_width: int | None) -> None:
        super().__init__()
        self.n = n
        lead = () if n is None else (n,)
        for name, shape in shapes.items():
            self.register_parameter(name, nn.Parameter(torch.zeros(*lead, *shape)))
        if bn_width is not None:
            self.register_buffer("running_mean", torch.zeros(*lead, bn_width))
            self.register_buffer("running_var", torch.ones(*lead, bn_width))

    def stacked(self) -> dict[str, Tensor]:
        """The parameters with a leading ``n`` (a view of width 1 for a single head)."""
        return {k: v if self.n is not None else v.unsqueeze(0) for k, v in self.named_parameters(recurse=False)}

    def _bn(self) -> tuple[Tensor, Tensor] | None:
        if not hasattr(self, "running_mean"):
            return None
        return (self.running_mean, self.running_var) if self.n is not None else \
            (self.running_mean.unsqueeze(0), self.running_var.unsqueeze(0))

    def _copy_member(self, other: _Stacked, i: int) -> None:
        """Load bank member ``i`` of ``other`` into this single head."""
        with torch.no_grad():
            own = self.state_dict(keep_vars=True)
            for name, stacked in other.state_dict(keep_vars=True).items():
                own[name].copy_(stacked[i])

    @classmethod
    def _stack_members(cls, bank: _Stacked, members: list[_Stacked]) -> None:
        with torch.no_grad():
            for name, t in bank.state_dict(keep_vars=True).items():
                t.copy_(torch.stack([m.state_dict(keep_vars=True)[name] for m in members]))


class _PoolerBase(_Stacked):
    def __init__(self, dim: int, num_classes: int, config: PoolerConfig, n: int | None) -> None:
        if not isinstance(config, PoolerConfig):
            raise CogError(f"pooler config must be a PoolerConfig (or a preset of POOLER_PRESETS: "
                           f"{', '.join(POOLER_PRESETS)}), got {config!r}")
        self.heads = config.heads(dim)
        super().__init__(_shapes(dim, num_classes, config), n, dim if config.out_batchnorm else None)
        self.dim, self.num_classes, self.config = dim, num_classes, config
        _init_pooler(self.stacked(), config)

    def _logits(self, x: Tensor) -> Tensor:
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise CogError(f"attentive pooler: tokens must be [B, T, {self.dim}], got {list(x.shape)}")
        return _pool(self.stacked(), x, self.config, self.heads, self._bn(), self.training)


def fitting_presets(dim: int) -> list[str]:
    """The presets of :data:`POOLER_PRESETS` that split ``dim`` channels into their heads."""
    fit = []
    for name, config in POOLER_PRESETS.items():
        try:
            config.heads(dim)
        except CogError:
            continue
        fit.append(name)
    return fit


class AttentivePooler(_PoolerBase):
    """An attentive pooler and its linear classifier: tokens ``[B, T, D]`` -> logits ``[B, C]``."""

    def __init__(self, dim: int, num_classes: int, config: PoolerConfig | str = "vjepa") -> None:
        super().__init__(dim, num_classes, _config(config), None)

    def forward(self, x: Tensor) -> Tensor:
        return self._logits(x)[0]


class PoolerBank(_PoolerBase):
    """``n`` independent attentive poolers (stacked parameters) computed in one forward: ``[B, T, D] -> [n, B, C]``."""

    def __init__(self, dim: int, num_classes: int, config: PoolerConfig | str, n: int) -> None:
        if not _is_int(n) or n < 1:
            raise CogError(f"pooler bank: n must be an integer >= 1, got {n!r}")
        super().__init__(dim, num_classes, _config(config), n)

    def forward(self, x: Tensor) -> Tensor:
        return self._logits(x)

    def pooler(self, i: int) -> AttentivePooler:
        """A standalone :class:`AttentivePooler` with member ``i``'s weights (and running statistics)."""
        out = AttentivePooler(self.dim, self.num_classes, self.config).to(self.query)
        out._copy_member(self, i)
        return out

    @classmethod
    def from_poolers(cls, poolers: list[AttentivePooler]) -> PoolerBank:
        """A bank holding copies of ``poolers`` (same width, classes and config) in this order."""
        if not poolers:
            raise CogError("pooler bank: from_poolers needs at least one pooler")
        first = poolers[0]
        if any((p.dim, p.num_classes, p.config) != (first.dim, first.num_classes, first.config) for p in poolers):
            raise CogError("pooler bank: from_poolers needs poolers of one width, class count and config")
        bank = cls(first.dim, first.num_classes, first.config, len(poolers)).to(first.query)
        cls._stack_members(bank, poolers)
        return bank


def _config(config: PoolerConfig | str) -> PoolerConfig:
    if isinstance(config, str):
        if config not in POOLER_PRESETS:
            raise CogError(f"pooler preset {config!r}: choose from {', '.join(POOLER_PRESETS)}")
        return POOLER_PRESETS[config]
    return config


def _mlp_shapes(dim: int, num_classes: int, hidden: int) -> dict[str, tuple[int, ...]]:
    if hidden:
        return {"fc1_weight": (hidden, dim), "fc1_bias": (hidden,), "head_weight": (num_classes, hidden),
                "head_bias": (num_classes,)}
    return {"head_weight": (num_classes, dim), "head_bias": (num_classes,)}


class _MLPBase(_Stacked):
    def __init__(self, dim: int, num_classes: int, hidden: int, batchnorm: bool, n: int | None) -> None:
        if not _is_int(hidden) or hidden < 0:
            raise CogError(f"MLP probe: hidden must be an integer >= 0 (0: BatchNorm + linear), got {hidden!r}")
        super().__init__(_mlp_shapes(dim, num_classes, hidden), n, dim if batchnorm else None)
        self.dim, self.num_classes, self.hidden, self.batchnorm = dim, num_classes, hidden, batchnorm
        with torch.no_grad():  # VISSL's MLP: nn.Linear's default initialisation
            p = self.stacked()
            for name in ("fc1", "head"):
                if f"{name}_weight" in p:
                    _torch_linear(p[f"{name}_weight"], p[f"{name}_bias"])

    def _logits(self, x: Tensor) -> Tensor:
        if x.dim() != 2 or x.shape[-1] != self.dim:
            raise CogError(f"MLP probe: features must be [B, {self.dim}], got {list(x.shape)}")
        p, bn = self.stacked(), self._bn()
        n = p["head_weight"].shape[0]
        shared = bn is None  # without the BatchNorm every member reads the same x
        z = x if shared else _batchnorm(x.unsqueeze(0).expand(n, *x.shape), *bn, self.training)
        if self.hidden:
            z, shared = F.relu(_lin(z, p["fc1_weight"], p["fc1_bias"], shared)), False
        return _lin(z, p["head_weight"], p["head_bias"], shared)


class MLPProbe(_MLPBase):
    """BatchNorm (affine=False) + a ReLU hidden layer + linear: features ``[B, D]`` -> logits ``[B, C]``."""

    def __init__(self, dim: int, num_classes: int, hidden: int, batchnorm: bool = True) -> None:
        super().__init__(dim, num_classes, hidden, batchnorm, None)

    def forward(self, x: Tensor) -> Tensor:
        return self._logits(x)[0]


class MLPBank(_MLPBase):
    """``n`` independent :class:`MLPProbe` in one forward: ``[B, D] -> [n, B, C]``."""

    def __init__(self, dim: int, num_classes: int, hidden: int, n: int, batchnorm: bool = True) -> None:
        if not _is_int(n) or n < 1:
            raise CogError(f"MLP bank: n must be an integer >= 1, got {n!r}")
        super().__init__(dim, num_classes, hidden, batchnorm, n)

    def forward(self, x: Tensor) -> Tensor:
        return self._logits(x)

    def probe(self, i: int) -> MLPProbe:
        """A standalone :class:`MLPProbe` with member ``i``'s weights (and running statistics)."""
        out = MLPProbe(self.dim, self.num_classes, self.hidden, self.batchnorm).to(self.head_weight)
        out._copy_member(self, i)
        return out

    @classmethod
    def from_probes(cls, probes: list[MLPProbe]) -> MLPBank:
        """A bank holding copies of ``probes`` (same width, classes, hidden width and BatchNorm) in this order."""
        if not probes:
            raise CogError("MLP bank: from_probes needs at least one probe")
        key = [(p.dim, p.num_classes, p.hidden, p.batchnorm) for p in probes]
        if len(set(key)) != 1:
            raise CogError("MLP bank: from_probes needs probes of one width, class count, hidden width and BatchNorm")
        bank = cls(*key[0][:3], len(probes), batchnorm=key[0][3]).to(probes[0].head_weight)
        cls._stack_members(bank, probes)
        return bank



class HeadRollback:
    """The linear probe's fast-mode rule for a diverging head (:mod:`cog_pl.probe.multihead`, ``"rollback"``), for a
    bank's heads: ``tensors`` are the bank's state (parameters, running statistics, optimiser moments), each with the
    head as its first axis. A head whose loss turns non-finite during an epoch (:meth:`observe`, which never waits
    for the device) is returned at the epoch's end (:meth:`end_epoch`) to its state at the end of the previous epoch,
    and learns no more; ``diverged_epoch`` records the epoch. One that diverged in its first epoch has no such state:
    it is not ``scored`` (its accuracy is 0, as the linear probe's). Each head's gradient and update are its own, so
    the other heads end as they would without it."""

    def __init__(self, tensors: Sequence[Tensor], n: int) -> None:
        self.tensors = list(tensors)
        bad = [tuple(t.shape) for t in self.tensors if t.dim() == 0 or t.shape[0] != n]
        if bad:
            raise CogError(f"a bank of {n} heads has state of shapes {bad[:3]}: each must have the head first")
        self.saved = [t.detach().clone() for t in self.tensors]
        self.bad = torch.zeros(n, dtype=torch.bool, device=self.tensors[0].device if self.tensors else "cpu")
        self.diverged_epoch: list[int | None] = [None] * n

    def observe(self, losses: Tensor) -> None:
        """Note the heads whose loss (``(n,)``, one per head) of this step is not finite."""
        self.bad |= ~torch.isfinite(losses.detach()).to(self.bad.device)

    @torch.no_grad()
    def end_epoch(self, epoch: int) -> None:
        """Heads that diverged in ``epoch`` are recorded; every diverged head is put back to its saved state, every
        other head's state saved."""
        for i in torch.nonzero(self.bad.cpu()).flatten().tolist():
            if self.diverged_epoch[i] is None:
                self.diverged_epoch[i] = epoch
        self.bad.zero_()
        dead = torch.tensor([e is not None for e in self.diverged_epoch], dtype=torch.bool)
        for t, saved in zip(self.tensors, self.saved):
            keep = dead.to(t.device).view((-1,) + (1,) * (t.dim() - 1))
            saved.copy_(torch.where(keep, saved, t))
            t.copy_(saved)

    @property
    def scored(self) -> list[bool]:
        """Per head: False for one rolled back to no state (diverged in its first epoch)."""
        return [e != 0 for e in self.diverged_epoch]
