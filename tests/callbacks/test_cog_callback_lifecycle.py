"""CoGEvaluationCallback through a Lightning run's whole life, as a demanding Lightning user drives it (issue 47):
EarlyStopping and ModelCheckpoint on a CoG key compare evaluations only, in either order of the callback list; the
last epoch is the one the Trainer really stopped at (max_steps without max_epochs, EarlyStopping, max_time);
trainer.validate evaluates once and returns the keys; fast_dev_run runs one tiny evaluation and says so; two instances
take two names; a resume with other domains or methods keeps the history. Real Trainers on CPU, tiny 32 px data."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from test_cog_callback import TF, Net, _callback

from cog_pl.datamodules.images import ImageNetDataModule
from cog_pl.demo.synthetic import make_demo

KEY = "cog/l5/top1"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench(onto, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    return root, make_demo(root, n_seen=4, n_per_level=3, train_per_concept=10, test_per_concept=4, image_size=32,
                           onto=onto)


class LoggingNet(Net):
    """The test module, logging its training loss per epoch and with validation and test steps."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.cross_entropy(self.head(self.backbone(batch["image"])), batch["label"]))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", F.cross_entropy(self.head(self.backbone(batch["image"])), batch["label"]))


class SlowNet(LoggingNet):
    """0.3 s a step: Trainer(max_time={"seconds": 1}) stops it within its first epoch of 5 steps."""

    def training_step(self, batch, batch_idx):
        time.sleep(0.3)
        return super().training_step(batch, batch_idx)


def _data(bench) -> ImageNetDataModule:
    root, path = bench
    return ImageNetDataModule(in1k_root=str(root / "in1k"), benchmark=str(path), transform=TF, batch_size=8,
                              num_workers=0, shuffle_train=False)  # 40 train images: 5 batches an epoch


def _trainer(tmp_path, callbacks, **kw) -> L.Trainer:
    checkpointing = any(isinstance(c, ModelCheckpoint) for c in callbacks)
    kw = {"accelerator": "cpu", "logger": L.pytorch.loggers.CSVLogger(tmp_path, name="logs"),
          "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": checkpointing, **kw}
    return L.Trainer(callbacks=callbacks, **kw)


def _fit(bench, trainer, model=None, **kw):
    torch.manual_seed(0)
    model = model or LoggingNet()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule=_data(bench), **kw)
    return model, [str(w.message) for w in caught]


def _csv_epochs(tmp_path, key: str = KEY) -> list[int]:
    path = sorted((tmp_path / "logs").glob("version_*"))[-1] / "metrics.csv"
    with open(path) as fh:
        return [int(r["epoch"]) for r in csv.DictReader(fh) if r.get(key)]


def early_stop(history: list[dict], key: str, patience: int) -> tuple[int | None, int]:
    """What EarlyStopping(mode="max", min_delta=0) decides when it sees exactly these evaluations: the epoch it stops
    at (None: never) and its wait count (Lightning 2.6 callbacks/early_stopping.py, _evaluate_stopping_criteria)."""
    best, wait = -math.inf, 0
    for h in history:
        if h[key] > best:
            best, wait = h[key], 0
        else:
            wait += 1
            if wait >= patience:
                return h["epoch"], wait
    return None, wait


# -- item 1: EarlyStopping and ModelCheckpoint compare evaluations, never an old value again ----------------------
@pytest.mark.parametrize(("every", "patience", "epochs", "order"), [
    (5, 3, 12, "cog_first"), (5, 3, 12, "cog_last"), (2, 1, 10, "cog_last")],
    ids=["issue-cog-first", "issue-cog-last", "patience1"])
