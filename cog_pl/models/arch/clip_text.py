"""CLIP's text tower (``CLIP.encode_text``), read from OpenAI's published file.

The network, as OpenAI's ``clip/model.py`` writes it:

- ``token_embedding`` (``nn.Embedding(vocab_size, width)``) plus ``positional_embedding`` (context_length, width);
- ``transformer.resblocks.<i>``: pre-norm residual blocks, ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``,
  ``nn.MultiheadAttention(width, heads)`` under a causal mask (``-inf`` above the diagonal), the MLP ``c_fc``
  (width -> 4 width), QuickGELU (``x * sigmoid(1.702 x)``), ``c_proj``; LayerNorm computed in float32, eps 1e-5;
- ``ln_final``, then the features at the end-of-text token, the highest id of each sequence (``text.argmax(-1)``),
  times ``text_projection`` (width, embed_dim). ``logit_scale`` is kept with the tower.

Under the causal mask a position's output depends on the positions up to it only, and only the end-of-text
position's output is read, so the positions after a batch's last end-of-text token change no embedding: the forward
cuts each batch there (token ids, positional embedding and mask cut alike), which gives the full-context forward's
embeddings at a fraction of its cost (prompts of ~10-20 tokens out of 77), and the tower encodes its texts sorted by
that length (:attr:`~cog_pl.models.text.TokenTextTower.sort_by_length`) so that a batch holds prompts of like
lengths.

The sizes are read from the tensors as ``build_model`` reads them (embed_dim from ``text_projection``, context
length from ``positional_embedding``, vocabulary from ``token_embedding``, width from ``ln_final``, heads =
width // 64, layers from the ``transformer.resblocks`` indices), so any of OpenAI's CLIP files (``RN50.pt``,
``ViT-B-32.pt``...) gives its own tower. The published files store the linear and attention weights and the
projection in fp16 (``convert_weights``): the tower runs in float32, as ``clip.load`` does on a CPU
(``model.float()``). The tokenizer is CLIP's byte-pair encoding (``clip/simple_tokenizer.py`` with
``bpe_simple_vocab_16e6.txt.gz``), as the PyPI package ``open_clip_torch`` ships it (``open_clip.tokenizer``).

Source (line by line: ``docs/reference/sources.md``): openai/CLIP d05afc4 ``clip/model.py``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

from cog_pl.models.checkpoints import CheckpointError, load_file, load_into
from cog_pl.models.text import TokenTextTower, clip_tokenizer

#: The keys of OpenAI's CLIP state dict that make the text tower (``CLIP.__init__``'s); the rest of the file is the
#: image tower (``visual.*``) and the sizes ``build_model`` deletes.
TEXT_KEYS = ("transformer.", "token_embedding.", "positional_embedding", "ln_final.", "text_projection",
             "logit_scale")


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``, CLIP's QuickGELU."""

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    """One pre-norm block of CLIP's text transformer (its ``ResidualAttentionBlock``), batch first."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(OrderedDict([("c_fc", nn.Linear(width, width * 4)), ("gelu", QuickGELU()),
                                              ("c_proj", nn.Linear(width * 4, width))]))
        self.ln_2 = nn.LayerNorm(width)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, need_weights=False, attn_mask=mask)[0]
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """``resblocks``: the blocks under the names OpenAI's state dict gives them (CLIP's ``Transformer``)."""

    def __init__(self, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList(ResidualAttentionBlock(width, heads) for _ in range(layers))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        for block in self.resblocks:
            x = block(x, mask)
        return x


class CLIPTextTransformer(nn.Module):
    """CLIP's text tower under OpenAI's tensor names: token ids (N, context_length) -> embeddings (N, embed_dim).
    ``cut``: each batch cut after its last end-of-text token (the same embeddings; False: the whole context, as
    the published forward computes it, for comparison: ``benchmarks/bench_zeroshot.py``)."""

    cut = True

    def __init__(self, embed_dim: int = 1024, context_length: int = 77, vocab_size: int = 49408, width: int = 512,
                 heads: int = 8, layers: int = 12) -> None:
        super().__init__()
        self.context_length = context_length
        self.transformer = Transformer(width, layers, heads)
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.positional_embedding = nn.Parameter(torch.zeros(context_length, width))
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.zeros(width, embed_dim))
        self.logit_scale = nn.Parameter(torch.ones([]))
        # CLIP's causal mask: a token attends to itself and those before it
        mask = torch.full((context_length, context_length), float("-inf")).triu_(1)
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, tokens: Tensor) -> Tensor:
        eot = tokens.argmax(dim=-1)  # the position read: the end-of-text token, the highest id
        n = int(eot.max()) + 1 if len(tokens) and self.cut else tokens.shape[1]  # later ones change nothing (causal)
        x = self.token_embedding(tokens[:, :n]) + self.positional_embedding[:n]
        x = self.ln_final(self.transformer(x, self.attn_mask[:n, :n]))
        return x[torch.arange(x.shape[0], device=x.device), eot] @ self.text_projection


def text_state(state: Mapping[str, Tensor], where: str) -> dict[str, Tensor]:
    """The text tower's tensors of an OpenAI CLIP state dict, floating ones as float32; a file without them is
    refused, naming ``where``."""
    out = {k: (v.float() if v.is_floating_point() else v) for k, v in state.items() if k.startswith(TEXT_KEYS)}
    missing = [k for k in ("token_embedding.weight", "positional_embedding", "ln_final.weight", "text_projection")
               if k not in out]
    if missing:
        raise CheckpointError(f"{where} holds no CLIP text tower (no {', '.join(missing)}): is it OpenAI's CLIP file "
                              "(RN50.pt)?")
    return out


def text_transformer_for(state: Mapping[str, Tensor]) -> CLIPTextTransformer:
    """A tower of the sizes ``state`` holds, read as CLIP's ``build_model`` reads them."""
    width = state["ln_final.weight"].shape[0]
    layers = len({k.split(".")[2] for k in state if k.startswith("transformer.resblocks")})
    return CLIPTextTransformer(embed_dim=state["text_projection"].shape[1],
                               context_length=state["positional_embedding"].shape[0],
                               vocab_size=state["token_embedding.weight"].shape[0], width=width, heads=width // 64,
                               layers=layers)


