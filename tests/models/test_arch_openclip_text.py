"""The text-tower guards of open_clip models, each on a tiny model of its family built here (random weights saved as a
file, nothing downloaded): SigLIP's padding to its whole context with its own pad token (mteb PR 1424), a checkpoint
of another context length (open_clip issue 1067), SigLIP 2's canonicalisation (NVlabs/RADIO PR 142), a tokenizer that
is not in the Hugging Face cache; and how each tower makes its tokens, recorded in the zero-shot identity.

The SigLIP-family tokenizers are word-level stand-ins with the real special tokens (open_clip_fixtures.local_tokenizer):
the real ones are on the Hugging Face hub, not installed here."""

from __future__ import annotations

import logging
import re
import string

import pytest
import torch

from cog_pl.errors import CogError
from cog_pl.zeroshot import build_text_tower, check_zeroshot_identity, zeroshot_identity

open_clip = pytest.importorskip("open_clip", reason="open_clip text towers need open_clip_torch (the vlm extra)")
transformers = pytest.importorskip("transformers", reason="SigLIP's tokenizers are Hugging Face tokenizers")
from open_clip_fixtures import TINY, local_tokenizer, tiny_open_clip, tiny_siglip_config  # noqa: E402

TEXTS = ["a photo of the dog.", "A Photo, of the DOG!", "a bad photo of the small crane (wading bird).", "art"]
CONTEXT = 16


def canonicalize_text(text: str, *, keep_punctuation_exact_string: str | None = None) -> str:
    """big_vision's ``canonicalize_text`` (google-research/big_vision 0127fb6
    ``big_vision/evaluators/proj/image_text/prompt_engineering.py`` lines 94-115), transcribed."""
    text = text.replace("_", " ")
    if keep_punctuation_exact_string:
        text = keep_punctuation_exact_string.join(
            part.translate(str.maketrans("", "", string.punctuation))
            for part in text.split(keep_punctuation_exact_string))
    else:
        text = text.translate(str.maketrans("", "", string.punctuation))
    text = text.lower()
    text = re.sub(r"\s+", " ", text)
    return text.strip()


def hf_tokens(folder, texts, **padding) -> torch.Tensor:
    """Token ids as transformers makes them, SigLIP's way by default: ``padding="max_length"`` to the context
    (transformers v4.46.2 ``pipelines/zero_shot_image_classification.py`` l.147, what mteb PR 1424 adopted)."""
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    kwargs = padding or {"padding": "max_length", "max_length": CONTEXT}
    return tok(texts, truncation=True, return_tensors="pt", **kwargs).input_ids


@pytest.fixture(scope="module")
def siglip(tmp_path_factory):
    """A tiny SigLIP (T5-style vocabulary, padding with ``</s>`` = 1): its tokenizer folder, weights file, model."""
    folder = tmp_path_factory.mktemp("siglip")
    tokenizer = local_tokenizer(folder / "tiny-SigLIP-tokenizer", "siglip")
    path, model = tiny_open_clip(folder, "cog-pl-tiny-siglip", seed=1, config=tiny_siglip_config(tokenizer, CONTEXT),
                                 stem="siglip")
    return tokenizer, path, model


def test_a_siglip_tower_pads_to_its_whole_context_with_its_own_pad_token(siglip):
    """The tower's embeddings are the model's on texts canonicalised and padded to the context with ``</s>``, as
    transformers' zero-shot pipeline pads SigLIP; padded to the longest text, or with zeros, they are not (the trap)."""
    folder, path, model = siglip
    tower = build_text_tower("open_clip:cog-pl-tiny-siglip", path)
    assert tower.text_handling == {"tokenizer": f"HFTokenizer {folder}", "clean": "canonicalize",
                                   "context_length": CONTEXT, "padding": "max_length", "pad_id": 1, "pool": "last",
                                   "causal_mask": False}
    canonical = [canonicalize_text(t) for t in TEXTS]
    right = hf_tokens(folder, canonical)
    assert right.shape == (len(TEXTS), CONTEXT) and (right[:, -1] == 1).all()
    with torch.no_grad():
        ref = model.encode_text(right)
    assert torch.allclose(tower.encode_text(TEXTS), ref, atol=1e-6)
    assert torch.equal(tower.encode_text(TEXTS[:1]), tower.encode_text(TEXTS[1:2]))  # canonicalised alike
    # the trap: the same texts padded to the longest one, or with CLIP's zeros, give other embeddings
    longest = hf_tokens(folder, canonical, padding=True)
    zeros = torch.where(right == 1, torch.zeros_like(right), right)
    with torch.no_grad():
        for wrong in (longest, zeros):
            assert not torch.allclose(model.encode_text(wrong), ref, atol=1e-3)


