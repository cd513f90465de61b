"""Token stores (issue 40): float16 ``[N, T, D]`` stores made by a token definition, crash-safe, resumable and
identity-checked like vector stores; never mixed with vector definitions under one label or in one pair; refused by
the probes that read one vector per image."""

from __future__ import annotations

import json
import subprocess

import lightning as L
import numpy as np
import pytest
import timm
import torch
from bad_input_cases import COG_PL
from conftest_data import tiny  # noqa: F401 - fixture

from cog_pl.cli.main import main
from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.evaluate import Method, register_method, unregister_method
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.module import FeatureExtractor
from cog_pl.features.convert import export_pth
from cog_pl.features.missing import mark_missing
from cog_pl.features.pair import open_pair
from cog_pl.features.store import (
    StoreError,
    StoreWriter,
    is_complete,
    make_meta,
    open_store,
    partial_path,
    write_store,
)
from cog_pl.models.arch.demo_cnn import DemoCNN
from cog_pl.probe.cell import Splits
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol


@pytest.fixture
def roots(tiny, tmp_path):  # noqa: F811
    return tiny.make_in1k(tmp_path / "in1k", n_train=2, n_val=3), None


def _vit() -> torch.nn.Module:
    torch.manual_seed(0)  # the same random weights in every call: a resumed run reads the same network
    return timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=0).eval()


class _Crash(L.Callback):
    def __init__(self, after: int) -> None:
        self.after, self.seen = after, 0

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.seen += 1
        if self.seen == self.after:
            raise RuntimeError("simulated crash")


def _extract(roots, out, feature, net=None, callbacks=(), overwrite=False, splits=("test",)):
    model = FeatureExtractor(net if net is not None else _vit(), name="m", feature=feature, transform=32)
    dm = ExtractionDataModule(out=str(out), model_name="m", in1k_root=str(roots[0]), domains=("in1k",), splits=splits,
                              batch_size=2, num_workers=0, overwrite=overwrite)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=list(callbacks),
                        enable_progress_bar=False)
    trainer.predict(model, datamodule=dm, return_predictions=False)
    _extract.dataset = dm.plan.stores[0].dataset  # the images of the last extraction, as the model read them
    return out / "m" / "in1k"


def test_a_token_store_is_float16_n_t_d_with_its_layout_and_equals_the_module(roots, tmp_path):
    root = _extract(roots, tmp_path / "out", "tokens2x2")
    store = open_store(root / "test")
    assert store.features.dtype == np.float16 and store.features.shape == (9, 5, 192) and store.tokens == 5
    meta = store.meta
    assert (meta["tokens"], meta["token_layout"], meta["dim"], meta["feature"]) == (5, {"cls": 1, "grid": [2, 2]},
                                                                                  192, "tokens2x2")
    assert "tokens2x2" in meta["definition"]
    vit = _vit()
    images = torch.stack([_extract.dataset[int(i)]["image"] for i in store.index])
    with torch.no_grad():
        out = vit.forward_intermediates(images, indices=1, return_prefix_tokens=True, norm=True,
                                        intermediates_only=True)[0]
    grid, prefix = out  # [B, D, 2, 2] at 32 px / patch 16: the 2x2 grid is every patch
    want = torch.cat([prefix[:, :1], grid.flatten(2).transpose(1, 2)], dim=1)
    np.testing.assert_allclose(store.features.astype(np.float32), want.half().float().numpy(), atol=2e-3)


def test_kill_and_resume_of_a_token_store_gives_the_bytes_of_an_uninterrupted_one(roots, tmp_path):
    ref = _extract(roots, tmp_path / "ref", "tokens_full")
    with pytest.raises(RuntimeError, match="simulated crash"):
        _extract(roots, tmp_path / "run", "tokens_full", callbacks=[_Crash(after=2)])
    run = tmp_path / "run" / "m" / "in1k" / "test"
    assert not is_complete(run) and 0 < np.load(partial_path(run) / "written.npy").sum() < 9
    _extract(roots, tmp_path / "run", "tokens_full")
    assert (run / "features.npy").read_bytes() == (ref / "test" / "features.npy").read_bytes()
    assert (run / "labels.npy").read_bytes() == (ref / "test" / "labels.npy").read_bytes()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["tokens"] == 5 and meta["token_layout"] == {"cls": 1, "grid": [2, 2]}


