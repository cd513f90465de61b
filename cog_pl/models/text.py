"""Text towers: the text side of a vision-language backbone, built by the backbone's name from the same weights.

A backbone entry has a text tower when its :attr:`~cog_pl.models.registry.BackboneSpec.text_tower` names the
function that builds it (``"module:function"``, called with the model name, the weights and the trust opt-in): the
paper's ``clip`` (the text transformer of OpenAI's ``RN50.pt``, :mod:`cog_pl.models.arch.clip_text`) and every
``open_clip:<name>`` (:mod:`cog_pl.models.arch.openclip_text`). :func:`build_text_tower` builds it; its image features
are those :func:`~cog_pl.models.build_backbone` gives the same name, so zero-shot and probe rows of one model
describe one embedding. Every tower is a :class:`TextTower`: ``encode_text(texts)`` -> (N, E), not normalised.

How a tower turns a text into tokens and reads them changes every embedding without changing a weight (SigLIP's
padding, its text canonicalisation, a context length other than the weights'): a :class:`TokenTextTower` states it in
:attr:`~TokenTextTower.text_handling`, and :func:`text_handling` gives it for any tower, for the zero-shot
classifier's identity (:func:`cog_pl.zeroshot.zeroshot_identity`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from cog_pl.errors import CogError, MissingDependencyError
from cog_pl.models.registry import has_text_tower, list_text_towers, resolve_spec
from cog_pl.registry import load_object

__all__ = ["TextTower", "TokenTextTower", "build_text_tower", "clip_tokenizer", "has_text_tower",
           "list_text_towers", "text_handling"]

#: Texts encoded per forward by :meth:`TokenTextTower.encode_text`.
TEXT_BATCH = 256


@runtime_checkable
class TextTower(Protocol):
    """A vision-language model's text side: ``encode_text(texts)`` -> (N, ``embed_dim``), not normalised."""

    embed_dim: int

    def encode_text(self, texts: list[str]) -> Tensor: ...


class TokenTextTower(nn.Module):
    """A text tower made of a tokenizer (texts -> token ids) and a network on token ids (:meth:`encode_tokens`).

    ``name``: the model name it was built for; ``weights``: the file (or pretrained tag) it was read from;
    ``handling``: :attr:`text_handling`.
    :attr:`sort_by_length`: a tower whose network cuts a batch after its longest text (CLIP's,
    :mod:`cog_pl.models.arch.clip_text`) encodes its texts sorted by token length, so that a batch holds texts of
    like lengths; the embeddings come back in the order given.
    """

    #: Encode the texts in the order of their end-of-text position (the highest token id's: CLIP's tokenizer).
    sort_by_length = False

    def __init__(self, tokenizer: Callable[[list[str]], Tensor], embed_dim: int, name: str, weights: str,
                 handling: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.embed_dim = int(embed_dim)
        self.name = name
        self.weights = weights
        #: How texts become tokens and how the network reads them: ``tokenizer``, ``clean`` (the text cleaning:
        #: ``lower``, ``whitespace``, ``canonicalize``), ``context_length``, ``padding`` and ``pad_id``, ``pool``
        #: (the position read: ``argmax``, ``last``...), ``causal_mask``; part of a zero-shot row's identity.
        self.text_handling: dict[str, Any] = dict(handling or {})

    def encode_tokens(self, tokens: Tensor) -> Tensor:
        raise NotImplementedError

    def encode_text(self, texts: Sequence[str]) -> Tensor:
        """The embeddings of ``texts`` (N, ``embed_dim``), float32 on the tower's device, not normalised."""
        if isinstance(texts, str):
            raise CogError(f"encode_text takes a list of texts, got the string {texts!r}")
        device = next(self.parameters()).device
        if not texts:
            return torch.zeros(0, self.embed_dim, device=device)
        if not self.sort_by_length:
            out = []
            with torch.inference_mode():
                for start in range(0, len(texts), TEXT_BATCH):
                    tokens = self.tokenizer(list(texts[start:start + TEXT_BATCH])).to(device)
                    out.append(self.encode_tokens(tokens).float())
            return torch.cat(out)
        tokens = torch.cat([self.tokenizer(list(texts[i:i + TEXT_BATCH])) for i in range(0, len(texts), TEXT_BATCH)])
        order = torch.argsort(tokens.argmax(dim=-1), stable=True)
        with torch.inference_mode():
            out = torch.cat([self.encode_tokens(tokens[order[i:i + TEXT_BATCH]].to(device)).float()
                             for i in range(0, len(texts), TEXT_BATCH)])
        return out[torch.argsort(order).to(device)]


def text_handling(tower: TextTower) -> dict[str, Any]:
    """How ``tower`` turns texts into what its network reads (:attr:`TokenTextTower.text_handling`); for a tower
    that states none (a user's :class:`TextTower`), its class, the one thing known about its tokenizer."""
    handling = getattr(tower, "text_handling", None)
    if handling:
        return dict(handling)
    return {"tokenizer": f"{type(tower).__module__}.{type(tower).__qualname__}"}


def clip_tokenizer(context_length: int = 77) -> Callable[[list[str]], Tensor]:
    """CLIP's byte-pair tokenizer (openai/CLIP d05afc4 ``clip/simple_tokenizer.py``, vocabulary
    ``bpe_simple_vocab_16e6.txt.gz``) as ``open_clip_torch`` ships it: texts -> token ids (N, ``context_length``),
    start and end-of-text tokens around each, zero-padded, a longer text cut with its end token kept."""
    try:
        from open_clip.tokenizer import SimpleTokenizer
    except ImportError as err:
        raise MissingDependencyError("CLIP's tokenizer comes from the PyPI package open_clip_torch: pip install "
                                     "'cog_pl[vlm]'") from err
    return SimpleTokenizer(context_length=context_length)


def build_text_tower(model_name: str, checkpoint: str | Path | None = None, *, trust_checkpoint: bool = False,
                     random_weights: bool = False) -> TextTower:
    """The text tower of the backbone ``model_name``, read from the same weights as its image features.

    Args:
        model_name: ``clip`` (OpenAI's CLIP ResNet-50, the paper's model) or ``open_clip:<name>`` (any
            ``open_clip`` model, e.g. ``open_clip:ViT-B-32``), or a registered backbone whose spec names a text tower.
        checkpoint: the weights: ``clip``: OpenAI's ``RN50.pt`` (default: the file in the models dir, as ``cog-pl
            run`` finds it); ``open_clip:<name>``: a file, or one of its pretrained tags read from the Hugging Face
            cache (``HF_HUB_OFFLINE=1`` respected).
        trust_checkpoint: read a file that safe loading refuses (``RN50.pt`` is a TorchScript archive).
        random_weights: without ``checkpoint``, random weights from a fixed seed (tests, smoke runs).

    Returns:
        The :class:`TextTower`, frozen and in eval mode.

    Raises:
        cog_pl.errors.CogError: the model has no text tower, or its weights are missing (one line saying where to
            put them).
    """
    from cog_pl.models.files import resolve_checkpoint

    spec = resolve_spec(model_name)
    if spec.text_tower is None:
        raise CogError(f"{model_name} has no text tower; the backbones with one: "
                       f"{', '.join(list_text_towers())}, open_clip:<name>")
    weights = resolve_checkpoint(model_name, checkpoint, random_weights)
    try:
        builder = load_object(spec.text_tower)
    except (ImportError, AttributeError) as err:
        raise CogError(f"{model_name}: cannot import its text tower's builder {spec.text_tower} ({err})") from err
    return builder(model_name, weights, trust_checkpoint)
