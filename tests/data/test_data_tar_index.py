"""Tar member index: built once, cached beside the tar or in a cache dir, rebuilt when the tar changes."""

import io
import os
import tarfile

import pytest
from conftest_data import jpeg_bytes, write_synset

from cog_pl.data import tar_index
from cog_pl.data.sources import SynsetSource
from cog_pl.data.tar_index import TarIndex, scan_tar


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


def _cut(path, size):
    with open(path, "r+b") as fh:
        fh.truncate(size)


def test_a_tar_cut_short_is_refused_naming_it_and_the_bytes_missing(tmp_path):
    files = {f"n03_{k}.JPEG": jpeg_bytes(k) for k in range(3)}
    write_synset(tmp_path, "n03", files, "tar")
    path = tmp_path / "n03.tar"
    complete = scan_tar(path)
    assert sorted(complete) == sorted(files)  # a complete tar still reads
    offset, size = complete["n03_2.JPEG"]
    _cut(path, offset + size // 2)  # mid-member: tarfile lists it, its data is gone
    missing = -(-size // 512) * 512 - size // 2
    with pytest.raises(OSError, match=rf"n03\.tar: truncated, {missing} bytes missing \(member n03_2\.JPEG"):
        TarIndex.open(path)
    write_synset(tmp_path, "n03", files, "tar")
    _cut(path, complete["n03_2.JPEG"][0] - 300)  # inside the last header: tarfile stops without a word
    with pytest.raises(OSError, match=r"n03\.tar: truncated or damaged after member n03_1\.JPEG"):
        TarIndex.open(path)
    write_synset(tmp_path, "n03", files, "tar")
    _cut(path, complete["n03_2.JPEG"][0] - 512)  # exactly before the last header: only the end marker is missing
    with pytest.raises(OSError, match=r"n03\.tar: truncated after member n03_1\.JPEG: no end-of-archive marker"):
        SynsetSource(tmp_path).list("n03")


def test_members_keep_their_full_paths_so_equal_base_names_do_not_shadow(tmp_path):
    path = tmp_path / "n04.tar"
    with tarfile.open(path, "w") as tf:
        for name, data in (("a/x.JPEG", jpeg_bytes(1)), ("./b/x.JPEG", jpeg_bytes(2)), ("./y.JPEG", jpeg_bytes(3))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    source = SynsetSource(tmp_path)
    assert source.list("n04") == ["a/x.JPEG", "b/x.JPEG", "y.JPEG"]  # "./" dropped, folders kept
    assert source.read("n04", "a/x.JPEG") == jpeg_bytes(1) and source.read("n04", "b/x.JPEG") == jpeg_bytes(2)
    with tarfile.open(path, "a") as tf:  # the same name twice: which one is the image is ambiguous
        info = tarfile.TarInfo("a/x.JPEG")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"new"))
    with pytest.raises(OSError, match=r"n04\.tar: member a/x\.JPEG appears twice"):
        TarIndex.open(path)
    write_synset(tmp_path / "packed", "n05", {"n05/n05_1.JPEG": b"1", "n05/n05_2.JPEG": b"2"}, "tar")
    assert TarIndex.open(tmp_path / "packed" / "n05.tar").names() == ["n05_1.JPEG", "n05_2.JPEG"]  # one top folder


def _with_strays(path, wnid: str, images: int = 4) -> None:
    """A synset tar of ``images`` JPEGs and two members named outside it (``../``, an absolute path)."""
    with tarfile.open(path, "w") as tf:
        names = [f"{wnid}_{k}.JPEG" for k in range(images)] + ["../escape.JPEG", "/abs/evil.JPEG"]
        for k, name in enumerate(names):
            data = jpeg_bytes(k)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_members_named_outside_the_tar_are_left_out_and_named(tmp_path, caplog):
    _with_strays(tmp_path / "n06.tar", "n06")
    with caplog.at_level("WARNING", logger="cog_pl.data.tar_index"):
        assert SynsetSource(tmp_path).list("n06") == [f"n06_{k}.JPEG" for k in range(4)]  # not images of n06
    assert f"{tmp_path / 'n06.tar'}: 2 member(s) named outside the tar (absolute, or climbing with ..) left out, " \
           "not images of it: ../escape.JPEG, /abs/evil.JPEG" in caplog.text
    assert not (tmp_path.parent / "escape.JPEG").exists() and not os.path.exists("/abs/evil.JPEG")


def test_data_check_counts_a_synset_without_the_members_named_outside_its_tar(tmp_path):
    """Through the installed command: the split's train count is the synset's own images, the others named."""
    import subprocess

    from bad_input_cases import COG_PL, L1_PAIR, make_data

    data = make_data(tmp_path / "d")  # its benchmark file: two concepts per level, one test image each
    root = tmp_path / "in21k"
    root.mkdir()
    for wnid in L1_PAIR:
        _with_strays(root / f"{wnid}.tar", wnid)
    out = subprocess.run([str(COG_PL), "data", "check", "--in21k-root", str(root), "--benchmark",
                          f"{data['root']}/bench.json", "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    l1 = next(line.split() for line in out.stdout.splitlines() if line.startswith("cog_l1"))
    assert l1[1:4] == ["2/2", "6", "2"]  # 4 images each, one of them test: 6 train (the 4 strays would make 10)
    for wnid in L1_PAIR:
        assert f"{root / wnid}.tar: 2 member(s) named outside the tar (absolute, or climbing with ..) left out, " \
               "not images of it: ../escape.JPEG, /abs/evil.JPEG" in out.stderr
