"""LightningDataModules for IN-1K, the CoG levels and pre-extracted features."""

from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.datamodules.images import CoGLevelDataModule, ImageDataModule, ImageNetDataModule

__all__ = ["CoGLevelDataModule", "FeatureDataModule", "ImageDataModule", "ImageNetDataModule"]
