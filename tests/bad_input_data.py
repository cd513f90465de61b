"""The small files the bad-input catalogue's command lines name (:func:`make_data`: their ``{placeholders}``):
stores, level files, images, results stores and studies, each broken in the one way a case needs."""

from __future__ import annotations

import io
import json
import os
import sqlite3
from pathlib import Path

import numpy as np

#: Real synsets: an official L1 concept, IN-1K's first class, a wnid that is no synset; the first two L1 concepts.
L1_WNID, IN1K_WNID, NO_WNID = "n01322508", "n01440764", "n99999999"
L1_PAIR = (L1_WNID, "n01322898")


def _store(folder: Path, classes: int = 3, dim: int = 4, per_class: int = 6, seed: int = 0) -> None:
    """A plain feature store (features.npy float16, labels.npy int64)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    labels = np.repeat(np.arange(classes), per_class)
    np.save(folder / "features.npy", rng.normal(size=(len(labels), dim)).astype(np.float16))
    np.save(folder / "labels.npy", labels.astype(np.int64))


def _pair(root: Path) -> Path:
    _store(root / "train")
    _store(root / "test", per_class=2, seed=1)
    return root


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _level_file(path: Path, **given: object) -> str:
    from cog_pl.resources import LEVELS, official_levels

    levels = {lvl: sorted(official_levels()[lvl])[:2] for lvl in LEVELS}
    path.write_text(json.dumps({"format": "cog-pl-levels", "version": 1, "levels": {**levels, **given}}))
    return str(path)


def _odd_inputs(root: Path, d: dict[str, str]) -> None:
    """The inputs of the cases that once wrote a number or said nothing useful (issue 29), into ``d``."""
    import torch

    from cog_pl.io import printable

    empty = _pair(root / "empty" / "m" / "cog_l2")  # a train store of 0 rows
    np.save(empty / "train" / "features.npy", np.zeros((0, 4), np.float16))
    np.save(empty / "train" / "labels.npy", np.zeros(0, np.int64))
    unseen = _pair(root / "unseen" / "m" / "cog_l2")  # train labels 0..2, one test label 15
    y = np.load(unseen / "test" / "labels.npy")
    y[0] = 15
    np.save(unseen / "test" / "labels.npy", y)
    (root / "results-dir.sqlite").mkdir()  # a folder given as a results file
    (root / "rundir" / "results.sqlite").mkdir(parents=True)  # a run whose results file is a folder
    nonutf = _pair(root / "nonutf" / "m" / os.fsdecode(b"\xffdom"))  # a folder name that is not UTF-8
    d.update(empty=str(empty), unseen=str(unseen), resdir=str(root / "results-dir.sqlite"),
             rundir=str(root / "rundir"), nonutf=str(nonutf), nonutf_shown=printable(nonutf))

    class Payload:  # unpickled, it would run a command (that leaves a file behind)
        def __reduce__(self):
            return os.system, (f"touch {root / 'pwned'}",)

    torch.save({"state_dict": {}, "hyper_parameters": Payload()}, root / "evil.ckpt")
    (root / "key.pth").write_bytes(b"\x80\x02h\x65.")  # a pickle that fetches memo 101, which it never stored
    torch.save({"X": torch.ones(8192, 16), "Y": torch.zeros(8192, dtype=torch.int64)}, root / "good_X_Y.pth")
    (root / "enospc").mkdir()  # imported at start-up: the file system refuses every reservation
    (root / "enospc" / "sitecustomize.py").write_text(
        "import errno, os\n\n\ndef _full(fd, offset, length):\n    raise OSError(errno.ENOSPC, "
        "os.strerror(errno.ENOSPC))\n\n\nos.posix_fallocate = _full\n")
    (root / "foreign_bench.json").write_text('{"name": "x", "levels": {}}')
    devkit = root / "devkit"  # IN-1K with the devkit's ground truth but not its meta.mat
    (devkit / "train" / IN1K_WNID).mkdir(parents=True)
    (devkit / "val").mkdir()
    (devkit / "val" / "ILSVRC2012_val_00000001.JPEG").write_bytes(_jpeg(0))
    (devkit / "ILSVRC2012_devkit_t12" / "data").mkdir(parents=True)
    (devkit / "ILSVRC2012_devkit_t12" / "data" / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n")
    kaggle = root / "kaggle"  # Kaggle's ImageNet download as unpacked
    for sub in (f"train/{IN1K_WNID}", "val"):
        (kaggle / "ILSVRC" / "Data" / "CLS-LOC" / sub).mkdir(parents=True)
    (kaggle / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n")
    d.update(evil=str(root / "evil.ckpt"), key_pth=str(root / "key.pth"), good_pth=str(root / "good_X_Y.pth"),
             enospc=str(root / "enospc"), foreign_bench=str(root / "foreign_bench.json"), devkit=str(devkit),
             kaggle=str(kaggle))


def make_data(root: Path) -> dict[str, str]:
    """The small files the cases read, under ``root``; returns the placeholders' values."""
    root.mkdir(parents=True, exist_ok=True)
    d: dict[str, str] = {"root": str(root), "missing": str(root / "nowhere"), "cache": str(root / "cache")}
    d["feat"] = str(_pair(root / "features" / "m" / "cog_l2"))
    nan = _pair(root / "nan" / "m" / "cog_l2")
    x = np.load(nan / "train" / "features.npy")
    x[3, 1] = np.nan
    np.save(nan / "train" / "features.npy", x)
    d["nan"] = str(nan)
    trunc = _pair(root / "trunc" / "m" / "cog_l2")
    blob = (trunc / "train" / "features.npy").read_bytes()
    (trunc / "train" / "features.npy").write_bytes(blob[: len(blob) - 40])
    d["trunc"] = str(trunc)
    labels = _pair(root / "labels" / "m" / "cog_l2")
    y = np.load(labels / "train" / "labels.npy")
    y[0] = -5
    np.save(labels / "train" / "labels.npy", y)
    d["labels"] = str(labels)
    locked = _pair(root / "locked" / "m" / "cog_l2")
    (locked / "train" / "features.npy").chmod(0)
    d["locked"] = str(locked)
    # level files
    levels = root / "levels"
    levels.mkdir()
    for name, text in {"notjson": "{not json", "string": '"abc"', "list": "[1, 2]", "vnull":
                       '{"version": null, "levels": {}}', "vstr": '{"version": "one", "levels": {}}'}.items():
        (levels / f"{name}.json").write_text(text)
        d[f"lv_{name}"] = str(levels / f"{name}.json")
    d["lv_int"] = _level_file(levels / "int.json", L1=3)
    d["lv_str"] = _level_file(levels / "str.json", L2="n01440764")
    d["lv_unknown"] = _level_file(levels / "unknown.json", L3=[NO_WNID])
    d["lv_bad"] = _level_file(levels / "bad.json", L4=["cat"])
    d["lv_dup"] = _level_file(levels / "dup.json", L5=[L1_WNID])
    d["lv_locked"] = _level_file(levels / "locked.json")
    Path(d["lv_locked"]).chmod(0)
    # databases, journals, checkpoints
    d["foreign"] = str(root / "app.db")
    with sqlite3.connect(d["foreign"]) as con:
        con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        con.execute("INSERT INTO users (name) VALUES ('alice')")
    con.close()
    d["notdb"] = str(root / "notdb.sqlite")
    Path(d["notdb"]).write_bytes(b"this is not an SQLite database\n" * 50)
    d["journal"] = str(root / "journal.log")
    Path(d["journal"]).write_text("garbage that is not a journal\n{\"op_code\": \n")
    d["ckpt"] = str(root / "garbage.ckpt")
    Path(d["ckpt"]).write_bytes(np.random.default_rng(0).bytes(4096))
    d["pth"] = str(root / "X_Y.pth")
    Path(d["pth"]).write_bytes(b"not a torch file")
    d["yaml"] = str(root / "bad.yaml")
    Path(d["yaml"]).write_text("model: [unclosed\n")
    d["afile"] = str(root / "afile.txt")
    Path(d["afile"]).write_text("a file where a folder is expected\n")
    # an image tree with a corrupt JPEG (a folder per synset)
    images = root / "in21k"
    for k, wnid in enumerate(L1_PAIR):
        (images / wnid).mkdir(parents=True)
        for i in range(4):
            (images / wnid / f"{wnid}_{i}.JPEG").write_bytes(_jpeg(10 * k + i))
    d["corrupt_jpeg"] = str(images / L1_WNID / f"{L1_WNID}_2.JPEG")
    Path(d["corrupt_jpeg"]).write_bytes(b"\xff\xd8\xff\xe0 corrupt" * 20)
    d["in21k"] = str(images)
    # webdataset shards (timm's layout): one whose second sample has no cls, one cut short mid-member
    import tarfile

    for name, cut in (("wds_nocls", False), ("wds_cut", True)):
        shard = root / name / "imagenet-w21-train-0000.tar"
        shard.parent.mkdir()
        with tarfile.open(shard, "w") as tf:
            for i in range(3):
                for ext, data in (("jpg", _jpeg(i)), ("cls", b"0"), ("json", b'{"filename": "%s_%d.JPEG"}'
                                                                      % (L1_WNID.encode(), i))):
                    if not (ext == "cls" and i == 1 and not cut):
                        info = tarfile.TarInfo(f"k{i}.{ext}")
                        info.size = len(data)
                        tf.addfile(info, io.BytesIO(data))
        if cut:
            shard.write_bytes(shard.read_bytes()[:1500])
        d[name], d[f"{name}_shard"] = str(shard.parent), str(shard)
    from cog_pl.benchmark import Benchmark
    from cog_pl.resources import LEVELS, official_levels

    levels = {lvl: tuple(sorted(official_levels()[lvl])[:2]) for lvl in LEVELS}
    test = {lvl: tuple(f"{w}/{w}_0.JPEG" for w in ws) for lvl, ws in levels.items()}
    Benchmark("bad-inputs", (IN1K_WNID, "n01443537"), levels, test,
              protocol={"test_per_concept": 1, "min_train_per_concept": 2, "max_train_per_concept": 3}
              ).save(root / "bench.json")
    _odd_inputs(root, d)
    _passing_inputs(root, d)
    _claims_inputs(root)
    _label_inputs(root, d)
    _trap_inputs(root, d)
    return d


