"""The image-source table: the built-in source, refusals by name, and a source added by a user read end to end."""

from __future__ import annotations

import shutil

import lightning as L
import pytest
import torch
from conftest_data import TINY_PROTOCOL, tiny  # noqa: F401 - fixture

from cog_pl.data.sources import (
    ImageSource,
    SynsetSource,
    get_source,
    list_sources,
    open_source,
    register_source,
    unregister_source,
)
from cog_pl.data.transforms import TransformConfig
from cog_pl.datamodules import CoGLevelDataModule


def test_the_table_lists_the_built_in_source_and_refuses_unknown_names(tmp_path):
    assert list_sources() == ("synsets", "flat_val", "hf_tars", "wds", "whole_tar")
    assert get_source("synsets") is SynsetSource
    with pytest.raises(ValueError, match="unknown image source 'webdataset'; known: synsets, flat_val, hf_tars, wds, "
                                         "whole_tar"):
        open_source(tmp_path, "webdataset")
    with pytest.raises(ValueError, match="unknown image source 'webdataset'; known: synsets, flat_val"):
        CoGLevelDataModule("cog_l2", str(tmp_path), source="webdataset")
    with pytest.raises(ValueError, match="image source 'synsets' is already registered"):
        register_source("synsets")(SynsetSource)
    with pytest.raises(TypeError, match="is not an ImageSource subclass"):
        register_source("plain")(dict)
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        open_source(tmp_path / "absent")



@pytest.mark.parametrize("first", ["cog_pl.data.hf_tars", "cog_pl.data.whole_tar", "cog_pl.data.source_base"])
def test_the_built_in_sources_register_in_one_order_whichever_module_comes_first(first):
    """The base imports no layout; ``cog_pl.data.sources`` registers the built-in ones, so the detection order
    (newest first) does not depend on which of their modules a program imported first."""
    import subprocess
    import sys

    code = (f"import {first}, sys; base = sys.modules['cog_pl.data.source_base']; print(base.list_sources()); "
            "from cog_pl.data.sources import list_sources; print(list_sources())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "('synsets',)"  # the plug-ins' modules register nothing themselves
    assert out[1] == "('synsets', 'flat_val', 'hf_tars', 'wds', 'whole_tar')"

def test_the_source_options_name_every_built_in_source_where_it_applies():
    """``--in1k-source`` / ``--in21k-source`` list the built-in sources without importing the table (start-up stays
    fast): each of them, under the datasets it can hold; and data check takes a benchmark file as run and extract."""
    from cog_pl.cli.data import SOURCES_OF
    from cog_pl.cli.main import build_parser

    assert set(SOURCES_OF["in1k"]) | set(SOURCES_OF["in21k"]) == set(list_sources())
    assert set(SOURCES_OF["in1k"]) == set(list_sources())  # IN-1K's train tar is a whole tar of synset tars
    data = build_parser(only="data")._subparsers._group_actions[0].choices["data"]
    check = data._subparsers._group_actions[0].choices["check"]
    helps = {a.option_strings[0]: a.help for a in check._actions if a.option_strings}
    for which, names in SOURCES_OF.items():
        assert f"stored: {', '.join(names)} or a registered source" in helps[f"--{which}-source"]
    assert "--benchmark" in helps


@pytest.mark.parametrize("layout", ["folder", "tar"])
def test_auto_opens_folders_and_tars_per_synset(tiny, tmp_path, layout):  # noqa: F811
    root = tiny.make_in21k(tmp_path / "in21k", layout)
    source = open_source(root, cache_dir=tmp_path / "cache")
    assert isinstance(source, SynsetSource)
    assert source.synsets() == sorted(w for ws in tiny.levels.values() for w in ws)


class FlatSource(ImageSource):
    """A user's layout: every image directly under the root, named ``<wnid>_<anything>``."""

    @classmethod
    def detect(cls, root):
        return any(p.suffix == ".JPEG" for p in root.iterdir())

    def synsets(self):
        return sorted({p.name.split("_", 1)[0] for p in self.root.iterdir()})

    def has(self, wnid):
        return wnid in self.synsets()

    def list(self, wnid):
        if not self.has(wnid):
            raise FileNotFoundError(f"synset {wnid} is missing under {self.root}")
        return sorted(p.name for p in self.root.glob(f"{wnid}_*"))

    def read(self, wnid, filename):
        return (self.root / filename).read_bytes()


@pytest.fixture
def flat():
    register_source("flat")(FlatSource)
    yield FlatSource
    unregister_source("flat")


def _images(root, **kw):
    dm = CoGLevelDataModule("cog_l2", str(root), transform=TransformConfig(crop=16, resize=16), batch_size=4,
                            num_workers=0, pin_memory=False, cache_dir=str(root.parent / "cache"),
                            protocol=TINY_PROTOCOL, **kw)
    out = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).predict(Probe(), datamodule=dm)
    ds = dm.datasets["test"]
    return [ds.key(i) for i in torch.cat([o[1] for o in out]).tolist()], torch.cat([o[0] for o in out])


class Probe(L.LightningModule):
    def predict_step(self, batch, batch_idx):
        return batch["image"], batch["index"]


def test_a_registered_source_reads_a_generated_tree_like_the_built_in(tiny, tmp_path, flat):  # noqa: F811
    folders = tiny.make_in21k(tmp_path / "in21k")
    root = tmp_path / "flat"
    root.mkdir()
    for image in folders.glob("*/*.JPEG"):
        shutil.copyfile(image, root / image.name)
    assert "flat" in list_sources() and isinstance(open_source(root), FlatSource)  # detected from the path
    assert isinstance(open_source(folders), SynsetSource)  # the fallback keeps the per-synset layouts
    keys, images = _images(folders)
    for kind in ("flat", "auto"):
        flat_keys, flat_images = _images(root, source=kind)
        assert flat_keys == keys and torch.equal(flat_images, images)


@pytest.mark.parametrize("layout", ["folder", "tar"])
def test_a_synset_lists_its_images_only_and_counts_agree(tmp_path, layout):
    from conftest_data import jpeg_bytes, write_synset

    from cog_pl.levels.counts import count_images

    files = {"n01440764_1.JPEG": jpeg_bytes(1), "n01440764_2.png": jpeg_bytes(2), "notes.txt": b"x", ".hidden.jpg": b""}
    write_synset(tmp_path / "root", "n01440764", files, layout)
    source = open_source(tmp_path / "root", cache_dir=tmp_path / "cache")
    assert source.list("n01440764") == ["n01440764_1.JPEG", "n01440764_2.png"]
    assert count_images(tmp_path / "root", ["n01440764"]) == {"n01440764": 2}  # what the splits are built from
