"""Tar member index: built once, cached beside the tar or in a cache dir, rebuilt when the tar changes."""

import os

import pytest
from conftest_data import jpeg_bytes, write_synset

from cog_pl.data import tar_index
from cog_pl.data.tar_index import TarIndex


@pytest.fixture
def tar(tmp_path):
    files = {f"n01_{k}.JPEG": jpeg_bytes(k) for k in range(5)}
    write_synset(tmp_path / "in21k", "n01", files, "tar")
    return tmp_path / "in21k" / "n01.tar", files


def test_members_read_back_exactly(tar):
    path, files = tar
    idx = TarIndex.open(path)
    assert idx.names() == sorted(files)
    assert all(idx.read(n) == data for n, data in files.items())
    with pytest.raises(KeyError, match=r"nope\.JPEG is not in .*n01\.tar"):
        idx.read("nope.JPEG")


def test_index_is_cached_beside_the_tar_and_reused(tar, monkeypatch):
    path, files = tar
    TarIndex.open(path)
    assert path.with_name("n01.tar.index.json").is_file()
    monkeypatch.setattr(tar_index, "scan_tar", lambda p: pytest.fail("the cached index was not used"))
    assert TarIndex.open(path).names() == sorted(files)


def test_explicit_cache_dir_is_used(tar, tmp_path):
    path, _ = tar
    TarIndex.open(path, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "tar_index").glob("n01-*.json"))) == 1
    assert not path.with_name("n01.tar.index.json").exists()


def test_index_is_rebuilt_when_the_tar_changes(tar):
    path, files = tar
    TarIndex.open(path)
    files = {**files, "n01_new.JPEG": jpeg_bytes(99)}
    write_synset(path.parent, "n01", files, "tar")
    os.utime(path, ns=(1, 1))  # make sure the mtime differs even on coarse clocks
    idx = TarIndex.open(path)
    assert "n01_new.JPEG" in idx and idx.read("n01_new.JPEG") == files["n01_new.JPEG"]


def test_truncated_tar_names_the_member(tar):
    path, _ = tar
    idx = TarIndex.open(path)
    last = max(idx.members, key=lambda n: idx.members[n][0])
    offset, _ = idx.members[last]
    with open(path, "r+b") as fh:
        fh.truncate(offset + 10)
    with pytest.raises(OSError, match=f"{last} is truncated"):
        idx.read(last)


def test_not_a_tar_is_refused(tmp_path):
    (tmp_path / "n02.tar").write_bytes(b"garbage" * 200)
    with pytest.raises(OSError, match=r"n02\.tar: not a readable uncompressed tar"):
        TarIndex.open(tmp_path / "n02.tar")