@pytest.mark.parametrize("family, kind, end", [
    ("siglip", "nopad", "its tokenizer has no pad token"),
    ("siglip", "left", "its tokenizer makes 'a photo' start with token 1 and end with token 1"),  # T5: pad = eos
    ("siglip2", "left", "its tokenizer makes 'a photo' start with token 0 and end with token 1"),
])
def test_a_siglip_tokenizer_that_does_not_pad_after_the_text_with_a_pad_token_is_refused(family, kind, end, tmp_path):
    """No pad token, or padding on the left (as transformers 5.25's Siglip2Tokenizer, ``padding_side = "left"``):
    the last position would not be the one SigLIP was trained to read."""
    folder = tmp_path / f"tiny-SigLIP-{kind}"
    tokenizer = local_tokenizer(folder, family, pad=kind != "nopad", padding_side="left" if kind == "left" else "right")
    name = f"cog-pl-tiny-{family}-{kind}"
    path, _ = tiny_open_clip(tmp_path, name, seed=1, config=tiny_siglip_config(tokenizer))
    with pytest.raises(CogError) as err:
        build_text_tower(f"open_clip:{name}", path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"open_clip:{name}: its text tower reads the last position, so a text "
                                                "must be padded to its 16 positions with the tokenizer's own pad token")
    assert "mteb PR 1424" in line and line.endswith(end)


@pytest.mark.parametrize("family", ["clip", "siglip"])
def test_a_checkpoint_of_another_context_length_is_read_at_its_own(family, tmp_path, caplog):
    """A checkpoint saved at 8 text positions, read through a config of 16 (77 for CLIP): open_clip alone
    interpolates the positional embedding (other embeddings); the tower builds the model at 8 and tokenizes to 8."""
    if family == "siglip":
        tokenizer = local_tokenizer(tmp_path / "tiny-SigLIP-tokenizer", "siglip")
        small, config = tiny_siglip_config(tokenizer, context=8), tiny_siglip_config(tokenizer, CONTEXT)
    else:
        small = {**TINY, "text_cfg": {**TINY["text_cfg"], "context_length": 8}}
        config = TINY
    path, model = tiny_open_clip(tmp_path, f"cog-pl-ctx8-{family}", seed=2, config=small, stem="ctx8")
    tiny_open_clip(tmp_path, f"cog-pl-ctx-{family}", seed=3, config=config, stem="other")
    name = f"cog-pl-ctx-{family}"
    with caplog.at_level(logging.WARNING, logger="cog_pl.models.arch.openclip"):
        tower = build_text_tower(f"open_clip:{name}", path)
    assert "holds a text context of 8 positions and the config" in caplog.text and "issue 1067" in caplog.text
    assert tower.text_handling["context_length"] == 8 and tower.model.context_length == 8
    tokens = open_clip.get_tokenizer(f"cog-pl-ctx8-{family}")(TEXTS)
    assert tokens.shape == (len(TEXTS), 8)
    with torch.no_grad():
        ref = model.encode_text(tokens)
        resized = open_clip.create_model(name, pretrained=str(path)).eval()  # open_clip's own read: interpolated
        assert resized.context_length == config["text_cfg"]["context_length"]
        interpolated = resized.encode_text(open_clip.get_tokenizer(name)(TEXTS))
    assert torch.allclose(tower.encode_text(TEXTS), ref, atol=1e-6)
    assert not torch.allclose(interpolated, ref, atol=1e-3)
    # the tower of the checkpoint's context is another classifier's tower: a row made with it is refused
    same = build_text_tower(f"open_clip:cog-pl-ctx8-{family}", path)
    assert zeroshot_identity("lemma", "openai7", same) == zeroshot_identity("lemma", "openai7", tower)
    full = build_text_tower(f"open_clip:{name}", tmp_path / "other.pt")
    with pytest.raises(CogError, match=r"made with text \{.*'context_length': 8.*not the study's text \{.*"
                                       rf"'context_length': {config['text_cfg']['context_length']}"):
        check_zeroshot_identity(zeroshot_identity("lemma", "openai7", tower), "lemma", "openai7", tower=full)


