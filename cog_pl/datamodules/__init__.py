"""LightningDataModules for IN-1K, the CoG levels and pre-extracted features."""
