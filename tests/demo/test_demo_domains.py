"""The demo's comparable domains (IN-1K as many concepts as a level) and its second, self-supervised backbone."""

from __future__ import annotations

import json

import torch

from cog_pl.benchmark import Benchmark
from cog_pl.demo import prepare
from cog_pl.demo.domains import comparable_benchmark
from cog_pl.demo.selfsup import MODEL_NAME as SSL_MODEL
from cog_pl.demo.selfsup import nt_xent, views
from cog_pl.models import build_backbone

TINY = {"n_seen": 6, "n_per_level": 3, "train_per_concept": 5, "test_per_concept": 2, "image_size": 16}


def test_prepare_evaluates_in1k_on_as_many_concepts_as_a_level_and_trains_both_backbones(onto, tmp_path):
    assets = prepare(tmp_path, **TINY, epochs=1, ssl_epochs=1, onto=onto)
    full, evaluated = Benchmark.load(assets.pretrain_benchmark), Benchmark.load(assets.benchmark)
    assert len(full.in1k) == 6 and len(evaluated.in1k) == 3 == len(evaluated.levels["L1"])
    assert set(evaluated.in1k) < set(full.in1k)
    assert list(evaluated.in1k) == [w for w in full.in1k if w in evaluated.in1k]  # label order kept
    assert evaluated.levels == full.levels and evaluated.test == full.test
    assert evaluated.meta["in1k_domain"] == {"concepts": 3, "sample_of": 6, "seed": 0,
                                             "why": "every domain has as many concepts as a level, as in the paper"}
    assert comparable_benchmark(full) == evaluated and comparable_benchmark(full, seed=1).in1k != () and \
        len(comparable_benchmark(full, seed=1).in1k) == 3
    # the second backbone: same architecture, its own weights, trained without labels
    supervised = build_backbone("external:demo_cnn", checkpoint=assets.checkpoint)
    ssl = build_backbone(SSL_MODEL, checkpoint=assets.ssl_checkpoint)
    assert ssl.spec.name == "demo_cnn_ssl" and ssl.weights_sha256 != supervised.weights_sha256
    record = json.loads((tmp_path / "demo_cnn_ssl.json").read_text())
    assert record["epochs"] == 1 and "no labels" in record["method"]
    stamp = assets.ssl_checkpoint.stat().st_mtime_ns
    again = prepare(tmp_path, **TINY, epochs=1, ssl_epochs=1, onto=onto)  # made once, then reused
    assert again == assets and assets.ssl_checkpoint.stat().st_mtime_ns == stamp


def test_views_keep_the_image_content_and_the_loss_pulls_views_together():
    g = torch.Generator().manual_seed(0)
    images = torch.randn(8, 3, 16, 16, generator=g)
    v = views(images, torch.Generator().manual_seed(1))
    assert v.shape == images.shape and not torch.allclose(v, images)
    assert torch.equal(views(images, torch.Generator().manual_seed(1)), v)  # seeded
    z = torch.randn(16, 8, generator=g)
    assert nt_xent(z, z + 0.01 * torch.randn(16, 8, generator=g), 0.2) < nt_xent(z, torch.randn(16, 8, generator=g),
                                                                                  0.2)