def _passing_inputs(root: Path, d: dict[str, str]) -> None:
    """The inputs of issue 37 (item 8) that passed as something else, into ``d``: two models' rows made on other
    test splits, a label-noise predictions file of another level, a results file of format 1."""
    import hashlib
    import shutil

    from concept_fixtures import simulated_results

    from cog_pl.results import append_row, read_rows
    from cog_pl.results.predictions import noise_relative_path, predictions_root

    def split(model: str, domain: str) -> str:  # each model's level rows made on a split of its own
        return hashlib.sha256(f"{model} {domain}".encode()).hexdigest()

    (root / "splits").mkdir()
    results, levels = simulated_results(root / "splits", {"base": 0.0, "other": 0.1}, seeds=(22,), n=4, images=3)
    for row in read_rows(results):
        if row["domain"] != "in1k":  # IN-1K's test set is the official val set: no split digest
            append_row(results, {**row, "features": {"test": {"split_sha256": split(row["model"], row["domain"])}}})
    d.update(split_results=str(results), split_levels=str(levels), split_base=split("base", "cog_l1")[:16],
             split_other=split("other", "cog_l1")[:16])
    (root / "noise").mkdir()
    results, levels = simulated_results(root / "noise", {"m": 0.0}, seeds=(22,), n=4, images=3)
    at = predictions_root(results)
    shutil.copyfile(at / noise_relative_path("m", "in1k", "cog_l2", 22), at / noise_relative_path("m", "in1k",
                                                                                                  "cog_l1", 22))
    d.update(noise_results=str(results), noise_levels=str(levels),
             noise_l1=str(at / noise_relative_path("m", "in1k", "cog_l1", 22)))
    d["results_v1"] = str(root / "results_v1.sqlite")  # format 1: a development format no release wrote
    with sqlite3.connect(d["results_v1"]) as con:
        con.executescript("CREATE TABLE rows (model TEXT NOT NULL, domain TEXT NOT NULL, shots INTEGER NOT NULL, "
                          "seed INTEGER NOT NULL, row TEXT NOT NULL, updated TEXT NOT NULL, PRIMARY KEY (model, "
                          "domain, shots, seed)); CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT NOT NULL); "
                          "INSERT INTO info VALUES ('format', 'cog-pl-results v1');")
        con.execute("INSERT INTO rows VALUES ('m@finetune', 'in1k', 0, 22, ?, '2025-01-01T00:00:00+00:00')",
                    (json.dumps({"model": "m@finetune", "domain": "in1k", "shots": None, "seed": 22,
                                 "test_top1": 70.0}),))
    con.close()


