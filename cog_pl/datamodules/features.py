"""``FeatureDataModule``: pre-extracted features for the linear probes, batched by index from memory.

Features are L2-normalised once, held as one float16 tensor in host or GPU memory, and each batch is a single
gather ``x[idx]`` (cast to float32) and ``y[idx]``: no per-sample dataset calls, no collation. Batches are tuples
``(features [B, D] float32, labels [B] int64)``.

Modes (docs/protocol.md): ``stage_mode="tune"``: train = the 80 % left by :func:`~cog_pl.data.sampling.val_split` (or
an N-shot sample of it), val = the 20 %; no test row is read (the test store's header and labels are checked with
the train store's, :func:`~cog_pl.features.pair.open_pair`). ``"final"``: train = the full train store (or a fresh
N-shot sample), test = the test store.

``device="auto"`` holds the features on the Trainer's device when they fit there (:func:`cog_pl.device.fits`,
counting every tensor placed: features, labels and row indices), else in host memory.

Under DDP every rank holds the data and takes its own shard: training batches come from one permutation shared by
all ranks (seeded by ``seed`` and the epoch), padded by wrapping like ``DistributedSampler``; evaluation batches
cover every row exactly once, with the same number of batches on every rank.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from cog_pl.data.sampling import final_indices, tuning_indices
from cog_pl.device import fits, resolve_device
from cog_pl.errors import CogError
from cog_pl.features.pair import StorePair, open_pair, vectors_only
from cog_pl.features.store import FeatureStore
from cog_pl.protocol import ProbeProtocol

log = logging.getLogger(__name__)
STAGE_MODES = ("tune", "final")


class _Epoch:
    """Where Lightning finds ``set_epoch`` (it looks at ``loader.sampler``)."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class IndexBatches:
    """Batches gathered by index from in-memory tensors; see the module docstring for the DDP sharding."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor, batch_size: int, shuffle: bool,
                 seed: int = 0, rank: int = 0, world_size: int = 1) -> None:
        self.x, self.y, self.rows = x, y, rows.to(x.device)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.sampler = _Epoch()  # Lightning calls loader.sampler.set_epoch(epoch) before each epoch
        self.batch_sampler = None  # and inspects this one when it sees a sampler

    def _batches(self) -> list[torch.Tensor]:
        n, w = len(self.rows), self.world_size
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.sampler.epoch)
            order = self.rows[torch.randperm(n, generator=gen).to(self.rows.device)]
            per_rank = math.ceil(n / w)
            if per_rank * w > n:  # pad by wrapping so every rank gets as many rows
                order = torch.cat([order, order[: per_rank * w - n]])
            return list(order[self.rank::w].split(self.batch_size))
        shard = self.rows[self.rank::w]
        n_batches = math.ceil(math.ceil(n / w) / self.batch_size)
        return [c for c in torch.tensor_split(shard, n_batches)] if n_batches else []

    def __len__(self) -> int:
        n = math.ceil(len(self.rows) / self.world_size)
        return math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for idx in self._batches():
            yield self.x[idx].float(), self.y[idx]


def _normalized(store: FeatureStore, rows: np.ndarray, chunk: int = 65536) -> torch.Tensor:
    """L2-normalised float16 copy of ``store.features[rows]`` (read in chunks from the memory map)."""
    out = torch.empty(len(rows), store.features.shape[1], dtype=torch.float16)
    for s in range(0, len(rows), chunk):
        part = torch.from_numpy(np.asarray(store.features[rows[s:s + chunk]], dtype=np.float32))
        out[s:s + chunk] = torch.nn.functional.normalize(part, dim=1).half()
    return out


class FeatureDataModule(L.LightningDataModule):
    """Features of one (model, domain) from a store root holding ``train/`` and ``test/`` (v1 or plain stores).

    Args:
        features: the store root, e.g. ``features/resnet50/cog_l3``.
        seed: the seed of the validation split and of the N-shot sample (:mod:`cog_pl.data.sampling`).
        shots: N images per concept, or None for all of them.
        stage_mode: ``"tune"`` (train on the tuning split, validate on the held-out part) or ``"final"`` (all of
            train, then test); see the module docstring.
        batch_size: rows per batch.
        device: where the features are held: ``"auto"`` (the Trainer's device where they fit, else the host),
            ``"cpu"``, ``"cuda"``...
        val_fraction: the held-out part of each concept in tune mode; default: the protocol's.
        normalize: L2-normalise the features once, when they are loaded.
        expect: meta values each store must hold (:func:`~cog_pl.features.pair.open_pair`).
        allow_class_mismatch: probe plain stores whose class counts differ (:func:`~cog_pl.features.pair.open_pair`).

    Example:
        >>> data = FeatureDataModule("features/resnet50/cog_l3", shots=4, stage_mode="tune")  # doctest: +SKIP
        >>> data.num_classes, data.feature_dim  # doctest: +SKIP
        (1000, 2048)
    """

    def __init__(self, features: str, seed: int = 22, shots: int | None = None, stage_mode: str = "final",
                 batch_size: int = 1024, device: str = "auto", val_fraction: float | None = None,
                 normalize: bool = True, expect: dict[str, Any] | None = None,
                 allow_class_mismatch: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        if stage_mode not in STAGE_MODES:
            raise CogError(f"stage_mode={stage_mode!r}; expected one of {', '.join(STAGE_MODES)}")
        if shots is not None and shots < 1:
            raise CogError(f"shots must be a positive number of images per class or None (all), got {shots}")
        self.root, self.seed, self.shots, self.stage_mode = Path(features), seed, shots, stage_mode
        self.batch_size, self.device_request, self.normalize = batch_size, device, normalize
        self.val_fraction = ProbeProtocol().val_fraction if val_fraction is None else val_fraction
        self.expect, self.allow_class_mismatch = expect, allow_class_mismatch
        self._pair: StorePair | None = None
        self.train_idx = self.val_idx = self.test_idx = None  # rows of the train / test stores in use
        self._tensors: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    @property
    def pair(self) -> StorePair:
        """The train and test stores, opened and checked together once (:func:`~cog_pl.features.pair.open_pair`);
        token stores (``[N, T, D]``) are refused in one line: the linear probe reads one vector per image."""
        if self._pair is None:
            self._pair = vectors_only(open_pair(self.root, self.expect, self.allow_class_mismatch),
                                      "cog-pl probe (LinearProbe on FeatureDataModule)")
        return self._pair

    def store(self, split: str) -> FeatureStore:
        return self.pair[split]

    @property
    def num_classes(self) -> int:
        return self.pair.num_classes

    @property
    def feature_dim(self) -> int:
        return self.pair.dim

    def _device(self, needed: int) -> torch.device:
        """Where the ``needed`` bytes of tensors go: the requested device, or for ``"auto"`` the Trainer's (the
        current CUDA device without one) when they fit there, else the host."""
        if self.device_request != "auto":
            return resolve_device(self.device_request)
        trainer = self.trainer
        dev = trainer.strategy.root_device if trainer is not None else resolve_device("auto")
        if fits(needed, dev, what=f"the features of {self.root}"):
            return dev
        log.info("features stay in host memory")
        return torch.device("cpu")

    def setup(self, stage: str | None = None) -> None:
        if self._tensors:
            return
        train, test = self.pair.train, self.pair.test
        valid = np.flatnonzero(train.valid)  # rows whose image was unreadable at extraction are left out
        labels = np.asarray(train.labels)[valid]
        if self.stage_mode == "tune":
            train_idx, val_idx = tuning_indices(labels, self.val_fraction, self.seed, self.shots)
            self.train_idx, self.val_idx = valid[train_idx], valid[val_idx]
            splits = {"train": self.train_idx, "val": self.val_idx}
        else:
            self.train_idx = valid[final_indices(labels, self.seed, self.shots)]
            self.test_idx = np.flatnonzero(test.valid).astype(np.int64)
            splits = {"train": self.train_idx}
        needed = np.unique(np.concatenate(list(splits.values())))
        pools = {"train": (train, needed)}
        if self.stage_mode == "final":
            pools["test"] = (test, self.test_idx)
            splits["test"] = self.test_idx
        loaded = {}
        for name, (store, rows) in pools.items():
            x = _normalized(store, rows) if self.normalize else torch.from_numpy(
                np.asarray(store.features[rows], dtype=np.float16))
            loaded[name] = (x, torch.from_numpy(np.asarray(store.labels[rows], dtype=np.int64)), rows)
        self._tensors = {}
        for name, idx in splits.items():
            x, y, rows = loaded["test" if name == "test" else "train"]
            self._tensors[name] = (x, y, torch.from_numpy(np.searchsorted(rows, idx)))
        placed = {id(t): t for x, y, local in self._tensors.values() for t in (x, y, local)}  # shared ones once
        dev = self._device(sum(t.numel() * t.element_size() for t in placed.values()))
        moved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, (x, y, local) in self._tensors.items():
            if id(x) not in moved:
                moved[id(x)] = (x.to(dev), y.to(dev))
            self._tensors[name] = (*moved[id(x)], local)
        log.info("features %s (%s, shots=%s): train %d, %s on %s", self.root, self.stage_mode, self.shots,
                 len(self.train_idx), f"val {len(self.val_idx)}" if self.stage_mode == "tune"
                 else f"test {len(self.test_idx)}", dev)

    def _loader(self, name: str, shuffle: bool) -> IndexBatches:
        if not self._tensors:
            self.setup()
        x, y, rows = self._tensors[name]
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        return IndexBatches(x, y, rows, self.batch_size, shuffle, self.seed, rank, world)

    def train_dataloader(self) -> IndexBatches:
        return self._loader("train", True)

    def val_dataloader(self) -> IndexBatches | list:
        return self._loader("val", False) if self.stage_mode == "tune" else []

    def test_dataloader(self) -> IndexBatches:
        if self.stage_mode != "final":
            raise CogError("stage_mode='tune' never reads the test set; use stage_mode='final' to test")
        return self._loader("test", False)

