"""The text tower of an ``open_clip:<name>`` model, and the guards on the tokens its family must be given.

The tower is ``encode_text`` on the model's own tokenizer (``open_clip.get_tokenizer``), over the whole context: unlike
CLIP's own tower (:mod:`cog_pl.models.arch.clip_text`) its batches are not cut after their last end-of-text token, since
``CLIP._encode_text`` adds the whole ``positional_embedding`` and applies ``self.attn_mask`` of the full context, and
some towers pool the last position or attend without a causal mask (``text_global_pool``): cutting would mean a copy of
their forward.

Known silent traps of text towers, each refused or handled when the tower is built (:func:`checked_tokenizer`), what was
done recorded in :attr:`~cog_pl.models.text.TokenTextTower.text_handling` (part of a zero-shot row's identity):

- **Padding.** A tower whose read position sees the padding (no causal mask: SigLIP, CLIPA, MobileCLIP; or the last
  position read: SigLIP's ``pool_type: last``) gives the embeddings it was trained to give only on texts padded to its
  whole context with its own pad token. big_vision's SigLIP tokenizer pads with ``</s>`` (``pad_value=1``,
  "traditionally used with contrastive models that use the last token"; transformers' ``SiglipTokenizer`` has
  ``pad_token="</s>"``), SigLIP 2's Gemma tokenizer with ``<pad>`` (0; open_clip's ``SigLipTokenizer``); mteb's SigLIP,
  padded to the longest text of a batch, lost up to 70 points (embeddings-benchmark/mteb PR 1424: MNIST zero-shot ~10 %
  -> 80 %+ with ``padding="max_length"``). open_clip's ``HFTokenizer`` pads to ``max_length`` with its tokenizer's pad
  token; the tower checks that a short text comes out as long as the model's context, padded after the text with that
  pad token, and refuses a tokenizer without one, of another length, or padding on the left (transformers 5.25's
  ``Siglip2Tokenizer`` has ``padding_side = "left"``).
- **Context length.** The tokenizer's context is set to the model's, which is the checkpoint's
  (:mod:`cog_pl.models.arch.openclip`: open_clip would interpolate another length, open_clip issue 1067).
- **Canonicalisation.** big_vision evaluates SigLIP and SigLIP 2 zero-shot on canonicalised class names and templates
  (lowercase, punctuation removed: ``canonicalize_text``), as open_clip's SigLIP configs ask (``"tokenizer_kwargs":
  {"clean": "canonicalize"}``); the Hugging Face SigLIP 2 tokenizer does not, which costs about 12 points (NVlabs/RADIO
  PR 142). A SigLIP-family tower (its Hugging Face tokenizer's name holds ``siglip``, or, without one, the model's:
  open_clip's own rule, ``factory.get_tokenizer``) whose tokenizer does not canonicalise gets one that does
  (``get_tokenizer(name, clean="canonicalize")``), with a warning.
- **Tokenizer files.** A Hugging Face tokenizer that is not in the cache (``HF_HUB_OFFLINE=1``) is refused in one line
  saying how to fetch it, before the weights are read.

Sources (line by line: ``docs/reference/sources.md``): mlfoundations/open_clip 89fb801 ``src/open_clip/model.py``,
``src/open_clip/transformer.py``, and open_clip_torch 3.3.0 ``src/open_clip/tokenizer.py``,
``src/open_clip/factory.py``; google-research/big_vision 0127fb6 ``big_vision/pp/ops_text.py``,
``big_vision/evaluators/proj/image_text/prompt_engineering.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from cog_pl.errors import CogError
from cog_pl.models.arch.openclip import open_clip_model, text_positions
from cog_pl.models.registry import check_open_clip_name, import_open_clip
from cog_pl.models.text import TokenTextTower

logger = logging.getLogger(__name__)

#: A text that comes out the same once canonicalised (lowercase, punctuation removed) and otherwise does not.
_CASED, _CANONICAL = "A Photo, of a DOG!", "a photo of a dog"


def _tokenizer_source(name: str) -> str:
    """The Hugging Face tokenizer (hub name or folder) open_clip's config of ``name`` names, "" for none."""
    config = import_open_clip().get_model_config(name) or {}
    return str(config.get("text_cfg", {}).get("hf_tokenizer_name", "") or "")


