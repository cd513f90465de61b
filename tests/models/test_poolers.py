"""The attentive poolers and MLP probes against their publishers' modules, the banks against single heads, and what an
attentive pooler learns that a linear probe on the mean token cannot.

The reference modules below are transcribed from the publishers' files (the commits and lines are cited on each),
keeping only the inference path (dropout 0, no activation checkpointing; ``torch.backends.cuda.sdp_kernel()``, a
context manager that changes nothing on the CPU, left out). Their weights are drawn at random, then loaded into
``cog_pl``'s poolers through a state-dict mapping, and the logits compared.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cog_pl.errors import CogError
from cog_pl.models.poolers import (
    POOLER_PRESETS,
    AttentivePooler,
    MLPBank,
    MLPProbe,
    PoolerBank,
    PoolerConfig,
)


# --- facebookresearch/jepa 51c59d5 src/models/utils/modules.py l.13-181 (V-JEPA), and vjepa2 c2963a4's -------------
class RefMLP(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class RefAttention(nn.Module):  # modules.py l.39-78 (use_sdpa=True, dropout 0)
    def __init__(self, dim, num_heads=8, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class RefBlock(nn.Module):  # modules.py l.81-120 (vjepa2 l.505-568 without RoPE: the same computation)
    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = RefAttention(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = RefMLP(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class RefCrossAttention(nn.Module):  # modules.py l.123-157; vjepa2 l.571-599 has no self.proj
    def __init__(self, dim, num_heads=12, qkv_bias=False, proj=True):  # proj: defined, never applied (jepa l.137)
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, int(dim * 2), bias=qkv_bias)
        self.proj = nn.Linear(dim, dim) if proj else None

    def forward(self, q, x):
        B, n, C = q.shape
        q = self.q(q).reshape(B, n, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        B, N, C = x.shape
        kv = self.kv(x).reshape(B, N, 2, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
        q = F.scaled_dot_product_attention(q, k, v)
        q = q.transpose(1, 2).reshape(B, n, C)
        return q  # jepa l.156-157: self.proj is not applied


class RefCrossAttentionBlock(nn.Module):  # modules.py l.160-181
    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=False, proj=True):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.xattn = RefCrossAttention(dim, num_heads=num_heads, qkv_bias=qkv_bias, proj=proj)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = RefMLP(dim, int(dim * mlp_ratio))

    def forward(self, q, x):
        y = self.xattn(q, self.norm1(x))
        q = q + y
        return q + self.mlp(self.norm2(q))


class RefVJEPAClassifier(nn.Module):
    """jepa attentive_pooler.py l.21-136 (``version=1``: blocks over the query after the cross-attention) and vjepa2
    attentive_pooler.py l.16-137 (``version=2``: blocks over the tokens before it), one query, then ``linear``."""

    def __init__(self, dim, num_heads, depth, num_classes, complete_block=True, version=1):
        super().__init__()
        self.version = version
        self.query_tokens = nn.Parameter(torch.zeros(1, 1, dim))
        proj = version == 1
        self.cross_attention_block = (RefCrossAttentionBlock(dim, num_heads, qkv_bias=True, proj=proj)
                                      if complete_block else RefCrossAttention(dim, num_heads, True, proj=proj))
        self.blocks = nn.ModuleList([RefBlock(dim, num_heads, qkv_bias=True) for _ in range(depth - 1)]) \
            if depth > 1 else None
        self.linear = nn.Linear(dim, num_classes, bias=True)

    def forward(self, x):
        if self.version == 2 and self.blocks is not None:
            for blk in self.blocks:
                x = blk(x)
        q = self.query_tokens.repeat(len(x), 1, 1)
        q = self.cross_attention_block(q, x)
        if self.version == 1 and self.blocks is not None:
            for blk in self.blocks:
                q = blk(q)
        return self.linear(q.squeeze(1))


# --- facebookresearch/capi 98b4fa1 eval_classification.py l.203-234 ----------------------------------------------
class RefAttnPoolClassifier(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        assert in_dim % 64 == 0
        self.query_token = nn.Parameter(torch.empty(in_dim))
        self.num_heads = in_dim // 64
        self.kv = nn.Linear(in_dim, in_dim * 2)
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, feat_tokens):
        B, N, D = feat_tokens.shape
        q = self.query_token.expand(B, 1, -1)
        q = q.reshape(B, 1, self.num_heads, D // self.num_heads)
        q = q.permute(0, 2, 1, 3)
        kv = self.kv(feat_tokens).reshape(B, N, 2, self.num_heads, D // self.num_heads)
        kv = kv.permute(2, 0, 3, 1, 4)
        k, v = torch.unbind(kv, dim=0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.reshape(B, D)
        return self.linear(x)


# --- billpsomas/efficient-probing b8f4fb8 poolings/ep.py l.7-47; probe_heads.py l.75-76, 106-110 ---------------
class RefEfficientProbing(nn.Module):
    def __init__(self, dim, num_heads=1, qkv_bias=False, qk_scale=None, num_queries=32, d_out=1):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim**-0.5
        self.d_out = d_out
        self.num_queries = num_queries
        self.v = nn.Linear(dim, dim // d_out, bias=qkv_bias)
        self.cls_token = nn.Parameter(torch.randn(1, num_queries, dim) * 0.02)

    def forward(self, x):
        B, N, C = x.shape
        C_prime = C // self.d_out
        cls_token = self.cls_token.expand(B, -1, -1)
        q = cls_token.reshape(B, self.num_queries, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        k = (x.reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3))
        q = q * self.scale
        v = (self.v(x).reshape(B, N, self.num_queries, C // (self.d_out * self.num_queries)).permute(0, 2, 1, 3))
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x_cls = torch.matmul(attn.squeeze(1).unsqueeze(2), v)
        return x_cls.view(B, C_prime)


def ref_ep(dim, num_classes, num_queries=32):
    return nn.Sequential(RefEfficientProbing(dim, num_queries=num_queries),
                         nn.BatchNorm1d(dim, affine=False, eps=1e-6), nn.Linear(dim, num_classes, bias=True))


# --- state-dict mappings: the references' names to cog_pl's -------------------------------------------------------
_BLOCK_NAMES = {"norm1.weight": "norm1_weight", "norm1.bias": "norm1_bias", "attn.qkv.weight": "qkv_weight",
                "attn.qkv.bias": "qkv_bias", "attn.proj.weight": "proj_weight", "attn.proj.bias": "proj_bias",
                "norm2.weight": "norm2_weight", "norm2.bias": "norm2_bias", "mlp.fc1.weight": "fc1_weight",
                "mlp.fc1.bias": "fc1_bias", "mlp.fc2.weight": "fc2_weight", "mlp.fc2.bias": "fc2_bias"}


def _split_kv(out, sd, prefix):
    """kv(x).reshape(B, N, 2, H, dh): the keys' rows first, then the values'. cog_pl has no key bias (it shifts all
    of a query's logits alike, which the softmax drops): the comparison of logits checks that it changes nothing."""
    k, v = sd[f"{prefix}kv.weight"].chunk(2)
    out["k_weight"], out["v_weight"] = k, v
    if f"{prefix}kv.bias" in sd:
        out["v_bias"] = sd[f"{prefix}kv.bias"].chunk(2)[1]


def map_vjepa(sd, version):
    out = {"query": sd["query_tokens"][0], "head_weight": sd["linear.weight"], "head_bias": sd["linear.bias"]}
    block = "cross_attention_block."
    xattn = block + "xattn." if f"{block}xattn.q.weight" in sd else block
    out["q_weight"], out["q_bias"] = sd[f"{xattn}q.weight"], sd[f"{xattn}q.bias"]
    _split_kv(out, sd, xattn)
    if xattn != block:
        for ref, ours in (("norm1", "norm_x"), ("norm2", "norm_q"), ("mlp.fc1", "fc1"), ("mlp.fc2", "fc2")):
            out[f"{ours}_weight"], out[f"{ours}_bias"] = sd[f"{block}{ref}.weight"], sd[f"{block}{ref}.bias"]
    depth = 1 + len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    prefix = "query_blocks" if version == 1 else "token_blocks"
    for ref, ours in _BLOCK_NAMES.items():
        if depth > 1:
            out[f"{prefix}_{ours}"] = torch.stack([sd[f"blocks.{i}.{ref}"] for i in range(depth - 1)])
    return out


def map_capi(sd):
    out = {"query": sd["query_token"][None], "head_weight": sd["linear.weight"], "head_bias": sd["linear.bias"]}
    _split_kv(out, sd, "")
    return out


def map_ep(sd):
    return {"query": sd["0.cls_token"][0], "v_weight": sd["0.v.weight"], "running_mean": sd["1.running_mean"],
            "running_var": sd["1.running_var"], "head_weight": sd["2.weight"], "head_bias": sd["2.bias"]}


class RefTorchMHA(nn.Module):
    """A learned query through torch's nn.MultiheadAttention (q/k/v and output projections), then a linear layer: the
    reference for ``o_proj`` (no published pooler here applies an output projection)."""

    def __init__(self, dim, heads, num_classes):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(1, 1, dim))
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.linear = nn.Linear(dim, num_classes)

    def forward(self, x):
        out, _ = self.attn(self.query.expand(len(x), -1, -1), x, x, need_weights=False)
        return self.linear(out[:, 0])


