"""``cog-pl run --checkpoint FILE`` over feature stores that are all complete skips the checkpoint's load: their
identity is decided with the network on the meta device and the file's digest; a file changed at the same path
(other bytes) is still loaded, refused against the stores, and extracted again with ``--overwrite``."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest_data import tiny  # noqa: F401 - fixture

from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.module import FeatureExtractor
from cog_pl.features.store import StoreError, open_store
from cog_pl.io import file_sha256
from cog_pl.models import build, build_backbone
from cog_pl.pipeline import RunConfig
from cog_pl.pipeline.stages import extract as run_extract

MODEL = "timm:resnet10t"
SPLITS = ("train", "test")


@pytest.fixture
def root(tiny, tmp_path):  # noqa: F811
    return tiny.make_in1k(tmp_path / "in1k", n_train=2, n_val=2)


@pytest.fixture
def loads(monkeypatch):
    """The checkpoint files build_backbone reads (its one loading function, counted)."""
    seen = []

    def counted(path, *args, **kwargs):
        seen.append(str(path))
        return real(path, *args, **kwargs)

    real = build.load_file
    monkeypatch.setattr(build, "load_file", counted)
    return seen


def _weights(path, seed):
    torch.manual_seed(seed)
    torch.save(build_backbone(MODEL).model.state_dict(), path)


def _cfg(root, out, checkpoint, overwrite=False):
    cfg = RunConfig(model=MODEL, checkpoint=str(checkpoint), in1k_root=str(root), in21k_root=None, out=str(out),
                    domains=("in1k",), progress=False, overwrite=overwrite)
    cfg.extract.num_workers, cfg.extract.accelerator, cfg.extract.devices, cfg.extract.batch_size = 0, "cpu", 1, 4
    return cfg


def _stamps(out):
    return {s: (out / "features" / "resnet10t" / "in1k" / s / "features.npy").stat().st_mtime_ns for s in SPLITS}


def test_a_rerun_over_complete_stores_does_not_load_the_checkpoint(root, tmp_path, loads, caplog):
    ckpt, out = tmp_path / "mine.pth", tmp_path / "run"
    _weights(ckpt, 1)
    stores, label, transform, lead = run_extract(_cfg(root, out, ckpt), out)
    assert loads == [str(ckpt)] and label == "resnet10t" and lead
    stamps = _stamps(out)
    loads.clear()
    caplog.set_level(logging.INFO, logger="cog_pl")
    again = run_extract(_cfg(root, out, ckpt), out)
    assert loads == []  # read once before: a full load for nothing
    assert again[0] == stores and again[1] == label and again[2] == transform and again[3]
    assert _stamps(out) == stamps
    (line,) = [m for m in caplog.messages if "checkpoint was not loaded" in m]
    assert f"made by these weights (sha256 {file_sha256(ckpt)[:12]})" in line


def test_a_checkpoint_changed_at_the_same_path_is_loaded_refused_and_extracted_again(root, tmp_path, loads):
    ckpt, out = tmp_path / "mine.pth", tmp_path / "run"
    _weights(ckpt, 1)
    run_extract(_cfg(root, out, ckpt), out)
    before = file_sha256(ckpt)
    _weights(ckpt, 2)  # the same path and size, other bytes
    assert file_sha256(ckpt) != before
    loads.clear()
    with pytest.raises(StoreError, match=f"weights_sha256='{before}' \\(this run: '{file_sha256(ckpt)}'\\)"):
        run_extract(_cfg(root, out, ckpt), out)
    assert loads == [str(ckpt)]  # decided with the weights, as before
    run_extract(_cfg(root, out, ckpt, overwrite=True), out)
    store = open_store(out / "features" / "resnet10t" / "in1k" / "test")
    assert store.meta["weights_sha256"] == file_sha256(ckpt)
    ref = FeatureExtractor(MODEL, str(ckpt))
    dataset, _ = ExtractionDataModule(out=str(tmp_path / "unused"), model_name="x", in1k_root=str(root),
                                      domains=("in1k",), splits=("test",),
                                      transform=ref.transform_config).datasets("in1k")["test"]
    with torch.inference_mode():
        want = ref(torch.stack([dataset[i]["image"] for i in range(len(dataset))])).numpy()
    np.testing.assert_allclose(np.asarray(store.features, np.float32), want, rtol=1e-2, atol=1e-2)


def test_open_clip_which_reads_its_own_files_is_never_planned_without_them():
    """open_clip reads its file (or tag) itself: asking its facts without the weights is refused at once (the run
    then loads it), never answered by a load."""
    from cog_pl.errors import CogError

    with pytest.raises(CogError, match="read_weights do not apply"):
        build_backbone("open_clip:ViT-B-32", "laion2b_s34b_b79k", read_weights=False)


@pytest.mark.parametrize("model, feature, transform", [
    ("timm:test_vit", None, None), ("timm:test_vit", "tokens_full", 224), ("timm:test_vit", "cls_last4", None),
    ("timm:test_resnet", "tokens2x2", None), (MODEL, None, 64)])
def test_the_store_meta_planned_without_the_weights_is_the_extractors(tmp_path, model, feature, transform):
    """What a rerun decides on: the meta of the network built on the meta device and the file's digest equals the
    meta the extractor records after loading the file (the model half of every store's identity)."""
    from cog_pl.extract.module import planned_store_meta
    from cog_pl.features.store import IDENTITY_KEYS

    ckpt = tmp_path / "w.pth"
    torch.manual_seed(0)
    torch.save(build_backbone(model).model.state_dict(), ckpt)
    real = FeatureExtractor(model, str(ckpt), feature=feature, transform=transform)
    planned, used, dim = planned_store_meta(model, str(ckpt), feature=feature, transform=transform,
                                            precision="32-true")
    want = real.store_meta(precision="32-true")
    assert {k: planned.get(k) for k in IDENTITY_KEYS} == {k: want.get(k) for k in IDENTITY_KEYS}
    assert planned.get("token_layout") == want.get("token_layout")
    assert used == real.transform_config and dim == real.feature_dim
