"""Benchmark definitions: the official one round-trips through its file, a custom one drives the datamodules."""

import json

import lightning as L
import pytest
import torch
from conftest_data import jpeg_bytes, write_synset

from cog_pl import resources
from cog_pl.benchmark import Benchmark, load_benchmark
from cog_pl.data.check import check_data
from cog_pl.data.splits import load_split, save_split
from cog_pl.data.transforms import TransformConfig
from cog_pl.datamodules import CoGLevelDataModule, ImageNetDataModule


def test_official_round_trip(tmp_path):
    official = Benchmark.official()
    assert load_benchmark(None) == official and official.in1k == resources.in1k_wnids()
    assert all(len(official.classes(lv)) == 1000 and len(official.test[lv]) == 50_000 for lv in resources.LEVELS)
    path = official.save(tmp_path / "official.json")
    rec = json.loads(path.read_text())
    assert (rec["format"], rec["version"], rec["name"]) == ("cog-pl-benchmark", 1, "imagenet-cog")
    back = Benchmark.load(path)
    assert back == official and back.sha256() == official.sha256()
    assert official.feature_protocol().test_per_concept == 50  # the official counts are the protocol's


def _custom(tmp_path):
    """Real wnids: 3 seen concepts, 2 per level with 2 test images each; train names are the other files."""
    levels = {lv: tuple(sorted(resources.official_levels()[lv])[:2]) for lv in resources.LEVELS}
    test = {lv: tuple(f"{w}/{w}_{k}.JPEG" for w in ws for k in (1, 3)) for lv, ws in levels.items()}
    bench = Benchmark("tiny", resources.in1k_wnids()[10:13], levels, test, "in1k/val",
                      {"test_per_concept": 2, "min_train_per_concept": 3, "max_train_per_concept": 3})
    return bench, bench.save(tmp_path / "tiny.json")


def _tree(tmp_path, bench):
    for i, w in enumerate(bench.in1k):
        write_synset(tmp_path / "in1k" / "train", w, {f"{w}_{k}.JPEG": jpeg_bytes(10 * i + k) for k in range(3)},
                     "folder")
        write_synset(tmp_path / "in1k" / "val", w, {f"v_{w}_{k}.JPEG": jpeg_bytes(500 + 10 * i + k)
                                                    for k in range(2)}, "folder")
    for i, w in enumerate(w for lv in resources.LEVELS for w in bench.levels[lv]):
        write_synset(tmp_path / "in21k", w, {f"{w}_{k}.JPEG": jpeg_bytes(1000 + 10 * i + k) for k in range(5)}, "tar")


class Collect(L.LightningModule):
    def predict_step(self, batch, batch_idx):
        return batch["label"], batch["index"]


def _predict(dm):
    out = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).predict(Collect(), datamodule=dm)
    return torch.cat([o[0] for o in out]).tolist(), torch.cat([o[1] for o in out]).tolist()


def test_custom_benchmark_drives_the_datamodules(tmp_path, caplog):
    bench, path = _custom(tmp_path)
    _tree(tmp_path, bench)
    common = {"benchmark": str(path), "transform": TransformConfig(crop=16, resize=16), "batch_size": 4,
              "num_workers": 0, "pin_memory": False, "cache_dir": str(tmp_path / "cache")}
    in1k = ImageNetDataModule(str(tmp_path / "in1k"), predict_split="train", **common)
    labels, _ = _predict(in1k)
    assert in1k.classes == bench.in1k and sorted(labels) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    in1k.setup("test")  # predict built only the predict split
    assert len(in1k.datasets["test"]) == 6

    level = CoGLevelDataModule("cog_l3", str(tmp_path / "in21k"), **common)
    labels, index = _predict(level)
    level.setup()  # predict built only the predict split (test); now the train split too
    test = level.datasets["test"]
    assert {test.key(i) for i in index} == set(bench.test["L3"])
    assert all(bench.classes("L3")[y] == test.key(i).split("/")[0] for y, i in zip(labels, index))
    train = level.datasets["train"]
    assert sorted(train.key(i) for i in range(len(train))) == sorted(
        f"{w}/{w}_{k}.JPEG" for w in bench.classes("L3") for k in (0, 2, 4))
    assert not [r for r in caplog.records if "outside the protocol" in r.message]  # the benchmark's own counts
    meta = level.store_meta("test")
    assert meta["benchmark"] == "tiny" and meta["level_file_sha256"] == bench.sha256()

    split_file = save_split(level.split, tmp_path / "L3.json.gz")
    assert load_split(split_file, "L3", bench) == level.split
    with pytest.raises(ValueError, match="differ from the official L3 test split"):
        load_split(split_file, "L3")
    report = check_data(tmp_path / "in1k", tmp_path / "in21k", decode=True, benchmark=str(path),
                        cache_dir=str(tmp_path / "cache"))
    assert report.ok, report.format()
    assert report.counts["cog_l5"] == {"classes": 2, "expected_classes": 2, "train": 6, "test": 4}


def test_bad_benchmark_files_are_refused_by_name(tmp_path):
    bench, path = _custom(tmp_path)
    with pytest.raises(FileNotFoundError, match="benchmark file .*nothing.json does not exist"):
        Benchmark.load(tmp_path / "nothing.json")
    rec = json.loads(path.read_text())

    def broken(edit):
        r = json.loads(json.dumps(rec))
        edit(r)
        out = tmp_path / "bad.json"
        out.write_text(json.dumps(r))
        return out

    with pytest.raises(ValueError, match="bad.json is a 'cog-pl-levels' file; expected a 'cog-pl-benchmark' file, "
                                         "version 1"):
        Benchmark.load(broken(lambda r: r.update(format="cog-pl-levels")))
    with pytest.raises(ValueError, match="bad.json is version 2 of the format; expected"):
        Benchmark.load(broken(lambda r: r.update(version=2)))
    with pytest.raises(ValueError, match="bad.json is not a cog-pl benchmark file .a JSON object with no format "
                                         "field; its keys: name, in1k, levels, test, in1k_test.; expected"):
        Benchmark.load(broken(lambda r: [r.pop(k) for k in ("format", "version")]))
    w = bench.levels["L2"][0]
    with pytest.raises(ValueError, match=f"bad.json: L2 concept\\(s\\) without test images: {w}"):
        Benchmark.load(broken(lambda r: r["test"].update(L2=[p for p in r["test"]["L2"] if not p.startswith(w)])))
    with pytest.raises(ValueError, match="L1 test image\\(s\\) not of a L1 concept"):
        Benchmark.load(broken(lambda r: r["test"]["L1"].append(r["test"]["L2"][0])))
    with pytest.raises(ValueError, match="none of them seen"):
        Benchmark.load(broken(lambda r: r["in1k"].append(r["levels"]["L4"][0])))
    dm = ImageNetDataModule(str(tmp_path), benchmark=str(tmp_path / "bad.json"))
    with pytest.raises(ValueError, match="benchmark file .*bad.json"):
        len(dm.classes)