def is_siglip(name: str) -> bool:
    """Whether ``name``'s text side is big_vision's SigLIP (or SigLIP 2) vocabulary: its Hugging Face tokenizer's name
    (the repository's, or the folder's) holds ``siglip`` (``timm/ViT-B-16-SigLIP2``), or, without one, the model's
    (open_clip 3.3.0 ``factory.get_tokenizer`` then builds a ``SigLipTokenizer``)."""
    source = _tokenizer_source(name).rstrip("/\\")
    return "siglip" in (Path(source).name if source else name).lower()


def open_clip_tokenizer(name: str, **kwargs: Any) -> Any:
    """``open_clip.get_tokenizer(name, **kwargs)``; refused in one line when it cannot be built (a Hugging Face
    tokenizer that is not in the cache offline, a vocabulary that cannot be downloaded)."""
    open_clip = import_open_clip()
    try:
        return open_clip.get_tokenizer(name, **kwargs)
    except Exception as err:  # (transformers' and fsspec's offline and missing-file errors: one refusal)
        from huggingface_hub import constants

        source = _tokenizer_source(name)
        offline = " (HF_HUB_OFFLINE=1: nothing is downloaded)" if constants.HF_HUB_OFFLINE else ""
        where = (f"its Hugging Face tokenizer {source} is not in the cache {constants.HF_HUB_CACHE}{offline}; put it "
                 f"there with `hf download {source}`" if source and not Path(source).exists()
                 else f"its tokenizer cannot be built{offline}")
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise CogError(f"open_clip:{name}: {where} ({type(err).__name__}: {reason})") from None


def _reading(model: nn.Module) -> tuple[str, bool | None]:
    """The position the text tower reads (``pool_type``) and whether it attends under a causal mask (None: a
    Hugging Face encoder, which masks its padding itself)."""
    text = getattr(model, "text", None)
    if text is None:  # CLIP: the text transformer is the model's own (open_clip model.py CLIP.__init__)
        return str(model.text_pool_type), model.attn_mask is not None
    if not hasattr(text, "positional_embedding"):  # HFTextEncoder: attention mask from the pad token, its pooler
        return type(getattr(text, "pooler", text)).__name__, None
    if getattr(text, "cls_emb", None) is not None:  # CoCa's appended class token, always read last
        return "last", text.attn_mask is not None
    return str(text.pool_type), text.attn_mask is not None


def _pad_id(tokenizer: Any) -> int | None:
    """The pad token id the tokenizer pads with: its Hugging Face tokenizer's (``HFTokenizer``, ``SigLipTokenizer``),
    0 for CLIP's ``SimpleTokenizer`` (it writes the tokens into zeros, open_clip ``tokenizer.py``)."""
    inner = getattr(tokenizer, "tokenizer", None)
    return getattr(inner, "pad_token_id", None) if inner is not None else 0


def _tokens(tokenizer: Any, texts: list[str], name: str) -> Tensor:
    """``tokenizer(texts)``, a failure refused in one line (transformers: a tokenizer that cannot pad)."""
    try:
        return tokenizer(texts)
    except Exception as err:
        raise CogError(f"open_clip:{name}: its tokenizer cannot make the model's tokens ({type(err).__name__}: "
                       f"{(str(err).strip().splitlines() or [''])[0][:200]})") from None


def _clean(tokenizer: Any, name: str) -> str:
    """What the tokenizer does to a text's case and punctuation, seen on a probe: ``canonicalize``, ``lower`` or
    ``cased``."""
    canonical = _tokens(tokenizer, [_CANONICAL], name)
    if torch.equal(_tokens(tokenizer, [_CASED], name), canonical):
        return "canonicalize"
    upper = _CASED.rstrip("!").replace(",", "").upper()
    return "lower" if torch.equal(_tokens(tokenizer, [upper], name), canonical) else "cased"


