"""A tiny open_clip model for the zero-shot tests, and CLIP_benchmark's classifier written out as the reference.

The model is built from a config in open_clip's format (the keys of open_clip's ``model_configs/ViT-B-32.json``),
registered with ``open_clip.add_model_config`` under a name of the test's, with seeded random weights saved as a file
(what ``open_clip:<name> --checkpoint FILE`` reads).

SigLIP-family models (:func:`tiny_siglip_config`) have the text side of open_clip 3.3.0's
``model_configs/ViT-B-16-SigLIP.json`` / ``ViT-B-16-SigLIP2.json`` (no causal mask, the last position read, a Hugging
Face tokenizer, ``clean: canonicalize``), tiny. Their real tokenizers (``timm/ViT-B-16-SigLIP``,
``timm/ViT-B-16-SigLIP2`` on the Hugging Face hub: sentencepiece vocabularies of 32,000 and 256,000 pieces) are not
installed and nothing is downloaded, so :func:`local_tokenizer` writes a word-level stand-in with their special tokens:
T5's ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2, padding with ``</s>`` (transformers ``SiglipTokenizer``'s
``pad_token="</s>"``; big_vision's ``pad_value=1``), and Gemma's ``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3,
padding with ``<pad>`` (open_clip ``tokenizer.py`` ``SigLipTokenizer``: pad 0 for Gemma); both end a text with their
end-of-sequence token and add no start token (big_vision ``eos="sticky"``, ``bos="no"``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

#: A tiny ViT image tower and a 1-layer text transformer, in open_clip's config format.
TINY = {"embed_dim": 32, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
#: OpenAI's 7 selected templates (open_clip zero_shot_metadata.py SIMPLE_IMAGENET_TEMPLATES), written out here.
SEVEN = ["itap of a {c}.", "a bad photo of the {c}.", "a origami {c}.", "a photo of the large {c}.",
         "a {c} in a video game.", "art of the {c}.", "a photo of the small {c}."]


def tiny_open_clip(folder: Path, name: str, seed: int, config: dict | None = None,
                   stem: str = "tiny") -> tuple[Path, torch.nn.Module]:
    """Register ``config`` (default :data:`TINY`) as open_clip model ``name``, build it with weights of ``seed``
    and save them as ``folder/<stem>.pt``; returns (the weights file, the model in eval mode)."""
    import open_clip

    (folder / f"{name}.json").write_text(json.dumps(config or TINY))
    open_clip.add_model_config(folder / f"{name}.json")
    torch.manual_seed(seed)
    model = open_clip.create_model(name).eval()
    path = folder / f"{stem}.pt"
    torch.save(model.state_dict(), path)
    return path, model


#: The stand-in tokenizers' special tokens (id order) and pad token, by family.
SPECIALS = {"siglip": (("<pad>", "</s>", "<unk>"), "</s>", "</s>"),
            "siglip2": (("<pad>", "<eos>", "<bos>", "<unk>"), "<eos>", "<pad>")}
#: Their words (and the punctuation a non-canonicalised text keeps as tokens of its own).
WORDS = ("a photo of the small large dog cat crane wading bird lifting device itap bad origami in video game art "
         ", . ! ( )").split()


def local_tokenizer(folder: Path, family: str = "siglip", pad: bool = True, padding_side: str = "right") -> Path:
    """A word-level Hugging Face tokenizer with a SigLIP-family's special tokens (:data:`SPECIALS`) saved in
    ``folder`` (what ``transformers.AutoTokenizer.from_pretrained(folder)`` reads offline); ``pad=False``: no pad
    token; ``padding_side``: where it pads."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials, eos, pad_token = SPECIALS[family]
    vocab = {t: i for i, t in enumerate((*specials, *WORDS))}
    unk = "<unk>"
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, vocab[eos])])
    kwargs = {"pad_token": pad_token} if pad else {}
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, unk_token=unk, padding_side=padding_side,
                            **kwargs).save_pretrained(folder)
    return folder


def tiny_siglip_config(tokenizer: Path, context: int = 16, clean: str | None = "canonicalize") -> dict:
    """A tiny SigLIP-family config (open_clip ``ViT-B-16-SigLIP.json``'s text keys) reading ``tokenizer``; ``clean``
    None: no ``tokenizer_kwargs`` (HFTokenizer's default cleaning, whitespace only)."""
    text = {"context_length": context, "vocab_size": len(WORDS) + 4, "hf_tokenizer_name": str(tokenizer),
            "width": 32, "heads": 2, "layers": 1, "no_causal_mask": True, "proj_bias": True, "pool_type": "last",
            "norm_kwargs": {"eps": 1e-6}}
    if clean:
        text["tokenizer_kwargs"] = {"clean": clean}
    return {"embed_dim": 32, "init_logit_bias": -10, "custom_text": True, "vision_cfg": TINY["vision_cfg"],
            "text_cfg": text}


def reference_classifier(model: torch.nn.Module, name: str, classes: list[str], templates: list[str]) -> torch.Tensor:
    """CLIP_benchmark's construction (clip_benchmark/metrics/zeroshot_classification.py zero_shot_classifier), by open
    clip model ``name``'s tokenizer: per class, the templates' embeddings normalised, averaged, renormalised; ``[E, C]``
    (ELEVATER's zero-shot weights are the same, feature.py:546-557)."""
    import open_clip

    tokenizer = open_clip.get_tokenizer(name)
    cols = []
    with torch.no_grad():
        for c in classes:
            emb = model.encode_text(tokenizer([t.format(c=c) for t in templates])).float()
            emb = emb / emb.norm(dim=-1, keepdim=True)
            mean = emb.mean(dim=0)
            cols.append(mean / mean.norm())
    return torch.stack(cols, dim=1)


def write_pair(root: Path, weights, wnids, features_of: Callable, *, arch: str, per_class=(4, 3),
               seed: int = 0) -> Path:
    """A train/test store pair of ``wnids`` under ``root`` whose features are ``features_of(labels, rng)``, made by
    ``arch`` with ``weights`` as the extractor records them (``per_class``: train and test images per concept)."""
    from cog_pl.features.store import make_meta, write_store

    rng = np.random.default_rng(seed)
    for split, n in zip(("train", "test"), per_class):
        y = np.repeat(np.arange(len(wnids)), n)
        x = features_of(y, rng)
        meta = make_meta(model="m", arch=arch, weights=str(weights), weights_sha256="w", trusted_checkpoint=False,
                         precision="32-true", domain=root.name, split=split, num_rows=len(y), dim=x.shape[1],
                         num_classes=len(wnids), classes=list(wnids), transform={"size": 32},
                         level_file_sha256=None)
        write_store(root / split, x, y, np.arange(len(y)) + 100 * (split == "test"), meta)
    return root
