"""``StageProgress`` under its older path: the class lives in the progress floor, :mod:`cog_pl.progress.trainer`."""

from cog_pl.progress.trainer import StageProgress

__all__ = ["StageProgress"]