def test_early_stopping_and_checkpoint_on_a_cog_key_see_only_evaluations(bench, tmp_path, every, patience, epochs,
                                                                         order):
    cog = _callback(bench, domains=("l5",), every_n_epochs=every)
    stopper = EarlyStopping(monitor=KEY, mode="max", patience=patience, check_on_train_epoch_end=True, strict=False)
    best = ModelCheckpoint(dirpath=tmp_path / "best", monitor=KEY, mode="max", every_n_epochs=every,
                           save_on_train_epoch_end=True, save_top_k=-1, filename="{epoch}")
    callbacks = [cog, stopper, best] if order == "cog_first" else [stopper, best, cog]
    trainer = _trainer(tmp_path, callbacks, max_epochs=epochs)
    _, caught = _fit(bench, trainer)
    stop, wait = early_stop(cog.history, KEY, patience)
    last = epochs - 1 if stop is None else stop
    assert trainer.current_epoch == last + 1  # stopped where the evaluations say, not on an epoch without one
    assert stopper.wait_count == wait
    periodic = [e for e in range(last + 1) if (e + 1) % every == 0]
    assert [h["epoch"] for h in cog.history] == periodic + ([last] if last not in periodic else [])
    if (every, patience, epochs) == (5, 3, 12):  # the run: it stopped at epoch 7, before the 2nd evaluation
        assert stop is None and [h["epoch"] for h in cog.history] == [4, 9, 11]
    # a checkpoint on each of ModelCheckpoint's epochs, each with the score measured on its own weights
    scores = {p.rsplit("/", 1)[-1]: float(s) for p, s in best.best_k_models.items()}
    assert scores == {f"epoch={h['epoch']}.ckpt": pytest.approx(h[KEY]) for h in cog.history
                      if (h["epoch"] + 1) % every == 0}
    assert not [m for m in caught if "could not find the monitored key" in m or "Early stopping conditioned" in m]
    assert _csv_epochs(tmp_path) == [h["epoch"] for h in cog.history]  # logged on the evaluations' epochs only


def test_the_keys_are_out_of_callback_metrics_on_epochs_without_an_evaluation(bench, tmp_path):
    seen = []

    class Spy(L.Callback):  # a monitor of the user's own, reading at the training epoch's end as EarlyStopping does
        def on_train_epoch_end(self, trainer, pl_module):
            seen.append(KEY in trainer.callback_metrics)

    cog = _callback(bench, domains=("l5",), every_n_epochs=2, at_fit_end=False)
    _fit(bench, _trainer(tmp_path, [cog, Spy()], max_epochs=4))  # Lightning calls the others in the list's order
    assert seen == [False, True, False, True]


def test_an_early_stopping_that_checks_at_validation_end_is_warned_about(bench, tmp_path):
    cog = _callback(bench, domains=("l5",))
    late = EarlyStopping(monitor=KEY, mode="max", check_on_train_epoch_end=False, strict=False)
    other = EarlyStopping(monitor="train_loss", check_on_train_epoch_end=False)  # not a CoG key: no business of ours
    _, caught = _fit(bench, _trainer(tmp_path, [late, other, cog], max_epochs=1))
    assert [m for m in caught if m.startswith("CoGEvaluationCallback: EarlyStopping")] == [
        "CoGEvaluationCallback: EarlyStopping(monitor='cog/l5/top1') checks at the end of validation, before the "
        "training epoch's end where the CoG keys are logged, so it never sees them; pass check_on_train_epoch_end=True"]


# -- item 2: the last epoch is the Trainer's real stop -----------------------------------------------------------
def test_max_steps_without_max_epochs_evaluates_on_the_schedule_and_at_the_end(bench, tmp_path):
    cog = _callback(bench, domains=("l5",), every_n_epochs=2)
    trainer = _trainer(tmp_path, [cog], max_steps=22)  # 5 batches an epoch: epochs 0-3 and 2 steps of epoch 4
    _fit(bench, trainer)
    assert trainer.max_epochs == -1 and trainer.global_step == 22  # Lightning's setting, as the user had it
    assert [h["epoch"] for h in cog.history] == [1, 3, 4]
    assert _csv_epochs(tmp_path) == [1, 3, 4]


@pytest.mark.parametrize("stop", ["early_stopping", "max_time"])
def test_a_fit_stopped_before_its_limits_gets_its_final_evaluation(bench, tmp_path, stop, lines):
    cog = _callback(bench, domains=("l5",), every_n_epochs=3)
    if stop == "early_stopping":  # asks to stop after epoch 0; min_epochs=2 lets the fit stop after epoch 1
        stopper = EarlyStopping(monitor="train_loss", mode="min", stopping_threshold=1e9,
                                check_on_train_epoch_end=True)
        trainer, last = _trainer(tmp_path, [cog, stopper], max_epochs=10, min_epochs=2), 1
    else:  # Lightning's Timer stops the first epoch after a second
        trainer, last = _trainer(tmp_path, [cog], max_time={"seconds": 1}), 0
    _fit(bench, trainer, SlowNet() if stop == "max_time" else None)
    assert trainer.current_epoch == last + 1 and trainer.should_stop
    assert [h["epoch"] for h in cog.history] == [last]
    assert float(trainer.callback_metrics[KEY]) == pytest.approx(cog.history[0][KEY])
    assert _csv_epochs(tmp_path) == [last]
    assert [line for line in lines if line.startswith("CoG ")] == [
        f"CoG top-1 at epoch {last} (end of fit): l5 {cog.history[0][KEY]:.3f} ({cog.history[0]['seconds']:.1f} s)"]


