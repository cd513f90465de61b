"""Phase 1: the FeatureExtractor, the resumable store writer and ``cog-pl extract``, on tiny ImageNet-shaped trees."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from conftest_data import tiny  # noqa: F401 - fixture

from cog_pl.cli.main import main
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.module import FeatureExtractor
from cog_pl.features.plan import store_identity
from cog_pl.features.store import is_complete, make_meta, open_store, write_store
from cog_pl.protocol import DOMAINS

MODEL = "timm:resnet10t"


@pytest.fixture
def roots(tiny, tmp_path):  # noqa: F811
    return tiny.make_in1k(tmp_path / "in1k", n_val=3), tiny.make_in21k(tmp_path / "in21k", layout="tar")


def _args(roots, out, *extra):
    in1k, in21k = roots
    return ["extract", "--model.model", MODEL, "--model.random_weights", "true", "--data.in1k_root", str(in1k),
            "--data.in21k_root", str(in21k),
            "--data.out", str(out), "--data.num_workers", "0", "--data.batch_size", "4",
            "--trainer.accelerator", "cpu", "--trainer.devices", "1", *extra]


def _stores(out):
    return {(d, s): out / "resnet10t@random" / d / s for d in DOMAINS for s in ("train", "test")}


def test_extract_all_domains_then_skip(roots, tmp_path, capsys):
    out = tmp_path / "features"
    torch.manual_seed(0)
    assert main(_args(roots, out)) == 0
    stores = _stores(out)
    assert all(is_complete(p) for p in stores.values())
    # every row is the backbone's feature of the image at that dataset index
    extractor = FeatureExtractor(MODEL, random_weights=True)
    store = open_store(stores["cog_l3", "train"])
    extractor.net.load_state_dict(_weights_of_run(out))
    dm = ExtractionDataModule(out=str(tmp_path / "unused"), model_name="x", in1k_root=str(roots[0]),
                              in21k_root=str(roots[1]), transform=extractor.transform_config)
    dataset, meta = dm.datasets("cog_l3")["train"]
    assert len(store) == len(dataset) and store.meta["split_sha256"] == meta["split_sha256"]
    with torch.inference_mode():
        ref = extractor(torch.stack([dataset[i]["image"] for i in range(len(dataset))])).numpy()
    np.testing.assert_allclose(np.asarray(store.features, np.float32), ref, rtol=1e-2, atol=1e-2)
    np.testing.assert_array_equal(store.labels, [dataset[i]["label"] for i in range(len(dataset))])
    np.testing.assert_array_equal(store.index, np.arange(len(dataset)))
    assert store.meta["model"] == "resnet10t@random"  # random weights, labelled so
    assert store.meta["domain"] == "cog_l3" and store.meta["split"] == "train"
    assert store.meta["weights"] == "random" and store.meta["transform"] == extractor.transform_config.as_record()
    capsys.readouterr()
    mtimes = {k: (p / "features.npy").stat().st_mtime_ns for k, p in stores.items()}
    assert main(_args(roots, out)) == 0
    assert "already complete" in capsys.readouterr().out
    assert mtimes == {k: (p / "features.npy").stat().st_mtime_ns for k, p in stores.items()}


def _weights_of_run(out):
    """Random weights differ per run: the test saves none, so it reuses the seed-0 initialisation."""
    torch.manual_seed(0)
    return FeatureExtractor(MODEL, random_weights=True).net.state_dict()


class _Crash(L.Callback):
    def __init__(self, after: int):
        self.after, self.seen = after, 0

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.seen += 1
        if self.seen == self.after:
            raise RuntimeError("simulated crash")


class _Count(L.Callback):
    def __init__(self):
        self.rows = 0

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.rows += len(batch["index"])


def _extract(roots, out, callbacks=(), domains=("in1k", "cog_l1", "cog_l5")):
    torch.manual_seed(0)
    model = FeatureExtractor(MODEL, random_weights=True)
    dm = ExtractionDataModule(out=str(out), model_name="m", in1k_root=str(roots[0]), in21k_root=str(roots[1]),
                              domains=domains, transform=model.transform_config, batch_size=3, num_workers=0)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=list(callbacks),
                        enable_progress_bar=False)
    trainer.predict(model, datamodule=dm, return_predictions=False)
    return dm


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 243 s; extracting every domain and StoreWriter's resume stay fast
def test_interrupted_extraction_resumes_and_equals_an_uninterrupted_one(roots, tmp_path):
    ref = _extract(roots, tmp_path / "ref")
    total = sum(t.rows for t in ref.plan.targets)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _extract(roots, tmp_path / "run", [_Crash(after=7)])
    stores = list((tmp_path / "run" / "m").glob("*/*"))
    complete = [p for p in stores if is_complete(p)]
    assert 0 < len(complete) < len(ref.plan.targets)  # finished stores are final at once; the others resume
    stamps = {p: (p / "features.npy").stat().st_mtime_ns for p in complete}
    count = _Count()
    _extract(roots, tmp_path / "run", [count])
    assert 0 < count.rows <= total - 7 * 3 + 3  # finished batches were kept, not redone
    assert stamps == {p: (p / "features.npy").stat().st_mtime_ns for p in complete}
    for t in ref.plan.targets:
        a, b = open_store(t.path), open_store(tmp_path / "run" / "m" / t.domain / t.split)
        np.testing.assert_array_equal(a.features, b.features)
        np.testing.assert_array_equal(a.labels, b.labels)


def test_bad_requests_are_named(roots, tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown domain"):
        ExtractionDataModule(domains=("cog_l9",))
    dm = ExtractionDataModule(out=str(tmp_path), in1k_root=None, domains=("in1k",), transform="protocol")
    with pytest.raises(ValueError, match="needs --data.in1k_root"):
        dm.setup()


def test_a_split_left_to_extract_reads_only_that_split(roots, tmp_path):
    """Resuming with only test stores left (or --data.splits test) must not need, or list, the train images."""
    import shutil

    in1k, in21k = roots
    shutil.rmtree(in1k / "train")
    dm = ExtractionDataModule(out=str(tmp_path / "o"), model_name="x", in1k_root=str(in1k), in21k_root=str(in21k),
                              domains=("in1k",), splits=("test",), transform="protocol")
    dm.setup()
    assert [(t.domain, t.split) for t in dm.plan.targets] == [("in1k", "test")] and len(dm.plan.targets[0].dataset) > 0


def test_resuming_with_the_train_store_finished_needs_no_train_images(roots, tmp_path):
    """The default splits, the train store already written: only the test split is listed and extracted."""
    import shutil

    in1k, in21k = roots
    dm = ExtractionDataModule(out=str(tmp_path / "o"), model_name="x", in1k_root=str(in1k), in21k_root=str(in21k),
                              domains=("in1k",), transform="protocol")
    done = dm.store_path("in1k", "train")
    # finished by this data (no model known)
    meta = store_identity({}, dm.image_module("in1k").store_meta("train"), dm.dtype, dm.decode_path)
    write_store(done, np.zeros((2, 4)), np.zeros(2, dtype=np.int64), None, make_meta(model="x", weights_sha256=None,
                                                                                     **meta))
    shutil.rmtree(in1k / "train")
    dm.setup()
    assert [(t.domain, t.split) for t in dm.plan.targets] == [("in1k", "test")] and dm.plan.skipped == [done]


class TinyNet(torch.nn.Module):
    """A user's own backbone (reached from a config by class_path, or by its builder's import path)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, width, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                        torch.nn.Flatten())

    def forward(self, x):
        return self.body(x)


