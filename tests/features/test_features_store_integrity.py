"""Feature store integrity: identity-checked resume, finishing safe against a kill at every step, space reserved up
front (a full disk named in one line), the umask respected, no NaN, inf or float16 overflow written."""

import errno
import json
import os
import re
import shutil
import stat

import numpy as np
import pytest
import torch

from cog_pl.features.convert import import_pth
from cog_pl.features.store import (
    StoreError,
    StoreWriter,
    check_identity,
    is_complete,
    make_meta,
    open_store,
    partial_path,
    tidy,
    write_store,
)
from cog_pl.io import DiskFullError, atomic_open, write_json

N, D = 12, 4


def _meta(**kw):
    base = dict(model="resnet50", weights_sha256="ab" * 32, domain="cog_l1", split="train", num_classes=3,
                classes=["n1", "n2", "n3"], transform={"crop": 224}, level_file_sha256="cd" * 32,
                precision="32-true")
    return make_meta(**{**base, **kw})


def _rows(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(N, D)).astype(np.float32), rng.integers(0, 3, N)


# --- identity: a store or a write in progress made by other inputs is refused, never reused or mixed ---

def test_a_partial_write_of_another_checkpoint_is_refused_naming_both_hashes(tmp_path):
    x, y = _rows()
    path = tmp_path / "s"
    w = StoreWriter(path, N, D, identity=_meta())
    w.write(np.arange(5), x[:5], y[:5])
    del w  # killed: rows 0..4 of checkpoint "ab.." are on disk
    other = _meta(weights_sha256="ef" * 32)
    with pytest.raises(StoreError) as err:
        StoreWriter(path, N, D, identity=other)
    msg = str(err.value)
    assert str(partial_path(path)) in msg and "weights_sha256='abab" in msg and "this run: 'efef" in msg
    assert "--overwrite" in msg and "\n" not in msg
    with pytest.raises(StoreError, match="weights_sha256"):
        check_identity(path, other)
    check_identity(path, _meta())  # the same inputs resume
    w = StoreWriter(path, N, D, identity=_meta())
    w.write(np.arange(5, N), x[5:], y[5:])
    with pytest.raises(StoreError, match="differs from what wrote the rows: weights_sha256"):
        w.finish(other)  # a meta naming another model than the rows' is refused too
    s = open_store(w.finish(_meta()))
    np.testing.assert_allclose(s.features, x, atol=1e-2)
    # overwrite (fresh) discards the other checkpoint's rows and starts over
    shutil.rmtree(path)
    w = StoreWriter(path, N, D, identity=_meta())
    w.write(np.arange(3), x[:3], y[:3])
    del w
    w = StoreWriter(path, N, D, identity=other, fresh=True)
    assert not np.asarray(w.written).any()


def test_a_finished_store_is_compared_on_every_identity_key(tmp_path):
    x, y = _rows()
    path = write_store(tmp_path / "s", x, y, None, _meta())
    check_identity(path, _meta(versions={"x": 1}, created="now"))  # provenance is not identity
    for key, value in (("weights_sha256", "ef" * 32), ("precision", "bf16-mixed"), ("transform", {"crop": 160}),
                       ("split_sha256", "12" * 32), ("dtype", "float32"), ("model", "dino")):
        with pytest.raises(StoreError, match=f"{key}=") as err:
            check_identity(path, {**_meta(), key: value})
        assert str(path) in str(err.value) and "--overwrite" in str(err.value)


def test_a_store_from_before_identities_is_compared_on_what_its_meta_holds(tmp_path):
    x, y = _rows()
    path = write_store(tmp_path / "s", x, y, None, _meta())
    meta = json.loads((path / "meta.json").read_text())
    del meta["dtype"]
    (path / "meta.json").write_text(json.dumps(meta))
    check_identity(path, {**_meta(), "dtype": "float16"})  # v1 stores were float16
    with pytest.raises(StoreError, match="weights_sha256"):
        check_identity(path, _meta(weights_sha256="ef" * 32))
    # an old partial (no identity.json) with rows cannot be verified: refused; one without rows is started over
    old = tmp_path / "old"
    w = StoreWriter(old, N, D, identity=_meta())
    w.write(np.arange(2), x[:2], y[:2])
    del w
    (partial_path(old) / "identity.json").unlink()
    with pytest.raises(StoreError, match="weights_sha256='<not recorded>'"):
        StoreWriter(old, N, D, identity=_meta())
    np.lib.format.open_memmap(partial_path(old) / "written.npy", "r+")[:] = False
    StoreWriter(old, N, D, identity=_meta())


