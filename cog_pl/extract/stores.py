"""The stores of one extraction: planned once (:func:`plan_extraction`), settled, written.

:func:`plan_extraction` asks the :class:`~cog_pl.extract.datamodule.ExtractionDataModule` for each (domain, split)'s
path, data meta and dataset only, and :func:`cog_pl.features.plan.plan_store` for what to do with the store. The
:class:`ExtractionPlan` it returns is what the rest reads: the datamodule's loaders (its ``targets``), the
:class:`~cog_pl.extract.writer.FeatureStoreWriter` (which settles it on rank zero, :meth:`ExtractionPlan.settle`,
opens the writers of its targets, :meth:`ExtractionPlan.writer`, and finishes each with its ``meta``), and the
summaries of ``cog-pl run`` and ``cog-pl extract``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from cog_pl.features.plan import Action, Policy, StorePlan, needs_rows, plan_store, refuse_mixed, store_identity
from cog_pl.features.store import StoreWriter, tidy

if TYPE_CHECKING:
    from torch.utils.data import Dataset

logger = logging.getLogger(__name__)


class StoreSource(Protocol):
    """What :func:`plan_extraction` asks of the datamodule
    (:class:`~cog_pl.extract.datamodule.ExtractionDataModule`): where each store goes, the image datamodule of a
    domain (its ``store_meta(split)``, ``dataset(split)`` and ``root``), the data meta a finished store is checked on
    when its images may be gone, and the run's policy, dtype and decode path."""

    domains: Sequence[str]
    splits: Sequence[str]
    overwrite: bool
    on_error: str
    max_skipped: float
    dtype: str

    @property
    def decode_path(self) -> str: ...

    def store_path(self, domain: str, split: str) -> Path: ...

    def image_module(self, domain: str, need_root: bool = True) -> Any: ...

    def _finished_meta(self, dm: Any, split: str) -> dict[str, Any]: ...


@dataclass(frozen=True, eq=False)
class ExtractionTarget:
    """One store of an extraction: its (domain, split), its plan and, unless skipped, the dataset of its rows."""

    domain: str
    split: str
    store: StorePlan
    dataset: Dataset | None = None

    @property
    def path(self) -> Path:
        return self.store.path

    @property
    def rows(self) -> int:
        return int(self.store.num_rows or 0)

    @property
    def meta(self) -> Mapping[str, Any]:
        """The meta the store is checked on and finished with, less what the writer adds."""
        return self.store.want

    @property
    def max_missing(self) -> int:
        """Unreadable images the store may skip (``on_error="skip"``, :func:`~cog_pl.data.policy.skip_budget`)."""
        return self.store.max_missing

    @property
    def rows_left(self) -> np.ndarray:
        return self.store.rows_left


@dataclass(frozen=True)
class ExtractionPlan:
    """Every store of one extraction, in (domain, split) order, and the model meta they were planned with."""

    model_meta: Mapping[str, Any]
    stores: tuple[ExtractionTarget, ...]

    @property
    def targets(self) -> list[ExtractionTarget]:
        """The stores with rows left to extract (resumed or fresh), one predict dataloader each."""
        return [t for t in self.stores if t.store.action in (Action.RESUME, Action.FRESH)]

    @property
    def ready(self) -> list[ExtractionTarget]:
        """The stores an interrupted run wrote every row of: only finishing is left."""
        return [t for t in self.stores if t.store.action is Action.FINISH]

    @property
    def skipped(self) -> list[Path]:
        """The finished stores kept as they are."""
        return [t.path for t in self.stores if t.store.action is Action.SKIP]

    def settle(self, dim: int) -> None:
        """What needs no dataloader, done once (rank zero): tidy the kept stores (leftovers of a kill while they
        were being finished) and finish the ready ones."""
        for path in self.skipped:
            tidy(path)
        for t in self.ready:
            self.writer(t, dim).finish(dict(t.meta))
            logger.info("finalised %s (all %d rows were written before the interruption)", t.path, t.rows)

    @staticmethod
    def writer(target: ExtractionTarget, dim: int, first: bool = True) -> StoreWriter:
        """The store writer of ``target`` (a token store's when its meta has ``tokens``); ``first``: the process that
        creates the files (under ``overwrite`` it discards an interrupted write; later ranks open what it made)."""
        plan = target.store
        return StoreWriter(plan.path, target.rows, dim, overwrite=plan.overwrite, fresh=plan.overwrite and first,
                           identity=dict(plan.want), dtype=plan.want["dtype"], tokens=plan.want.get("tokens"))


def plan_extraction(data: StoreSource, model_meta: Mapping[str, Any]) -> ExtractionPlan:
    """The plan of every store ``data`` extracts, for the model of ``model_meta`` (what the extractor records,
    :meth:`~cog_pl.extract.module.FeatureExtractor.store_meta`): a finished store kept by the policy is checked on
    the data meta that needs no image (``ExtractionDataModule._finished_meta``), any other needs its images."""
    policy = Policy(data.overwrite, data.on_error, data.max_skipped)
    paths = tuple(data.store_path(d, s) for d in data.domains for s in data.splits)
    if paths:  # one label, one kind of store (token or vector)
        refuse_mixed(paths[0].parent.parent, model_meta, paths if data.overwrite else ())
    stores = []
    for domain in data.domains:
        images = data.image_module(domain, need_root=False)
        for split in data.splits:
            path = data.store_path(domain, split)
            if not needs_rows(path, policy):
                want = store_identity(model_meta, data._finished_meta(images, split), data.dtype, data.decode_path)
                stores.append(ExtractionTarget(domain, split, plan_store(path, want, policy)))
                continue
            if not images.root:
                data.image_module(domain)  # refuses, naming the missing root option
            want = store_identity(model_meta, images.store_meta(split), data.dtype, data.decode_path)
            dataset = images.dataset(split)
            stores.append(ExtractionTarget(domain, split, plan_store(path, want, policy, len(dataset)), dataset))
    for path in (t.path for t in stores if t.store.action is Action.SKIP):
        logger.info("complete, skipped: %s", path)
    return ExtractionPlan(dict(model_meta), tuple(stores))
