"""Feature store v1: round trip, memory mapping, atomic writes, plain stores, refusals with reasons."""

import json
import subprocess
import sys

import numpy as np
import pytest

from cog_pl.features import store as store_mod
from cog_pl.features.store import StoreError, StoreWriter, is_complete, make_meta, open_store, write_store
from cog_pl.io import write_json


def _meta(**kw):
    base = dict(model="resnet50", weights_sha256="ab" * 32, domain="cog_l1", split="train", num_classes=3,
                classes=["n1", "n2", "n3"], transform={"crop": 224}, level_file_sha256="cd" * 32)
    return make_meta(**{**base, **kw})


def _data(n=50, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, 3, n), rng.permutation(n)


def test_round_trip_is_memory_mapped_with_full_meta(tmp_path):
    x, y, idx = _data()
    path = write_store(tmp_path / "m" / "cog_l1" / "train", x, y, idx, _meta())
    s = open_store(path)
    assert isinstance(s.features, np.memmap) and s.features.dtype == np.float16 and s.labels.dtype == np.int64
    assert np.allclose(s.features, x, atol=1e-2) and np.array_equal(s.labels, y) and np.array_equal(s.index, idx)
    meta = json.loads((path / "meta.json").read_text())
    assert set(store_mod.REQUIRED_META) <= set(meta)
    assert (meta["num_rows"], meta["dim"], meta["format"], meta["version"]) == (50, 8, "cog-pl-features", 1)
    assert sorted(p.name for p in path.parent.iterdir()) == ["train"]  # no temporary left behind


def test_expectations_are_checked_with_the_reason(tmp_path):
    x, y, idx = _data()
    path = write_store(tmp_path / "s", x, y, idx, _meta())
    assert open_store(path, {"model": "resnet50", "domain": "cog_l1"}).meta["model"] == "resnet50"
    with pytest.raises(StoreError, match="made with model='resnet50', but 'dino' was requested"):
        open_store(path, {"model": "dino"})
    with pytest.raises(StoreError, match="domain='cog_l1', but 'cog_l2'"):
        open_store(path, {"domain": "cog_l2"})
    with pytest.raises(StoreError, match="level_file_sha256="):
        open_store(path, {"level_file_sha256": "00" * 32})
    with pytest.raises(ValueError, match="cannot check feature store key"):
        open_store(path, {"colour": "red"})


def test_interrupted_write_never_looks_finished(tmp_path, monkeypatch):
    x, y, idx = _data()
    target = tmp_path / "s"

    def boom(path, *a, **k):
        if path.name == "meta.json":
            raise KeyboardInterrupt
        return write_json(path, *a, **k)
    monkeypatch.setattr(store_mod, "write_json", boom)  # die right before meta.json
    with pytest.raises(KeyboardInterrupt):
        write_store(target, x, y, idx, _meta())
    assert not target.exists() and not is_complete(target) and list(tmp_path.iterdir()) == []


def test_killed_writer_leaves_only_a_hidden_partial(tmp_path):
    code = ("import numpy as np, os; from cog_pl.features.store import StoreWriter; "
            f"w = StoreWriter({str(tmp_path / 's')!r}, 10, 4); w.write(np.arange(5), np.ones((5, 4)), np.zeros(5));"
            "os._exit(1)")
    subprocess.run([sys.executable, "-c", code], check=False)
    assert not (tmp_path / "s").exists() and (tmp_path / ".s.partial").is_dir()
    with pytest.raises(StoreError, match="no feature store at"):
        open_store(tmp_path / "s")
    w = StoreWriter(tmp_path / "s", 10, 4)  # reopening resumes
    with pytest.raises(StoreError, match=r"5 row\(s\) never written, e\.g\. row 5"):
        w.finish(_meta())
    w.write(np.arange(5, 10), np.ones((5, 4)), np.ones(5))
    s = open_store(w.finish(_meta()))
    assert s.labels.tolist() == [0] * 5 + [1] * 5 and s.index.tolist() == list(range(10))


