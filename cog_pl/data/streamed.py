"""The rows of an :class:`~cog_pl.data.imagenet.ImageDataset` read in one pass over a streaming source.

A source without random access (gzip tars, :mod:`cog_pl.data.hf_tars`) cannot serve row ``i`` cheaply, so this
iterable dataset reads each of its files once (:meth:`~cog_pl.data.sources.ImageSource.stream`) and yields the
rows in the order they come, each carrying its ``index``: the extraction writer places rows by index, so the
stores equal those of a random-access source row for row. The files (:meth:`~cog_pl.data.sources.ImageSource.
stream_units`: one gzip tar each, or one synset of a gzip whole tar) are shared among the DataLoader workers of
every DDP rank in runs of whole batches (:func:`share`), and each reader streams its share in one call (one pass over
the files it touches); each row is read once.
Items and bad-image policy are the :class:`ImageDataset`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from cog_pl.data.imagenet import ImageDataset


def _reader() -> tuple[int, int]:
    """``(this reader's number, readers)`` over DDP ranks and DataLoader workers."""
    rank, ranks = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)
    info = get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank * workers + worker, ranks * workers


def share(units: Sequence[Sequence[int]], me: int, readers: int, batch_size: int | None = None) -> list[int]:
    """The positions reader ``me`` of ``readers`` reads, from ``units`` (what streams independently, in order).

    With ``batch_size``, each reader takes one run of the units' positions, every run but the last a whole number of
    batches: the loader then yields exactly ``ceil(rows / batch_size)`` batches, the number Lightning stops after
    (``len(loader)``), and no reader's partial batch pushes a row past it. A file at a run's edge is read by the two
    readers sharing it. Without ``batch_size``, whole units go round-robin."""
    if readers == 1:
        return [k for unit in units for k in unit]
    if batch_size is None:
        return [k for u, unit in enumerate(units) if u % readers == me for k in unit]
    order = [k for unit in units for k in unit]
    batches = -(-len(order) // batch_size)
    run = -(-batches // readers) * batch_size
    return order[me * run:(me + 1) * run]


class StreamedImages(IterableDataset):
    """``base``'s rows ``rows`` (all by default), streamed; ``subset`` keeps the rows still to read. ``batch_size``:
    the loader's, so that several readers never yield more batches than ``len(loader)`` (:func:`share`)."""

    def __init__(self, base: ImageDataset, rows: Sequence[int] | None = None, batch_size: int | None = None) -> None:
        self.base = base
        self.rows = list(range(len(base))) if rows is None else list(rows)
        self.labels = base.labels
        self.samples = base.samples
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self.rows)

    def key(self, index: int) -> str:
        return self.base.key(index)

    def subset(self, rows: Sequence[int]) -> StreamedImages:
        """The same dataset, reading only ``rows`` (an interrupted extraction's rows left)."""
        return StreamedImages(self.base, rows, self.batch_size)

    def __iter__(self) -> Iterator[dict[str, Any] | None]:
        me, readers = _reader()
        keys = [self.base.samples[i] for i in self.rows]
        source = self.base.source
        mine = share(source.stream_units(keys), me, readers, self.batch_size)
        for pos, data in source.stream([keys[k] for k in mine]):  # one call: one pass over a shared stream
            yield self.base.item(self.rows[mine[pos]], data)
