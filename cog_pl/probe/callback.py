"""``OptunaTrialCallback``: connects a Lightning fit to an Optuna trial.

After every validation it reports the monitored metric (``val/top1``) to the trial, so a study sees the same
per-epoch values the published loop computes; the objective reads ``callback.value``, the last value reported. When
the model's loss goes non-finite (``LinearProbe.diverged_epoch``) the fit stops and Lightning validates the model as
it stopped, as the published loop does: that validation is reported and is the trial's value; nothing after it.
Pruning is off by default because the protocol trains every trial to the end.
"""

from __future__ import annotations

import lightning as L
import optuna
from lightning.pytorch.callbacks import Callback


class OptunaTrialCallback(Callback):
    """Report a metric to an Optuna trial after each validation epoch.

    Args:
        trial: the trial the fit is for.
        monitor: the logged metric reported (the probe's ``val/top1``).
        prune: stop the fit when Optuna's pruner says the trial is behind.

    Example:
        >>> def objective(trial):  # doctest: +SKIP
        ...     probe = LinearProbe(data.num_classes, data.feature_dim, lr=trial.suggest_float("lr", 1e-3, 10))
        ...     callback = OptunaTrialCallback(trial)
        ...     L.Trainer(max_epochs=100, callbacks=[callback]).fit(probe, data)
        ...     return callback.value
    """

    def __init__(self, trial: optuna.Trial, monitor: str = "val/top1", prune: bool = False) -> None:
        super().__init__()
        self.trial, self.monitor, self.prune = trial, monitor, prune
        self.value: float | None = None
        self.halted = False  # the model that diverged has been validated: nothing more is reported

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.halted:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            return
        self.halted = getattr(pl_module, "diverged_epoch", None) is not None
        self.value = float(value)
        if trainer.is_global_zero:
            self.trial.report(self.value, trainer.current_epoch)
            if self.prune and self.trial.should_prune():
                raise optuna.TrialPruned(f"pruned at epoch {trainer.current_epoch}")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            self.trial.set_user_attr("diverged_epoch", getattr(pl_module, "diverged_epoch", None))
