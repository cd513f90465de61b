"""The Lightning shell: LinearProbe + FeatureDataModule from a YAML config (fit, then test), DDP, bf16 AMP, Optuna."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import lightning as L
import optuna
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from test_probe_fixtures import write_features

from cog_pl.cli.main import main
from cog_pl.cli.probe_lightning import run as cli_main
from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.probe.callback import OptunaTrialCallback
from cog_pl.probe.module import LinearProbe
from cog_pl.probe.schedule import lr_sequence
from cog_pl.protocol import ProbeProtocol

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "probe" / "linear_probe.yaml"
QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    return write_features(tmp_path_factory.mktemp("feats"), classes=6, dim=16, per_class=40)


class RecordLR(Callback):
    def __init__(self):
        self.lrs = []

    def on_train_epoch_start(self, trainer, pl_module):
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_cli_fit_then_test_from_the_config_file(features, tmp_path):
    common = ["--config", str(CONFIG), "--data.features", str(features), "--data.batch_size", "64",
              "--trainer.max_epochs", "3", "--trainer.accelerator", "cpu", "--trainer.default_root_dir",
              str(tmp_path)]
    fit = cli_main(["fit", *common])
    assert fit.model.linear.weight.shape == (6, 16)  # linked from the datamodule
    assert fit.model.hparams.lr == 1.0 and fit.trainer.max_epochs == 3
    assert 0 <= float(fit.trainer.callback_metrics["val/top1"]) <= 1
    ckpt = fit.trainer.checkpoint_callback.best_model_path
    assert ckpt and Path(ckpt).exists()
    assert list(tmp_path.rglob("config.yaml"))  # resolved config saved with the run
    tested = cli_main(["test", *common, "--data.stage_mode", "final", "--ckpt_path", ckpt])
    assert {"test/top1", "test/top5"} <= set(tested.trainer.callback_metrics)
    assert tested.trainer.callback_metrics["test/top5"] >= tested.trainer.callback_metrics["test/top1"]


def test_cog_pl_probe_hands_the_rest_of_the_line_to_the_lightning_cli(features, tmp_path, capsys):
    """``cog-pl probe fit|validate|test`` take LightningCLI's options as typed, with no warning about ``args``
    (the test's own ``sys.argv`` holds pytest's arguments, as a console script's holds the whole line)."""
    common = ["--config", str(CONFIG), "--data.features", str(features), "--trainer.max_epochs", "1",
              "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["probe", "fit", *common]) == 0
        assert main(["-v", "probe", "validate", *common, "--ckpt_path", "last"]) == 0  # the config keeps last.ckpt
        with pytest.raises(SystemExit) as help_exit:
            main(["probe", "test", "--help"])
    assert help_exit.value.code == 0 and "usage: cog-pl probe [options] test" in capsys.readouterr().out
    assert not [w for w in caught if "args parameter" in str(w.message)]


def test_module_follows_the_published_lr_sequence(features):
    dm = FeatureDataModule(str(features), stage_mode="tune", batch_size=64, device="cpu")
    model = LinearProbe(dm.num_classes, dm.feature_dim, lr=3.0, weight_decay=1e-6)
    rec = RecordLR()
    L.Trainer(max_epochs=6, accelerator="cpu", callbacks=[rec], enable_checkpointing=False, **QUIET).fit(model, dm)
    assert rec.lrs == pytest.approx(lr_sequence(3.0, 6), rel=1e-12)


def test_bf16_autocast_trains(features):
    dm = FeatureDataModule(str(features), stage_mode="tune", batch_size=64, device="cpu")
    model = LinearProbe(dm.num_classes, dm.feature_dim, lr=10.0, weight_decay=1e-6)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", precision="bf16-mixed", enable_checkpointing=False, **QUIET)
    trainer.fit(model, dm)
    top1 = float(trainer.callback_metrics["val/top1"])
    assert torch.isfinite(torch.tensor(top1)) and top1 > 1.5 / dm.num_classes


@pytest.mark.slow
def test_ddp_two_cpu_processes_from_the_config_files(features, tmp_path):
    """``cog-pl probe fit`` as typed: Lightning starts the second process from the same command line."""
    cmd = [str(Path(sys.executable).with_name("cog-pl")), "probe", "fit", "--config", str(CONFIG), "--config",
           str(REPO / "configs" / "probe" / "ddp_cpu.yaml"), "--data.features", str(features),
           "--data.batch_size", "32", "--trainer.max_epochs", "2", "--trainer.default_root_dir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "args parameter" not in out.stdout  # each process parses the line Lightning relaunched
    assert "distributed_backend=gloo" in out.stdout and "All distributed processes registered" in out.stdout
    assert list(tmp_path.rglob("*.ckpt"))


def test_optuna_callback_reports_every_epoch_and_keeps_a_diverged_trials_value(features):
    dm = FeatureDataModule(str(features), stage_mode="tune", batch_size=64, device="cpu")
    protocol = replace(ProbeProtocol(), epochs=2)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=3))
    study.enqueue_trial({"lr": 1e37, "wd": 10.0})  # outside the ranges: weights overflow in the first epoch

    def objective(trial: optuna.Trial) -> float:  # one Trainer.fit per trial, the published search's Lightning form
        lr = trial.suggest_float("lr", *protocol.lr_range, log=True)
        wd = trial.suggest_float("wd", *protocol.wd_range, log=True)
        model = LinearProbe(dm.num_classes, dm.feature_dim, lr=lr, weight_decay=wd, momentum=protocol.momentum,
                            epochs=protocol.epochs, normalize=protocol.normalize)
        callback = OptunaTrialCallback(trial)
        L.Trainer(max_epochs=protocol.epochs, accelerator="cpu", callbacks=[callback], enable_checkpointing=False,
                  **QUIET).fit(model, datamodule=dm)
        return callback.value

    study.optimize(objective, n_trials=3)
    diverged, *others = study.trials
    # as published: the model is validated as it stopped, in the epoch it diverged, and that is the trial's value
    assert diverged.user_attrs["diverged_epoch"] == 0 and list(diverged.intermediate_values) == [0]
    assert diverged.value == diverged.intermediate_values[0]
    for t in others:
        assert sorted(t.intermediate_values) == [0, 1] and t.value == t.intermediate_values[1]


@pytest.mark.parametrize("prune", [True, False])
def test_optuna_callback_prunes_only_when_asked(features, prune):
    dm = FeatureDataModule(str(features), stage_mode="tune", batch_size=64, device="cpu")
    below = optuna.pruners.ThresholdPruner(lower=2.0)  # top-1 is a fraction: every reported value is below 2
    study = optuna.create_study(direction="maximize", pruner=below)

    def objective(trial: optuna.Trial) -> float:
        model = LinearProbe(dm.num_classes, dm.feature_dim, lr=1.0, weight_decay=1e-6)
        callback = OptunaTrialCallback(trial, prune=prune)
        L.Trainer(max_epochs=3, accelerator="cpu", callbacks=[callback], enable_checkpointing=False,
                  **QUIET).fit(model, dm)
        return callback.value

    study.optimize(objective, n_trials=1)
    (trial,) = study.trials
    if prune:  # stopped at the first report
        assert trial.state == optuna.trial.TrialState.PRUNED and sorted(trial.intermediate_values) == [0]
    else:  # the protocol's default: every trial trains to the end
        assert trial.state == optuna.trial.TrialState.COMPLETE and sorted(trial.intermediate_values) == [0, 1, 2]


def test_test_and_validate_refuse_an_untrained_probe(features, tmp_path, capsys):
    common = ["--config", str(CONFIG), "--data.features", str(features), "--trainer.max_epochs", "1",
              "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path), "--data.stage_mode", "final"]
    assert main(["probe", "test", *common]) == 2
    assert "cog-pl probe: error: test needs --ckpt_path" in capsys.readouterr().err
    assert main(["probe", "test", *common, "--ckpt_path", "last"]) == 2  # nothing fit here yet
    err = capsys.readouterr().err
    assert "test --ckpt_path last: Lightning found no such checkpoint" in err and "test/top1" not in err
    assert main(["probe", "validate", *common, "--data.stage_mode", "tune"]) == 2
    assert main(["probe", "fit", *common]) == 0  # the config keeps last.ckpt: `last` then finds it
    out = capsys.readouterr().out
    (line,) = [x.split(": ", 1)[1] for x in out.splitlines() if x.startswith("test this run with: ")]
    assert line == (f"cog-pl probe test --config {tmp_path / 'config.yaml'} --ckpt_path "
                    f"{tmp_path / 'checkpoints' / 'last.ckpt'}")
    tested = cli_main(line.split()[2:])
    assert tested.trainer.ckpt_path == str(tmp_path / "checkpoints" / "last.ckpt")
    assert float(tested.trainer.callback_metrics["test/protocol_deviations"]) == 1  # max_epochs 1, not 100


def test_a_probe_departing_from_the_protocol_records_it(features, tmp_path):
    fit = cli_main(["fit", "--config", str(CONFIG), "--data.features", str(features), "--trainer.max_epochs", "2",
                    "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path),
                    "--data.stage_mode", "final", "--optimizer", "Adam", "--trainer.logger", "CSVLogger",
                    "--trainer.logger.save_dir", str(tmp_path)])
    deviations = fit.model.protocol_deviations
    assert deviations["optimizer"] == "Adam (protocol: SGD, momentum 0.9)"
    assert deviations["lr_scheduler"].startswith("none (protocol: the cosine rule") and "epochs" in deviations
    ckpt = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, weights_only=False)["protocol_deviations"] == deviations
    assert "protocol_deviations" in (tmp_path / "lightning_logs" / "version_0" / "hparams.yaml").read_text()
    tested = cli_main(["test", "--config", str(tmp_path / "lightning_logs" / "version_0" / "config.yaml"),
                       "--ckpt_path", str(ckpt), "--trainer.logger", "false"])
    assert tested.model.protocol_deviations == deviations
    assert float(tested.trainer.callback_metrics["test/protocol_deviations"]) == 3
    dm = FeatureDataModule(str(features), stage_mode="tune", batch_size=ProbeProtocol().batch_size, device="cpu")
    model = LinearProbe(dm.num_classes, dm.feature_dim, lr=1.0, epochs=ProbeProtocol().epochs)
    L.Trainer(max_epochs=1, accelerator="cpu", enable_checkpointing=False, **QUIET).fit(model, dm)
    assert model.protocol_deviations == {}  # the protocol's optimizer, schedule, epochs and batch size


def test_a_logger_whose_package_is_missing_is_named(features, tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        pytest.skip("tensorboard is installed here")
    common = ["--config", str(CONFIG), "--data.features", str(features), "--trainer.accelerator", "cpu",
              "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "TensorBoardLogger"]
    for extra in ([], ["--trainer.logger.save_dir", str(tmp_path)]):
        assert main(["probe", "fit", *common, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == ("cog-pl probe: error: --trainer.logger TensorBoardLogger needs the tensorboard or tensorboardX "
                       "package, which is not installed (pip install tensorboard)")
