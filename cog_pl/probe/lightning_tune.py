"""The published search through Lightning: one ``Trainer.fit`` of ``LinearProbe`` per trial, as an Optuna objective.

This is the exact mode's Lightning form (slow, one trial at a time, validation every epoch, any Trainer strategy or
precision); ``cog_pl.probe.tuner`` runs the same protocol on in-memory heads, which the CLI uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import optuna

from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.probe.callback import OptunaTrialCallback
from cog_pl.probe.module import LinearProbe
from cog_pl.protocol import ProbeProtocol


def lightning_objective(datamodule: FeatureDataModule, protocol: ProbeProtocol | None = None,
                        **trainer_kwargs: Any) -> Callable[[optuna.Trial], float]:
    """An objective that trains a ``LinearProbe`` per trial and returns its last validation top-1."""
    protocol = protocol or ProbeProtocol()
    trainer_kwargs = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                      "enable_model_summary": False, "num_sanity_val_steps": 0, **trainer_kwargs}

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", *protocol.lr_range, log=True)
        wd = trial.suggest_float("wd", *protocol.wd_range, log=True)
        model = LinearProbe(datamodule.num_classes, datamodule.feature_dim, lr=lr, weight_decay=wd,
                            momentum=protocol.momentum, epochs=protocol.epochs, normalize=protocol.normalize)
        callback = OptunaTrialCallback(trial)
        trainer = L.Trainer(max_epochs=protocol.epochs, callbacks=[callback], **trainer_kwargs)
        trainer.fit(model, datamodule=datamodule)
        return callback.value if callback.value is not None else 0.0  # no validation ran (no validation batches)

    return objective