def checked_tokenizer(model: nn.Module, tokenizer: Any, name: str) -> tuple[Any, dict[str, Any]]:
    """``tokenizer`` made to give ``model`` (open_clip ``name``) the tokens its family needs, and how (the tower's
    :attr:`~cog_pl.models.text.TokenTextTower.text_handling`): its context set to the model's, a canonicalising one
    for a SigLIP-family tower; refused in one line where padding to the whole context with its pad token fails."""
    positions = text_positions(model)
    pool, causal = _reading(model)
    if positions is not None:
        tokenizer.context_length = positions[0]
    pad = _pad_id(tokenizer)
    reads_padding = positions is not None and (causal is False or pool == "last")
    reads = "the last position" if pool == "last" else "every position"
    where = (f"open_clip:{name}: its text tower reads {reads}, so a text must be padded to its "
             f"{positions[0] if positions else '?'} positions with the tokenizer's own pad token")
    if reads_padding and pad is None:
        raise CogError(f"{where} (SigLIP: embeddings-benchmark/mteb PR 1424), and its tokenizer has no pad token")
    clean = _clean(tokenizer, name)
    if is_siglip(name) and clean != "canonicalize":
        logger.warning("open_clip:%s: a SigLIP-family text tower whose tokenizer does not canonicalise texts "
                       "(clean %r): canonicalised, as big_vision evaluates it (NVlabs/RADIO PR 142)", name, clean)
        tokenizer = open_clip_tokenizer(name, clean="canonicalize")
        if positions is not None:
            tokenizer.context_length = positions[0]
        clean = _clean(tokenizer, name)
    probe = _tokens(tokenizer, ["a photo"], name)  # (two words: shorter than any context)
    if positions is not None and probe.shape[-1] != positions[0]:
        raise CogError(f"open_clip:{name}: its tokenizer gives {probe.shape[-1]} tokens per text and the text tower "
                       f"reads {positions[0]}")
    first, last = int(probe[0, 0]), int(probe[0, -1])
    if reads_padding and (last != pad or first == pad):  # padded after the text, to the end (not on the left)
        raise CogError(f"{where}, {pad}, after the text (SigLIP: embeddings-benchmark/mteb PR 1424), and its tokenizer "
                       f"makes 'a photo' start with token {first} and end with token {last}")
    source = _tokenizer_source(name)
    handling = {"tokenizer": type(tokenizer).__name__ + (f" {source}" if source else ""), "clean": clean,
                "context_length": positions[0] if positions is not None else int(probe.shape[-1]),
                "padding": "max_length" if pad is not None and last == pad != first else "none", "pad_id": pad,
                "pool": pool, "causal_mask": causal}
    return tokenizer, handling


class OpenCLIPTextTower(TokenTextTower):
    """``encode_text`` of an ``open_clip`` model on its own tokenizer, checked by :func:`checked_tokenizer`."""

    def __init__(self, model: nn.Module, name: str, weights: str, tokenizer: Any = None) -> None:
        arch = name.split(":", 1)[1]
        tokenizer, handling = checked_tokenizer(model, tokenizer or open_clip_tokenizer(arch), arch)
        with torch.inference_mode():  # (the projection is a tensor, a Linear or absent, by model)
            embed_dim = model.encode_text(tokenizer(["a"])).shape[-1]
        super().__init__(tokenizer, embed_dim, name, weights, handling)
        self.model = model

    def encode_tokens(self, tokens: Tensor) -> Tensor:
        return self.model.encode_text(tokens)


def build_open_clip_text_tower(name: str, checkpoint: str | Path | None, trust_checkpoint: bool = False
                               ) -> OpenCLIPTextTower:
    """The text tower of ``open_clip:<name>`` (``name`` with its prefix) with ``checkpoint`` (a file or a tag); the
    tokenizer is built first, so that one that cannot be refuses before the weights are read."""
    arch = name.split(":", 1)[1]
    check_open_clip_name(arch)
    tokenizer = open_clip_tokenizer(arch)
    model, _ = open_clip_model(arch, checkpoint, trust_checkpoint)
    model.visual = None  # the text side only
    tower = OpenCLIPTextTower(model, name, "random" if checkpoint is None else str(checkpoint), tokenizer)
    return tower.eval().requires_grad_(False)
