"""timm's webdataset shards (IN-1K, IN-21K Winter 2021): read in place, matched to the CoG splits by original name,
extracted to the folder layout's stores, and checked (dropped and re-encoded images named)."""

from __future__ import annotations

import os
import tarfile

import pytest
from conftest_data import TINY_PROTOCOL, tiny  # noqa: F401 - fixture
from conftest_sources import (
    assert_same_stores,
    extract,
    image_bytes,
    in1k_images,
    in1k_shards,
    w21_shards,
    write_folders,
    write_shards,
)

from cog_pl.cli.main import main
from cog_pl.data import check
from cog_pl.data.sources import open_source, open_split_source
from cog_pl.data.splits import build_split, save_split
from cog_pl.data.webdataset import WebDatasetSource
from cog_pl.datamodules import CoGLevelDataModule


def test_in1k_shards_extract_to_the_folder_layouts_stores(tiny, tmp_path):  # noqa: F811
    images = in1k_images(tiny.in1k)
    folders = write_folders(tmp_path / "folders", images)
    shards = in1k_shards(tmp_path / "wds", images)
    train, val = (open_split_source(shards, s, cache_dir=tmp_path / "cache") for s in ("train", "test"))
    assert isinstance(train, WebDatasetSource) and [p.name for p in val.shards] == ["imagenet1k-validation-0000.tar",
                                                                                 "imagenet1k-validation-0001.tar",
                                                                                 "imagenet1k-validation-0002.tar"]
    assert all(train.list(w) == sorted(images["train"][w]) for w in tiny.in1k)
    assert_same_stores(extract(tmp_path / "got", ("in1k",), in1k_root=shards),
                       extract(tmp_path / "ref", ("in1k",), in1k_root=folders))


def test_w21_shards_match_the_cog_split_by_original_name_and_extract_the_same(tiny, tmp_path):  # noqa: F811
    folders = tiny.make_in21k(tmp_path / "in21k")
    shards = w21_shards(folders, tmp_path / "w21")
    source = open_source(shards)
    assert isinstance(source, WebDatasetSource) and source.synsets() == sorted(w for ws in tiny.levels.values()
                                                                               for w in ws)
    got = extract(tmp_path / "got", ("cog_l1", "cog_l4"), in21k_root=shards)
    ref = extract(tmp_path / "ref", ("cog_l1", "cog_l4"), in21k_root=folders)
    assert_same_stores(got, ref)
    assert got["cog_l1", "train"][3]["split_sha256"] == ref["cog_l1", "train"][3]["split_sha256"]
    record = got["cog_l1", "test"][3]["source"]
    assert record["images"] == "wds" and record["index_sha256"] != ref["cog_l1", "test"][3]["source"]["index_sha256"]


def test_index_is_cached_beside_each_shard_and_rebuilt_when_it_changes(tiny, tmp_path):  # noqa: F811
    shards = w21_shards(tiny.make_in21k(tmp_path / "in21k"), tmp_path / "w21")
    open_source(shards)
    first = shards / "imagenet-w21-train-0000.tar"
    index = shards / "imagenet-w21-train-0000.tar.wds.index.json"
    assert index.is_file()
    before = index.stat().st_mtime_ns
    open_source(shards)
    assert index.stat().st_mtime_ns == before  # reused
    with tarfile.open(first, "a") as tf:  # a sample more: size and mtime change
        from conftest_sources import add_member

        add_member(tf, "zz.jpg", image_bytes("jpeg", 3))
        add_member(tf, "zz.cls", b"1")
        add_member(tf, "zz.json", b'{"filename": "n00000001_1.JPEG"}')
    assert "n00000001" in open_source(shards).synsets()


