"""Image DataModules over generated IN-1K and IN-21K trees, driven by real Lightning Trainers on CPU."""

import lightning as L
import pytest
import torch
from conftest_data import TINY_PROTOCOL, tiny  # noqa: F401 - fixture

from cog_pl.data.imagenet import DecodedImages, UnreadableImageError, read_error_log
from cog_pl.data.sources import SynsetSource
from cog_pl.data.splits import save_split
from cog_pl.data.transforms import TransformConfig
from cog_pl.datamodules import CoGLevelDataModule, ImageNetDataModule


class Collect(L.LightningModule):
    """Returns each batch's labels and indices from predict_step."""

    def predict_step(self, batch, batch_idx):
        assert batch["image"].shape[1:] == (3, 32, 32)
        return batch["label"], batch["index"]


def _predict(dm):
    out = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).predict(Collect(), datamodule=dm)
    return torch.cat([o[0] for o in out]).tolist(), torch.cat([o[1] for o in out]).tolist()


def _dm(tiny, root, **kw):  # noqa: F811
    kw = {"transform": TransformConfig(crop=32, resize=32), "batch_size": 4, "num_workers": 0, "pin_memory": False,
          "cache_dir": str(root.parent / "cache"), "protocol": TINY_PROTOCOL, **kw}
    return CoGLevelDataModule("cog_l2", str(root), **kw)


@pytest.mark.parametrize("layout", ["tar", "folder"])
def test_cog_level_test_split_is_the_official_one(tiny, tmp_path, layout):  # noqa: F811
    dm = _dm(tiny, tiny.make_in21k(tmp_path / "in21k", layout))
    labels, index = _predict(dm)
    ds = dm.datasets["test"]
    assert index == list(range(len(ds))) and len(ds) == 9
    dm.setup("fit")
    assert {ds.key(i) for i in index} == set(tiny.test["L2"])
    classes = sorted(tiny.levels["L2"])
    assert all(classes[y] == ds.key(i).split("/")[0] for y, i in zip(labels, index))
    train = dm.datasets["train"]
    assert len(train) == 3 * TINY_PROTOCOL.max_train_per_concept
    assert not {train.key(i) for i in range(len(train))} & set(tiny.test["L2"])
    meta = dm.store_meta("test")
    assert meta["domain"] == "cog_l2" and meta["classes"] == classes and len(meta["split_sha256"]) == 64


def test_split_file_is_used_when_given(tiny, tmp_path):  # noqa: F811
    root = tiny.make_in21k(tmp_path / "in21k")
    dm = _dm(tiny, root)
    split = dm.split
    fewer = type(split)(split.level, {w: v[:3] for w, v in split.train.items()}, split.test)
    path = save_split(fewer, tmp_path / "L2.json.gz")
    dm2 = _dm(tiny, root, split_file=str(path))
    dm2.setup()
    assert len(dm2.datasets["train"]) == 9 and dm2.store_meta("train")["split_sha256"] == fewer.sha256()


def test_missing_test_image_is_refused_by_name(tiny, tmp_path):  # noqa: F811
    gone = tiny.test["L2"][4]
    dm = _dm(tiny, tiny.make_in21k(tmp_path / "in21k", "tar", skip=(gone,)))
    with pytest.raises(FileNotFoundError, match=f"1 test image\\(s\\) missing: {gone}"):
        dm.setup()


def test_unreadable_images_fail_or_are_skipped_and_listed(tiny, tmp_path):  # noqa: F811
    bad = {tiny.test["L2"][0]: "corrupt", tiny.test["L2"][5]: "truncated"}
    root = tiny.make_in21k(tmp_path / "in21k", "tar", bad=bad)
    with pytest.raises(UnreadableImageError, match=bad and tiny.test["L2"][0].split("/")[1]):
        _predict(_dm(tiny, root, predict_split="test"))
    log = tmp_path / "bad.tsv"
    _, index = _predict(_dm(tiny, root, on_error="skip", error_log=str(log)))
    assert len(index) == 7 and [k for k, _ in read_error_log(log)] == sorted(bad)


