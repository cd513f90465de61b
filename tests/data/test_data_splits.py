"""CoG splits: the documented train rule, split files that travel between machines, per-concept checks."""

import gzip
import json
import os
import shutil
from dataclasses import replace

import pytest
from conftest_data import TINY_PROTOCOL, jpeg_bytes, tiny, write_synset  # noqa: F401 - fixture

from cog_pl.data.imagenet import ImageDataset, load_image
from cog_pl.data.sources import SynsetSource
from cog_pl.data.splits import (
    build_split,
    check_split,
    load_split,
    official_test_by_concept,
    save_split,
    select_train,
)


def test_select_train_rule_is_fixed():
    names = [f"n1_{k}.JPEG" for k in range(10)]
    picked = select_train("n1", names, test=["n1_0.JPEG"], max_train=4, seed=0)
    assert picked == sorted(picked) and "n1_0.JPEG" not in picked
    # sha256 ranks are the same on every machine: this is the split everybody gets
    assert picked == ["n1_2.JPEG", "n1_5.JPEG", "n1_8.JPEG", "n1_9.JPEG"]
    assert select_train("n1", names[::-1], ["n1_0.JPEG"], 4, 0) == picked  # listing order does not matter
    assert select_train("n1", names, ["n1_0.JPEG"], 4, seed=1) != picked
    assert select_train("n1", names[:3], ["n1_0.JPEG"], 4) == ["n1_1.JPEG", "n1_2.JPEG"]  # fewer: all of them


def test_split_from_tars_equals_split_from_folders(tiny, tmp_path):  # noqa: F811
    tars = SynsetSource(tiny.make_in21k(tmp_path / "tars", "tar"), tmp_path / "c")
    a = build_split("L2", tars, protocol=TINY_PROTOCOL)
    b = build_split("L2", SynsetSource(tiny.make_in21k(tmp_path / "dirs", "folder")), protocol=TINY_PROTOCOL)
    assert a == b and a.sha256() == b.sha256()
    for wnid in a.classes:
        assert len(a.train[wnid]) == TINY_PROTOCOL.max_train_per_concept
        assert not set(a.train[wnid]) & set(a.test[wnid])
        assert a.test[wnid] == official_test_by_concept("L2")[wnid]
    rows, labels = a.samples("test")
    assert labels == sorted(labels) and {a.classes[y] for y in labels} == set(a.classes)
    assert {f"{w}/{n}" for w, n in rows} == set(tiny.test["L2"])


def test_split_file_round_trip_and_refusals(tiny, tmp_path):  # noqa: F811
    split = build_split("L1", SynsetSource(tiny.make_in21k(tmp_path / "in21k")), protocol=TINY_PROTOCOL)
    path = save_split(split, tmp_path / "L1.json.gz")
    assert path.read_bytes() == save_split(split, tmp_path / "again.json.gz").read_bytes()  # byte-identical
    assert load_split(path, "L1") == split
    rec = json.loads(gzip.open(path).read())
    assert rec["rule"] == "sha256-rank-v1" and "sha256(" in rec["rule_text"] and rec["sha256"] == split.sha256()
    with pytest.raises(ValueError, match="split of level L1, expected L3"):
        load_split(path, "L3")

    def tampered(edit):
        r = json.loads(gzip.open(path).read())
        edit(r)
        out = tmp_path / "bad.json.gz"
        out.write_bytes(gzip.compress(json.dumps(r).encode()))
        return out

    w = split.classes[0]
    with pytest.raises(ValueError, match="content hash mismatch"):
        load_split(tampered(lambda r: r["train"][w].pop()))
    leak = tiny.test["L1"][0].split("/")[1]

    def add_leak(r):
        r["train"][w].append(leak)
        r["sha256"] = type(split)("L1", {k: tuple(v) for k, v in r["train"].items()},
                                  {k: tuple(v) for k, v in r["test"].items()}).sha256()
    with pytest.raises(ValueError, match=f"official test image.*listed as train, e.g. {w}/{leak}"):
        load_split(tampered(add_leak))
    with pytest.raises(ValueError, match="not a cog-pl split file"):
        load_split(tmp_path / "missing.json.gz")


def test_check_split_names_each_problem(tiny, tmp_path):  # noqa: F811
    w0, w1, w2 = tiny.levels["L3"]
    gone = tiny.test["L3"][3]  # first test image of w1
    root = tiny.make_in21k(tmp_path / "in21k", skip=(w2, gone), n_train={w0: 2})
    source = SynsetSource(root)
    issues = {(i.wnid, i.problem) for i in check_split(build_split("L3", source, protocol=TINY_PROTOCOL),
                                                       TINY_PROTOCOL, source)}
    assert (w2, "synset missing") in issues
    assert (w0, "2 train images, expected 3..6") in issues
    assert (w1, f"1 test image(s) missing: {gone}") in issues
    assert len(issues) == 3


@pytest.mark.parametrize("layout", ["folder", "tar"])
def test_a_file_name_that_is_not_utf8_is_split_saved_and_read_back(tiny, tmp_path, layout):  # noqa: F811
    wnid = tiny.levels["L2"][0]
    root = tiny.make_in21k(tmp_path / "in21k", "folder")
    odd = os.fsdecode(b"\xff.JPEG")  # '\udcff.JPEG': the byte survives as a surrogate escape
    (root / wnid / odd).write_bytes(jpeg_bytes(7))
    if layout == "tar":
        files = {p.name: p.read_bytes() for p in (root / wnid).iterdir()}
        shutil.rmtree(root / wnid)
        write_synset(root, wnid, files, "tar")
    source = SynsetSource(root, tmp_path / "cache")
    assert odd in source.list(wnid)
    split = build_split("L2", source, protocol=replace(TINY_PROTOCOL, max_train_per_concept=9))  # all are train
    assert odd in split.train[wnid]
    ranked = build_split("L2", source, protocol=TINY_PROTOCOL)  # 9 candidates for 6 places: ranked by hash
    assert len(ranked.train[wnid]) == TINY_PROTOCOL.max_train_per_concept
    path = save_split(split, tmp_path / "L2.split.json.gz")
    again = load_split(path, "L2")
    assert again == split and again.sha256() == split.sha256()  # the name round-trips through the JSON file
    assert source.where(wnid, odd).endswith("\\xff.JPEG")  # messages show the byte, printable
    image = load_image(source, wnid, odd)
    assert image.size == (40, 30)
    rows, labels = split.samples("train")
    dataset = ImageDataset(source, rows, labels, lambda img: img.size)
    row = rows.index((wnid, odd))
    assert dataset[row]["image"] == (40, 30) and dataset.key(row) == f"{wnid}/\\xff.JPEG"  # a key prints
