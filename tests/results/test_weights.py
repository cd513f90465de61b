"""Which weights a row was made from (issue 46): one rule for every method's rows, whatever their label: the stores'
``weights_sha256`` of a row made from features, the checkpoint's digest of a row made from images; the rows of
unknown weights pair within their label only."""

from __future__ import annotations

import numpy as np
import pytest
from test_probe_fixtures import write_features

from cog_pl.features.pair import open_pair
from cog_pl.features.store import make_meta, write_store
from cog_pl.io import file_sha256
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import append_row
from cog_pl.results.identity import features_identity, wanted
from cog_pl.results.labels import LabelWeightsError, check_label_weights
from cog_pl.results.weights import row_weights, weights_key


def _pair(root, label: str, weights: str | None, tokens: int | None = None):
    for split in ("train", "test"):
        y = np.repeat(np.arange(3), 4)
        x = np.ones((len(y), tokens, 8) if tokens else (len(y), 8), np.float32)
        meta = make_meta(model=label, weights_sha256=weights, domain="cog_l1", split=split, num_classes=3,
                         classes=["a", "b", "c"], transform={"crop": 32}, level_file_sha256=None)
        write_store(root / split, x, y, np.arange(len(y)), meta)
    return open_pair(root)


def test_every_methods_rows_name_their_weights_the_same_way(tmp_path):
    """A linear probe's and a k-NN's row on vector stores, an attentive probe's on the token stores of the same weights
    under another label, a fine-tuning row and an image-trained attentive probe's of the checkpoint: one digest."""
    from cog_pl.finetune.attentive_images import identity as images_identity
    from cog_pl.finetune.compare import finetune_identity
    from cog_pl.probe.knn_protocol import KNNSettings, knn_identity

    checkpoint = tmp_path / "weights.pt"
    checkpoint.write_bytes(b"the weights")
    digest = file_sha256(checkpoint)
    vectors = features_identity(_pair(tmp_path / "m", "m", digest))
    tokens = features_identity(_pair(tmp_path / "t", "m+tokens2x2", digest, tokens=5))
    rows = {
        "linear": {"model": "m", **wanted(vectors, ProbeProtocol(), {"mode": "fast"}, "32-true")},
        "knn": {"model": "m", "method": "knn", **knn_identity(vectors, KNNSettings(), ProbeProtocol(), "32-true")},
        "attentive": {"model": "m+tokens2x2", "method": "attentive", "features": tokens},
        "finetune": {"model": "m", "method": "finetune", **finetune_identity(
            "m", str(checkpoint), recipe={}, epochs=1, batch_size=8, precision="32-true", transform=None,
            benchmark=None)},
        "attentive_images": {"model": "m-img", "method": "attentive_images", "features": "on-the-fly",  # as written
                             **images_identity(
            "m-img", str(checkpoint), feature=None, preset="capi", epochs=1, batch_size=8, trials=2, startup_trials=1,
            trial_batch=1, val_fraction=0.2, transform=None, precision="32-true", benchmark=None)},
    }
    for method, row in rows.items():
        assert row_weights(row) == digest, method
        assert weights_key(row) == ("sha256", digest), method


def test_rows_of_unknown_weights_pair_within_their_label_only(tmp_path):
    plain = features_identity(open_pair(write_features(tmp_path / "plain", classes=3, dim=4, per_class=4,
                                                       test_per_class=2)))
    random = features_identity(_pair(tmp_path / "r", "r", None))
    for row in ({"model": "p", "features": plain}, {"model": "r", "features": random},
                {"model": "f", "method": "finetune", "finetune": {"checkpoint_sha256": None}},
                {"model": "h", "test_top1": 50.0}):
        assert row_weights(row) is None
        assert weights_key(row) == ("label", row["model"])
    mixed = {"model": "x", "features": {"train": {"weights_sha256": "a" * 64}, "test": {"weights_sha256": "b" * 64}}}
    assert row_weights(mixed) is None  # train and test of other weights: none trusted


def test_a_label_of_image_trained_rows_keeps_its_weights(tmp_path):
    """The label check reads an ``attentive_images`` row's checkpoint digest as it reads a fine-tuning row's."""
    results = tmp_path / "results.sqlite"
    append_row(results, {"model": "m", "method": "attentive_images", "domain": "cog_l1", "shots": None, "seed": 22,
                         "test_top1": 50.0, "attentive_images": {"checkpoint_sha256": "ab" * 32}})
    other = tmp_path / "other.pt"
    other.write_bytes(b"other weights")
    with pytest.raises(LabelWeightsError, match=r"label m already names weights of sha256 abababababababab in "):
        check_label_weights("m", other, results=results)
    check_label_weights("m", other, sha256="ab" * 32, results=results)  # the same weights: free
