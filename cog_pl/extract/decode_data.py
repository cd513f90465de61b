"""The loader side of the decode paths: the rows of an image dataset as ``uint8`` crops or encoded bytes.

:class:`PixelImages` serves the rows of an :class:`~cog_pl.data.imagenet.ImageDataset` (any
:class:`~cog_pl.data.sources.ImageSource`: folders, tars, shards, as long as ``read`` gives encoded bytes) by
``(wnid, filename)`` through one decode path (:mod:`cog_pl.extract.decode`). Every row keeps its dataset ``index``,
label and, when unreadable, the dataset's own handling (``on_error``: raise naming the file, or a ``skipped`` row):
an image any fast path cannot take goes through the PIL route, which decides. :func:`collate_pixels` batches them
for :class:`~cog_pl.extract.decode_device.BatchDecoder`.
"""

from __future__ import annotations

import copy
import functools
import logging
from typing import Any

import torch
from torch.utils.data import Dataset

from cog_pl.data.imagenet import ImageDataset, collate_images
from cog_pl.data.transforms import TransformConfig, pil_resize_crop, tensor_resize_crop
from cog_pl.extract.decode import decode_rgb, device_unsupported

log = logging.getLogger(__name__)


class PixelImages(Dataset):
    """Rows ``{"image": uint8 [3,S,S], "label", "index"}`` of ``images`` decoded by ``decode`` (``pil``, ``cpu`` or
    ``gpu``); with ``gpu`` a row the device can decode is ``{"encoded": uint8 [N], "label", "index"}`` and one it
    cannot is decoded here by the ``cpu`` path and carries ``"fallback"``: the reason."""

    def __init__(self, images: ImageDataset, cfg: TransformConfig, decode: str) -> None:
        if decode not in ("pil", "cpu", "gpu"):
            raise ValueError(f"decode={decode!r}: a resolved path (pil, cpu or gpu)")
        self.pil = copy.copy(images)  # the reference route, also the judge of unreadable images
        self.pil.transform = functools.partial(pil_resize_crop, cfg=cfg)
        self.cfg, self.decode = cfg, decode

    def __len__(self) -> int:
        return len(self.pil)

    def key(self, index: int) -> str:
        return self.pil.key(index)

    @property
    def source(self) -> Any:
        return self.pil.source

    @property
    def samples(self) -> list[tuple[str, str]]:
        return self.pil.samples

    @property
    def labels(self) -> list[int]:
        return self.pil.labels

    def __getitem__(self, index: int) -> dict[str, Any] | None:
        return self.item(index)

    def item(self, index: int, data: bytes | Exception | None = None) -> dict[str, Any] | None:
        """Row ``index``, read from the source or decoded from ``data`` when a stream brings it
        (:class:`~cog_pl.data.streamed.StreamedImages` takes this dataset as its base)."""
        if self.decode == "pil" or isinstance(data, Exception):
            return self.pil.item(index, data)
        if data is None:
            try:
                data = self.pil.source.read(*self.pil.samples[index])
            except Exception:  # the PIL route reads it again and names it
                return self.pil.item(index)
        reason = None
        if self.decode == "gpu":
            reason = device_unsupported(data)
            if reason is None:
                return {"encoded": torch.frombuffer(bytearray(data), dtype=torch.uint8),
                        "label": self.pil.labels[index], "index": index}
        row = self.cpu_row(index, data)
        if reason is not None and row is not None and "image" in row:
            row["fallback"] = (self.pil.source.where(*self.pil.samples[index]), reason)
        return row

    def cpu_row(self, index: int, data: bytes | None = None) -> dict[str, Any] | None:
        """Row ``index`` through the ``cpu`` path (``data``: its bytes, read when None); what torchvision cannot
        decode goes through PIL, which decodes it or handles it as unreadable (the dataset's ``on_error``)."""
        try:
            if data is None:
                data = self.pil.source.read(*self.pil.samples[index])
            image = tensor_resize_crop(decode_rgb(data), self.cfg)
        except Exception as err:  # PIL decides what is unreadable, as on the reference path
            log.debug("%s: torchvision cannot decode it (%s); PIL route", self.key(index), err)
            return self.pil.item(index, data)
        return {"image": image, "label": self.pil.labels[index], "index": index}

def collate_pixels(batch: list[dict[str, Any] | None]) -> dict[str, Any]:
    """:func:`~cog_pl.data.imagenet.collate_images` of the decoded rows, plus, when there are any, the encoded rows
    as ``"encoded"`` (a list of byte tensors) with ``"encoded_label"`` and ``"encoded_index"``, and the rows that
    fell back from the device as ``"fallback": {"path": [...], "reason": [...]}``."""
    encoded = [b for b in batch if b is not None and "encoded" in b]
    fell = [b["fallback"] for b in batch if b is not None and "fallback" in b]
    out = collate_images([None if b is None else {k: v for k, v in b.items() if k != "fallback"}
                          for b in batch if b is None or "encoded" not in b])
    if out["image"].numel() == 0:
        out["image"] = torch.empty(0, 3, 0, 0, dtype=torch.uint8)
    if fell:
        out["fallback"] = {"path": [p for p, _ in fell], "reason": [r for _, r in fell]}
    if encoded:
        out["encoded"] = [b["encoded"] for b in encoded]
        out["encoded_label"] = torch.tensor([b["label"] for b in encoded], dtype=torch.long)
        out["encoded_index"] = torch.tensor([b["index"] for b in encoded], dtype=torch.long)
    return out
