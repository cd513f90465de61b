"""The device side of the decode paths: a loader batch to normalised float32 images on the extraction's device.

:class:`BatchDecoder` is what :meth:`ExtractionDataModule.transfer_batch_to_device
<cog_pl.extract.datamodule.ExtractionDataModule.transfer_batch_to_device>` calls for every batch. Pixels (``uint8``
crops from the workers) are copied without blocking (the loader pins them) and normalised on the device, a quarter
of float32's bytes over the bus. Encoded rows (``--decode gpu``) are decoded as one batch by
``torchvision.io.decode_jpeg(list, device=...)`` (nvJPEG's batched decoder on CUDA; the same function on the CPU
device), then resized, cropped and normalised there. On CUDA this runs on a side stream that the compute stream
waits on, so decoding batch k+1 overlaps the backbone on batch k (nothing here synchronises the host). A batch the
device decoder refuses is decoded image by image, and an image it still refuses goes through the CPU path
(``fallback``); every fallback is counted and named in the log, and :meth:`BatchDecoder.summary` totals them.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import warnings
from collections.abc import Callable
from typing import Any

import torch

from cog_pl.data.transforms import TransformConfig, normalize_images, tensor_resize_crop

log = logging.getLogger(__name__)


class BatchDecoder:
    """Turns loader batches into ``{"image": float32 [B,3,S,S] on device, "label", "index", ...}``.

    ``cfg``: the transform the images are read with. ``fallback(index, dataloader_idx) -> (row, where)``: the CPU
    path of one dataset row and its location, for images the device decoder refuses (the row is the dataset's:
    an unreadable image raises or comes back skipped, as its ``on_error`` says).
    """

    def __init__(self, cfg: TransformConfig,
                 fallback: Callable[[int, int], tuple[dict[str, Any] | None, str]] | None = None) -> None:
        self.cfg, self.fallback = cfg, fallback
        self.images = 0
        self.on_device = 0
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def __call__(self, batch: dict[str, Any], device: torch.device, dataloader_idx: int = 0) -> dict[str, Any]:
        device = torch.device(device)
        stream = self._stream(device)
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            out = self._decode(batch, device, dataloader_idx)
        if stream is not None:  # the compute stream waits for the decode; the allocator learns who uses the tensors
            torch.cuda.current_stream(device).wait_stream(stream)
            for value in out.values():
                if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                    value.record_stream(torch.cuda.current_stream(device))
        return out

    def _stream(self, device: torch.device) -> torch.cuda.Stream | None:
        if device.type != "cuda":
            return None
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        return self._streams[device]

    def _decode(self, batch: dict[str, Any], device: torch.device, dataloader_idx: int) -> dict[str, Any]:
        pixels, labels, index = [batch["image"]], [batch["label"]], [batch["index"]]
        skipped = batch.get("skipped")
        for path, reason in zip(*(batch.get("fallback") or {"path": [], "reason": []}).values()):
            self._fell(path, reason)
        if batch.get("encoded"):
            decoded, lost = self._device_decode(batch["encoded"], device)
            keep = [i for i in range(len(decoded)) if decoded[i] is not None]
            if keep:
                pixels.insert(0, torch.stack([tensor_resize_crop(decoded[i], self.cfg) for i in keep]))
                labels.insert(0, batch["encoded_label"][keep])
                index.insert(0, batch["encoded_index"][keep])
                self.on_device += len(keep)
            for i in lost:  # the device decoder refused it: the CPU path decides
                row, where = self.fallback(int(batch["encoded_index"][i]), dataloader_idx)
                self._fell(where, "refused by the device decoder")
                if row is not None and "image" in row:
                    pixels.append(row["image"][None])
                    labels.append(torch.tensor([row["label"]]))
                    index.append(torch.tensor([row["index"]]))
                elif row is not None:
                    skipped = _add_skipped(skipped, row)
        pixels = [p for p in pixels if p.numel()]
        images = torch.cat([p.to(device, non_blocking=True) for p in pixels]) if pixels else None
        out = {k: v for k, v in batch.items() if not k.startswith("encoded") and k != "fallback"}
        out["label"], out["index"] = torch.cat(labels).to(device), torch.cat(index).to(device)
        out["image"] = (normalize_images(images, self.cfg) if images is not None
                        else torch.empty(0, 3, self.cfg.crop, self.cfg.crop, device=device))
        if skipped is not None:
            out["skipped"] = skipped
        self.images += len(out["index"])
        return out

    def _device_decode(self, encoded: list[torch.Tensor], device: torch.device
                       ) -> tuple[list[torch.Tensor | None], list[int]]:
        """The batch decoded on ``device`` in one call; when the decoder refuses the batch, image by image. Returns
        the images (None where refused) and the positions refused."""
        from torchvision.io import ImageReadMode, decode_jpeg

        with warnings.catch_warnings():  # torchvision 0.29 deprecates its decoders in favour of torchcodec
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                return list(decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)), []
            except RuntimeError as err:
                log.info("the device decoder refused a batch (%s); decoding its %d images one by one",
                         " ".join(str(err).split())[:200], len(encoded))
            images: list[torch.Tensor | None] = []
            for data in encoded:
                try:
                    images.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
                except RuntimeError:
                    images.append(None)
        return images, [i for i, image in enumerate(images) if image is None]

    def _fell(self, path: str, reason: str) -> None:
        self.fallbacks[reason] += 1
        log.info("decoded on the CPU, not the device (%s): %s", reason, path)

    def summary(self) -> str:
        """One line: images decoded, on the device, and the fallbacks by reason."""
        fell = sum(self.fallbacks.values())
        reasons = ", ".join(f"{n} {r}" for r, n in self.fallbacks.most_common())
        return (f"{self.images} images: {self.on_device} decoded on the device, {fell} on the CPU"
                + (f" ({reasons})" if reasons else ""))


def _add_skipped(skipped: dict[str, Any] | None, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (a skipped image, as the dataset records it) added to a batch's ``skipped`` record."""
    skipped = skipped or {"index": torch.empty(0, dtype=torch.long), "label": torch.empty(0, dtype=torch.long),
                          "path": [], "error": []}
    return {"index": torch.cat([skipped["index"], torch.tensor([row["skipped"]])]),
            "label": torch.cat([skipped["label"], torch.tensor([row["label"]])]),
            "path": [*skipped["path"], row["path"]], "error": [*skipped["error"], row["error"]]}