def test_at_fit_end_false_adds_no_evaluation_after_a_stop(bench, tmp_path):
    cog = _callback(bench, domains=("l5",), every_n_epochs=3, at_fit_end=False)
    trainer = _trainer(tmp_path, [cog], max_time={"seconds": 1})
    _fit(bench, trainer, SlowNet())
    assert cog.history == [] and KEY not in trainer.callback_metrics


# -- item 5: trainer.validate and fast_dev_run --------------------------------------------------------------------
def test_validate_runs_one_evaluation_and_returns_its_keys(bench, tmp_path, lines):
    cog = _callback(bench, domains=("l1", "l5"))
    model, dm = LoggingNet(), _data(bench)
    dm.setup("test")
    trainer = _trainer(tmp_path, [cog])
    results = trainer.validate(model, dataloaders=dm.test_dataloader(), verbose=False)
    assert set(results[0]) == {"val_loss", "cog/l1/top1", "cog/l5/top1"}
    direct = cog.evaluate(model)  # the same numbers as an evaluation now
    assert results[0]["cog/l1/top1"] == pytest.approx(direct["cog/l1/top1"])
    assert results[0][KEY] == pytest.approx(direct[KEY])
    assert cog.history == []  # the history is the fits'
    assert [line.split(":")[0] for line in lines if line.startswith("CoG ")] == ["CoG top-1 at epoch 0 (validate)"]
    lines.clear()
    trainer.test(model, dataloaders=dm.test_dataloader(), verbose=False)
    assert "CoGEvaluationCallback: trainer.test runs no CoG evaluation (fit and validate do; evaluate() runs one " \
           "now)" in lines
    lines.clear()
    _trainer(tmp_path, [cog], limit_val_batches=0).validate(model, dataloaders=dm.test_dataloader())
    assert "CoGEvaluationCallback: trainer.validate ran no validation batch, so no CoG evaluation " \
           "(limit_val_batches=0, or an empty val loader)" in lines


@pytest.mark.parametrize("schedule", ["evaluating", "disabled"])
def test_fast_dev_run_runs_one_tiny_evaluation_and_says_so(bench, tmp_path, lines, schedule):
    kw = {"every_n_epochs": 5} if schedule == "evaluating" else {"every_n_epochs": 0, "at_fit_end": False}
    cog = _callback(bench, domains=("in1k", "l5"), methods=("linear", "knn"), **kw)
    trainer = L.Trainer(fast_dev_run=True, accelerator="cpu", callbacks=[cog], enable_progress_bar=False,
                        enable_model_summary=False)
    _fit(bench, trainer)
    said = [line for line in lines if line.startswith("CoGEvaluationCallback: fast_dev_run")]
    if schedule == "disabled":
        assert cog.history == [] and said == [
            "CoGEvaluationCallback: fast_dev_run: no CoG evaluation (every_n_epochs=0, at_fit_end=False)"]
        return
    assert said == ["CoGEvaluationCallback: fast_dev_run: one tiny CoG evaluation after the training batches "
                    "(2 concepts x (5 train + 2 test) images per domain, a probe of 1 epoch), to run the code once, "
                    "not to measure"]
    assert [h["epoch"] for h in cog.history] == [0]
    assert {"cog/in1k/top1", "cog/in1k/knn_top1", KEY, "cog/l5/knn_top1"} <= set(trainer.callback_metrics)
    xtr, ytr, xte, _ = cog._data["cog_l5"]
    assert (len(xtr), len(xte), int(ytr.max()) + 1) == (2 * 5, 2 * 2, 2)
    cog.evaluate(LoggingNet())  # outside fast_dev_run: the callback's own sizes again
    assert len(cog._data["cog_l5"][0]) == 3 * 10


