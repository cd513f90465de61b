"""Text towers: CLIP RN50's read from OpenAI's ``RN50.pt``, and any open_clip model's, built by the backbone's name."""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cog_pl.errors import CheckpointError, CogError, MissingWeightsError
from cog_pl.models import PAPER_MODELS, build_backbone, resolve_spec
from cog_pl.zeroshot.text import TextTower, build_text_tower, has_text_tower, list_text_towers

open_clip = pytest.importorskip("open_clip", reason="text towers need open_clip_torch (the vlm extra)")
from open_clip_fixtures import tiny_open_clip  # noqa: E402

TEXTS = ["a photo of a tench.", "a photo of a goldfish, a small golden or orange-red freshwater fish",
         "Ünïcödé  and   spaces", ""]
#: A tiny open_clip model (ViT image tower, 2-layer text transformer) in open_clip's config format
#: (open_clip model_configs/ViT-B-32.json's keys), registered with open_clip.add_model_config.
TINY = {"embed_dim": 32,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}}
TINY_NAME = "cog-pl-tiny-clip"


@pytest.fixture(scope="module")
def rn50(tmp_path_factory):
    """A replica of OpenAI's RN50.pt (TorchScript, fp16 weights, both towers) and its reference text forward."""
    if importlib.util.find_spec("clip") is None:
        pytest.skip("the CLIP replica needs clip-anytorch")
    from replicas.clip_resnet import publish_clip

    path = tmp_path_factory.mktemp("clip") / "RN50.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated; the published file is TorchScript
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        replica = publish_clip(path, seed=0, methods=("encode_text",))
    return path, replica


@pytest.fixture(scope="module")
def clip_tower(rn50):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return build_text_tower("clip", rn50[0], trust_checkpoint=True)


