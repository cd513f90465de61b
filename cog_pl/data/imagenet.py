"""ImageNet read in place, in the shapes it is distributed in, and a map-style dataset over chosen images.

Images come from an :class:`~cog_pl.data.sources.ImageSource` (:mod:`cog_pl.data.sources`: folders or tars per
synset, and any source registered there), opened by :func:`~cog_pl.data.sources.open_source`.

:class:`ImageDataset` returns ``{"image": FloatTensor[3,S,S], "label": int, "index": int}`` where ``index`` is the
row of the dataset, so that an extraction writer can place each row at its index under DDP.
:class:`DecodedImages` holds the rows of an :class:`ImageDataset` decoded once, for small datasets read many times.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset, default_collate

# the unreadable-image policy lives in cog_pl.data.policy (no torch); its names stay importable from here
from cog_pl.data.policy import ERROR_POLICIES, check_policy, check_tolerance, skip_budget  # noqa: F401
from cog_pl.data.sources import ImageSource, printable
from cog_pl.defaults import MAX_SKIPPED  # noqa: F401 (cog_pl.data.check imports it from here)
from cog_pl.errors import UnreadableImageError

log = logging.getLogger(__name__)


def decode_image(data: bytes) -> Image.Image:
    """Fully decode encoded bytes to an RGB image; raises on corrupt or truncated data."""
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")  # convert() loads every pixel: a truncated file fails here


def load_image(source: ImageSource, wnid: str, filename: str, data: bytes | Exception | None = None) -> Image.Image:
    """Read and decode one image, or raise :class:`UnreadableImageError` naming it (its ``path`` and ``reason`` set).
    ``data``: its bytes (or the error reading them) when a streaming source already has them.

    The one test of "can this file be decoded": extraction and ``cog-pl data check --decode`` both call it."""
    try:
        if isinstance(data, Exception):
            raise data
        return decode_image(source.read(wnid, filename) if data is None else data)
    except Exception as err:  # PIL raises OSError, SyntaxError, ValueError, ... on bad data
        reason = "not a recognised image format" if isinstance(err, UnidentifiedImageError) else str(err)
        reason = " ".join(reason.split())  # one line
        path = source.where(wnid, filename)
        error = UnreadableImageError(f"unreadable image {path}: {reason}")
        error.path, error.reason = path, reason
        raise error from err


class ImageDataset(Dataset):
    """Images ``(wnid, filename)`` of one source with their labels.

    ``on_error="fail"`` raises :class:`UnreadableImageError`; ``"skip"`` logs a warning, appends
    ``wnid/filename<TAB>reason`` to ``error_log`` (one atomic append per line, safe across workers) and returns
    ``{"skipped": index, "label", "path", "error"}``, which :func:`collate_images` sets apart: the row travels with
    the batch, so an extraction writer (on any DDP rank) records it as missing.
    """

    def __init__(self, source: ImageSource, samples: Sequence[tuple[str, str]], labels: Sequence[int],
                 transform: Callable[[Image.Image], torch.Tensor], on_error: str = "fail",
                 error_log: str | os.PathLike | None = None) -> None:
        check_policy(on_error)
        if len(samples) != len(labels):
            raise ValueError(f"{len(samples)} samples but {len(labels)} labels")
        self.source, self.samples, self.labels = source, list(samples), list(labels)
        self.transform, self.on_error = transform, on_error
        self.error_log = Path(error_log) if error_log is not None else None

    def __len__(self) -> int:
        return len(self.samples)

    def key(self, index: int) -> str:
        """``wnid/filename`` of a row, for messages and tables (:func:`~cog_pl.data.sources.printable`)."""
        return printable("/".join(self.samples[index]))

    def __getitem__(self, index: int) -> dict[str, Any] | None:
        return self.item(index)

    def item(self, index: int, data: bytes | Exception | None = None) -> dict[str, Any] | None:
        """Row ``index``, read from the source or, when a stream brings them, decoded from ``data``."""
        wnid, filename = self.samples[index]
        try:
            image = load_image(self.source, wnid, filename, data)
        except UnreadableImageError as err:
            if self.on_error == "fail":
                raise
            log.warning("skipped %s", err)
            if self.error_log is not None:
                self.error_log.parent.mkdir(parents=True, exist_ok=True)
                line = f"{printable(wnid + '/' + filename)}\t{err.reason}\n".encode()
                fd = os.open(self.error_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
            return {"skipped": index, "label": self.labels[index], "path": err.path, "error": err.reason}
        return {"image": self.transform(image), "label": self.labels[index], "index": index}


class DecodedImages(Dataset):
    """The rows of an :class:`ImageDataset`, decoded and transformed once and kept in memory.

    For small datasets read for many epochs (fine-tuning on the demo): decoding JPEGs costs as much as a small
    network's training step. Rows are the same as the source's (same ``index``; skipped images stay skipped), as the
    evaluation transforms are deterministic. Memory: ``4 * 3 * S * S`` bytes per image (12 KiB at S = 32, 588 KiB
    at S = 224), so keep it to datasets of at most some thousand images at ImageNet sizes.
    """

    def __init__(self, dataset: ImageDataset, batch_size: int = 256, num_workers: int = 0) -> None:
        self.dataset = dataset
        self.labels = list(dataset.labels)
        self.images: torch.Tensor | None = None
        self.kept = torch.zeros(len(dataset), dtype=torch.bool)
        self.lost: dict[int, dict[str, Any]] = {}  # rows the dataset skipped, served as it served them
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_images)
        with torch.random.fork_rng(devices=[]):  # a loader draws a seed: leave the caller's random stream as it was
            for batch in loader:  # each batch copied in as it comes: one batch in memory besides the cache
                lost = batch.get("skipped", {"index": []})
                for k, i in enumerate(lost["index"]):
                    self.lost[int(i)] = {"skipped": int(i), "label": int(lost["label"][k]), "path": lost["path"][k],
                                         "error": lost["error"][k]}
                if len(batch["index"]) == 0:
                    continue
                if self.images is None:
                    self.images = torch.empty(len(dataset), *batch["image"].shape[1:], dtype=batch["image"].dtype)
                self.images[batch["index"]] = batch["image"]
                self.kept[batch["index"]] = True

    @property
    def nbytes(self) -> int:
        return 0 if self.images is None else self.images.numel() * self.images.element_size()

    def __len__(self) -> int:
        return len(self.labels)

    def key(self, index: int) -> str:
        return self.dataset.key(index)

    def __getitem__(self, index: int) -> dict[str, Any] | None:
        if not self.kept[index]:
            return self.lost.get(index)
        return {"image": self.images[index], "label": self.labels[index], "index": index}


def collate_images(batch: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Stack samples into ``{"image": [B,3,S,S], "label": [B], "index": [B]}``, dropping ``None``.

    Images a skipping dataset could not read are left out of these and listed, when there are any, as ``"skipped":
    {"index": [K], "label": [K], "path": [...], "error": [...]}``. A batch whose images were all skipped comes out
    with ``B = 0``.
    """
    kept = [b for b in batch if b is not None and "image" in b]
    lost = [b for b in batch if b is not None and "skipped" in b]
    if kept:
        out = default_collate(kept)
    else:
        empty = torch.empty(0, dtype=torch.long)
        out = {"image": torch.empty(0, 3, 0, 0), "label": empty, "index": empty.clone()}
    if lost:
        out["skipped"] = {"index": torch.tensor([b["skipped"] for b in lost], dtype=torch.long),
                          "label": torch.tensor([b["label"] for b in lost], dtype=torch.long),
                          "path": [b["path"] for b in lost], "error": [b["error"] for b in lost]}
    return out


def read_error_log(path: str | os.PathLike) -> list[tuple[str, str]]:
    """The ``(wnid/filename, reason)`` pairs a skipping dataset recorded, one per image, sorted."""
    path = Path(path)
    if not path.exists():
        return []
    rows: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, _, reason = line.partition("\t")
        rows.setdefault(key, reason)
    return sorted(rows.items())