class CLIPTextTower(TokenTextTower):
    """OpenAI CLIP's text tower with CLIP's tokenizer: ``encode_text(texts)`` -> (N, embed_dim), not normalised."""

    sort_by_length = True  # its forward cuts a batch after its last end-of-text token

    def __init__(self, net: CLIPTextTransformer, name: str = "clip", weights: str = "random") -> None:
        # the tokenizer's context is the weights' (positional_embedding's rows), so none is ever resized; its zero
        # padding after the end-of-text token changes nothing under the causal mask and the argmax read
        handling = {"tokenizer": "CLIP BPE (open_clip SimpleTokenizer)", "clean": "lower",
                    "context_length": net.context_length, "padding": "max_length", "pad_id": 0, "pool": "argmax",
                    "causal_mask": True}
        super().__init__(clip_tokenizer(net.context_length), net.text_projection.shape[1], name, weights, handling)
        self.net = net

    def encode_tokens(self, tokens: Tensor) -> Tensor:
        return self.net(tokens)


def build_clip_text_tower(name: str, checkpoint: str | Path | None, trust_checkpoint: bool = False
                          ) -> CLIPTextTower:
    """The text tower of OpenAI's CLIP file ``checkpoint`` (``RN50.pt``: a TorchScript archive, read only with
    ``trust_checkpoint``, as the zoo reads its image tower); without a file, random weights of RN50's sizes from a
    fixed seed, the embeddings and projection drawn as ``CLIP.initialize_parameters`` draws them."""
    if checkpoint is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            net = CLIPTextTransformer()
            nn.init.normal_(net.token_embedding.weight, std=0.02)
            nn.init.normal_(net.positional_embedding, std=0.01)
            nn.init.normal_(net.text_projection, std=net.text_projection.shape[0] ** -0.5)
        return CLIPTextTower(net, name).eval().requires_grad_(False)
    where = f"checkpoint {checkpoint}"
    state = text_state(load_file(checkpoint, trust_checkpoint), where)
    net = text_transformer_for(state)
    load_into(net, state, where, f"{name} (CLIP text tower)", "")
    return CLIPTextTower(net, name, str(checkpoint)).eval().requires_grad_(False)