def tiny_net() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet(6)


class _UserModule(L.LightningModule):
    """A LightningModule holding its backbone as ``self.backbone`` (keys ``backbone.*`` in its checkpoints)."""

    def __init__(self):
        super().__init__()
        import timm

        self.backbone = timm.create_model("resnet10t", num_classes=0)
        self.head = torch.nn.Linear(512, 3)

    def training_step(self, batch, batch_idx):
        return self.head(self.backbone(batch[0])).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _images(n=4, size=64):
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def test_a_lightning_checkpoint_is_named_with_the_prefixes_it_holds(tmp_path):
    from cog_pl.models.checkpoints import CheckpointError

    user = _UserModule()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(_images(2)), batch_size=2)
    trainer = L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(user, data)
    ckpt = tmp_path / "user.ckpt"
    trainer.save_checkpoint(ckpt)
    held = (r"a Lightning checkpoint \(Lightning 2\.[\d.]+\) whose state_dict holds the module's attributes "
            r"backbone\. \(\d+ tensors\), head\. \(2 tensors\).*e\.g\. prefix='backbone\.'")
    with pytest.raises(CheckpointError, match=held):
        FeatureExtractor(MODEL, checkpoint=str(ckpt))
    with pytest.raises(CheckpointError, match=r"prefix 'net\.' was given"):
        FeatureExtractor(MODEL, checkpoint=str(ckpt), prefix="net.")
    loaded = FeatureExtractor(MODEL, checkpoint=str(ckpt), prefix="backbone.")
    assert loaded.backbone.report.container.startswith("state_dict (a Lightning checkpoint")
    user.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(_images()), user.backbone(_images()))
    with pytest.raises(CheckpointError, match="published file holds; it is a Lightning checkpoint.*the architecture"):
        FeatureExtractor("resnet50", checkpoint=str(ckpt))