def test_a_store_of_another_definition_is_never_resumed_or_reused(roots, tmp_path):
    with pytest.raises(RuntimeError, match="simulated crash"):
        _extract(roots, tmp_path / "out", "tokens2x2", callbacks=[_Crash(after=1)])
    with pytest.raises(StoreError) as err:  # an interrupted token store is not resumed by another grid
        _extract(roots, tmp_path / "out", "tokens1x1")
    msg = str(err.value)
    assert "interrupted feature store write made with different inputs" in msg and "feature='tokens2x2' (this " \
        "run: 'tokens1x1')" in msg and "\n" not in msg
    _extract(roots, tmp_path / "out", "tokens2x2")
    with pytest.raises(StoreError, match=r"feature store made with different inputs: feature='tokens2x2'"):
        _extract(roots, tmp_path / "out", "tokens1x1")  # nor is a finished one reused


def test_token_and_vector_definitions_are_never_mixed_under_one_label(roots, tmp_path):
    _extract(roots, tmp_path / "out", "cls", splits=("test",))
    with pytest.raises(StoreError) as err:  # another split of the same label, a token definition
        _extract(roots, tmp_path / "out", "tokens2x2", splits=("train",))
    msg = str(err.value)
    assert msg == (f"{tmp_path / 'out' / 'm' / 'in1k' / 'test'}: a vector store (feature 'cls') where this run "
                   "makes token stores (feature 'tokens2x2'): token and vector definitions are never mixed under one "
                   "label; give this run another --name (cog-pl extract: --model.name)")
    assert not (tmp_path / "out" / "m" / "in1k" / "train").exists()


def _write(path, features, feature, labels=(0, 1, 0, 1)):
    labels = np.asarray(labels)
    meta = make_meta(model="m", weights_sha256=None, domain="in1k", split=path.name, num_classes=2,
                     classes=["a", "b"], transform={}, level_file_sha256=None, feature=feature)
    if features.ndim == 3:
        meta["tokens"] = features.shape[1]
    tokens = features.shape[1] if features.ndim == 3 else None
    writer = StoreWriter(path, len(labels), features.shape[-1], identity=meta, tokens=tokens)
    writer.write(np.arange(len(labels)), features, labels)
    return writer.finish(meta)


def test_a_pair_of_a_token_store_and_a_vector_store_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    _write(tmp_path / "r" / "train", rng.normal(size=(4, 3, 8)).astype(np.float32), "tokens1x1")
    _write(tmp_path / "r" / "test", rng.normal(size=(4, 8)).astype(np.float32), "cls")
    with pytest.raises(StoreError) as err:
        open_pair(tmp_path / "r")
    assert str(err.value) == (f"{tmp_path / 'r'}: the train store holds 3 tokens per image (feature 'tokens1x1'), "
                              "the test store one vector per image (feature 'cls'): one definition per pair")
    _write(tmp_path / "s" / "train", rng.normal(size=(4, 8)).astype(np.float32), "patch_mean")
    _write(tmp_path / "s" / "test", rng.normal(size=(4, 8)).astype(np.float32), "cls")
    with pytest.raises(StoreError, match="differ in feature: 'patch_mean' and 'cls'"):
        open_pair(tmp_path / "s")


def test_the_linear_probe_and_knn_refuse_a_token_store_naming_the_methods_that_take_it(tmp_path):
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        _write(tmp_path / "r" / split, rng.normal(size=(4, 5, 8)).astype(np.float32), "tokens2x2")
    class Stub(Method):
        name, reads, order = "attentive_stub", "tokens", 7.0

    register_method(Stub())
    try:
        for method, check_only in (("linear", False), ("linear", True), ("knn", False)):
            with pytest.raises(StoreError) as err:
                run_on_stores(method, tmp_path / "r", tmp_path / "results.jsonl", seeds=(0,), shots=(None,),
                              check_only=check_only)
            assert str(err.value) == (f"{tmp_path / 'r' / 'train'}: a token store (5 tokens per image, feature "
                                      f"'tokens2x2'); {method} reads one vector per image: the methods that take "
                                      "token stores: attentive, mlp, attentive_stub (cog-pl run --methods)")
    finally:
        unregister_method("attentive_stub")
    assert not (tmp_path / "results.jsonl").exists()