def _claims_inputs(root: Path) -> None:
    """Claims files beside the results of :func:`_cell` tags ``clbad``, ``cldir``, ``clro`` (issue 37): not a
    database, a folder, read-only."""
    (root / "r-clbad.sqlite.claims").write_bytes(b"not an SQLite database\n" * 50)
    (root / "r-cldir.sqlite.claims").mkdir()
    with sqlite3.connect(root / "r-clro.sqlite.claims") as con:
        con.execute("CREATE TABLE claims (cell TEXT PRIMARY KEY, worker TEXT NOT NULL, host TEXT NOT NULL, "
                    "heartbeat REAL NOT NULL)")
    con.close()
    (root / "r-clro.sqlite.claims").chmod(0o444)


def _label_inputs(root: Path, d: dict[str, str]) -> None:
    """The inputs of the cases of issue 37's labels and weights, into ``d``: an empty models dir, one whose resnet50
    folder holds two files, and an output folder whose resnet10t stores were made from another file."""
    d["models_empty"] = str(root / "models-empty")
    two = root / "models-two" / "resnet50"
    two.mkdir(parents=True)
    for name in ("a.pth", "b.pth"):
        (two / name).write_bytes(b"weights")
    d["models_two"] = str(two.parent)
    store = root / "run-label" / "features" / "resnet10t" / "cog_l1" / "train"
    store.mkdir(parents=True)
    (store / "meta.json").write_text(json.dumps({"model": "resnet10t", "weights": "/elsewhere/first.pth",
                                                 "weights_sha256": "ab" * 32}))
    d["run_label"] = str(root / "run-label")
    d["second"] = str(root / "second.pth")
    Path(d["second"]).write_bytes(b"other weights")


