"""Extraction never reuses or mixes features of other inputs: a finished or interrupted store made with another
checkpoint is refused, naming the difference, and ``overwrite`` (``--data.overwrite``, ``cog-pl run --overwrite``)
extracts it again."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from conftest_data import tiny  # noqa: F401 - fixture

from cog_pl.cli.main import main
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.module import FeatureExtractor
from cog_pl.features.store import StoreError, is_complete, open_store, partial_path
from cog_pl.io import file_sha256
from cog_pl.models import build_backbone

MODEL = "timm:resnet10t"


@pytest.fixture
def roots(tiny, tmp_path):  # noqa: F811
    return tiny.make_in1k(tmp_path / "in1k", n_train=2, n_val=3), None


@pytest.fixture
def checkpoints(tmp_path):
    paths = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        paths.append(tmp_path / f"ckpt{seed}.pth")
        torch.save(build_backbone(MODEL).model.state_dict(), paths[-1])
    return paths


class _Crash(L.Callback):
    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        raise RuntimeError("simulated crash")


def _extract(roots, out, checkpoint, overwrite=False, callbacks=()):
    model = FeatureExtractor(MODEL, str(checkpoint))
    dm = ExtractionDataModule(out=str(out), model_name="m", in1k_root=str(roots[0]), domains=("in1k",),
                              splits=("test",), transform=model.transform_config, batch_size=3, num_workers=0,
                              overwrite=overwrite)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=list(callbacks),
                        enable_progress_bar=False)
    trainer.predict(model, datamodule=dm, return_predictions=False)
    return out / "m" / "in1k" / "test"


def _same(a, b):
    a, b = open_store(a), open_store(b)
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.meta["weights_sha256"] == b.meta["weights_sha256"]


@pytest.mark.slow
def test_a_finished_store_of_another_checkpoint_is_refused_and_overwrite_replaces_it(roots, checkpoints, tmp_path):
    a, b = checkpoints
    ref_b = _extract(roots, tmp_path / "ref_b", b)
    store = _extract(roots, tmp_path / "out", a)
    assert open_store(store).meta["weights_sha256"] == file_sha256(a)
    with pytest.raises(StoreError) as err:
        _extract(roots, tmp_path / "out", b)
    msg = str(err.value)
    assert msg.startswith(f"{store}: feature store made with different inputs: weights_sha256='{file_sha256(a)}' "
                          f"(this run: '{file_sha256(b)}')") and "--overwrite" in msg and "\n" not in msg
    assert open_store(store).meta["weights_sha256"] == file_sha256(a)  # untouched
    _extract(roots, tmp_path / "out", b, overwrite=True)
    _same(store, ref_b)
    _extract(roots, tmp_path / "out", b)  # the same inputs: skipped
    _same(store, ref_b)


@pytest.mark.slow
def test_an_interrupted_store_is_never_resumed_by_another_checkpoint(roots, checkpoints, tmp_path):
    a, b = checkpoints
    ref_a, ref_b = _extract(roots, tmp_path / "ref_a", a), _extract(roots, tmp_path / "ref_b", b)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _extract(roots, tmp_path / "out", a, callbacks=[_Crash()])
    store = tmp_path / "out" / "m" / "in1k" / "test"
    assert not is_complete(store) and partial_path(store).is_dir()
    with pytest.raises(StoreError, match=rf"{partial_path(store)}: interrupted feature store write made with "
                                         rf"different inputs: weights_sha256='{file_sha256(a)}'"):
        _extract(roots, tmp_path / "out", b)
    _extract(roots, tmp_path / "out", a)  # the same checkpoint resumes, and equals an uninterrupted run
    _same(store, ref_a)
    with pytest.raises(RuntimeError, match="simulated crash"):  # interrupted again, then overwritten by b
        _extract(roots, tmp_path / "out2", a, callbacks=[_Crash()])
    _extract(roots, tmp_path / "out2", b, overwrite=True)
    _same(tmp_path / "out2" / "m" / "in1k" / "test", ref_b)


def test_cli_extract_refuses_another_checkpoint_and_data_overwrite_replaces(roots, checkpoints, tmp_path, capsys):
    a, b = checkpoints

    def args(ckpt, *extra):
        return ["extract", "--model.model", MODEL, "--model.checkpoint", str(ckpt), "--data.in1k_root",
                str(roots[0]), "--data.domains", "[in1k]", "--data.splits", "[test]", "--data.out",
                str(tmp_path / "f"), "--data.num_workers", "0", "--data.batch_size", "4", "--trainer.accelerator",
                "cpu", "--trainer.devices", "1", *extra]

    assert main(args(a)) == 0
    store = tmp_path / "f" / "resnet10t" / "in1k" / "test"
    try:
        code = main(args(b))
    except StoreError as err:  # however the CLI reports it, the run must not succeed
        code, msg = 1, str(err)
    else:
        msg = capsys.readouterr().err
    assert code != 0 and "--data.overwrite true" in msg and "--model.name" in msg  # one label, one set of weights
    assert all(f in msg for f in (str(a), file_sha256(a)[:16], str(b), file_sha256(b)[:16]))
    assert open_store(store).meta["weights_sha256"] == file_sha256(a)
    assert main(args(b, "--data.overwrite", "true")) == 0
    assert open_store(store).meta["weights_sha256"] == file_sha256(b)


def test_run_overwrite_reaches_the_extraction(roots, checkpoints, tmp_path):
    from cog_pl.cli.main import build_parser
    from cog_pl.pipeline import RunConfig
    from cog_pl.pipeline.stages import extract as run_extract

    a, b = checkpoints
    args = build_parser().parse_args(["run", "--model", MODEL, "--in1k-root", str(roots[0]), "--overwrite"])
    assert args.overwrite is True

    def cfg(ckpt, overwrite=False):
        return RunConfig(model=MODEL, checkpoint=str(ckpt), in1k_root=str(roots[0]), in21k_root=None,
                         out=str(tmp_path / "run"), domains=("in1k",), progress=False, overwrite=overwrite)

    run_extract(_workers0(cfg(a)), tmp_path / "run")
    with pytest.raises(StoreError, match="weights_sha256"):
        run_extract(_workers0(cfg(b)), tmp_path / "run")
    run_extract(_workers0(cfg(b, overwrite=True)), tmp_path / "run")
    for split in ("train", "test"):
        meta = open_store(tmp_path / "run" / "features" / "resnet10t" / "in1k" / split).meta
        assert meta["weights_sha256"] == file_sha256(b)


def _workers0(cfg):
    cfg.extract.num_workers, cfg.extract.accelerator, cfg.extract.devices = 0, "cpu", 1
    return cfg