def map_torch_mha(sd):
    (qw, kw, vw), (qb, _, vb) = sd["attn.in_proj_weight"].chunk(3), sd["attn.in_proj_bias"].chunk(3)
    return {"query": sd["query"][0], "q_weight": qw, "q_bias": qb, "k_weight": kw, "v_weight": vw,
            "v_bias": vb, "o_weight": sd["attn.out_proj.weight"], "o_bias": sd["attn.out_proj.bias"],
            "head_weight": sd["linear.weight"], "head_bias": sd["linear.bias"]}


DIM, CLASSES = 128, 7

# name, reference factory, its mapping, our config: the four presets and the published variants of their modules
CASES = {
    "vjepa": (lambda: RefVJEPAClassifier(DIM, DIM // 64, 1, CLASSES), lambda sd: map_vjepa(sd, 1),
              POOLER_PRESETS["vjepa"]),
    "vjepa-depth3": (lambda: RefVJEPAClassifier(DIM, DIM // 64, 3, CLASSES), lambda sd: map_vjepa(sd, 1),
                     PoolerConfig(query_blocks=2)),
    "vjepa-bare-xattn": (lambda: RefVJEPAClassifier(DIM, 4, 1, CLASSES, complete_block=False),
                         lambda sd: map_vjepa(sd, 1),
                         PoolerConfig(num_heads=4, norm=False, residual=False, mlp_ratio=0.0)),
    "torch-multihead-attention": (lambda: RefTorchMHA(DIM, 4, CLASSES), map_torch_mha,
                                  PoolerConfig(num_heads=4, o_proj=True, norm=False, residual=False, mlp_ratio=0.0)),
    "vjepa2": (lambda: RefVJEPAClassifier(DIM, 16, 4, CLASSES, version=2), lambda sd: map_vjepa(sd, 2),
               POOLER_PRESETS["vjepa2"]),
    "vjepa2-depth1": (lambda: RefVJEPAClassifier(DIM, 16, 1, CLASSES, version=2), lambda sd: map_vjepa(sd, 2),
                      PoolerConfig(num_heads=16, init="vjepa2")),
    "capi": (lambda: RefAttnPoolClassifier(DIM, CLASSES), map_capi, POOLER_PRESETS["capi"]),
    "ep": (lambda: ref_ep(DIM, CLASSES), map_ep, POOLER_PRESETS["ep"]),
    "ep-8-queries": (lambda: ref_ep(DIM, CLASSES, 8), map_ep, PoolerConfig(**{
        **POOLER_PRESETS["ep"].to_record(), "num_queries": 8})),
}


def _randomise(module: nn.Module, seed: int) -> None:
    """Weights far from any initialisation (peaked attention, non-trivial norms), so a wrong path cannot match."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in module.state_dict(keep_vars=True).items():
            if name.endswith("num_batches_tracked"):
                continue
            noise = torch.randn(t.shape, generator=g)
            if name.endswith("running_var"):
                t.copy_(noise.abs() + 0.5)
            elif "norm" in name and name.endswith("weight"):
                t.copy_(1 + 0.3 * noise)
            else:
                t.copy_(noise * (0.3 if t.dim() > 1 and "token" not in name else 0.5))


def _pair(case: str, seed: int = 0):
    make_ref, mapping, config = CASES[case]
    ref = make_ref()
    _randomise(ref, seed)
    ours = AttentivePooler(DIM, CLASSES, config)
    ours.load_state_dict(mapping(ref.state_dict()), strict=True)
    return ref, ours


@pytest.mark.parametrize("case", list(CASES))
def test_pooler_equals_publishers_module(case):
    """Each preset (and each variant of its module: depth, bare cross-attention, queries, an output projection) gives
    its publisher's logits to 1e-5, in training (EP's BatchNorm on batch statistics, its running statistics updated
    alike) and in evaluation mode. In float64: the logits reach ~100 here, where float32's own rounding is ~1e-4."""
    torch.manual_seed(1)
    ref, ours = _pair(case)
    ref, ours = ref.double(), ours.double()
    x = torch.randn(6, 9, DIM, dtype=torch.float64)
    for mode in ("eval", "train"):
        ref.train(mode == "train")
        ours.train(mode == "train")
        expected, got = ref(x), ours(x)
        assert got.shape == (6, CLASSES)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=f"{case} in {mode} mode")
    if case.startswith("ep"):
        torch.testing.assert_close(ours.running_mean, ref[1].running_mean, atol=1e-8, rtol=1e-8)
        torch.testing.assert_close(ours.running_var, ref[1].running_var, atol=1e-8, rtol=1e-8)
    # the comparison is sensitive: the attention is not uniform (a pooler averaging the tokens differs)
    x_perm_mean = x.mean(1, keepdim=True).expand_as(x)
    ours.eval()
    assert (ours(x) - ours(x_perm_mean)).abs().max() > 1e-2


