"""IN-1K's official flat ``val/``, labelled by the devkit or Kaggle's CSV: detected, indexed once, checked, and
extracted to the same stores as the sorted folders."""

from __future__ import annotations

import os

import pytest
import scipy.io  # noqa: F401 - the devkit's meta.mat is written (and read) with scipy (the test extra pins it)
from conftest_data import tiny  # noqa: F401 - fixture
from conftest_sources import assert_same_stores, extract, in1k_images, write_flat_val, write_folders

from cog_pl.data.check import check_data
from cog_pl.data.flat_val import FlatValSource
from cog_pl.data.sources import SynsetSource, open_split_source


@pytest.mark.parametrize("labels", ["devkit", "kaggle"])
def test_flat_val_extracts_to_the_folder_layouts_stores(tiny, tmp_path, labels):  # noqa: F811
    images = in1k_images(tiny.in1k)
    folders = write_folders(tmp_path / "folders", images)
    flat = write_flat_val(tmp_path / "flat", images, labels)
    val = open_split_source(flat, "test", cache_dir=tmp_path / "cache")
    assert isinstance(val, FlatValSource) and isinstance(open_split_source(flat, "train"), SynsetSource)
    assert all(val.list(w) == sorted(images["test"][w]) for w in tiny.in1k)
    ref = extract(tmp_path / "ref", ("in1k",), in1k_root=folders)
    got = extract(tmp_path / "got", ("in1k",), in1k_root=flat)
    assert_same_stores(got, ref)
    assert got["in1k", "test"][3]["source"]["images"] == "flat_val"
    assert ref["in1k", "test"][3]["source"]["images"] == "synsets"


def test_the_index_is_built_once_and_rebuilt_when_the_labels_change(tiny, tmp_path):  # noqa: F811
    images = in1k_images(tiny.in1k)
    flat = write_flat_val(tmp_path / "flat", images, "kaggle")
    first = open_split_source(flat, "test")
    index = flat / "val.flat_val.index.json"  # beside the folder it indexes
    assert index.is_file()
    stamp = index.stat().st_mtime_ns
    assert open_split_source(flat, "test").index == first.index and index.stat().st_mtime_ns == stamp
    csv = flat / "LOC_val_solution.csv"
    moved = tiny.in1k[0]
    text = csv.read_text().replace("ILSVRC2012_val_00000001," + moved, "ILSVRC2012_val_00000001," + tiny.in1k[1])
    csv.write_text(text)
    os.utime(csv, ns=(stamp + 10**9, stamp + 10**9))
    again = open_split_source(flat, "test")
    assert "ILSVRC2012_val_00000001.JPEG" in again.list(tiny.in1k[1])
    assert "ILSVRC2012_val_00000001.JPEG" not in again.list(moved)


def test_a_ground_truth_of_the_wrong_length_is_refused_naming_file_and_image(tiny, tmp_path):  # noqa: F811
    flat = write_flat_val(tmp_path / "flat", in1k_images(tiny.in1k), "devkit")
    truth = flat / "ILSVRC2012_devkit_t12" / "data" / "ILSVRC2012_validation_ground_truth.txt"
    truth.write_text("".join(truth.read_text().splitlines(keepends=True)[:-2]))  # 12 images, 10 lines
    with pytest.raises(ValueError, match=f"{truth}: 10 lines, but image ILSVRC2012_val_00000011.JPEG needs line 11"):
        open_split_source(flat, "test", cache_dir=tmp_path / "cache")


def test_check_names_missing_and_unlabelled_val_images_and_extraction_refuses_them(tiny, tmp_path):  # noqa: F811
    images = in1k_images(tiny.in1k)
    gone, stray = "ILSVRC2012_val_00000005.JPEG", "ILSVRC2012_val_00000099.JPEG"
    flat = write_flat_val(tmp_path / "flat", images, "kaggle", drop=(gone,), extra=(stray,))
    report = check_data(in1k_root=flat, benchmark=None)
    missing = [f for f in report.findings if f.kind == "missing test images"]
    wnid = next(w for w, files in images["test"].items() if gone in files)
    assert [f.message for f in missing] == [f"{wnid}/{gone}"] and missing[0].severity == "error"
    assert [f.message for f in report.findings if f.kind == "unlabelled val images"] == [str(flat / "val" / stray)]
    assert report.sources["in1k"] == "synsets/flat_val" and report.mismatch["in1k"] == {
        "missing": 1, "extra": 1, "re-encoded": 0}
    assert "synsets/flat_val" in report.format()
    with pytest.raises(FileNotFoundError, match=f"1 image\\(s\\) the split lists are not in the source: {wnid}/{gone}"):
        extract(tmp_path / "out", ("in1k",), in1k_root=flat)
    stores = extract(tmp_path / "out", ("in1k",), in1k_root=flat, allow_missing=1)  # the explicit tolerance
    assert len(stores["in1k", "test"][1]) == sum(map(len, images["test"].values())) - 1
    tolerated = check_data(in1k_root=flat, allow_missing=1)
    assert [f.severity for f in tolerated.findings if f.message == f"{wnid}/{gone}"] == ["warning"]


def test_kaggles_download_as_unpacked_reads_its_labels_four_folders_up(tiny, tmp_path):  # noqa: F811
    """Kaggle's ``imagenet-object-localization-challenge`` unpacks to ``LOC_val_solution.csv`` beside
    ``ILSVRC/Data/CLS-LOC/{train,val}/``: the CSV is four folders above val/."""
    images = in1k_images(tiny.in1k)
    download = tmp_path / "download"
    root = write_flat_val(download / "ILSVRC" / "Data" / "CLS-LOC", images, "kaggle")
    (root / "LOC_val_solution.csv").rename(download / "LOC_val_solution.csv")
    val = open_split_source(root, "test", cache_dir=tmp_path / "cache")
    assert val.labels_path == download / "LOC_val_solution.csv"
    assert all(val.list(w) == sorted(images["test"][w]) for w in tiny.in1k)
    with pytest.raises(FileNotFoundError, match=f"image root {download / 'train'} is not a directory: {download} is "
                                                f"Kaggle's ImageNet download as unpacked, whose IN-1K root is "
                                                f"{root}$"):
        open_split_source(download, "train")  # the folder Kaggle unpacks to, given as the IN-1K root
    (download / "LOC_val_solution.csv").rename(tmp_path / "LOC_val_solution.csv")  # five folders up: not looked at
    with pytest.raises(FileNotFoundError, match="no labels found; .* or up to 4 folders above it"):
        open_split_source(root, "test", cache_dir=tmp_path / "cache2")


def test_a_devkit_ground_truth_without_its_meta_mat_is_named(tiny, tmp_path):  # noqa: F811
    flat = write_flat_val(tmp_path / "flat", in1k_images(tiny.in1k), "devkit")
    meta = flat / "ILSVRC2012_devkit_t12" / "data" / "meta.mat"
    meta.unlink()
    with pytest.raises(FileNotFoundError, match=f"^{meta}: the devkit's meta.mat is missing beside "
                                                f"{meta.parent / 'ILSVRC2012_validation_ground_truth.txt'}"):
        open_split_source(flat, "test", cache_dir=tmp_path / "cache")
