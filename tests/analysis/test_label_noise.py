"""The label-noise check (App. A.3): a domain's classifier finds another domain's images of its own concepts."""

from __future__ import annotations

import numpy as np
import pytest

from cog_pl.analysis.label_noise import confident_predictions
from cog_pl.cli.main import main
from cog_pl.features.store import make_meta, write_store

SOURCE = ["n02123159", "n01440764", "n09472597"]  # tiger cat, tench, volcano
TARGET = ["n02123045", "n07747607"]  # tabby, orange


def _store(path, x, y, classes, domain, split):
    meta = make_meta(model="m", weights_sha256=None, domain=domain, split=split, classes=classes,
                     num_classes=len(classes), transform={}, level_file_sha256=None)
    write_store(path, x.astype(np.float16), y, np.arange(len(y)), meta)


@pytest.fixture
def features(tmp_path):
    rng = np.random.default_rng(0)
    centers = np.eye(8)[:3] * 5
    y = np.repeat(np.arange(3), 40)
    _store(tmp_path / "cog_l5" / "train", centers[y] + rng.normal(0, 0.3, (120, 8)), y, SOURCE, "cog_l5", "train")
    # target test: 5 "tabby" images that look exactly like the source's tiger cats, 5 "orange" images unlike any
    lookalikes = centers[[0] * 5] + rng.normal(0, 0.3, (5, 8))
    unlike = rng.normal(0, 0.05, (5, 8)) + np.eye(8)[7] + np.eye(8)[6]  # directions no source concept uses
    tx = np.concatenate([lookalikes, unlike])
    ty = np.repeat([0, 1], 5)
    _store(tmp_path / "in1k" / "test", tx, ty, TARGET, "in1k", "test")
    return tmp_path


def test_confident_matches_are_the_lookalikes(features):
    rows = confident_predictions(features, "cog_l5", "in1k", lr=10.0, wd=1e-6, threshold=0.99)
    assert len(rows) == 5
    assert {r.concept for r in rows} == {"n02123045"} and {r.predicted for r in rows} == {"n02123159"}
    assert all(r.confidence >= 0.99 for r in rows) and rows == sorted(rows, key=lambda r: -r.confidence)


def test_noise_command_prints_a_named_table(features, tmp_path, capsys):
    out = tmp_path / "noise.md"
    assert main(["noise", "--features", str(features), "--source", "cog_l5", "--target", "in1k", "--lr", "10",
                 "--wd", "1e-6", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "5 confident predictions of 10 test images (50.00 %)" in text
    assert "tabby" in text and "tiger cat" in text
    assert out.exists() and out.with_suffix(".csv").read_text().count("\n") == 6
    assert main(["noise", "--features", str(features), "--source", "cog_l5", "--target", "in1k"]) == 2
    assert "give --lr and --wd" in capsys.readouterr().err
