"""Any ``open_clip`` model (PyPI ``open_clip_torch``) as a backbone and a text tower, with weights the user supplies.

``open_clip:<name>`` names a model of ``open_clip.list_models()`` (``ViT-B-32``, ``RN50-quickgelu``...); its
weights are the checkpoint: a local file (``open_clip.create_model(name, pretrained=FILE)``), or a pretrained tag
of that model (``open_clip.list_pretrained_tags_by_model(name)``), whose file is taken from the Hugging Face cache
(``huggingface_hub.hf_hub_download``, which honours ``HF_HUB_OFFLINE=1``) or, for a tag published only at a URL,
from ``open_clip``'s download folder (``~/.cache/clip``); weights that are not there are refused in one line that
says where to put them. A tag's preprocessing (mean, std) and QuickGELU setting are applied as
``open_clip.create_model`` applies them for a tag (open_clip 3.3.0 ``factory.py`` ``create_model``).

The image features are ``encode_image``'s output, ``model.visual(images)`` (open_clip ``model.py``
``CLIP.encode_image``): the embedding the text tower's texts are compared with, so the linear probe and zero-shot
read one embedding. The text tower is ``encode_text`` on CLIP's tokenizer (``open_clip.get_tokenizer``), over the
whole context: unlike CLIP's own tower (:mod:`cog_pl.models.arch.clip_text`) its batches are not cut after their last
end-of-text token, since ``CLIP._encode_text`` adds the whole ``positional_embedding`` and applies ``self.attn_mask``
of the full context (open_clip 89fb801 ``src/open_clip/model.py`` lines 396-411) and some towers pool the last
position or attend without a causal mask (``text_global_pool``, ``src/open_clip/transformer.py`` lines 931-951):
cutting would mean a copy of their forward.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from cog_pl.errors import CogError, MissingDependencyError
from cog_pl.models.checkpoints import CheckpointError, is_torchscript, trust_hint
from cog_pl.models.text import TokenTextTower

logger = logging.getLogger(__name__)

#: The fixed seed of random weights (as :data:`cog_pl.models.build.RANDOM_SEED`).
RANDOM_SEED = 0


def _open_clip() -> Any:
    try:
        import open_clip
    except ImportError as err:
        raise MissingDependencyError("open_clip:<name> models come from the PyPI package open_clip_torch: pip install "
                                     "'cog_pl[vlm]'") from err
    return open_clip


def _tag_file(name: str, tag: str, cfg: dict) -> str:
    """The local file of ``name``'s pretrained ``tag``: the Hugging Face cache, else open_clip's URL download
    folder; refused in one line when absent."""
    from open_clip.pretrained import download_pretrained_from_hf

    hub = cfg.get("hf_hub", "")
    if hub:
        repo, filename = os.path.split(hub)
        try:
            return download_pretrained_from_hf(repo, filename=filename or None)
        except Exception as err:  # (huggingface_hub's offline and missing-file errors: one refusal)
            from huggingface_hub import constants

            offline = " (HF_HUB_OFFLINE=1: nothing is downloaded)" if constants.HF_HUB_OFFLINE else ""
            raise CogError(f"open_clip:{name} tag {tag!r}: its weights are not in the Hugging Face cache "
                           f"{constants.HF_HUB_CACHE}{offline}; put them there with `hf download {repo}` "
                           f"(or huggingface-cli download), or give the file with --checkpoint FILE "
                           f"({type(err).__name__})") from None
    url = cfg.get("url", "")
    path = Path(os.path.expanduser("~/.cache/clip")) / os.path.basename(url)
    if url and path.is_file():
        return str(path)
    raise CogError(f"open_clip:{name} tag {tag!r}: its weights are published at {url or 'no URL'} and are not in "
                   f"{path.parent}; download the file there, or give it with --checkpoint FILE")


def open_clip_model(name: str, checkpoint: str | Path | None, trust_checkpoint: bool = False
                    ) -> tuple[nn.Module, str | None]:
    """``open_clip.create_model(name)`` with ``checkpoint`` (a file or a pretrained tag) loaded, in eval mode, and
    the file read (None for random weights from :data:`RANDOM_SEED`, without a checkpoint)."""
    open_clip = _open_clip()
    if name not in open_clip.list_models():
        raise CogError(f"open_clip:{name}: open_clip has no such model (open_clip.list_models(): e.g. "
                       f"{', '.join(open_clip.list_models()[:6])} ...)")
    kwargs: dict[str, Any] = {"pretrained_text": False}  # (never the base text weights of an HF text tower)
    if checkpoint is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_SEED)
            model = open_clip.create_model(name, pretrained=None, **kwargs)
        return model.eval().requires_grad_(False), None
    file, given = str(checkpoint), str(checkpoint)
    if not Path(file).is_file():
        cfg = open_clip.get_pretrained_cfg(name, given)
        if not cfg:
            tags = open_clip.list_pretrained_tags_by_model(name)
            raise CogError(f"open_clip:{name} checkpoint {given!r}: neither a file nor a pretrained tag of {name} "
                           f"(its tags: {', '.join(tags) or 'none'})")
        file = _tag_file(name, given, cfg)
        kwargs["force_quick_gelu"] = bool(cfg.get("quick_gelu", False))
        kwargs["force_preprocess_cfg"] = {k: cfg[k] for k in ("mean", "std", "interpolation", "resize_mode")
                                          if k in cfg}
    elif is_torchscript(file) and not trust_checkpoint:  # OpenAI's own files (RN50.pt): open_clip reads them too
        raise CheckpointError(f"checkpoint {file} is a TorchScript archive: reading it runs its code, so it was not "
                              f"opened; {trust_hint()}")
    try:
        model = open_clip.create_model(name, pretrained=file, weights_only=not trust_checkpoint, **kwargs)
    except (RuntimeError, KeyError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {file} does not fit open_clip:{name}: {reason[:300]}") from err
    return model.eval().requires_grad_(False), file


class OpenCLIPImage(nn.Module):
    """``encode_image``: the model's image tower (``model.visual``), with its preprocessing config."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.visual = model.visual
        self.preprocess_cfg = dict(getattr(model.visual, "preprocess_cfg", {}))

    def forward(self, images: Tensor) -> Tensor:
        return self.visual(images)


