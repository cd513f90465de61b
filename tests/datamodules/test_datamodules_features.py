"""FeatureDataModule: normalisation, tune/final splits, N-shot, no test leakage, determinism, Trainer fits, DDP."""

import lightning as L
import numpy as np
import pytest
import torch
from conftest_data import TINY_PROTOCOL, tiny  # noqa: F401 - fixture

from cog_pl.data.transforms import TransformConfig
from cog_pl.datamodules import CoGLevelDataModule, FeatureDataModule
from cog_pl.datamodules.features import IndexBatches
from cog_pl.errors import CogError
from cog_pl.features.store import StoreError, make_meta, write_store


def _plain(root, n_classes=5, per_class=(40, 10), d=16, seed=0):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(n_classes, d)) * 3
    for split, n in zip(("train", "test"), per_class):
        y = rng.permutation(np.repeat(np.arange(n_classes), n))
        (root / split).mkdir(parents=True)
        np.save(root / split / "features.npy", (means[y] + rng.normal(size=(len(y), d))).astype(np.float16))
        np.save(root / split / "labels.npy", y.astype(np.int64))
    return root


def _rows(dm, name):
    return dm._tensors[name][2]


def test_tune_mode_cuts_val_first_and_never_reads_test_rows(tmp_path):
    root = _plain(tmp_path / "f")
    dm = FeatureDataModule(str(root), seed=22, stage_mode="tune", shots=4, device="cpu", batch_size=8)
    dm.setup("fit")
    y = np.load(root / "train" / "labels.npy")
    assert not set(dm.train_idx) & set(dm.val_idx)
    assert np.bincount(y[dm.val_idx]).tolist() == [8] * 5 and np.bincount(y[dm.train_idx]).tolist() == [4] * 5
    full = FeatureDataModule(str(root), seed=22, stage_mode="tune", device="cpu")
    full.setup()
    assert np.array_equal(full.val_idx, dm.val_idx) and set(dm.train_idx) <= set(full.train_idx)
    assert "test" not in dm._tensors and dm.test_idx is None  # the test store's header and labels checked, no row read
    with pytest.raises(CogError, match="never reads the test set"):
        dm.test_dataloader()
    x, _ = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.float32 and torch.allclose(x.norm(dim=1), torch.ones(len(x)), atol=2e-3)
    assert sum(len(b[1]) for b in dm.val_dataloader()) == 40 and dm.num_classes == 5 and dm.feature_dim == 16


def test_final_mode_uses_full_train_or_a_fresh_sample(tmp_path):
    root = _plain(tmp_path / "f")
    tune = FeatureDataModule(str(root), seed=22, stage_mode="tune", shots=2, device="cpu")
    final = FeatureDataModule(str(root), seed=22, stage_mode="final", shots=2, device="cpu")
    tune.setup(), final.setup()
    assert len(final.train_idx) == 10 and not np.array_equal(final.train_idx, tune.train_idx)
    assert sum(len(b[1]) for b in final.test_dataloader()) == 50 and final.val_dataloader() == []
    again = FeatureDataModule(str(root), seed=22, stage_mode="final", shots=2, device="cpu")
    again.setup()
    assert np.array_equal(again.train_idx, final.train_idx)
    other = FeatureDataModule(str(root), seed=37, stage_mode="final", shots=2, device="cpu")
    other.setup()
    assert not np.array_equal(other.train_idx, final.train_idx)
    all_train = FeatureDataModule(str(root), stage_mode="final", device="cpu")
    all_train.setup()
    assert len(all_train.train_idx) == 200


def test_no_test_image_enters_train_val_or_shots(tiny, tmp_path):  # noqa: F811
    """Images -> stores (rows placed by dataset index) -> every sample the probe sees maps to a train image."""
    images = CoGLevelDataModule("L4", str(tiny.make_in21k(tmp_path / "in21k", "tar")), num_workers=0,
                                cache_dir=str(tmp_path / "cache"), protocol=TINY_PROTOCOL,
                                transform=TransformConfig(crop=8, resize=8))
    images.setup()
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        ds = images.datasets[split]
        order = rng.permutation(len(ds))  # rows arrive in any order, e.g. from DDP ranks
        meta = make_meta(model="m", weights_sha256=None, **images.store_meta(split))
        write_store(tmp_path / "store" / split, rng.normal(size=(len(ds), 4)), np.array(ds.labels)[order], order,
                    meta)
    from cog_pl.features.store import open_store
    test_keys = set(tiny.test["L4"])
    train_store = open_store(tmp_path / "store" / "train")
    assert {images.datasets["test"].key(i) for i in open_store(tmp_path / "store" / "test").index} == test_keys
    for mode in ("tune", "final"):
        for shots in (None, 1, 2):
            dm = FeatureDataModule(str(tmp_path / "store"), stage_mode=mode, shots=shots, device="cpu",
                                   expect={"model": "m", "domain": "cog_l4"})
            dm.setup()
            for rows in [dm.train_idx] + ([dm.val_idx] if mode == "tune" else []):
                keys = {images.datasets["train"].key(i) for i in train_store.index[np.asarray(rows, int)]}
                assert keys and not keys & test_keys
    with pytest.raises(StoreError, match="domain='cog_l4', but 'cog_l1' was requested"):
        FeatureDataModule(str(tmp_path / "store"), expect={"domain": "cog_l1"}).setup()


