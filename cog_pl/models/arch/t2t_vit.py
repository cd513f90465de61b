"""T2T-ViT-t-14 (Yuan et al., 2021, "Tokens-to-Token ViT"): the paper's feature network, without its classifier.

Neither timm nor torchvision provides T2T-ViT, so it is written here; the ViT blocks are timm's own. Every fact
comes from the authors' code at the commit the ImageNet-CoG benchmark checked out (naver/cog 5b34ca9
``prepare_models/prepare_t2tvit.sh``: yitu-opensource/T2T-ViT @ 9dafdef17f6740fc600dad754e0f40bd246463e0):

- ``models/t2t_vit.py``: ``T2t_vit_t_14`` = ``T2T_ViT(tokens_type='transformer', embed_dim=384, depth=14,
  num_heads=6, mlp_ratio=3.)``, ``qkv_bias=False``, ``token_dim=64``, ``nn.LayerNorm`` (eps 1e-5). ``qk_scale`` stays
  None (head_dim ** -0.5) because naver/cog ``model_loaders.py`` ``load_t2tvit`` calls ``create_model`` with
  ``pretrained=False``, as the authors' ``main.py`` did in training. ``T2T_module``: soft splits ``nn.Unfold``
  (7, 4, 2), (3, 2, 1), (3, 2, 1); ``attention1`` = ``Token_transformer(dim=3*7*7, in_dim=64, num_heads=1,
  mlp_ratio=1.)``; ``attention2`` the same on 64*3*3; ``project`` = ``Linear(64*3*3, 384)``. ``forward_features``
  returns the class token after the final ``norm``: the benchmark's feature (384-d).
- ``pos_embed`` is a frozen ``nn.Parameter`` holding ``transformer_block.get_sinusoid_encoding(197, 384)``, so it is
  part of the state dict (and of the released checkpoint).
- ``models/token_transformer.py``: the single-head token attention projects ``dim`` -> ``in_dim``, scales by
  ``(dim // num_heads) ** -0.5`` (the *input* width) and adds ``v`` as the skip connection (the widths differ);
  the block is ``x = attn(norm1(x)); x = x + mlp(norm2(x))``.
- ``models/transformer_block.py``: ``Block`` and ``Mlp`` are timm's pre-norm ViT block (fc1, GELU, fc2), which
  timm's ``vision_transformer.Block`` and ``layers.Mlp`` equal key for key.

The state dict's names equal the authors' ones, so their checkpoint's ``state_dict_ema`` minus ``head.*`` loads
strictly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from timm.layers import Mlp, trunc_normal_
from timm.models.vision_transformer import Block
from torch import nn

#: T2t_vit_t_14 in yitu-opensource/T2T-ViT models/t2t_vit.py @ 9dafdef
EMBED_DIM = 384
DEPTH = 14
NUM_HEADS = 6
MLP_RATIO = 3.0
TOKEN_DIM = 64
IMG_SIZE = 224


def sinusoid_table(n_position: int, dim: int) -> torch.Tensor:
    """The fixed position table (1, n_position, dim) of ``get_sinusoid_encoding``: sin on even, cos on odd channels."""
    position = torch.arange(n_position, dtype=torch.float64)[:, None]
    exponent = 2 * (torch.arange(dim, dtype=torch.float64) // 2) / dim  # float64 like the authors' numpy
    angle = position / torch.pow(10000.0, exponent)[None, :]
    table = angle.clone()
    table[:, 0::2] = torch.sin(angle[:, 0::2])
    table[:, 1::2] = torch.cos(angle[:, 1::2])
    return table.to(torch.float32)[None]


class TokenAttention(nn.Module):
    """Single-head attention that maps ``dim``-wide tokens to ``out_dim`` and adds the values as the skip path."""

    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.out_dim = out_dim
        self.scale = dim**-0.5  # the authors scale by the input width (one head), not by out_dim
        self.qkv = nn.Linear(dim, out_dim * 3, bias=False)
        self.proj = nn.Linear(out_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.out_dim).unbind(2)
        attended = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        return v + self.proj(attended)


class TokenTransformer(nn.Module):
    """The T2T transformer layer: attention (with its own skip) then a residual MLP of ratio 1."""

    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = TokenAttention(dim, out_dim)
        self.norm2 = nn.LayerNorm(out_dim)
        self.mlp = Mlp(in_features=out_dim, hidden_features=out_dim, out_features=out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def _to_map(tokens: torch.Tensor) -> torch.Tensor:
    """Tokens (B, H*W, C) in row-major order back to a square map (B, C, H, W) for the next soft split."""
    batch, count, channels = tokens.shape
    side = math.isqrt(count)
    return tokens.transpose(1, 2).reshape(batch, channels, side, side)


class TokensToToken(nn.Module):
    """Three soft splits (overlapping unfolds, total stride 16) with a token transformer between each."""

    def __init__(self, in_chans: int = 3, embed_dim: int = EMBED_DIM, token_dim: int = TOKEN_DIM) -> None:
        super().__init__()
        self.soft_split0 = nn.Unfold(kernel_size=7, stride=4, padding=2)
        self.soft_split1 = nn.Unfold(kernel_size=3, stride=2, padding=1)
        self.soft_split2 = nn.Unfold(kernel_size=3, stride=2, padding=1)
        self.attention1 = TokenTransformer(in_chans * 7 * 7, token_dim)
        self.attention2 = TokenTransformer(token_dim * 3 * 3, token_dim)
        self.project = nn.Linear(token_dim * 3 * 3, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.attention1(self.soft_split0(images).transpose(1, 2))
        x = self.attention2(self.soft_split1(_to_map(x)).transpose(1, 2))
        return self.project(self.soft_split2(_to_map(x)).transpose(1, 2))


class T2TViT(nn.Module):
    """T2T-ViT backbone: T2T tokens, class token, sinusoid positions, ViT blocks, final norm -> class token."""

    def __init__(
        self,
        img_size: int = IMG_SIZE,
        embed_dim: int = EMBED_DIM,
        depth: int = DEPTH,
        num_heads: int = NUM_HEADS,
        mlp_ratio: float = MLP_RATIO,
        token_dim: int = TOKEN_DIM,
    ) -> None:
        super().__init__()
        self.num_features = embed_dim
        self.tokens_to_token = TokensToToken(embed_dim=embed_dim, token_dim=token_dim)
        num_patches = (img_size // 16) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(sinusoid_table(num_patches + 1, embed_dim), requires_grad=False)
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, mlp_ratio=mlp_ratio, qkv_bias=False, norm_layer=nn.LayerNorm)
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(embed_dim)
        trunc_normal_(self.cls_token, std=0.02)
        self.apply(_init_weights)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.tokens_to_token(images)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.norm(x)[:, 0]


def _init_weights(module: nn.Module) -> None:
    """The authors' initialisation (``T2T_ViT._init_weights``); the checkpoint overwrites it."""
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def build_t2t_vit_t_14() -> nn.Module:
    """T2T-ViT-t-14 without its head: normalised RGB (B, 3, 224, 224) -> class token after the final norm (B, 384)."""
    return T2TViT().eval()
