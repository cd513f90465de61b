"""Any ``open_clip`` model (PyPI ``open_clip_torch``) as a backbone and a text tower, with weights the user supplies.

``open_clip:<name>`` names a model of ``open_clip.list_models()`` (``ViT-B-32``, ``RN50-quickgelu``...); its
weights are the checkpoint: a local file (``open_clip.create_model(name, pretrained=FILE)``), or a pretrained tag
of that model (``open_clip.list_pretrained_tags_by_model(name)``), whose file is taken from the Hugging Face cache
(``huggingface_hub.hf_hub_download``, which honours ``HF_HUB_OFFLINE=1``) or, for a tag published only at a URL,
from ``open_clip``'s download folder (``~/.cache/clip``); weights that are not there are refused in one line that
says where to put them. A tag's preprocessing (mean, std) and QuickGELU setting are applied as
``open_clip.create_model`` applies them for a tag.

The image features are ``encode_image``'s output, ``model.visual(images)`` (``CLIP.encode_image``): the embedding
the text tower's texts are compared with, so the linear probe and zero-shot read one embedding. The text tower is
:mod:`cog_pl.models.arch.openclip_text`.

**The text context is the weights'.** A checkpoint whose text positional embedding has another number of rows than
the model config's context length is read by open_clip's ``factory.load_checkpoint`` through
``model.resize_text_pos_embed``, which interpolates it linearly to the config's length and only logs it: a changed
context, which knocks a SigLIP tower's zero-shot back to chance (mlfoundations/open_clip issue 1067, rwightman: "it
knocks zero-shot back to pretty much random"). Such a model is dropped and built again at the checkpoint's own
length (``create_model(force_context_length=...)``, one warning), and the text tower's tokenizer follows the model's
context (:func:`text_positions`).

Source (line by line: ``docs/reference/sources.md``): open_clip_torch 3.3.0 (mlfoundations/open_clip)
``src/open_clip/factory.py`` (``create_model``, ``load_checkpoint``), ``src/open_clip/model.py``
(``CLIP.encode_image``, ``resize_text_pos_embed``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from cog_pl.errors import CogError
from cog_pl.models.checkpoints import CheckpointError, is_torchscript, trust_hint
from cog_pl.models.registry import check_open_clip_name, import_open_clip

logger = logging.getLogger(__name__)

#: The fixed seed of random weights (as :data:`cog_pl.models.build.RANDOM_SEED`).
RANDOM_SEED = 0


def text_positions(model: nn.Module) -> tuple[int, int] | None:
    """``(context_length, rows)`` of an open_clip model's text positional embedding (``rows`` is one more than the
    context where a class token is appended: CoCa's ``embed_cls``); None for a Hugging Face text encoder, which
    has its own."""
    text = getattr(model, "text", None)
    holder = text if text is not None else model  # CustomTextCLIP's TextTransformer, or CLIP itself
    own = getattr(holder, "positional_embedding", None)
    if own is None:
        return None
    return int(getattr(holder, "context_length", own.shape[0])), int(own.shape[0])


@contextmanager
def _text_contexts_read() -> Iterator[list[tuple[int, int]]]:
    """While open_clip loads a checkpoint, the (checkpoint's, config's) text context lengths of every load whose text
    positional embedding ``load_checkpoint`` resizes to another length: it calls ``resize_text_pos_embed(state_dict,
    model)`` by the name ``open_clip.factory`` imported, which this wraps; the keys are those that function
    reads."""
    from open_clip import factory

    resize, seen = factory.resize_text_pos_embed, []

    def recording(state_dict: dict, model: nn.Module, *args: Any, **kwargs: Any) -> None:
        key = "positional_embedding" if "positional_embedding" in state_dict else "text.positional_embedding"
        found, positions = state_dict.get(key), text_positions(model)
        if found is not None and positions is not None and found.shape[0] != positions[1]:
            seen.append((int(found.shape[0]) - (positions[1] - positions[0]), positions[0]))
        resize(state_dict, model, *args, **kwargs)

    factory.resize_text_pos_embed = recording
    try:
        yield seen
    finally:
        factory.resize_text_pos_embed = resize


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
    open_clip = import_open_clip()
    check_open_clip_name(name)
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
        with _text_contexts_read() as resized:
            model = open_clip.create_model(name, pretrained=file, weights_only=not trust_checkpoint, **kwargs)
        if resized:  # built again at the checkpoint's own context (the interpolated model is dropped)
            context, config = resized[0]
            logger.warning("open_clip:%s: %s holds a text context of %d positions and the config %d: built at %d, "
                           "its tokenizer too (open_clip would interpolate the positional embedding: open_clip issue "
                           "1067)", name, file, context, config, context)
            model = open_clip.create_model(name, pretrained=file, weights_only=not trust_checkpoint,
                                           force_context_length=context, **kwargs)
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
