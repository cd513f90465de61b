"""IN-21K's whole tar (``fall11_whole.tar``, ``winter21_whole.tar.gz``: one tar per synset inside), read in place:
random access into the uncompressed one, one streamed pass over the gzip one; both extract to the folder layout's
stores; a cut-short outer tar and an inner member that is not a tar are named."""

from __future__ import annotations

import io
import pickle
import tarfile

import pytest
from conftest_data import tiny  # noqa: F401 - fixture
from conftest_sources import add_member, assert_same_stores, extract, whole_tar

from cog_pl.data.sources import SynsetSource, open_source
from cog_pl.data.whole_tar import WholeTarSource

DOMAINS = ("cog_l1", "cog_l4")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fall11_whole.tar", "winter21_whole.tar.gz"])
def test_whole_tar_extracts_to_the_folder_layouts_stores(tiny, tmp_path, name):  # noqa: F811
    folders = tiny.make_in21k(tmp_path / "in21k")
    tar = whole_tar(folders, tmp_path / "whole" / name, inner_folder=name.endswith(".gz"))
    source = open_source(tar)  # the file itself; its folder works as well (below)
    assert isinstance(source, WholeTarSource) and source.random_access == (not name.endswith(".gz"))
    assert source.synsets() == sorted(w for ws in tiny.levels.values() for w in ws)
    w = source.synsets()[0]
    assert source.list(w) == sorted(p.name for p in (folders / w).iterdir())
    assert source.read(w, source.list(w)[1]) == (folders / w / source.list(w)[1]).read_bytes()
    root = tar if name == "fall11_whole.tar" else tar.parent  # the tar file itself, or the folder holding it
    got = extract(tmp_path / "got", DOMAINS, in21k_root=root)
    assert_same_stores(got, extract(tmp_path / "ref", DOMAINS, in21k_root=folders))
    assert got["cog_l1", "test"][3]["source"]["images"] == "whole_tar"
    assert sorted(p.name for p in tar.parent.iterdir()) == [name, f"{name}.whole.table"]  # nothing unpacked


def test_the_uncompressed_index_maps_each_image_to_its_bytes_in_the_outer_tar(tiny, tmp_path):  # noqa: F811
    folders = tiny.make_in21k(tmp_path / "in21k")
    tar = whole_tar(folders, tmp_path / "whole" / "fall11_whole.tar")
    source = open_source(tmp_path / "whole", cache_dir=tmp_path / "cache")
    data = tar.read_bytes()
    for w in source.synsets():
        for n in source.list(w):
            inner, offset, size = source.entry(w, n).split(":")
            assert inner == f"{w}.tar" and data[int(offset):int(offset) + int(size)] == (folders / w / n).read_bytes()
    again = pickle.loads(pickle.dumps(source.table))  # a loader worker gets the path and maps the same file
    assert again.path == source.table.path is not None and again.names(w) == source.list(w)
    with pytest.raises(FileNotFoundError, match=f"synset n00000001 is missing from {tar}"):
        source.list("n00000001")


def test_a_folder_of_tars_per_synset_is_not_a_whole_tar(tiny, tmp_path):  # noqa: F811
    root = tiny.make_in21k(tmp_path / "in21k", "tar")
    assert isinstance(open_source(root, cache_dir=tmp_path / "cache"), SynsetSource)
    other = tmp_path / "other" / "imagenet21k.tar"  # not named *_whole: found by its first member, a synset's tar
    whole_tar(tiny.make_in21k(tmp_path / "f"), other)
    assert isinstance(open_source(other.parent, cache_dir=tmp_path / "cache"), WholeTarSource)


@pytest.mark.parametrize("name", ["fall11_whole.tar", "winter21_whole.tar.gz"])
def test_a_truncated_outer_tar_is_refused_naming_it_and_the_member(tiny, tmp_path, name):  # noqa: F811
    tar = whole_tar(tiny.make_in21k(tmp_path / "in21k"), tmp_path / "whole" / name)
    data = tar.read_bytes()
    tar.write_bytes(data[: len(data) * 2 // 3])  # an interrupted download
    what = "truncated or damaged gzip tar after member" if name.endswith(".gz") else "truncated, .* missing \\(member"
    with pytest.raises(OSError, match=f"{tar}: {what} n\\d{{8}}\\.tar"):
        open_source(tar, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("name", ["fall11_whole.tar", "winter21_whole.tar.gz"])
def test_an_inner_member_that_is_not_a_tar_is_refused_naming_it(tmp_path, name):
    tar = tmp_path / name
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w") as inner:
        add_member(inner, "n01440764_1.JPEG", b"\xff\xd8 a JPEG, say")
    with tarfile.open(tar, "w:gz" if name.endswith(".gz") else "w") as outer:
        add_member(outer, "n01440764.tar", good.getvalue())
        add_member(outer, "n01443537.tar", b"these bytes are no tar at all " * 40)
    with pytest.raises(OSError, match=f"{tar}: member n01443537.tar is not a readable tar"):
        open_source(tar, cache_dir=tmp_path / "cache")


def test_the_run_takes_the_whole_tar_itself_as_its_in21k_root(tiny, tmp_path):  # noqa: F811
    from cog_pl.pipeline import RunConfig

    tar = whole_tar(tiny.make_in21k(tmp_path / "in21k"), tmp_path / "whole" / "fall11_whole.tar")
    config = dict(model="resnet50", random_weights=True, in1k_root=None, out=str(tmp_path / "out"),
                  domains=("cog_l1",), check=False)
    assert RunConfig(in21k_root=str(tar), **config).in21k_root == str(tar)
    other = tmp_path / "notes.txt"
    other.write_text("not images")
    with pytest.raises(FileNotFoundError, match=f"--in21k-root {other} is not a folder nor an IN-21K whole tar"):
        RunConfig(in21k_root=str(other), **config)