def test_the_demo_cnn_makes_token_stores(roots, tmp_path):
    torch.manual_seed(0)
    net = DemoCNN().eval()
    root = _extract(roots, tmp_path / "out", "tokens2x2", net=net)
    store = open_store(root / "test")
    assert store.features.shape == (9, 5, 96) and store.meta["token_layout"] == {"cls": 1, "grid": [2, 2]}
    images = torch.stack([_extract.dataset[int(i)]["image"] for i in store.index])
    with torch.no_grad():  # the class token is the global average of the last feature map: the CNN's own feature
        own = net(images)
    np.testing.assert_allclose(store.features[:, 0].astype(np.float32), own.half().float().numpy(), atol=2e-3)


def test_token_stores_are_written_checked_and_reopened_like_vector_stores(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3, 8)).astype(np.float32)
    meta = make_meta(model="m", weights_sha256=None, domain="in1k", split="train", num_classes=2, classes=["a", "b"],
                     transform={}, level_file_sha256=None, feature="tokens1x1", tokens=3)
    store = open_store(write_store(tmp_path / "s", x, np.array([0, 1, 0, 1]), None, meta))
    assert store.features.shape == (4, 3, 8) and store.meta["tokens"] == 3 and store.meta["dim"] == 8
    np.testing.assert_array_equal(store.features, x.astype(np.float16))
    writer = StoreWriter(tmp_path / "t", 4, 8, identity=meta, tokens=3)  # an interrupted write of 3 tokens
    bad = x.copy()
    bad[2, 1, 5] = np.nan
    with pytest.raises(StoreError, match=r"row 2 has NaN or inf features"):
        writer.write(np.arange(4), bad, np.zeros(4, dtype=np.int64))
    del writer
    with pytest.raises(StoreError, match=r"interrupted feature store write made with different inputs: tokens=3 "
                                         r"\(this run: 5\)"):
        StoreWriter(tmp_path / "t", 4, 8, identity={**meta, "tokens": 5}, tokens=5, fresh=False)
    (tmp_path / "s" / "meta.json").write_text(json.dumps({**store.meta, "tokens": 4}))
    with pytest.raises(StoreError, match=r"meta.json says 4 x 4 x 8, features.npy is 4 x 3 x 8"):
        open_store(tmp_path / "s")


def test_token_stores_regroup_into_level_variants_as_token_stores(tmp_path):
    """A level variant of token stores (``cog-pl run --feature tokens... --variants``) is made of token stores: every
    row's tokens moved whole, the layout inherited."""
    from test_features_regroup import _permuted, write_level_file, write_level_stores

    from cog_pl.features import regroup

    root = tmp_path / "features"
    everyone = write_level_stores(root)
    layout = {"cls": 1, "grid": [1, 1]}
    for path in sorted(root.glob("m/cog_l*/*")):  # the same rows as token stores: [x, 2 x] per image
        store = open_store(path)
        x = np.asarray(store.features, np.float32)
        meta = {**store.meta, "feature": "tokens1x1", "tokens": 2, "token_layout": layout}
        write_store(path, np.stack([x, 2 * x], axis=1), store.labels, store.index, meta, overwrite=True)
    regroup.regroup_variant(root, "m", level_file=write_level_file(tmp_path / "toy.json", _permuted(everyone)))
    for path in sorted(root.glob("m/cog_l*@toy/*")):
        store = open_store(path)
        x = np.asarray(store.features, np.float32)
        assert x.shape[1:] == (2, 4) and (store.meta["tokens"], store.meta["token_layout"]) == (2, layout)
        assert store.meta["feature"] == "tokens1x1"
        np.testing.assert_array_equal(x[:, 1], 2 * x[:, 0])  # each row's tokens travel together
        assert [store.meta["classes"][y] for y in store.labels] == [everyone[int(v)] for v in x[:, 0, 0]]


def _token_root(root):
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        _write(root / split, rng.normal(size=(4, 5, 8)).astype(np.float32), "tokens2x2")
    return root


