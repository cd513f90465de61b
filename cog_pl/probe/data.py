"""Features for probing: loading, L2 normalisation, the per-class validation split and N-shot samples.

Stores are opened and checked by :func:`cog_pl.features.pair.open_pair`; :func:`load_store` reads an opened one
into tensors. The validation split and N-shot samples are the shared ones of :mod:`cog_pl.data.sampling` (pure
functions of the labels and a seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from cog_pl.data.sampling import final_indices, tuning_indices  # noqa: F401 - the probe's sampling rule
from cog_pl.errors import CogError
from cog_pl.features.pair import StorePair
from cog_pl.features.store import FeatureStore


def sub_seed(seed: int, *keys: int) -> int:
    """A seed derived from ``seed`` and integer keys: independent streams for independent draws."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1, dtype=np.uint32)[0])


def load_store(store: FeatureStore, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Features (float32, on ``device``) and labels (int64, on the CPU) of an opened store (its checks done by
    :func:`~cog_pl.features.store.open_store`) without its missing rows (``store.valid``: images unreadable at
    extraction); refuses rows holding NaN or infinite values.

    The features travel to ``device`` in the dtype they are stored in (half the bytes for float16 stores) and are
    converted and checked there."""
    x = store.features
    if x.dtype == np.dtype(np.float16):  # read as stored; torch converts several times faster than numpy
        features = torch.from_numpy(np.array(x)).to(device).float()
    else:  # float32 as mapped (no second copy on the CPU); float64, big-endian converted
        features = torch.from_numpy(np.asarray(x, dtype=np.float32)).to(device)
    labels = torch.from_numpy(np.array(store.labels, dtype=np.int64))
    if not bool(torch.isfinite(features.sum())):  # one reduction; rows counted only when it is not finite
        bad = int((~torch.isfinite(features)).any(dim=1).sum())
        if bad:
            raise CogError(f"{store.path / 'features.npy'}: {bad} rows hold NaN or infinite values")
    valid = store.valid
    if not valid.all():
        keep = torch.from_numpy(np.flatnonzero(valid))
        features, labels = features[keep.to(features.device)], labels[keep]
    return features, labels


def train_labels(pair: StorePair) -> np.ndarray:
    """The labels of the train store's readable rows (those :func:`load_store` reads): what the samples draw from."""
    return np.asarray(pair.train.labels)[pair.train.valid]


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
