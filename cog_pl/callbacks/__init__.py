"""Lightning callbacks: feature-store writing, Optuna trial reporting, CoG evaluation during training."""

from cog_pl.callbacks.cog_eval import CoGEvaluationCallback
from cog_pl.callbacks.feature_writer import FeatureStoreWriter
from cog_pl.callbacks.optuna import OptunaTrialCallback

__all__ = ["CoGEvaluationCallback", "FeatureStoreWriter", "OptunaTrialCallback"]