def test_a_siglip2_tower_canonicalises_its_texts_even_when_its_config_does_not_say_so(tmp_path, caplog):
    """SigLIP 2 (Gemma-style vocabulary, padding with ``<pad>`` = 0): with open_clip's ``clean: canonicalize`` its
    texts are canonicalised as big_vision's evaluator does; a config without it is given a canonicalising
    tokenizer, with a warning; a non-SigLIP tower on the same tokenizer is left as its config says."""
    tokenizer = local_tokenizer(tmp_path / "tiny-SigLIP2-tokenizer", "siglip2")
    configs = {"cog-pl-tiny-siglip2": tiny_siglip_config(tokenizer), "cog-pl-tiny-siglip2-raw":
               tiny_siglip_config(tokenizer, clean=None)}
    paths = {n: tiny_open_clip(tmp_path, n, seed=4, config=c, stem=n)[0] for n, c in configs.items()}
    models = {n: open_clip.create_model(n, pretrained=str(p)).eval() for n, p in paths.items()}
    canonical = hf_tokens(tokenizer, [canonicalize_text(t) for t in TEXTS])
    assert (canonical[:, -1] == 0).all()
    for name, path in paths.items():
        with caplog.at_level(logging.WARNING, logger="cog_pl.models.arch.openclip_text"):
            tower = build_text_tower(f"open_clip:{name}", path)
        assert tower.text_handling["clean"] == "canonicalize" and tower.text_handling["pad_id"] == 0
        with torch.no_grad():
            assert torch.allclose(tower.encode_text(TEXTS), models[name].encode_text(canonical), atol=1e-6)
    assert "cog-pl-tiny-siglip2-raw: a SigLIP-family text tower whose tokenizer does not canonicalise" in caplog.text
    assert "cog-pl-tiny-siglip2:" not in caplog.text  # (its config canonicalises)
    # a tower of another family on that tokenizer: cased, as its config says
    other = tmp_path / "words"
    local_tokenizer(other, "siglip2")
    path, _ = tiny_open_clip(tmp_path, "cog-pl-tiny-hf", seed=4, config=tiny_siglip_config(other, clean=None))
    assert build_text_tower("open_clip:cog-pl-tiny-hf", path).text_handling["clean"] == "cased"


def test_a_tokenizer_not_in_the_hugging_face_cache_is_refused_before_the_weights_are_read(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    def no_model(*args, **kwargs):
        raise AssertionError("the model was built before the tokenizer was checked")

    monkeypatch.setattr(open_clip, "create_model", no_model)
    with pytest.raises(CogError) as err:
        build_text_tower("open_clip:ViT-B-16-SigLIP2", random_weights=True)
    line = str(err.value)
    assert "\n" not in line
    for part in ("open_clip:ViT-B-16-SigLIP2: its Hugging Face tokenizer timm/ViT-B-16-SigLIP2 is not in the cache",
                 str(tmp_path / "hub"), "HF_HUB_OFFLINE=1", "`hf download timm/ViT-B-16-SigLIP2`"):
        assert part in line, part


def test_a_clip_tower_states_its_tokens():
    """CLIP's family (causal mask, the end-of-text position read): zero padding changes nothing, and is recorded."""
    from cog_pl.models.arch.clip_text import build_clip_text_tower

    tower = build_clip_text_tower("clip", None)
    assert tower.text_handling == {"tokenizer": "CLIP BPE (open_clip SimpleTokenizer)", "clean": "lower",
                                   "context_length": 77, "padding": "max_length", "pad_id": 0, "pool": "argmax",
                                   "causal_mask": True}
    assert zeroshot_identity("lemma", "openai7", tower)["text"] == tower.text_handling
