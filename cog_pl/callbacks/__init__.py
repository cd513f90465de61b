"""Lightning callbacks: CoG evaluation during training, and the public callbacks of extraction (feature-store
writing, :mod:`cog_pl.extract.writer`) and of the probe (Optuna trial reporting, :mod:`cog_pl.probe.callback`)."""

from cog_pl.callbacks.cog_eval import CoGEvaluationCallback
from cog_pl.extract.writer import FeatureStoreWriter
from cog_pl.probe.callback import OptunaTrialCallback

__all__ = ["CoGEvaluationCallback", "FeatureStoreWriter", "OptunaTrialCallback"]