# --- finishing survives a kill after any of its file operations ---

class Killed(BaseException):
    """A SIGKILL at that point: nothing after it runs (not even ``except Exception`` handlers)."""


OPS = ("open", "fchmod", "fsync", "replace", "rename", "unlink", "remove", "rmdir", "mkdir")  # what changes disk


def _kill_after(monkeypatch, n):
    """Make the ``n``-th file operation (of :data:`OPS`) the last one that runs."""
    count = [0]
    for name in OPS:
        real = getattr(os, name)

        def op(*a, _real=real, **k):
            out = _real(*a, **k)
            count[0] += 1
            if count[0] == n:
                raise Killed
            return out
        monkeypatch.setattr(os, name, op)
    return count


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_kill_after_any_file_operation_of_finish_leaves_a_resumable_or_complete_store(tmp_path, monkeypatch,
                                                                                         overwrite):
    x, y = _rows()
    n = 0
    while True:
        n += 1
        path = tmp_path / str(n) / "s"
        if overwrite:
            write_store(path, np.zeros((3, D)), np.zeros(3, dtype=np.int64), None, _meta())
        w = StoreWriter(path, N, D, overwrite=overwrite, identity=_meta())
        w.write(np.arange(N), x, y)
        with monkeypatch.context() as m:
            count = _kill_after(m, n)
            try:
                w.finish(_meta())
                finished = True
            except Killed:
                finished = False
        del w
        if partial_path(path).is_dir():  # the next run resumes: every row is written, only finishing is left
            StoreWriter(path, N, D, overwrite=overwrite, identity=_meta()).finish(_meta())
        else:
            assert is_complete(path)
            tidy(path)  # what the next run does to a finished store it skips
        assert sorted(p.name for p in path.parent.iterdir()) == ["s"]
        s = open_store(path)
        np.testing.assert_allclose(s.features, x, atol=1e-2)
        np.testing.assert_array_equal(s.labels, y)
        check_identity(path, _meta())
        assert not partial_path(path).exists()
        if finished:
            assert count[0] == n - 1 and n > 5  # every operation of finish was killed once
            break
        assert sorted(p.name for p in path.iterdir()) == ["features.npy", "index.npy", "labels.npy", "meta.json"]


# --- a full disk fails before writing, in one line naming the path and the bytes ---

def test_space_is_reserved_up_front_and_a_full_disk_names_path_and_bytes(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(DiskFullError) as err:
        StoreWriter(tmp_path / "s", 1000, 64, identity=_meta())
    msg = str(err.value)
    assert msg.startswith("disk full: cannot write") and str(tmp_path / "s") in msg and "\n" not in msg
    # what was asked, what the file system said, and its free space in whole blocks (why it may refuse less)
    found = re.search(r": asked for (\d+) bytes, the file system refused \(no space left on device; it counts \d+ "
                      r"bytes free, in whole \d+-byte blocks\)$", msg)
    need = int(found.group(1))
    assert 0.8 * (1000 * 64 * 2 + 1000 * 8 * 2 + 1000) < need <= 1000 * 64 * 2 + 1000 * 8 * 2 + 1000 + 4 * 128
    assert list(tmp_path.iterdir()) == []  # nothing half-made left behind


def test_a_disk_full_while_creating_the_files_is_named_too(tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(np.lib.format, "open_memmap", full)
    with pytest.raises(DiskFullError, match=rf"cannot write {tmp_path / 's'}: asked for \d+ bytes, the file system "
                                            r"refused \(no space left on device"):
        StoreWriter(tmp_path / "s", 1000, 64, identity=_meta())
    assert list(tmp_path.iterdir()) == []


def test_without_fallocate_the_free_space_is_checked(tmp_path, monkeypatch):
    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    StoreWriter(tmp_path / "ok", 100, 8, identity=_meta())  # plenty of room
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**6, 10**6 - 100, 100))
    with pytest.raises(DiskFullError, match=r"cannot write .*s2 \(\d+ bytes needed, 100 bytes free\)"):
        StoreWriter(tmp_path / "s2", 1000, 64, identity=_meta())
    assert not partial_path(tmp_path / "s2").exists()


