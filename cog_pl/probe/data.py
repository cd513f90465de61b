"""Features for probing: loading, L2 normalisation, the per-class validation split and N-shot samples.

A split directory holds ``features.npy`` (float16 or float32, ``N x D``) and ``labels.npy`` (int64, ``N``); a plain
root holds ``train/`` and ``test/`` split directories. The validation split and N-shot samples are the shared
ones of :mod:`cog_pl.data.sampling` (pure functions of the labels and a seed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from cog_pl.data.sampling import final_indices, tuning_indices  # noqa: F401 - the probe's sampling rule


def sub_seed(seed: int, *keys: int) -> int:
    """A seed derived from ``seed`` and integer keys: independent streams for independent draws."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1, dtype=np.uint32)[0])


def load_split(directory: str | os.PathLike) -> tuple[Tensor, Tensor]:
    """Features (float32) and labels (int64) of one split directory."""
    directory = Path(directory)
    x = np.load(directory / "features.npy", mmap_mode="r")
    y = np.load(directory / "labels.npy")
    if len(x) != len(y):
        raise ValueError(f"{directory}: {len(x)} features but {len(y)} labels")
    return torch.from_numpy(np.asarray(x, dtype=np.float32)), torch.from_numpy(y.astype(np.int64))


def l2_normalize(x: Tensor) -> Tensor:
    """Rows scaled to unit L2 norm (the probe protocol's input)."""
    return F.normalize(x, dim=1)


@dataclass
class ProbeData:
    """In-memory train and evaluation sets of one probe, features already normalised."""

    train_x: Tensor
    train_y: Tensor
    eval_x: Tensor
    eval_y: Tensor
    num_classes: int

    def to(self, device: torch.device | str) -> ProbeData:
        return ProbeData(self.train_x.to(device), self.train_y.to(device), self.eval_x.to(device),
                         self.eval_y.to(device), self.num_classes)