def build_open_clip_image(name: str, checkpoint: str | Path | None, trust_checkpoint: bool = False
                          ) -> tuple[OpenCLIPImage, str | None]:
    """The image backbone of ``open_clip:<name>`` (images -> ``encode_image``'s embedding) and the file read."""
    model, file = open_clip_model(name, checkpoint, trust_checkpoint)
    return OpenCLIPImage(model), file


class OpenCLIPTextTower(TokenTextTower):
    """``encode_text`` of an ``open_clip`` model on its own tokenizer."""

    def __init__(self, model: nn.Module, name: str, weights: str) -> None:
        open_clip = _open_clip()
        tokenizer = open_clip.get_tokenizer(name.split(":", 1)[1])
        with torch.inference_mode():  # (the projection is a tensor, a Linear or absent, by model)
            embed_dim = model.encode_text(tokenizer(["a"])).shape[-1]
        super().__init__(tokenizer, embed_dim, name, weights)
        self.model = model

    def encode_tokens(self, tokens: Tensor) -> Tensor:
        return self.model.encode_text(tokens)


def build_open_clip_text_tower(name: str, checkpoint: str | Path | None, trust_checkpoint: bool = False
                               ) -> OpenCLIPTextTower:
    """The text tower of ``open_clip:<name>`` (``name`` with its prefix) with ``checkpoint`` (a file or a tag)."""
    model, _ = open_clip_model(name.split(":", 1)[1], checkpoint, trust_checkpoint)
    model.visual = None  # the text side only
    tower = OpenCLIPTextTower(model, name, "random" if checkpoint is None else str(checkpoint))
    return tower.eval().requires_grad_(False)
