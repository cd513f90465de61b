"""Validation split and N-shot samples: seeded, per class, and never touching test data."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from test_probe_fixtures import write_features

from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.features.pair import open_pair
from cog_pl.probe.cell import Splits, probe
from cog_pl.probe.data import final_indices, tuning_indices
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol

LABELS = np.repeat(np.arange(5), [10, 11, 7, 20, 5])


def test_tuning_sample_is_cut_after_validation_and_final_sample_is_fresh():
    tr, va = tuning_indices(LABELS, 0.2, seed=5, shots=2)
    assert not set(tr) & set(va)
    final = final_indices(LABELS, seed=5, shots=2)
    assert np.bincount(LABELS[final]).tolist() == [2] * 5
    assert len(final_indices(LABELS, seed=5, shots=None)) == len(LABELS)


def test_test_rows_never_enter_tuning_or_training(tmp_path):
    """Test features are NaN: one test row in any training batch would make a loss non-finite."""
    root = write_features(tmp_path / "feats", classes=4, dim=8, per_class=20)
    protocol = replace(ProbeProtocol(), trials=4, epochs=2, batch_size=16)
    for shots in (None, 2):
        splits = Splits.load(root)
        splits.test_x.fill_(float("nan"))  # in memory: loading refuses non-finite features
        row = probe(splits, seed=22, shots=shots, storage=tmp_path / f"s{shots}.db", protocol=protocol,
                    plan=SearchPlan(startup_trials=2, trial_batch=2))
        assert row["final_diverged_epoch"] is None
        assert np.isfinite(row["val_top1"]) and row["val_top1"] > 0
        assert row["train_rows"] == (80 if shots is None else 8)


def test_bad_feature_files_are_named(tmp_path):
    root = write_features(tmp_path / "nan", classes=3, dim=4, per_class=5, test_per_class=4, test_value=float("nan"))
    with pytest.raises(ValueError, match=r"test/features\.npy: 12 rows hold NaN"):
        Splits.load(root)
    root = write_features(tmp_path / "cut", classes=3, dim=4, per_class=5)
    path = root / "train" / "features.npy"
    path.write_bytes(path.read_bytes()[:100])  # truncated, as by an interrupted copy
    with pytest.raises(ValueError, match=r"train/features\.npy: not a readable \.npy file"):
        Splits.load(root)
    root = write_features(tmp_path / "gone", classes=3, dim=4, per_class=5)
    (root / "train" / "labels.npy").unlink()
    with pytest.raises(ValueError, match=r"train/labels\.npy: no such file"):
        Splits.load(root)
    root = write_features(tmp_path / "neg", classes=3, dim=4, per_class=5)
    np.save(root / "test" / "labels.npy", -np.load(root / "test" / "labels.npy") - 1)
    with pytest.raises(ValueError, match=r"test/labels\.npy: negative labels"):
        Splits.load(root)


@pytest.mark.parametrize("field, value", [("trials", 0), ("epochs", 0), ("batch_size", 0), ("val_fraction", 1.0),
                                          ("momentum", 1.0), ("lr_range", (1.0, 0.1)), ("wd_range", (0.0, 1e-4)),
                                          ("shots", (0, 1))])
def test_bad_protocol_values_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        replace(ProbeProtocol(), **{field: value})


def _store_pair(root, test_meta=None, classes=4, test_labels=None):
    from cog_pl.features.store import make_meta, write_store

    rng = np.random.default_rng(0)
    base = dict(model="m", weights_sha256="ab" * 32, domain="cog_l2", num_classes=classes, transform={"crop": 224},
                classes=[f"n{i:08d}" for i in range(classes)], level_file_sha256="cd" * 32)
    for split, n in (("train", 40), ("test", 12)):
        labels = np.arange(n) % (classes - 1)  # the last class has no rows: its count comes from the store
        if split == "test" and test_labels is not None:
            labels = test_labels
        meta = make_meta(**{**base, "split": split, **((test_meta or {}) if split == "test" else {})})
        write_store(root / split, rng.random((n, 6)).astype(np.float32), labels, None, meta)
    return root


def test_feature_stores_are_checked_alone_and_as_a_pair(tmp_path):
    splits = Splits.load(_store_pair(tmp_path / "ok"))
    assert splits.num_classes == 4  # the store's classes, though no row carries the last one
    with pytest.raises(ValueError, match="differ in model: 'm' and 'other'"):
        Splits.load(_store_pair(tmp_path / "model", {"model": "other"}))
    with pytest.raises(ValueError, match="differ in transform"):  # the datamodule's rule, one check for both
        Splits.load(_store_pair(tmp_path / "transform", {"transform": {"crop": 160}}))
    with pytest.raises(ValueError, match="differ in transform"):
        FeatureDataModule(str(tmp_path / "transform"), stage_mode="tune").setup()  # checked even when tuning
    classes = [f"n{i:08d}" for i in range(4)]
    classes[2] = "n99999999"
    with pytest.raises(ValueError, match="different class lists .*first difference at position 2"):
        Splits.load(_store_pair(tmp_path / "classes", {"classes": classes}))
    with pytest.raises(ValueError, match=r"labels\.npy holds labels 0\.\.7, outside 0\.\.3"):
        Splits.load(_store_pair(tmp_path / "labels", test_labels=np.arange(12) % 8))
    root = _store_pair(tmp_path / "version")
    meta = json.loads((root / "test" / "meta.json").read_text())
    (root / "test" / "meta.json").write_text(json.dumps({**meta, "version": 9}))
    with pytest.raises(ValueError, match="store version 9"):
        Splits.load(root)


def test_plain_stores_count_classes_over_both_splits(tmp_path):
    root = write_features(tmp_path / "p", classes=3, dim=4, per_class=5, test_per_class=2)
    np.save(root / "test" / "labels.npy", np.full(6, 3, dtype=np.int64))  # a class seen only in test
    assert Splits.load(open_pair(root, allow_class_mismatch=True)).num_classes == 4  # as asked for
    np.save(root / "test" / "features.npy", np.ones((6, 5), dtype=np.float16))
    with pytest.raises(ValueError, match="train features have 4 dimensions, test features 5"):
        Splits.load(root)


def test_features_go_to_the_gpu_only_when_a_probe_fits_beside_them(tmp_path):
    from cog_pl.device import FIT_FRACTION
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.cell import splits_device

    pair = open_pair(write_features(tmp_path / "p", classes=4, dim=16, per_class=50, test_per_class=10))  # 200 + 40
    columns = 10 * 4  # 10 heads of 4 classes
    needed = 4 * 240 * 16 + 4 * 200 * 16 + 2 * 200 * 32 + 20 * 32 * columns + 12 * 1024 * columns + 4 * 8192 * columns
    assert splits_device(pair, "cuda:1", free_bytes=2 * needed) == "cuda:1"
    assert splits_device(pair, "cuda", free_bytes=int(needed / FIT_FRACTION) + 1) == "cuda"  # the one margin
    assert splits_device(pair, "cuda", free_bytes=needed) == "cpu"  # each probe moves its own rows instead
    assert splits_device(pair, "cpu") == "cpu"


def test_stores_of_any_float_type_load_as_the_same_float32(tmp_path):
    root = write_features(tmp_path / "f32", classes=3, dim=4, per_class=5)
    want = Splits.load(root).train_x
    features = np.load(root / "train" / "features.npy")
    for dtype in (np.float64, np.dtype(">f4"), np.float16):
        np.save(root / "train" / "features.npy", features.astype(dtype))
        got = Splits.load(root).train_x
        assert got.dtype == want.dtype
        tol = 2e-3 if dtype == np.float16 else 1e-7
        assert np.allclose(got.numpy(), want.numpy(), atol=tol), dtype