def test_in1k_datamodule_reads_train_and_val(tiny, tmp_path):  # noqa: F811
    root = tiny.make_in1k(tmp_path / "in1k", "tar", n_train=3, n_val=2)
    dm = ImageNetDataModule(str(root), batch_size=4, num_workers=0, pin_memory=False, predict_split="train",
                            cache_dir=str(tmp_path / "cache"), transform=TransformConfig(crop=32, resize=32))
    labels, index = _predict(dm)
    assert sorted(index) == list(range(9)) and sorted(labels) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    dm.setup("test")
    assert len(dm.datasets["test"]) == 6
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"image", "label", "index"}
    for f in (root / "val" / tiny.in1k[1]).iterdir():
        f.unlink()
    (root / "val" / tiny.in1k[1]).rmdir()
    with pytest.raises(FileNotFoundError, match=f"1 IN-1K val synset\\(s\\) missing under .*: {tiny.in1k[1]}"):
        ImageNetDataModule(str(root), num_workers=0).setup()


def test_cached_images_are_the_rows_read_from_disk_decoded_once(tiny, tmp_path, monkeypatch):  # noqa: F811
    bad = tiny.test["L2"][3]
    root = tiny.make_in21k(tmp_path / "in21k", "tar", bad={bad: "corrupt"})
    reads = []
    real_read = SynsetSource.read
    monkeypatch.setattr(SynsetSource, "read", lambda self, w, f: reads.append((w, f)) or real_read(self, w, f))
    plain = _dm(tiny, root, on_error="skip", shuffle_train=False)
    cached = _dm(tiny, root, on_error="skip", shuffle_train=False, cache_images=True)
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    cached.setup()
    assert torch.equal(torch.rand(2), expected)  # decoding at setup leaves the random stream as it was
    test = cached.datasets["test"]
    rows = len(cached.datasets["train"]) + len(test)
    assert isinstance(test, DecodedImages) and len(reads) == rows  # each image decoded once
    assert "skipped" in test[next(i for i in range(len(test)) if test.key(i) == bad)]  # skipped images stay skipped
    for split in ("train", "test"):
        a = list(getattr(plain, f"{split}_dataloader")())
        for _ in range(2):  # two epochs
            b = list(getattr(cached, f"{split}_dataloader")())
            assert len(a) == len(b)
            for x, y in zip(a, b):
                assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x if k != "skipped")
                assert x.get("skipped", {}).get("path") == y.get("skipped", {}).get("path")  # listed the same
    assert len(reads) == 2 * rows  # the plain module's one pass; the cached one read nothing more


def test_setup_decodes_only_the_splits_the_stage_reads(tiny, tmp_path, monkeypatch):  # noqa: F811
    root = tiny.make_in21k(tmp_path / "in21k")
    reads = []
    real_read = SynsetSource.read
    monkeypatch.setattr(SynsetSource, "read", lambda self, w, f: reads.append((w, f)) or real_read(self, w, f))
    dm = _dm(tiny, root, cache_images=True, predict_split="train")
    dm.setup("test")
    assert list(dm.datasets) == ["test"] and len(reads) == len(dm.datasets["test"]) == 9
    dm.setup("fit")
    train = dm.datasets["train"]
    assert isinstance(train, DecodedImages) and len(reads) == 9 + len(train)
    dm.setup("predict")  # predict_split="train": decoded already
    dm.setup()
    assert len(reads) == 9 + len(train)
    other = _dm(tiny, root, cache_images=True)
    other.setup("predict")  # predict_split="test"
    assert list(other.datasets) == ["test"]
    other.setup()
    assert set(other.datasets) == {"train", "test"}


def test_loader_defaults_fit_the_machine_and_the_trainer(tiny, tmp_path, monkeypatch):  # noqa: F811
    """num_workers="auto": this process's share of its cores; pin_memory only for a CUDA device."""
    import lightning as L

    import cog_pl.device

    root = tiny.make_in1k(tmp_path / "in1k", "tar", n_train=2, n_val=1)
    monkeypatch.setattr(cog_pl.device.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    dm = ImageNetDataModule(str(root), transform=TransformConfig(crop=32, resize=32))
    assert dm.num_workers == 7 and dm.pin_memory is False  # 8 cores, one process, on no device
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    dm.trainer = trainer
    assert dm.num_workers == 3 and dm.pin_memory is False  # two processes share the 8 cores; a CPU pins nothing
    loader = dm.train_dataloader()
    assert loader.num_workers == 3 and loader.pin_memory is False
    assert ImageNetDataModule(str(root), num_workers=0, pin_memory=True).train_dataloader().pin_memory is True
    with pytest.raises(ValueError, match="num_workers='many'; expected auto or a count"):
        ImageNetDataModule(str(root), num_workers="many")
