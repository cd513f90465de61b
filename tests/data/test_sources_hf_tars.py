"""Hugging Face's gzipped ``ILSVRC/imagenet-1k`` tars: streamed once, rows placed by index, the folder layout's
stores; a cut-short tar and an unreadable image named."""

from __future__ import annotations

import pytest
from conftest_data import tiny  # noqa: F401 - fixture
from conftest_sources import assert_same_stores, extract, hf_tars, in1k_images, write_folders

from cog_pl.data.check import check_data
from cog_pl.data.hf_tars import HFTarSource
from cog_pl.data.sources import open_split_source


def test_hf_tars_stream_to_the_folder_layouts_stores(tiny, tmp_path, caplog):  # noqa: F811
    images = in1k_images(tiny.in1k)
    root = hf_tars(tmp_path / "hf", images)
    train = open_split_source(root, "train", cache_dir=tmp_path / "cache")
    assert isinstance(train, HFTarSource) and not train.random_access and len(train.tars) == 2
    assert all(train.list(w) == sorted(images["train"][w]) for w in tiny.in1k)  # original names, wnid dropped
    w = tiny.in1k[-1]
    with caplog.at_level("WARNING", logger="cog_pl.data"):
        assert [train.read(w, n) for n in train.list(w)] == [images["train"][w][n] for n in train.list(w)]
    assert sum("decompresses the tar up to them" in r.message for r in caplog.records) == 1  # said once
    got = extract(tmp_path / "got", ("in1k",), in1k_root=root)
    assert_same_stores(got, extract(tmp_path / "ref", ("in1k",), in1k_root=write_folders(tmp_path / "f", images)))
    assert got["in1k", "train"][3]["source"]["images"] == "hf_tars"
    unpacked = [p for p in tmp_path.rglob("*") if p.suffix == ".JPEG" and tmp_path / "f" not in p.parents]
    assert not unpacked  # read in place: beside the tars, only their indexes


def test_decode_check_streams_and_names_the_unreadable_image(tiny, tmp_path):  # noqa: F811
    bad = "ILSVRC2012_val_00000003.JPEG"
    root = hf_tars(tmp_path / "hf", in1k_images(tiny.in1k, bad=(bad,)))
    report = check_data(in1k_root=root, decode=True, cache_dir=str(tmp_path / "cache"))
    assert report.sources["in1k"] == "hf_tars" and report.decoded == 21
    assert [k for k, _ in report.unreadable] == [f"{tiny.in1k[2]}/{bad}"]
    member = f"val_images.tar.gz:ILSVRC2012_val_00000003_{tiny.in1k[2]}.JPEG: not a recognised image format"
    assert report.unreadable[0][1].endswith(member)  # the tar and its member


def test_a_truncated_tar_is_refused_naming_it_and_the_last_member(tiny, tmp_path):  # noqa: F811
    root = hf_tars(tmp_path / "hf", in1k_images(tiny.in1k))
    tar = root / "data" / "train_images_1.tar.gz"
    data = tar.read_bytes()
    tar.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(OSError, match=f"{tar}: truncated or damaged gzip tar after member n.*_n.*JPEG"):
        open_split_source(root, "train", cache_dir=tmp_path / "cache")