class Probe(L.LightningModule):
    def __init__(self, dim, classes, out_dir=None):
        super().__init__()
        self.fc = torch.nn.Linear(dim, classes)
        self.seen: list[torch.Tensor] = []
        self.out_dir = out_dir

    def on_test_epoch_end(self):
        if self.out_dir is not None:
            torch.save(torch.cat(self.seen), f"{self.out_dir}/seen{self.global_rank}.pt")

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.fc(x), y)

    def validation_step(self, batch, _):
        self.log("val/top1", (self.fc(batch[0]).argmax(1) == batch[1]).float().mean())

    def test_step(self, batch, _):
        self.seen.append(batch[1])
        self.log("test/top1", (self.fc(batch[0]).argmax(1) == batch[1]).float().mean(), reduce_fx="mean")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=5.0, momentum=0.9)


def test_trainer_fits_tunes_and_tests_on_cpu(tmp_path):
    root = _plain(tmp_path / "f")
    kw = {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False, "max_epochs": 5}
    dm = FeatureDataModule(str(root), stage_mode="tune", batch_size=32, device="auto")
    probe = Probe(dm.feature_dim, dm.num_classes)
    trainer = L.Trainer(accelerator="cpu", **kw)
    trainer.fit(probe, datamodule=dm)
    assert trainer.callback_metrics["val/top1"] > 0.9
    final = FeatureDataModule(str(root), stage_mode="final", batch_size=32)
    trainer = L.Trainer(accelerator="cpu", **kw)
    trainer.fit(probe, datamodule=final)
    assert trainer.test(probe, datamodule=final, verbose=False)[0]["test/top1"] > 0.9


def test_ddp_sharding_covers_every_row_with_equal_batch_counts():
    x, y = torch.randn(103, 4).half(), torch.arange(103)
    rows = torch.arange(103)
    for world in (1, 2, 3, 4):
        evals = [list(IndexBatches(x, y, rows, 10, False, 0, r, world)) for r in range(world)]
        assert len({len(e) for e in evals}) == 1  # same number of batches everywhere: no rank waits forever
        seen = torch.cat([b[1] for e in evals for b in e])
        assert sorted(seen.tolist()) == list(range(103))  # evaluation: every row exactly once
        trains = [IndexBatches(x, y, rows, 10, True, 7, r, world) for r in range(world)]
        got = [torch.cat([b[1] for b in t]) for t in trains]
        assert len({len(g) for g in got}) == 1 and len({len(t) for t in trains}) == 1
        assert set(torch.cat(got).tolist()) == set(range(103)) and len(torch.cat(got)) - 103 < world
        trains[0].sampler.set_epoch(1)
        assert not torch.equal(torch.cat([b[1] for b in trains[0]]), got[0])  # a new order each epoch


@pytest.mark.slow
def test_real_ddp_test_run_sees_every_row_once(tmp_path):
    root = tmp_path / "f"
    for split, n in (("train", 40), ("test", 37)):
        (root / split).mkdir(parents=True)
        np.save(root / split / "features.npy", np.random.default_rng(0).normal(size=(n, 4)).astype(np.float16))
        np.save(root / split / "labels.npy", np.arange(n))  # label = row: shows which rows each rank saw
    # 40 train and 37 test "classes": other class counts, probed here because asked for
    dm = FeatureDataModule(str(root), stage_mode="final", batch_size=8, allow_class_mismatch=True)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False, enable_progress_bar=False,
                        enable_checkpointing=False, max_epochs=1)
    trainer.test(Probe(4, 40, out_dir=str(tmp_path)), datamodule=dm, verbose=False)
    seen = [torch.load(tmp_path / f"seen{r}.pt").tolist() for r in (0, 1)]
    assert sorted(seen[0] + seen[1]) == list(range(37))  # each test row evaluated once, on one rank
    assert abs(len(seen[0]) - len(seen[1])) <= 1
