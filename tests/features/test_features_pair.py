"""open_pair: a train/test pair opened and checked once; every reader of a store root takes what it needs from it."""

import json

import numpy as np
import pytest
from test_probe_fixtures import write_features

from cog_pl.cli import main as cli
from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.features import store as store_mod
from cog_pl.features.pair import open_pair
from cog_pl.features.store import StoreError, make_meta, write_store
from cog_pl.probe.cell import Splits, splits_device


def _pair(root, classes=4, test_meta=None, model="resnet50", domain="cog_l2"):
    rng = np.random.default_rng(0)
    base = dict(model=model, weights_sha256="ab" * 32, domain=domain, transform={"crop": 224},
                num_classes=classes, classes=[f"n{i:08d}" for i in range(classes)], level_file_sha256="cd" * 32)
    for split, n in (("train", 40), ("test", 12)):
        meta = make_meta(**{**base, "split": split, **((test_meta or {}) if split == "test" else {})})
        write_store(root / split, rng.random((n, 6)).astype(np.float16), np.arange(n) % (classes - 1), None, meta)
    return root


def test_the_probe_path_opens_each_file_once(tmp_path, monkeypatch):
    root = write_features(tmp_path / "plain", classes=3, dim=8, per_class=10, test_per_class=4)
    calls = []
    real = np.load
    monkeypatch.setattr(np, "load", lambda path, *a, **kw: calls.append(str(path)) or real(path, *a, **kw))
    pair = open_pair(root)
    assert splits_device(pair, "cuda", free_bytes=10**12) == "cuda"  # the fit is decided from the opened pair
    splits = Splits.load(pair)
    assert sorted(calls) == sorted(str(root / s / f) for s in ("train", "test") for f in ("features.npy", "labels.npy"))
    assert splits.num_classes == 3 and splits.train_x.shape == (30, 8)


def test_the_datamodule_opens_the_pair_once(tmp_path, monkeypatch):
    root = _pair(tmp_path / "v1")
    opened = []
    real = store_mod.open_store
    monkeypatch.setattr("cog_pl.features.pair.open_store", lambda p, e=None: opened.append(p) or real(p, e))
    dm = FeatureDataModule(str(root), stage_mode="final", device="cpu")
    assert dm.num_classes == 4 and dm.feature_dim == 6  # the class list's length, though no row has the last class
    dm.setup()
    list(dm.test_dataloader())
    assert opened == [root / "train", root / "test"]
    assert Splits.load(root).num_classes == dm.num_classes  # the probe and the datamodule count classes one way


def test_disagreeing_class_counts_are_refused_naming_the_file(tmp_path):
    root = _pair(tmp_path / "p")
    meta_file = root / "test" / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "num_classes": 5}))
    with pytest.raises(StoreError, match=r"test/meta\.json: num_classes is 5 but classes lists 4"):
        open_pair(root)
    with pytest.raises(StoreError, match=r"test/meta\.json: num_classes is 5"):
        FeatureDataModule(str(root)).setup()


def test_model_and_domain_come_from_the_metadata_not_the_folders(tmp_path):
    root = _pair(tmp_path / "copied" / "somewhere")
    pair = open_pair(root)
    assert (pair.model, pair.domain) == ("resnet50", "cog_l2")
    assert (Splits.load(root).model, Splits.load(root).domain) == ("resnet50", "cog_l2")
    with pytest.raises(StoreError, match="differ in domain: 'cog_l2' and 'cog_l3'"):
        open_pair(_pair(tmp_path / "mixed", test_meta={"domain": "cog_l3"}))
    with pytest.raises(StoreError, match="domain='cog_l2', but 'cog_l4' was requested"):
        open_pair(root, {"domain": "cog_l4"})


def test_plain_stores_are_named_by_their_folders_and_other_class_counts_need_the_option(tmp_path, caplog):
    root = write_features(tmp_path / "dino" / "cog_l5", classes=3, dim=4, per_class=5, test_per_class=2)
    assert open_pair(root).names() == ("dino", "cog_l5") and open_pair(root).names("m", None) == ("m", "cog_l5")
    np.save(root / "test" / "labels.npy", np.full(6, 3, dtype=np.int64))  # a class seen only in test
    with pytest.raises(StoreError, match=rf"^{root}: the train store has 3 classes \(labels 0..2\), the test store 4; "
                                         r"test labels the train split never has: 3 \(6 row\(s\)\); pass "
                                         r"--allow-class-mismatch"):
        open_pair(root)
    with caplog.at_level("WARNING", logger="cog_pl.features.pair"):
        pair = open_pair(root, allow_class_mismatch=True)  # asked for: each test row of class 3 counts as an error
    assert pair.plain and (pair.model, pair.domain) == ("dino", "cog_l5") and pair.num_classes == 4
    assert "6 test row(s) have labels the train split never has (3)" in caplog.text
    mixed = _pair(tmp_path / "mixed", classes=3)
    np.save(mixed / "test" / "features.npy", np.zeros((4, 6), dtype=np.float16))
    np.save(mixed / "test" / "labels.npy", np.array([0, 1, 2, 3]))
    (mixed / "test" / "meta.json").unlink()
    (mixed / "test" / "index.npy").unlink()  # a plain test store beside a v1 train store of 3 classes
    with pytest.raises(StoreError, match=r"test/labels\.npy: labels up to 3, but .*mixed has 3 classes"):
        open_pair(mixed)


