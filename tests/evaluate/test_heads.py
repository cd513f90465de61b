"""The attentive probe's preset against the features' width, before any extraction (issue 47: refused only after
it, naming no preset that fits)."""

from __future__ import annotations

import subprocess

import pytest
from bad_input_cases import COG_PL

from cog_pl.errors import CogError
from cog_pl.pipeline import RunConfig


@pytest.fixture
def demo_cnn_file(tmp_path):
    from cog_pl.demo.backbone import DemoCNN
    from cog_pl.demo.pretrain import save_backbone

    path = tmp_path / "demo_cnn.pt"
    save_backbone(DemoCNN(), path)
    return path


def test_a_preset_that_cannot_split_the_features_is_refused_before_any_extraction(demo_cnn_file, tmp_path):
    (tmp_path / "in21k").mkdir()
    argv = ["run", "--model", "external:demo_cnn", "--checkpoint", str(demo_cnn_file), "--in21k-root",
            str(tmp_path / "in21k"), "--domains", "cog_l1", "--feature", "tokens2x2", "--methods", "attentive",
            "--out", str(tmp_path / "out"), "--no-check"]
    done = subprocess.run([str(COG_PL), *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "cog-pl run: error: --attentive-preset capi on demo_cnn (96 wide): pooler config: dim 96 does not split into 1 "
        "heads of head_dim 64; the presets that fit 96 channels: vjepa2, ep"], done.stderr
    assert not (tmp_path / "out" / "features").exists()  # nothing extracted
    kw = {"model": "external:demo_cnn", "checkpoint": str(demo_cnn_file), "in21k_root": str(tmp_path / "in21k"),
          "domains": ("cog_l1",), "feature": "tokens2x2", "methods": ("attentive",)}
    cfg = RunConfig(**kw, method_options={"attentive": {"preset": "ep"}})  # one that fits
    assert cfg.method_options["attentive"].preset == "ep"
    with pytest.raises(CogError, match="the presets that fit 96 channels: vjepa2, ep"):
        RunConfig(**kw, method_options={"attentive": {"preset": "vjepa"}})