def test_feature_datamodule_and_probe_tune_refuse_a_token_store_naming_it_and_the_token_methods(tmp_path, capsys):
    """The LightningCLI linear probe (one nn.Linear on [B, D]) and ``cog-pl probe tune`` never train on a token
    store's flattened or mis-shaped array: one line names the store, its definition and the methods that read it."""
    root = _token_root(tmp_path / "r")
    said = (f"{root / 'train'}: a token store (5 tokens per image, feature 'tokens2x2'); {{}} reads one vector per "
            "image: the methods that take token stores are those `cog-pl run --methods` marks [token stores]")
    data = FeatureDataModule(str(root), device="cpu")
    with pytest.raises(StoreError) as err:
        _ = data.feature_dim  # what LightningCLI links into LinearProbe, at instantiation: before any batch
    assert str(err.value) == said.format("cog-pl probe (LinearProbe on FeatureDataModule)")
    with pytest.raises(StoreError) as err:
        FeatureDataModule(str(root), normalize=False, device="cpu").setup("fit")
    assert str(err.value) == said.format("cog-pl probe (LinearProbe on FeatureDataModule)")
    for load in (lambda: Splits.load(root), lambda: Splits.for_probes(root, "cpu", ProbeProtocol(), SearchPlan())):
        with pytest.raises(StoreError) as err:
            load()
        assert str(err.value) == said.format("linear")
    # the commands name the methods of the table that take token stores (issue 47: probe knn was an internal error)
    named = (f"{root / 'train'}: a token store (5 tokens per image, feature 'tokens2x2'); {{}} reads one vector per "
             "image: the methods that take token stores: attentive, mlp (cog-pl run --methods)")
    for command, method, own in (("tune", "linear", ["--workdir", str(tmp_path / "w")]), ("knn", "knn", [])):
        done = subprocess.run([str(COG_PL), "probe", command, "--features", str(root), *own, "--seed", "0",
                               "--probe-device", "cpu", "--results", str(tmp_path / "r.sqlite")],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [
            f"cog-pl probe: error: {named.format(method)}"], done.stderr
    assert not (tmp_path / "w" / "optuna.db").exists() and not (tmp_path / "r.sqlite").exists()


def test_export_refuses_a_token_store_and_info_reports_its_tokens_and_width(tmp_path, capsys):
    """The released code's X_Y.pth holds one N x D vector per image: a token store is refused in one line naming it
    (its tokens are read from features.npy), nothing written; ``info`` reports D as ``dim`` and T as ``tokens``."""
    root = _token_root(tmp_path / "r")
    line = (f"{root / 'train'}: a token store (5 tokens per image, feature 'tokens2x2') cannot be exported: the "
            "released code's X_Y.pth holds one N x D vector per image; read the tokens from "
            f"{root / 'train' / 'features.npy'} (N x T x D, layout in meta.json's token_layout)")
    with pytest.raises(StoreError) as err:
        export_pth(root / "train", tmp_path / "x" / "X_Y.pth")
    assert str(err.value) == line
    assert main(["features", "export", str(root), str(tmp_path / "out")]) == 2
    assert line in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not list((tmp_path / "out").rglob("*.pth"))
    assert main(["features", "info", str(root / "train")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["rows"], info["dim"], info["tokens"]) == (4, 8, 5)


def test_an_unreadable_image_in_a_token_store_is_marked_missing_with_zero_tokens(tmp_path):
    """An extraction that cannot read an image records it as missing: in a token store its row is T x D zeros."""
    meta = make_meta(model="m", weights_sha256=None, domain="in1k", split="train", num_classes=2, classes=["a", "b"],
                     transform={}, level_file_sha256=None, feature="tokens1x1", tokens=2)
    writer = StoreWriter(tmp_path / "s", 3, 8, identity=meta, tokens=2)
    writer.write(np.array([0, 2]), np.ones((2, 2, 8), dtype=np.float32), np.array([0, 1]))
    assert mark_missing(writer, np.array([1]), np.array([1]), ["img1.jpg"], ["cannot decode"]) == 1
    store = open_store(writer.finish(meta))
    assert store.features.shape == (3, 2, 8) and store.valid.tolist() == [True, False, True]
    np.testing.assert_array_equal(store.features[1], np.zeros((2, 8)))