@pytest.mark.parametrize("case", ["vjepa", "vjepa2", "capi", "ep"])
def test_pooler_init_as_publisher(case):
    """Every parameter starts with its publisher's distribution: the same zeros and ones, and standard deviations
    within 10 % (trunc_normal 0.02, the depth rescaling of V-JEPA and V-JEPA 2, nn.Linear's default draws)."""
    torch.manual_seed(2)
    dim, classes = 512, 1000
    make = {"vjepa": lambda: RefVJEPAClassifier(dim, dim // 64, 1, classes),
            "vjepa2": lambda: RefVJEPAClassifier(dim, 16, 4, classes, version=2),
            "capi": lambda: RefAttnPoolClassifier(dim, classes), "ep": lambda: ref_ep(dim, classes)}[case]
    mapping = CASES[case][1]
    ref = make()
    _publisher_init(ref, case)
    expected = mapping(ref.state_dict())
    ours = AttentivePooler(dim, classes, POOLER_PRESETS[case]).state_dict()
    assert set(expected) == set(ours)
    for name, want in expected.items():
        got = ours[name]
        if want.std() == 0:
            assert torch.equal(got, want), name
        else:
            assert abs(got.std() / want.std() - 1) < 0.1, (name, got.std(), want.std())
            assert abs(got.mean()) < 3 * want.std() / math.sqrt(want.numel()) + 1e-9, name


def _publisher_init(ref: nn.Module, case: str) -> None:
    """The publishers' init code applied to the reference modules (jepa attentive_pooler.py l.64-94, vjepa2 l.60-89;
    capi l.213-218; EP: its query's randn * 0.02 at construction and nn.Linear's defaults)."""
    if case == "ep":
        return
    if case == "capi":
        nn.init.trunc_normal_(ref.query_token, std=0.02)
        nn.init.trunc_normal_(ref.kv.weight, std=0.02)
        nn.init.zeros_(ref.kv.bias)
        nn.init.trunc_normal_(ref.linear.weight, std=0.02)
        nn.init.zeros_(ref.linear.bias)
        return
    pooler = [m for name, m in ref.named_children() if name != "linear"]

    def init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    with torch.no_grad():
        nn.init.trunc_normal_(ref.query_tokens, std=0.02)
        for m in pooler:
            m.apply(init_weights)

        def rescale(param, layer_id):
            param.div_(math.sqrt(2.0 * layer_id))

        if ref.version == 1:  # jepa l.69-81 (l.74 rescales xattn.proj, which the forward never applies)
            rescale(ref.cross_attention_block.mlp.fc2.weight.data, 1)
            for layer_id, layer in enumerate(ref.blocks or [], 1):
                rescale(layer.attn.proj.weight.data, layer_id + 1)
                rescale(layer.mlp.fc2.weight.data, layer_id + 1)
        else:  # vjepa2 l.65-76
            layer_id = 0
            for layer_id, layer in enumerate(ref.blocks or []):
                rescale(layer.attn.proj.weight.data, layer_id + 1)
                rescale(layer.mlp.fc2.weight.data, layer_id + 1)
            rescale(ref.cross_attention_block.mlp.fc2.weight.data, layer_id + 1)


@pytest.mark.parametrize("preset", list(POOLER_PRESETS))
def test_bank_equals_separate_poolers(preset):
    """A bank of n poolers gives each pooler's logits and, through a summed loss, each pooler's gradients; its
    members come back out as the same poolers (``pooler(i)``); EP's running statistics update per member
    (float64: the random weights give large logits)."""
    torch.manual_seed(3)
    dim, n = 128, 3
    poolers = [AttentivePooler(dim, 5, preset).double() for _ in range(n)]
    for i, p in enumerate(poolers):
        _randomise(p, 10 + i)
    bank = PoolerBank.from_poolers(poolers)
    x, y = torch.randn(6, 9, dim, dtype=torch.float64), torch.randint(0, 5, (6,))
    logits = bank(x)
    assert logits.shape == (n, 6, 5)
    sum(F.cross_entropy(logits[i], y) for i in range(n)).backward()
    for i, p in enumerate(poolers):
        single = p(x)
        torch.testing.assert_close(logits[i], single, atol=1e-8, rtol=1e-8)
        F.cross_entropy(single, y).backward()
        for name, param in p.named_parameters():
            torch.testing.assert_close(getattr(bank, name).grad[i], param.grad, atol=1e-8, rtol=1e-6, msg=name)
        back = bank.pooler(i)
        for name, t in p.state_dict().items():
            torch.testing.assert_close(back.state_dict()[name], t, msg=name)
    fresh = PoolerBank(dim, 5, preset, 4)
    assert not torch.equal(fresh.query[0], fresh.query[1])  # members are drawn independently


def test_mlp_probe_equals_mae_vissl_head():
    """MLPProbe is MAE's BatchNorm1d(affine=False, eps=1e-6) (main_linprobe.py l.222) and VISSL's eval_mlp classifier
    Linear -> ReLU -> Linear (mlp.py l.86-105), in training and evaluation mode; hidden=0 is MAE's BN + linear; the
    bank equals its probes (logits and gradients)."""
    torch.manual_seed(4)
    dim, hidden, classes = 32, 16, 5
    for width in (hidden, 0):
        layers = [nn.BatchNorm1d(dim, affine=False, eps=1e-6)]
        layers += [nn.Linear(dim, width), nn.ReLU(), nn.Linear(width, classes)] if width else \
            [nn.Linear(dim, classes)]
        ref = nn.Sequential(*layers)
        _randomise(ref, 5)
        ours = MLPProbe(dim, classes, width)
        sd = ref.state_dict()
        mapped = {"running_mean": sd["0.running_mean"], "running_var": sd["0.running_var"],
                  "head_weight": sd[f"{len(layers) - 1}.weight"], "head_bias": sd[f"{len(layers) - 1}.bias"]}
        if width:
            mapped |= {"fc1_weight": sd["1.weight"], "fc1_bias": sd["1.bias"]}
        ours.load_state_dict(mapped, strict=True)
        x = torch.randn(8, dim) * 2 + 1
        for mode in (False, True):
            ref.train(mode)
            ours.train(mode)
            torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.running_var, ref[0].running_var)
    for batchnorm in (True, False):
        probes = [MLPProbe(dim, classes, hidden, batchnorm=batchnorm) for _ in range(3)]
        bank = MLPBank.from_probes(probes)
        x, y = torch.randn(8, dim), torch.randint(0, classes, (8,))
        logits = bank(x)
        sum(F.cross_entropy(logits[i], y) for i in range(3)).backward()
        for i, p in enumerate(probes):
            torch.testing.assert_close(logits[i], p(x), atol=1e-5, rtol=1e-5)
            F.cross_entropy(p(x), y).backward()
            torch.testing.assert_close(bank.head_weight.grad[i], p.head_weight.grad, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(bank.probe(i).fc1_weight, p.fc1_weight)


def _tokens(n: int, signal_in_mean: bool, g: torch.Generator, classes: int = 4, dim: int = 64):
    """Token bags ``[n, classes, dim]`` and labels. Without ``signal_in_mean``: every bag holds each class's vector
    once, in a random order, and a marker rides on the token of the bag's class, so the mean token is the same for
    every class; with it: every token is the class's vector (plus noise)."""
    y = torch.randint(0, classes, (n,), generator=g)
    class_vec = torch.eye(dim)[:classes] * 2.0
    marker = torch.eye(dim)[classes + 1] * 3.0
    if signal_in_mean:
        x = class_vec[y].unsqueeze(1).expand(n, classes, dim).clone()
    else:
        order = torch.argsort(torch.rand(n, classes, generator=g), dim=1)
        x = class_vec[order]
        x = x + (order == y.unsqueeze(1)).unsqueeze(-1) * marker
    return x + 0.3 * torch.randn(x.shape, generator=g), y


def _fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 100, lr: float = 3e-2) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(y), (128,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    model.eval()


def _top1(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(-1) == y).float().mean().item()


class _MeanLinear(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.linear = nn.Linear(dim, classes)

    def forward(self, x):
        return self.linear(x.mean(1))


@pytest.mark.parametrize("signal_in_mean", [False, True], ids=["signal-in-one-token", "signal-in-mean"])
@pytest.mark.parametrize("preset", ["capi", "ep"])
def test_attentive_pooler_reads_what_the_mean_loses(preset, signal_in_mean):
    """With the class in which token carries a marker (the mean token the same for every class) a trained attentive
    pooler finds it and a linear probe on the mean token stays at chance; with the class in every token both get it."""
    torch.manual_seed(5)
    g = torch.Generator().manual_seed(6)
    x, y = _tokens(1024, signal_in_mean, g)
    xt, yt = _tokens(512, signal_in_mean, g)
    pooler, linear = AttentivePooler(64, 4, preset), _MeanLinear(64, 4)
    _fit(pooler, x, y)
    _fit(linear, x, y)
    att, lin = _top1(pooler, xt, yt), _top1(linear, xt, yt)
    assert att > 0.85, att
    if signal_in_mean:
        assert lin > 0.85, lin
    else:
        assert lin < 0.4, lin  # chance is 0.25


def test_pooler_bad_input_is_refused():
    """Bad configs and shapes are refused in one line naming the field."""
    with pytest.raises(CogError, match="num_queries"):
        PoolerConfig(num_queries=0)
    with pytest.raises(CogError, match="init"):
        PoolerConfig(init="mine")
    with pytest.raises(CogError, match="value_split"):
        PoolerConfig(value_split=True, num_heads=2)
    with pytest.raises(CogError, match="heads"):
        AttentivePooler(100, 3, "capi")  # 100 is not a multiple of 64
    with pytest.raises(CogError, match="preset"):
        AttentivePooler(128, 3, "dinov2")
    with pytest.raises(CogError, match=r"\[B, T, 128\]"):
        AttentivePooler(128, 3, "vjepa")(torch.randn(2, 128))
    with pytest.raises(CogError, match="one width"):
        PoolerBank.from_poolers([AttentivePooler(128, 3, "ep"), AttentivePooler(128, 4, "ep")])


def test_head_rollback_returns_a_head_that_diverges_later_to_its_previous_epoch_and_leaves_the_others():
    """The linear probe's fast-mode rule: a head whose loss turns non-finite in epoch 1 is put back, at that epoch's
    end, to its state at the end of epoch 0 and stays there; one diverging in epoch 0 is unscored; the others move."""
    from cog_pl.models.poolers import HeadRollback

    p, m = torch.zeros(3, 2), torch.zeros(3, 2, 4)
    guard = HeadRollback([p, m], 3)
    for epoch, losses in enumerate(([1.0, 1.0, float("nan")], [1.0, float("inf"), 1.0], [1.0, 1.0, 1.0])):
        p += 1
        m += 1
        if epoch == 1:
            p[1], m[1] = float("nan"), float("nan")
        guard.observe(torch.tensor(losses))
        guard.end_epoch(epoch)
    assert guard.diverged_epoch == [None, 1, 0] and guard.scored == [True, True, False]
    assert p.tolist() == [[3.0, 3.0], [1.0, 1.0], [0.0, 0.0]] and (m[1] == 1).all() and (m[2] == 0).all()
    with pytest.raises(CogError, match=r"a bank of 3 heads has state of shapes \[\(2, 2\)\]"):
        HeadRollback([torch.zeros(2, 2)], 3)
