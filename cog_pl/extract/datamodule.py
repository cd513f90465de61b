"""``ExtractionDataModule``: every (domain, split) still to extract, one predict dataloader each.

Stores live at ``<out>/<model>/<domain>/<split>/``. A complete store (``meta.json`` present) is skipped; an
unfinished one is resumed: only the rows whose done bit is 0 are loaded. ``targets`` tells the
:class:`~cog_pl.extract.writer.FeatureStoreWriter` where each dataloader's rows go.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from torch.utils.data import DataLoader, Dataset, Subset

from cog_pl.data.imagenet import collate_images
from cog_pl.features.store import is_complete, written_rows
from cog_pl.protocol import DOMAINS, FeatureProtocol, check_domains

logger = logging.getLogger(__name__)
SPLITS = ("train", "test")


@dataclass
class ExtractionTarget:
    """One store to fill: where, how many rows, what the store's meta says about the data."""

    domain: str
    split: str
    path: Path
    rows: int
    dataset: Dataset = field(repr=False)
    meta: dict[str, Any] = field(default_factory=dict)


class ExtractionDataModule(L.LightningDataModule):
    """Predict loaders over the images of IN-1K and the CoG levels, for every store not yet complete.

    Args:
        out: root of the feature stores. model_name: the extractor's name (linked from the model by the CLI).
        in1k_root: IN-1K with ``train/`` and ``val/``. in21k_root: IN-21K, a folder or a tar per synset.
        domains / splits: what to extract (all six domains, train and test, by default).
        transform: the backbone's transform settings (linked from the model by the CLI), or ``"protocol"``.
        benchmark: a benchmark file (:mod:`cog_pl.benchmark`) instead of the official concepts and test split.
    """

    def __init__(self, out: str = "features", model_name: str = "model", in1k_root: str | None = None,
                 in21k_root: str | None = None, domains: Sequence[str] = DOMAINS, splits: Sequence[str] = SPLITS,
                 transform: Any = "protocol", batch_size: int = FeatureProtocol().batch_size, num_workers: int = 4,
                 on_error: str = "fail",
                 cache_dir: str | None = None, split_file_dir: str | None = None,
                 benchmark: str | None = None) -> None:
        super().__init__()
        check_domains(domains)
        bad = [s for s in splits if s not in SPLITS]
        if bad:
            raise ValueError(f"unknown split(s) {', '.join(bad)}; expected train and/or test")
        self.out, self.model_name = Path(out), model_name
        self.in1k_root, self.in21k_root = in1k_root, in21k_root
        self.domains, self.splits = tuple(domains), tuple(splits)
        self.transform = transform
        self.batch_size, self.num_workers, self.on_error = batch_size, num_workers, on_error
        self.cache_dir, self.split_file_dir = cache_dir, split_file_dir
        self.benchmark = benchmark
        self.targets: list[ExtractionTarget] = []  # stores with rows left to extract, one dataloader each
        self.ready: list[ExtractionTarget] = []  # every row written by an interrupted run, only finalising left
        self.skipped: list[Path] = []

    def store_path(self, domain: str, split: str) -> Path:
        return self.out / self.model_name / domain / split

    def datasets(self, domain: str, splits: Sequence[str] | None = None) -> dict[str, tuple[Dataset, dict[str, Any]]]:
        """The image datasets of one domain by split (``splits``, by default this module's), with the meta their
        stores record; only those splits are listed and read."""
        from cog_pl.datamodules.images import CoGLevelDataModule, ImageNetDataModule

        common = {"transform": self.transform, "batch_size": self.batch_size, "num_workers": self.num_workers,
                  "on_error": self.on_error, "cache_dir": self.cache_dir, "benchmark": self.benchmark}
        if domain == "in1k":
            if not self.in1k_root:
                raise ValueError("extracting in1k needs --data.in1k_root (a folder with train/ and val/)")
            dm = ImageNetDataModule(root=self.in1k_root, **common)
        else:
            if not self.in21k_root:
                raise ValueError(f"extracting {domain} needs --data.in21k_root (a folder or tar per synset)")
            dm = CoGLevelDataModule(level=domain, root=self.in21k_root, split_file=self._split_file(domain),
                                    **common)
        return {s: (dm.dataset(s), dm.store_meta(s)) for s in (self.splits if splits is None else splits)}

    def _split_file(self, domain: str) -> str | None:
        if not self.split_file_dir:
            return None
        path = Path(self.split_file_dir) / f"{domain}.json"
        return str(path) if path.exists() else None

    def setup(self, stage: str | None = None) -> None:
        if self.targets:
            return
        for domain in self.domains:
            todo = [s for s in self.splits if not is_complete(self.store_path(domain, s))]
            self.skipped += [self.store_path(domain, s) for s in self.splits if s not in todo]
            if not todo:
                continue
            for split, (dataset, meta) in self.datasets(domain, todo).items():
                path = self.store_path(domain, split)
                target = ExtractionTarget(domain, split, path, len(dataset), dataset, meta)
                full = len(dataset) > 0 and bool(written_rows(path, len(dataset)).all())
                (self.ready if full else self.targets).append(target)
        for path in self.skipped:
            logger.info("complete, skipped: %s", path)

    def finish_ready(self, model_meta: dict[str, Any], dim: int) -> None:
        """Finalise the stores whose rows an interrupted run wrote completely (no dataloader is needed for them)."""
        from cog_pl.features.store import StoreWriter

        for t in self.ready:
            StoreWriter(t.path, t.rows, dim).finish({**model_meta, **t.meta})
            logger.info("finalised %s (all %d rows were written before the interruption)", t.path, t.rows)

    def predict_dataloader(self) -> list[DataLoader]:
        loaders = []
        for t in self.targets:
            left = np.flatnonzero(~written_rows(t.path, t.rows))
            if len(left) < t.rows:
                logger.info("resuming %s: %d of %d rows left", t.path, len(left), t.rows)
            data = t.dataset if len(left) == t.rows else Subset(t.dataset, left.tolist())
            loaders.append(DataLoader(data, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers,
                                      collate_fn=collate_images, persistent_workers=False))
        return loaders