def test_an_own_module_or_callable_extracts_without_returning_features(roots, tmp_path, caplog):
    import warnings

    net = tiny_net()
    model = FeatureExtractor(model=net, name="mine", transform=48)
    assert model.model_name == "mine" and model.feature_dim == 6 and model.transform_config.crop == 48
    assert model.hparams["model"].startswith("module:test_extract.TinyNet")
    dm = ExtractionDataModule(out=str(tmp_path / "out"), model_name="mine", in1k_root=str(roots[0]),
                              domains=("in1k",), splits=("test",), batch_size=3, num_workers=0)
    assert dm.hparams["domains"] == ("in1k",) and dm.hparams["transform"] == "auto"  # saved as the others do
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    assert trainer.predict(model, datamodule=dm) is None  # written, not also returned
    store = open_store(tmp_path / "out" / "mine" / "in1k" / "test")
    assert store.meta["transform"]["crop"] == 48  # "auto": the extractor's transform
    assert store.meta["weights"] == "module" and len(store.meta["weights_sha256"]) == 64
    dataset, _ = dm.datasets("in1k")["test"]
    with torch.no_grad():
        ref = net(torch.stack([dataset[i]["image"] for i in range(len(dataset))])).numpy()
    np.testing.assert_allclose(np.asarray(store.features, np.float32), ref, rtol=1e-2, atol=1e-3)
    again = ExtractionDataModule(out=str(tmp_path / "out"), model_name="mine", in1k_root=str(roots[0]),
                                 domains=("in1k",), splits=("test",), batch_size=3, num_workers=0)
    caplog.set_level("INFO")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert trainer.predict(model, datamodule=again) is None
    assert not [w for w in caught if "Total length" in str(w.message)] and "nothing to extract" in caplog.text
    assert trainer.limit_predict_batches == 1.0  # the Trainer as it was
    fn = FeatureExtractor(model=lambda x: net(x) * 2, name="doubled")
    with torch.no_grad():
        torch.testing.assert_close(fn(_images(size=32)), 2 * net(_images(size=32)))
    assert fn.backbone.weights == "module" and fn.feature_dim == 6


def test_an_own_architecture_from_the_command_line(roots, tmp_path):
    import yaml

    cfg = tmp_path / "mine.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"model": {"class_path": "test_extract.TinyNet",
                                                       "init_args": {"width": 5}}, "name": "tiny"}}))
    assert main([*_args(roots, tmp_path / "a"), "--config", str(cfg), "--data.domains", "[in1k]",
                 "--data.splits", "[test]"]) == 0
    assert open_store(tmp_path / "a" / "tiny" / "in1k" / "test").features.shape[1] == 5
    assert main([*_args(roots, tmp_path / "b"), "--model.model", "external:test_extract:tiny_net",
                 "--data.domains", "[in1k]", "--data.splits", "[test]"]) == 0
    assert open_store(tmp_path / "b" / "tiny_net" / "in1k" / "test").features.shape[1] == 6


def test_a_transform_given_only_to_the_datamodule_is_the_stores_definition(roots, tmp_path):
    """Issue 37: the input a store states in its definition is the transform its images were read with, whoever was
    given it: the datamodule alone (as `cog-pl run` and the demo pass theirs) makes the same definition as the
    extractor given it, and a store made either way is reused by the other."""
    model = FeatureExtractor(MODEL, random_weights=True)  # its own transform: timm's pretrained config, 176 px
    assert f", {model.transform_config.crop} px RGB, spec " in model.store_meta()["definition"]
    assert model.transform_config.crop == 176
    dm = ExtractionDataModule(out=str(tmp_path / "out"), model_name="resnet10t", in1k_root=str(roots[0]),
                              domains=("in1k",), splits=("test",), transform=32, batch_size=3, num_workers=0)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.predict(model, datamodule=dm)
    meta = open_store(tmp_path / "out" / "resnet10t" / "in1k" / "test").meta
    assert meta["transform"]["crop"] == 32 and ", 32 px RGB, spec " in meta["definition"]
    given = FeatureExtractor(MODEL, transform=32, random_weights=True).store_meta(str(trainer.precision))
    assert meta["definition"] == given["definition"] and meta["transform"] == given["transform"]
    again = ExtractionDataModule(out=str(tmp_path / "out"), model_name="resnet10t", in1k_root=str(roots[0]),
                                 domains=("in1k",), splits=("test",), batch_size=3, num_workers=0)
    # the extractor given the transform: the store is its own, skipped
    trainer.predict(FeatureExtractor(MODEL, transform=32, random_weights=True), datamodule=again)
    assert again.plan.skipped == [tmp_path / "out" / "resnet10t" / "in1k" / "test"] and not again.plan.targets