def test_a_store_without_rows_is_refused_and_unseen_test_classes_are_said(tmp_path, caplog):
    root = write_features(tmp_path / "p", classes=3, dim=4, per_class=5, test_per_class=2)
    np.save(root / "train" / "features.npy", np.zeros((0, 4), np.float16))
    np.save(root / "train" / "labels.npy", np.zeros(0, np.int64))
    with pytest.raises(StoreError, match=rf"^{root / 'train'}: the train store has no rows; a probe needs rows in "
                                         "both train and test"):
        open_pair(root)
    v1 = _pair(tmp_path / "v1", classes=4, test_meta=None)  # v1 stores of 4 classes; class 3 in neither
    labels = np.load(v1 / "test" / "labels.npy")
    labels[:2] = 3
    np.save(v1 / "test" / "labels.npy", labels)  # class 3 in test only: the counts agree (meta), so it is said
    with caplog.at_level("WARNING", logger="cog_pl.features.pair"):
        assert open_pair(v1).num_classes == 4
    assert "2 test row(s) have labels the train split never has (3)" in caplog.text


def test_a_folder_name_that_is_not_utf8_is_refused_where_it_would_name_rows(tmp_path):
    folder = tmp_path / "m" / b"\xffdom".decode("utf-8", "surrogateescape")
    root = write_features(folder, classes=3, dim=4, per_class=5, test_per_class=2)
    pair = open_pair(root)  # opening and reading are fine; filing a row under the name is not
    with pytest.raises(StoreError, match=r"^domain '\\xffdom' \(the name of folder .*/m/\\xffdom\) is not UTF-8 "
                                         r"text, which result rows and study names must be; pass --domain NAME$"):
        pair.names()
    assert pair.names(domain="cog_l2") == ("m", "cog_l2")


def test_the_datamodule_asks_whether_what_it_places_fits(tmp_path, monkeypatch):
    root = write_features(tmp_path / "p", classes=4, dim=16, per_class=50, test_per_class=10)  # 200 + 40 rows
    asked = []
    monkeypatch.setattr("cog_pl.datamodules.features.fits", lambda needed, dev, **kw: asked.append(needed) or False)
    dm = FeatureDataModule(str(root), stage_mode="final")
    dm.setup()
    features, labels, indices = 2 * 240 * 16, 8 * 240, 8 * 240  # float16 features, int64 labels and row indices
    assert asked == [features + labels + indices]
    assert dm._tensors["train"][0].device.type == "cpu"  # not fitting: host memory


def test_features_info_and_export_read_a_root_as_a_pair(tmp_path, capsys):
    root = _pair(tmp_path / "p")
    assert cli.main(["features", "info", str(root)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["model"], info["domain"], info["num_classes"], info["dim"]) == ("resnet50", "cog_l2", 4, 6)
    assert info["train"]["rows"] == 40 and info["test"]["rows"] == 12
    bad = _pair(tmp_path / "bad", test_meta={"transform": {"crop": 160}})
    assert cli.main(["features", "export", str(bad), str(tmp_path / "out")]) == 2
    assert "differ in transform" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_train_store_of_one_class_is_refused_where_a_probe_opens_it(tmp_path, capsys):
    """Issue 47, item 3: a one-class store gave a 100 % row (linear, k-NN, attentive): open_pair, where every probe
    method and the FeatureDataModule of ``cog-pl probe fit`` open their stores, refuses a train store whose rows
    hold fewer than two classes, in one line naming it; ``features info`` and ``export``, which probe nothing, still
    read it. (Each probe, through the installed command: tests/bad_input_cases.py.)"""
    plain = write_features(tmp_path / "plain", classes=1, dim=4, per_class=5, test_per_class=2)
    with pytest.raises(StoreError, match=rf"^{plain / 'train'}: the train store's 5 rows hold one class \(label 0\); "
                                         r"a probe needs at least 2 classes \(on one it is right by construction\)$"):
        open_pair(plain)
    with pytest.raises(StoreError, match=r"the train store's 5 rows hold one class"):
        FeatureDataModule(str(plain)).setup()
    v1 = _pair(tmp_path / "v1", classes=2)  # meta of two classes, every train row labelled 0
    with pytest.raises(StoreError, match=rf"^{v1 / 'train'}: the train store's 40 rows hold one class \(label 0\)"):
        open_pair(v1)
    assert open_pair(plain, min_classes=1).num_classes == 1
    assert cli.main(["features", "info", str(plain)]) == 0 and json.loads(capsys.readouterr().out)["num_classes"] == 1
    assert open_pair(write_features(tmp_path / "two", classes=2, dim=4, per_class=5, test_per_class=1)).num_classes == 2