def test_a_real_reservation_allocates_the_blocks(tmp_path):
    w = StoreWriter(tmp_path / "s", 4096, 64, identity=_meta())
    f = w.tmp / "features.npy"
    assert f.stat().st_blocks * 512 >= f.stat().st_size  # not sparse: a full disk cannot SIGBUS a later write


def test_atomic_writes_report_a_full_disk_in_one_line_and_keep_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    write_json(target, {"old": 1})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DiskFullError) as err:
        write_json(target, {"new": 2})
    assert isinstance(err.value, OSError) and err.value.errno == errno.ENOSPC
    assert str(err.value).startswith(f"disk full: cannot write {target}: the file system refused (no space left "
                                     "on device; it counts ") and "\n" not in str(err.value)
    assert json.loads(target.read_text()) == {"old": 1} and [p.name for p in tmp_path.iterdir()] == [target.name]


# --- files and stores are made with the umask's modes, not mkstemp's 0600 ---

@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_outputs_respect_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        write_json(tmp_path / "r.json", {"a": 1})
        with atomic_open(tmp_path / "report.md") as fh:
            fh.write("x")
        x, y = _rows()
        store = write_store(tmp_path / "store", x, y, None, _meta())
    finally:
        os.umask(old)
    for f in (tmp_path / "r.json", tmp_path / "report.md", *store.iterdir()):
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask, f
    assert stat.S_IMODE(store.stat().st_mode) == 0o777 & ~mask


# --- NaN, inf and float16 overflow are refused, naming the store and the row ---

def test_nan_and_inf_rows_are_refused_naming_store_and_row(tmp_path):
    x, y = _rows()
    w = StoreWriter(tmp_path / "s", N, D, identity=_meta())
    bad = x[:6].copy()
    bad[4, 2] = np.nan
    with pytest.raises(StoreError, match=rf"{tmp_path / 's'}: row 4 has NaN or inf features"):
        w.write(np.arange(6), bad, y[:6])
    bad[4, 2], bad[5, 0] = 1.0, -np.inf
    with pytest.raises(StoreError, match="row 5 has NaN or inf"):
        w.write(np.arange(6), bad, y[:6])
    assert not np.asarray(w.written).any()  # nothing of a refused batch counts as written


def test_float16_overflow_is_refused_and_a_float32_store_keeps_the_values(tmp_path):
    x, y = _rows()
    x[7, 1] = 1e5
    with pytest.raises(StoreError) as err:
        write_store(tmp_path / "s", x, y, None, _meta())
    msg = str(err.value)
    assert "row 7" in msg and "100000" in msg and "float16's range (65504)" in msg and "--dtype float32" in msg
    assert not (tmp_path / "s").exists() and not partial_path(tmp_path / "s").exists()
    s = open_store(write_store(tmp_path / "s", x, y, None, _meta(), dtype="float32"))
    assert s.features.dtype == np.float32 and s.features[7, 1] == 1e5 and s.meta["dtype"] == "float32"


def test_import_refuses_overflow_and_nan_unless_float32(tmp_path):
    x = torch.randn(6, 4)
    x[2, 3] = 70000.0
    torch.save({"X": x, "Y": torch.zeros(6, dtype=torch.long)}, tmp_path / "X_Y.pth")
    with pytest.raises(StoreError, match=r"row 2 has a feature of magnitude 70000.*--dtype float32"):
        import_pth(tmp_path / "X_Y.pth", tmp_path / "out", "m", "in1k", "train")
    s = open_store(import_pth(tmp_path / "X_Y.pth", tmp_path / "out", "m", "in1k", "train", dtype="float32"))
    assert float(s.features[2, 3]) == 70000.0
    from cog_pl.cli.main import main

    assert main(["features", "import", str(tmp_path / "X_Y.pth"), str(tmp_path / "cli"), "--model", "m", "--domain",
                 "in1k", "--split", "train", "--dtype", "float32"]) == 0
    assert open_store(tmp_path / "cli").features.dtype == np.float32
    x[1, 0] = float("nan")
    torch.save({"X": x, "Y": torch.zeros(6, dtype=torch.long)}, tmp_path / "X_Y.pth")
    with pytest.raises(StoreError, match="row 1 has NaN or inf"):
        import_pth(tmp_path / "X_Y.pth", tmp_path / "nan", "m", "in1k", "train", dtype="float32")
