"""Synset sources (folders and tars) and the image dataset's contract and bad-image policy."""

import pytest
import torch
from conftest_data import bad_bytes, jpeg_bytes, write_synset
from torch.utils.data import DataLoader

from cog_pl.data.imagenet import ImageDataset, UnreadableImageError, collate_images, read_error_log
from cog_pl.data.sources import SynsetSource
from cog_pl.data.transforms import TransformConfig, build_transform

FILES = {"n01_a.JPEG": jpeg_bytes(1), "n01_b.JPEG": jpeg_bytes(2), "n01_bad.JPEG": bad_bytes("corrupt"),
         "n01_cut.JPEG": bad_bytes("truncated")}
TRANSFORM = build_transform(TransformConfig(crop=16, resize=16))


@pytest.fixture(params=["folder", "tar"])
def source(request, tmp_path):
    write_synset(tmp_path / "root", "n01", FILES, request.param)
    return SynsetSource(tmp_path / "root", cache_dir=tmp_path / "cache")


def _dataset(source, names, **kw):
    return ImageDataset(source, [("n01", n) for n in names], list(range(len(names))), TRANSFORM, **kw)


def test_folders_and_tars_list_and_read_the_same(source):
    assert source.list("n01") == sorted(FILES)
    assert all(source.read("n01", n) == FILES[n] for n in FILES)
    assert not source.has("n02")
    with pytest.raises(FileNotFoundError, match="synset n02 is missing under"):
        source.list("n02")


def test_samples_follow_the_contract(source):
    ds = _dataset(source, ["n01_a.JPEG", "n01_b.JPEG"])
    s = ds[1]
    assert s["image"].shape == (3, 16, 16) and s["image"].dtype == torch.float32
    assert s["label"] == 1 and s["index"] == 1
    batch = collate_images([ds[0], ds[1]])
    assert batch["image"].shape == (2, 3, 16, 16) and batch["index"].tolist() == [0, 1]


@pytest.mark.parametrize("name", ["n01_bad.JPEG", "n01_cut.JPEG"])
def test_fail_policy_names_the_file(source, name):
    ds = _dataset(source, ["n01_a.JPEG", name])
    with pytest.raises(UnreadableImageError, match=f"unreadable image .*n01.*{name}"):
        ds[1]


def test_skip_policy_drops_and_records_across_workers(source, tmp_path):
    log = tmp_path / "bad.tsv"
    ds = _dataset(source, sorted(FILES) * 3, on_error="skip", error_log=log)
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate_images)
    seen = torch.cat([b["index"] for b in loader]).tolist()
    kept = [i for i, (_, n) in enumerate(ds.samples) if n in ("n01_a.JPEG", "n01_b.JPEG")]
    assert sorted(seen) == kept
    assert [k for k, _ in read_error_log(log)] == ["n01/n01_bad.JPEG", "n01/n01_cut.JPEG"]
    lines = log.read_text().splitlines()
    assert len(lines) == 6 and all("\t" in line for line in lines)  # one whole line per failure, none torn


def test_a_batch_of_only_bad_images_is_empty(source):
    ds = _dataset(source, ["n01_bad.JPEG"], on_error="skip")
    batch = collate_images([ds[0]])
    assert batch["label"].numel() == 0 and batch["image"].shape[0] == 0


def test_unknown_policy_is_refused(source):
    with pytest.raises(ValueError, match="on_error='ignore'"):
        _dataset(source, ["n01_a.JPEG"], on_error="ignore")
