"""The demo's tiny CLIP ``demo_clip``: one weights file, its image half read by ``build_backbone`` as a user's file
(the text half beside it dropped and logged), its text half by ``build_text_tower`` (issue 41, the demo's zero-shot)."""

from __future__ import annotations

import logging
import zlib

import pytest
import torch

from cog_pl.errors import CheckpointError
from cog_pl.models import build_backbone
from cog_pl.models.arch.demo_clip import EMBED, DemoCLIPImage, HashedText, hash_words
from cog_pl.models.registry import has_text_tower, resolve_spec
from cog_pl.models.text import build_text_tower


@pytest.fixture
def weights(tmp_path):
    torch.manual_seed(1)
    image, text = DemoCLIPImage(), HashedText()
    path = tmp_path / "demo_clip.pt"
    torch.save({"state_dict": image.state_dict(), "text": text.state_dict()}, path)
    return path, image.eval(), text.eval()


def test_the_spec_has_a_text_tower():
    assert has_text_tower("demo_clip") and has_text_tower("external:demo_clip")
    assert resolve_spec("external:demo_clip").text_tower == "cog_pl.models.arch.demo_clip:build_text_tower"


def test_build_backbone_reads_the_image_half_and_logs_the_text_half(weights, caplog):
    path, image, _ = weights
    x = torch.rand(3, 3, 32, 32)
    with caplog.at_level(logging.INFO, logger="cog_pl"):
        backbone = build_backbone("external:demo_clip", checkpoint=path, image_size=32)
    with torch.no_grad():
        assert torch.allclose(backbone.model(x), image(x), atol=1e-6)
        assert backbone.model(x).shape == (3, EMBED)
    assert "beside text" in caplog.text  # the other half, named where the load is logged


def test_build_text_tower_reads_the_text_half(weights):
    path, _, text = weights
    tower = build_text_tower("external:demo_clip", path)
    texts = ["a photo of a tiger cat.", "a bad photo of the accordion ; accordion , free-reed_instrument"]
    with torch.no_grad():
        assert torch.allclose(tower.encode_text(texts), text(texts))
    assert tower.embed_dim == EMBED and not tower.training


def test_words_are_hashed_with_crc32_and_a_file_without_text_is_refused(tmp_path):
    assert hash_words("Free-reed_instrument, WIND.") == [zlib.crc32(w.encode()) % 4096
                                                        for w in ("free-reed", "instrument", "wind")]
    torch.save({"state_dict": DemoCLIPImage().state_dict()}, tmp_path / "image_only.pt")
    with pytest.raises(CheckpointError, match=r"no text tower.*\['text'\]"):
        build_text_tower("external:demo_clip", tmp_path / "image_only.pt")