def test_check_names_exactly_the_dropped_and_re_encoded_images(tiny, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(check, "FeatureProtocol", lambda: TINY_PROTOCOL)
    wnids = tiny.levels["L1"]
    folders = tiny.make_in21k(tmp_path / "in21k", n_train={w: 5 for ws in tiny.levels.values() for w in ws})
    split_file = save_split(build_split("L1", open_source(folders)), tmp_path / "L1.json.gz")  # the reference
    train = [f"{w}/{n}" for w in wnids for n in sorted(os.listdir(folders / w)) if f"{w}/{n}" not in tiny.test["L1"]]
    dropped = (tiny.test["L1"][1], train[0], train[7])
    reencoded = {train[3]: "png", tiny.test["L1"][4]: "webp"}
    shards = w21_shards(folders, tmp_path / "w21", drop=dropped, reencode=reencoded)
    report = check.check_data(in21k_root=shards, levels=("L1",), split_files={"L1": str(split_file)})
    named = sorted(f.message.split(":")[0] for f in report.findings if f.domain == "cog_l1")
    assert named == sorted([*dropped, *reencoded])
    assert report.mismatch["cog_l1"] == {"missing": 3, "extra": 0, "re-encoded": 2}
    assert {f.severity for f in report.findings if f.message.split(":")[0] in dropped} == {"error"}
    assert {f.severity for f in report.findings if f.message.split(":")[0] in reencoded} == {"warning"}
    text = report.format()
    assert "[cog_l1] missing train images: 2" in text and "[cog_l1] missing test images: 1" in text
    assert "[cog_l1] re-encoded train images: 1" in text and f"{train[3]}: stored as png" in text
    assert "wds" in text.splitlines()[1] and not report.ok


def test_a_sample_without_cls_is_refused_naming_shard_and_sample(tmp_path):
    root = tmp_path / "w21"
    write_shards(root, "imagenet-w21-train", [("k1", "jpg", image_bytes("jpeg", 1), "n01440764_1.JPEG", 3),
                                               ("k2", "jpg", image_bytes("jpeg", 2), "n01440764_2.JPEG", None)])
    with pytest.raises(ValueError, match=f"{root / 'imagenet-w21-train-0000.tar'}: sample k2 has no cls member"):
        open_source(root, cache_dir=tmp_path / "cache")


def test_a_truncated_shard_is_refused_naming_it_and_the_member(tmp_path):
    root = tmp_path / "w21"
    [shard] = write_shards(root, "imagenet-w21-train", [
        (f"k{i}", "jpg", image_bytes("jpeg", i), f"n01440764_{i}.JPEG", 0) for i in range(4)], per_shard=4)
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])  # an interrupted download
    with pytest.raises(OSError, match=f"{shard}: truncated.*member"):
        open_source(root, cache_dir=tmp_path / "cache")


def test_a_synset_absent_from_the_shards_is_refused_by_name(tiny, tmp_path):  # noqa: F811
    gone = tiny.levels["L3"][1]
    shards = w21_shards(tiny.make_in21k(tmp_path / "in21k", skip=(gone,)), tmp_path / "w21")
    dm = CoGLevelDataModule("cog_l3", str(shards), cache_dir=str(tmp_path / "cache"), protocol=TINY_PROTOCOL)
    with pytest.raises(FileNotFoundError, match=f"1 cog_l3 synset\\(s\\) missing under {shards}: {gone}"):
        dm.setup()
    assert main(["data", "check", "--in21k-root", str(shards), "--in21k-source", "wds"]) == 1


def test_the_index_is_one_memory_mapped_table_shared_by_path(tiny, tmp_path):  # noqa: F811
    import pickle

    import numpy as np

    shards = w21_shards(tiny.make_in21k(tmp_path / "in21k"), tmp_path / "w21")
    source = open_source(shards)
    table = source.table
    assert isinstance(table.columns["offset"], np.memmap) and table.path == tmp_path / "w21.wds-all.table"
    assert len(pickle.dumps(table)) < 500  # a loader worker or rank gets the path, not the index
    assert table.nbytes / len(table) < 64
    w = source.synsets()[0]
    assert pickle.loads(pickle.dumps(source)).list(w) == source.list(w)


def test_an_image_in_two_shards_is_refused_naming_both(tmp_path):
    root = tmp_path / "w21"
    write_shards(root, "imagenet-w21-train", [("k1", "jpg", image_bytes("jpeg", 1), "n01440764_1.JPEG", 0),
                                               ("k2", "jpg", image_bytes("jpeg", 2), "n01440764_1.JPEG", 0)],
                 per_shard=1, seed=0)
    with pytest.raises(ValueError, match=f"{root}/imagenet-w21-train-0001.tar: holds n01440764/n01440764_1.JPEG, "
                                         "which imagenet-w21-train-0000.tar holds too"):
        open_source(root, cache_dir=tmp_path / "cache")