def test_a_fresh_writer_discards_a_stale_write_of_another_shape(tmp_path):
    stale = StoreWriter(tmp_path / "s", 10, 4)
    stale.write(np.arange(3), np.ones((3, 4)), np.zeros(3))  # left behind by a killed write
    del stale
    with pytest.raises(StoreError, match=r"holds a \(10, 4\) write in progress, not \(6, 2\)"):
        StoreWriter(tmp_path / "s", 6, 2)
    w = StoreWriter(tmp_path / "s", 6, 2, fresh=True)
    with pytest.raises(StoreError, match=r"6 row\(s\) never written"):  # nothing of the stale write was kept
        w.finish(_meta())
    w.write(np.arange(6), np.full((6, 2), 2.0), np.arange(6) % 3)
    assert open_store(w.finish(_meta())).features.shape == (6, 2)
    stale = StoreWriter(tmp_path / "t", 7, 3)
    stale.write(np.arange(2), np.ones((2, 3)), np.zeros(2))
    del stale
    x, y, idx = _data()  # write_store writes every row, so it starts over too; chunks keep the row order
    s = open_store(write_store(tmp_path / "t", x, y, idx, _meta(), chunk=7))
    assert np.array_equal(s.features, x.astype(np.float16)) and s.labels.tolist() == y.tolist()
    assert s.index.tolist() == idx.tolist() and not list(tmp_path.glob(".*partial"))


def test_rows_written_out_of_order_land_at_their_position(tmp_path):
    w = StoreWriter(tmp_path / "s", 6, 2)
    for rows in ([4, 1], [0, 5, 2], [3, 1]):  # a DDP sampler may repeat a row: same values, same place
        rows = np.array(rows)
        w.write(rows, np.stack([rows, rows], 1), rows % 3)
    s = open_store(w.finish(_meta()))
    assert s.features[:, 0].tolist() == list(range(6)) and s.labels.tolist() == [0, 1, 2, 0, 1, 2]


def test_existing_store_is_not_replaced_unless_asked(tmp_path):
    x, y, idx = _data()
    path = write_store(tmp_path / "s", x, y, idx, _meta())
    with pytest.raises(StoreError, match="already exists"):
        write_store(path, x, y, idx, _meta())
    write_store(path, x[:10], y[:10], idx[:10], _meta(), overwrite=True)
    assert len(open_store(path)) == 10


def test_plain_store_is_accepted_and_incomplete_v1_refused(tmp_path):
    x, y, _ = _data()
    for split in ("train", "test"):
        (tmp_path / "plain" / split).mkdir(parents=True)
        np.save(tmp_path / "plain" / split / "features.npy", x.astype(np.float16))
        np.save(tmp_path / "plain" / split / "labels.npy", y)
    s = open_store(tmp_path / "plain" / "train")
    assert s.plain and s.meta["split"] == "train" and s.index.tolist() == list(range(50))
    assert not is_complete(tmp_path / "plain" / "train")
    assert open_store(tmp_path / "plain" / "train", {"model": "x"}).plain  # cannot be verified: warned, not refused
    np.save(tmp_path / "plain" / "train" / "index.npy", np.arange(50))  # a v1 store missing its meta.json
    with pytest.raises(StoreError, match=r"incomplete feature store \(no meta\.json"):
        open_store(tmp_path / "plain" / "train")
    np.save(tmp_path / "plain" / "test" / "labels.npy", y[:5])
    with pytest.raises(StoreError, match="row counts differ: features 50, labels 5"):
        open_store(tmp_path / "plain" / "test")


def test_damaged_store_is_refused(tmp_path):
    x, y, idx = _data()
    path = write_store(tmp_path / "s", x, y, idx, _meta())
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "version": 2}))
    with pytest.raises(StoreError, match="store version 2, this cog_pl reads version 1"):
        open_store(path)
    (path / "meta.json").write_text(json.dumps({**meta, "num_rows": 49}))
    with pytest.raises(StoreError, match=r"meta\.json says 49 x 8"):
        open_store(path)


def test_labels_outside_the_classes_are_refused_with_the_store_named(tmp_path):
    x, y, idx = _data()
    path = write_store(tmp_path / "s", x, y, idx, _meta())
    np.save(path / "labels.npy", np.where(y == 2, 3, y))  # a label past the three classes of meta.json
    with pytest.raises(StoreError, match=r"s: labels\.npy holds labels 0\.\.3, outside 0\.\.2"):
        open_store(path)