def _trap_inputs(root: Path, d: dict[str, str]) -> None:
    """The inputs of issue 47 (the last quiet traps), into ``d``: a pair of one-class stores (plain, and with meta in
    a run's output folder), a vocabulary of three counted entries."""
    import hashlib

    from cog_pl.features.store import make_meta, write_store

    d["oneclass"] = str(root / "oneclass" / "m" / "cog_l2")
    _store(Path(d["oneclass"]) / "train", classes=1)
    _store(Path(d["oneclass"]) / "test", classes=1, per_class=2, seed=1)
    d["run_oneclass"] = str(root / "run-oneclass")  # a run's finished stores of one class (`run --stage probe`)
    digest = hashlib.sha256(Path(d["second"]).read_bytes()).hexdigest()
    for split, n in (("train", 6), ("test", 2)):
        x = np.random.default_rng(n).normal(size=(n, 4)).astype(np.float32)
        write_store(root / "run-oneclass" / "features" / "resnet10t" / "cog_l1" / split, x, np.zeros(n, np.int64),
                    None, make_meta(model="resnet10t", weights_sha256=digest, domain="cog_l1", split=split,
                                    num_rows=n, dim=4, num_classes=1, classes=[L1_WNID], transform="t",
                                    level_file_sha256="0" * 64))
    d["vocab"] = str(root / "vocab.json")  # MetaCLIP's entry counts, each below 10
    Path(d["vocab"]).write_text('{"dog": 1, "cat": 2, "goldfish": 3}')


