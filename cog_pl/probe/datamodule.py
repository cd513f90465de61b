"""``ProbeDataModule``: features of one domain for the Lightning shell of the probe.

``fit`` trains on the tuning part of the train split (validation = a per-class 20 % held out) or, with
``holdout=False``, on all of it (the final probe, no validation); ``shots`` samples N per class from the training
part. ``test`` is the test split, which never enters either sample. ``num_classes`` and ``feature_dim`` are known at
construction, so LightningCLI links them into ``LinearProbe``.
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from cog_pl.probe.data import final_indices, load_split, split_shape, tuning_indices
from cog_pl.protocol import ProbeProtocol

_DEFAULTS = ProbeProtocol()


class ProbeDataModule(L.LightningDataModule):
    """Features in memory (``root/train``, ``root/test``), batches drawn by a DataLoader."""

    def __init__(
        self,
        root: str | os.PathLike,
        seed: int = _DEFAULTS.seeds[0],
        shots: int | None = None,
        holdout: bool = True,
        val_fraction: float = _DEFAULTS.val_fraction,
        batch_size: int = _DEFAULTS.batch_size,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.root = Path(root)
        _, self.feature_dim, self.num_classes = split_shape(self.root / "train")
        self.train_set = self.val_set = self.test_set = None

    def setup(self, stage: str) -> None:
        h = self.hparams
        if stage in ("fit", "validate") and self.train_set is None:
            x, y = load_split(self.root / "train")
            if h.holdout:
                train_idx, val_idx = tuning_indices(y, h.val_fraction, h.seed, h.shots)
                self.val_set = TensorDataset(x[val_idx], y[val_idx])
            else:
                train_idx = final_indices(y, h.seed, h.shots)
            self.train_set = TensorDataset(x[torch.from_numpy(np.asarray(train_idx))], y[train_idx])
        if stage in ("test", "predict") and self.test_set is None:
            self.test_set = TensorDataset(*load_split(self.root / "test"))

    def _loader(self, dataset, shuffle: bool) -> DataLoader:
        return DataLoader(dataset, batch_size=self.hparams.batch_size, shuffle=shuffle,
                          num_workers=self.hparams.num_workers, persistent_workers=self.hparams.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader(self.val_set, shuffle=False) if self.val_set is not None else []

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)