def openai_tokenize(texts: list[str]) -> torch.Tensor:
    """OpenAI's ``clip.tokenize`` (openai/CLIP clip/clip.py ``tokenize``): its BPE from clip-anytorch's
    ``simple_tokenizer.py`` (loaded as a file: the package's ``__init__`` needs ``pkg_resources``)."""
    spec = importlib.util.find_spec("clip")
    path = Path(spec.submodule_search_locations[0]) / "simple_tokenizer.py"
    module_spec = importlib.util.spec_from_file_location("clip_anytorch_tokenizer", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    tok = module.SimpleTokenizer()
    sot, eot = tok.encoder["<|startoftext|>"], tok.encoder["<|endoftext|>"]
    out = torch.zeros(len(texts), 77, dtype=torch.long)
    for i, text in enumerate(texts):
        ids = [sot, *tok.encode(text), eot]
        out[i, :len(ids)] = torch.tensor(ids)
    return out


def test_clip_text_tower_equals_clip_encode_text(rn50, clip_tower):
    """The paper's CLIP RN50: the text transformer of RN50.pt equals OpenAI's CLIP.encode_text (float32)."""
    _, replica = rn50
    assert isinstance(clip_tower, TextTower) and clip_tower.embed_dim == 1024
    tokens = openai_tokenize(TEXTS)
    assert torch.equal(clip_tower.tokenizer(TEXTS), tokens)  # CLIP's BPE, start and end tokens, zero padding
    ours = clip_tower.encode_text(TEXTS)
    ref = replica.text_reference(tokens)
    assert ours.shape == ref.shape == (len(TEXTS), 1024) and ours.dtype == torch.float32
    assert ref.abs().max() > 0 and torch.isfinite(ref).all()
    assert (ours - ref).abs().max() / ref.abs().max() < 1e-5
    assert not torch.allclose(ours[0], ours[1])  # (the features are taken at each text's own end token)
    assert clip_tower.text_handling["context_length"] == 77 and clip_tower.text_handling["pool"] == "argmax"


def test_clip_text_tower_reads_the_archive_only_with_trust(rn50):
    with pytest.raises(CheckpointError, match="TorchScript archive.*trust_checkpoint=True"):
        build_text_tower("clip", rn50[0])


def test_clip_text_tower_refuses_a_file_without_text_weights(tmp_path):
    path = tmp_path / "visual_only.pth"
    torch.save({"visual.conv1.weight": torch.zeros(32, 3, 3, 3)}, path)
    with pytest.raises(CheckpointError, match=r"visual_only.pth holds no CLIP text tower .*RN50\.pt"):
        build_text_tower("clip", path)


@pytest.mark.slow  # open_clip builds the whole RN50 and reads the 244 MiB archive: 4-11 s on 2 cores
def test_open_clip_reads_the_same_archive(rn50, clip_tower):
    """open_clip's RN50 (QuickGELU, as OpenAI trained it) reading RN50.pt gives the same text embeddings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)  # torch.load: "looks like a TorchScript archive"
        with pytest.raises(CheckpointError, match="TorchScript"):
            build_text_tower("open_clip:RN50-quickgelu", rn50[0])
        theirs = build_text_tower("open_clip:RN50-quickgelu", rn50[0], trust_checkpoint=True)
    ref = clip_tower.encode_text(TEXTS)
    assert (theirs.encode_text(TEXTS) - ref).abs().max() / ref.abs().max() < 1e-5


def test_text_tower_flag_on_the_backbone_entry():
    assert has_text_tower("clip") and has_text_tower("open_clip:ViT-B-32") and not has_text_tower("resnet50")
    assert "clip" in list_text_towers() and "resnet50" not in list_text_towers()
    with pytest.raises(CogError, match=r"resnet50 has no text tower; the backbones with one: clip.*open_clip:<name>"):
        build_text_tower("resnet50")
    clip = PAPER_MODELS["clip"]  # the flag is not part of what makes the image features
    assert clip.definition() == replace(clip, text_tower=None).definition()


def test_models_list_says_which_have_a_text_tower(capsys):
    from cog_pl.cli.main import main

    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("with a text tower (zero-shot), read from the same weights: clip, demo_clip, "
                              "open_clip:<name>")
    assert main(["models", "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["name"] for r in rows if r["text_tower"]] == ["clip"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny open_clip model registered by name, its random weights saved as a file, and the model itself."""
    return tiny_open_clip(tmp_path_factory.mktemp("open_clip"), TINY_NAME, seed=3, config=TINY,
                          stem="tiny_open_clip")


def test_open_clip_model_encodes_images_and_texts_through_the_registry(tiny):
    """open_clip:<name> with a weights file: the backbone's features are encode_image's, the tower's encode_text's."""
    path, model = tiny
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    backbone = build_backbone(f"open_clip:{TINY_NAME}", checkpoint=path)
    assert backbone.spec.feature_dim == TINY["embed_dim"] and backbone.spec.image_size == 32
    assert backbone.transform_config.crop == 32 and backbone.transform_config.mean == resolve_spec("clip").mean
    assert backbone.weights == str(path) and backbone.weights_sha256
    with pytest.raises(CogError, match="open_clip reads its own checkpoints; prefix, key_map, in_order"):
        build_backbone(f"open_clip:{TINY_NAME}", checkpoint=path, prefix="model.")
    with torch.no_grad():
        assert torch.allclose(backbone.model(images), model.encode_image(images), atol=1e-6)
    tower = build_text_tower(f"open_clip:{TINY_NAME}", path)
    assert isinstance(tower, TextTower) and tower.embed_dim == TINY["embed_dim"]
    with torch.no_grad():
        ref = model.encode_text(open_clip.get_tokenizer(TINY_NAME)(TEXTS))
    assert torch.allclose(tower.encode_text(TEXTS), ref, atol=1e-6)
    assert tower.encode_text([]).shape == (0, TINY["embed_dim"])


def test_open_clip_model_extracts_under_its_tag_label(tiny):
    """The extractor reads open_clip:<name> like any backbone; the label names the weights (tag or file stem)."""
    from cog_pl.extract import FeatureExtractor
    from cog_pl.models.label import model_label

    path, _ = tiny
    extractor = FeatureExtractor(f"open_clip:{TINY_NAME}", checkpoint=str(path), write_stores=False)
    assert extractor.backbone.spec.arch == f"open_clip:{TINY_NAME}"
    assert extractor.backbone.spec.feature_dim == TINY["embed_dim"]
    assert model_label(f"open_clip:{TINY_NAME}", path) == f"{TINY_NAME}@tiny_open_clip"
    assert model_label("open_clip:ViT-B-32", "laion2b_s34b_b79k") == "ViT-B-32@laion2b_s34b_b79k"
    assert model_label("open_clip:ViT-B-32", random_weights=True) == "ViT-B-32@random"


def test_open_clip_random_weights_are_fixed(tiny):
    a = build_text_tower(f"open_clip:{TINY_NAME}", random_weights=True).encode_text(TEXTS[:2])
    b = build_text_tower(f"open_clip:{TINY_NAME}", random_weights=True).encode_text(TEXTS[:2])
    assert torch.equal(a, b)
    with pytest.raises(MissingWeightsError, match="--checkpoint"):  # no weights, no random_weights: refused
        build_text_tower(f"open_clip:{TINY_NAME}")


def test_open_clip_tag_missing_offline_is_one_line(tmp_path, monkeypatch):
    """A pretrained tag whose weights are not in the (empty) Hugging Face cache, offline: one line saying where."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(CogError) as err:
        build_text_tower("open_clip:RN50", "openai")
    line = str(err.value)
    assert "\n" not in line
    for part in ("open_clip:RN50", "'openai'", "Hugging Face cache", str(tmp_path / "hub"), "HF_HUB_OFFLINE=1",
                 "timm/resnet50_clip.openai", "--checkpoint FILE"):
        assert part in line, part
    with pytest.raises(CogError, match=r"'laion9b': neither a file nor a pretrained tag of RN50 \(its tags: openai"):
        build_text_tower("open_clip:RN50", "laion9b")
    with pytest.raises(CogError, match=r"^open_clip:NoSuchNet: open_clip knows no such model; .*add_model_config"):
        build_backbone("open_clip:NoSuchNet", checkpoint="openai")
    with pytest.raises(CogError, match=r"^open_clip:ViT-B-32x: open_clip knows no such model; did you mean "
                                       r"'ViT-B-32'\?"):
        build_text_tower("open_clip:ViT-B-32x")  # (no weights given: the name is refused first, issue 47)