# -- item 6: two instances, two names ----------------------------------------------------------------------------
def test_two_instances_take_two_names(bench, tmp_path):
    linear = _callback(bench, domains=("l5",))
    knn = _callback(bench, domains=("l5",), methods=("knn",), knn_ks=(1, 3), name="cog_knn")
    last = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer = _trainer(tmp_path, [linear, knn, last], max_epochs=1)
    _fit(bench, trainer)
    assert {KEY, "cog_knn/l5/knn_top1"} <= set(trainer.callback_metrics)
    assert linear.state_key == "CoGEvaluationCallback{'name': 'cog'}" != knn.state_key
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["callbacks"]
    assert saved[linear.state_key]["history"] == linear.history and saved[knn.state_key]["history"] == knn.history
    assert set(knn.history[0]) == {"epoch", "cog_knn/l5/knn_top1", "seconds"}
    with pytest.raises(RuntimeError, match="HINT: The `callback.state_key` must be unique"):
        L.Trainer(callbacks=[_callback(bench, domains=("l5",)), _callback(bench, domains=("l1",))])
    with pytest.raises(ValueError, match="CoGEvaluationCallback: name 'cog/x'; expected a non-empty word"):
        _callback(bench, name="cog/x")


# -- item 4: a resume with other domains or methods keeps the history ---------------------------------------------
def test_a_resume_with_other_domains_and_methods_keeps_the_history_and_says_so(bench, tmp_path):
    first = _callback(bench, domains=("l1", "l5"))
    _fit(bench, _trainer(tmp_path, [first, ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)],
                         max_epochs=2))
    resumed = _callback(bench, domains=("l5",), methods=("linear", "knn"))
    trainer = _trainer(tmp_path, [resumed, ModelCheckpoint(dirpath=tmp_path / "ckpt2")], max_epochs=3)
    _, caught = _fit(bench, trainer, ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert resumed.history[:2] == first.history and [h["epoch"] for h in resumed.history] == [0, 1, 2]
    assert set(resumed.history[2]) == {"epoch", KEY, "cog/l5/knn_top1", "seconds"}
    assert not [m for m in caught if "Please add the following callbacks" in m]
    assert [m for m in caught if "CoGEvaluationCallback" in m] == [
        "CoGEvaluationCallback 'cog': the checkpoint's history (2 evaluation(s)) was made with other settings "
        "(domains cog_l1, cog_l5 -> cog_l5; methods linear -> linear, knn); it is kept as it was, each entry with "
        "the keys it was logged under, and this run evaluates with the new settings"]


# -- item 7 and items 1-2 under DDP: every line once, the end-of-fit evaluation on every rank together -------------
@pytest.mark.slow  # 2 processes on gloo
def test_under_two_process_ddp_each_line_is_said_once_and_the_final_evaluation_reaches_every_rank(bench, tmp_path):
    root, _ = bench
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(REPO / "tests" / "cog_callback_ddp.py"), "--devices", "2", "--bench", str(root),
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    reports = [json.loads((tmp_path / f"report_rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in reports] == [2, 2]
    # every 2 epochs (epoch 1), then EarlyStopping stopped the fit after epoch 2 (min_epochs=3): evaluated at its end
    assert [h["epoch"] for h in reports[0]["history"]] == [1, 2] and reports[1]["history"] == reports[0]["history"]
    assert [r["current_epoch"] for r in reports] == [3, 3]
    final = reports[0]["history"][-1][KEY]
    assert [r["callback_metric"] for r in reports] == [pytest.approx(final)] * 2  # on every rank, after fit
    assert reports[0]["best_model_score"] == pytest.approx(reports[0]["history"][0][KEY])  # epoch 1: its only check
    said = [line for line in proc.stderr.splitlines() if "rank_zero: CoG" in line]
    assert [line.split(":")[0] + ":" + line.split(":")[1] for line in said] == [
        "[rank 0] lightning.pytorch.utilities.rank_zero: CoGEvaluationCallback",  # images read at ...
        "[rank 0] lightning.pytorch.utilities.rank_zero: CoG top-1 at epoch 1",
        "[rank 0] lightning.pytorch.utilities.rank_zero: CoG top-1 at epoch 2 (end of fit)"]
    assert not [line for line in proc.stderr.splitlines() if line.startswith("[rank 1]") and "CoG" in line]
    assert _csv_epochs(tmp_path) == [1, 2]  # one row per evaluation, not one per rank
