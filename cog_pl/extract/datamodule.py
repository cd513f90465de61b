"""``ExtractionDataModule``: every (domain, split) still to extract, one predict dataloader each.

Stores live at ``<out>/<model>/<domain>/<split>/``. A complete store (``meta.json`` present) is skipped and an
unfinished one resumed (only the rows whose done bit is 0 are loaded), each only when what made it (model, weights,
precision, transform, classes, level file and split hashes, dtype: :func:`~cog_pl.features.store.check_identity`)
equals this run's; otherwise extraction is refused, naming the difference, unless ``overwrite``, which extracts
every store again. The module decides none of this: at ``setup`` it asks :func:`~cog_pl.extract.stores.plan_extraction`
(:mod:`cog_pl.features.plan`) once, giving it datasets and their meta, and keeps the answer as ``plan``; its
``targets`` are the predict dataloaders, and tell the :class:`~cog_pl.extract.writer.FeatureStoreWriter` where each
dataloader's rows go.

Images reach the device as ``uint8`` crops (or encoded bytes with ``decode="gpu"``) and are decoded, normalised and
laid out there by :meth:`ExtractionDataModule.transfer_batch_to_device` (:mod:`cog_pl.extract.decode`: the decode
paths; the resolved one is part of every store's identity). ``num_workers="auto"`` takes the cores this process may
run on (:func:`loader_workers`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from cog_pl.data.imagenet import check_policy, check_tolerance
from cog_pl.data.streamed import StreamedImages
from cog_pl.data.transforms import TransformConfig
from cog_pl.defaults import MAX_SKIPPED, NUM_WORKERS
from cog_pl.device import loader_workers
from cog_pl.errors import CogError, MissingFileError
from cog_pl.extract.decode import check_decode, resolve_decode
from cog_pl.extract.decode_data import PixelImages, collate_pixels
from cog_pl.extract.decode_device import BatchDecoder
from cog_pl.extract.stores import ExtractionPlan, plan_extraction
from cog_pl.features.store import DTYPES
from cog_pl.protocol import DOMAINS, SPLITS, FeatureProtocol, check_domains

logger = logging.getLogger(__name__)


class ExtractionDataModule(L.LightningDataModule):
    """Predict loaders over the images of IN-1K and the CoG levels, for every store not yet complete.

    Args:
        out: root of the feature stores. model_name: the extractor's name (linked from the model by the CLI).
        in1k_root: IN-1K with ``train/`` and ``val/``. in21k_root: IN-21K, a folder or a tar per synset.
        domains: the domains to extract (all six by default).
        splits: the splits to extract (train and test by default).
        transform: ``"auto"`` (the default): the extractor's own (``FeatureExtractor.transform_config``, taken at
            ``setup`` from the Trainer's module; the CLI links it); or anything
            :func:`~cog_pl.models.transform.resolve_transform` takes (``"protocol"``, a model name, a size, a dict).
        benchmark: a benchmark file (:mod:`cog_pl.benchmark`) instead of the official concepts and test split.
        on_error: ``"fail"`` stops at the first unreadable image, naming it; ``"skip"`` records it as a missing row
            of its store (meta.json ``missing``, left out of the probes). max_skipped: with ``"skip"``, the most a
            split may skip before it fails (:func:`~cog_pl.data.imagenet.skip_budget`: below 1 a fraction of the
            split, else a count; 0.1 % by default).
        overwrite: extract every store again, replacing finished ones and discarding interrupted ones (needed when
            a store was made by other inputs, e.g. another checkpoint).
        dtype: the stores' feature dtype, ``float16`` (the protocol's) or ``float32`` (for features beyond float16's
            range, which are refused rather than stored as inf).
        in1k_source: how IN-1K's images are stored (:func:`~cog_pl.data.sources.list_sources`), or ``"auto"``:
            detected from the root. in21k_source: the same for IN-21K. allow_missing: images a split lists but the
            source lacks that are tolerated (left out, the split hash then says so); 0 refuses any
            (:class:`~cog_pl.datamodules.images.ImageDataModule`).
        decode: ``pil`` (the reference), ``cpu``, ``gpu`` or ``auto`` (:mod:`cog_pl.extract.decode`).
        num_workers: loader worker processes, or ``"auto"`` (:func:`loader_workers`); default
            :data:`cog_pl.defaults.NUM_WORKERS`.

    ``device`` (set by the caller, else the Trainer's root device, else the CPU) is where batches are decoded and what
    ``decode="auto"`` is resolved for.

    ``plan`` (:class:`~cog_pl.extract.stores.ExtractionPlan`, made at :meth:`setup`): every store's decision, with
    the model meta of the Trainer's extractor (``store_meta()``, asked once) that existing stores are checked on.
    """

    def __init__(self, out: str = "features", model_name: str = "model", in1k_root: str | None = None,
                 in21k_root: str | None = None, domains: Sequence[str] = DOMAINS, splits: Sequence[str] = SPLITS,
                 transform: Any = "auto", batch_size: int = FeatureProtocol().batch_size,
                 num_workers: int | str = NUM_WORKERS, on_error: str = "fail", max_skipped: float = MAX_SKIPPED,
                 cache_dir: str | None = None, split_file_dir: str | None = None,
                 benchmark: str | None = None, overwrite: bool = False, dtype: str = "float16",
                 in1k_source: str = "auto", in21k_source: str = "auto", allow_missing: float = 0,
                 decode: str = "pil") -> None:
        super().__init__()
        self.save_hyperparameters()
        check_decode(decode)
        if num_workers != "auto" and not (isinstance(num_workers, int) and num_workers >= 0):
            raise CogError(f"--num-workers {num_workers!r}; expected auto or a count >= 0")
        num_workers = loader_workers() if num_workers == "auto" else num_workers
        self.decode, self.device = decode, None
        self._decode_path: str | None = None
        self.decoder: BatchDecoder | None = None
        self.in1k_source, self.in21k_source, self.allow_missing = in1k_source, in21k_source, allow_missing
        check_domains(domains)
        check_policy(on_error, max_skipped)
        check_tolerance(allow_missing, "allow_missing")
        bad = [s for s in splits if s not in SPLITS]
        if bad:
            raise CogError(f"unknown split(s) {', '.join(bad)}; expected train and/or test")
        if dtype not in DTYPES:
            raise CogError(f"--data.dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        self.overwrite, self.dtype = overwrite, dtype
        self.out, self.model_name = Path(out), model_name
        self.in1k_root, self.in21k_root = in1k_root, in21k_root
        self.domains, self.splits = tuple(domains), tuple(splits)
        self.transform = transform
        self.batch_size, self.num_workers, self.on_error = batch_size, num_workers, on_error
        self.max_skipped = max_skipped
        self.cache_dir, self.split_file_dir = cache_dir, split_file_dir
        self.benchmark = benchmark
        self.plan: ExtractionPlan | None = None  # made at setup

    def store_path(self, domain: str, split: str) -> Path:
        return self.out / self.model_name / domain / split

    def datasets(self, domain: str, splits: Sequence[str] | None = None) -> dict[str, tuple[Dataset, dict[str, Any]]]:
        """The image datasets of one domain by split (``splits``, by default this module's), with the meta their
        stores record; only those splits are listed and read."""
        dm = self.image_module(domain)
        return {s: (dm.dataset(s), dm.store_meta(s)) for s in (self.splits if splits is None else splits)}

    def image_module(self, domain: str, need_root: bool = True) -> Any:
        """The image datamodule of one domain (its ``store_meta(split)`` is the data half of a store's meta);
        without ``need_root``, one whose root may be missing (for the meta that needs no image)."""
        from cog_pl.datamodules.images import CoGLevelDataModule, ImageNetDataModule

        common = {"transform": self.transform_config, "batch_size": self.batch_size, "num_workers": self.num_workers,
                  "on_error": self.on_error, "cache_dir": self.cache_dir, "benchmark": self.benchmark,
                  "allow_missing": self.allow_missing}
        if domain == "in1k":
            if not self.in1k_root and need_root:
                raise CogError("extracting in1k needs --data.in1k_root (a folder with train/ and val/)")
            dm = ImageNetDataModule(in1k_root=self.in1k_root or "", source=self.in1k_source, **common)
        else:
            if not self.in21k_root and need_root:
                raise CogError(f"extracting {domain} needs --data.in21k_root (a folder or tar per synset)")
            dm = CoGLevelDataModule(level=domain, in21k_root=self.in21k_root or "", split_file=self._split_file(domain),
                                    source=self.in21k_source, **common)
        return dm

    @property
    def transform_config(self) -> TransformConfig:
        """The transform images are read with: ``transform``, or for ``"auto"`` the extractor's (the Trainer's
        module's ``transform_config``)."""
        from cog_pl.models.transform import resolve_transform

        if self.transform != "auto":
            return resolve_transform(self.transform)
        module = self.trainer.lightning_module if self.trainer is not None else None
        found = getattr(module, "transform_config", None)
        if isinstance(found, TransformConfig):
            return found
        raise CogError("ExtractionDataModule: transform='auto' takes the extractor's transform, and no extractor is "
                       "attached; pass transform= (a model name, 'protocol', a size, a TransformConfig) or run it "
                       "with trainer.predict(FeatureExtractor(...), datamodule=...)")

    def _finished_meta(self, dm: Any, split: str) -> dict[str, Any]:
        """The data half of the meta a finished store is checked on: all of it (the split hash of a CoG level
        included, which lists the images) when the images are there; without them (stores kept, images gone: the
        store cannot be made again anyway) what needs no image: domain, classes, transform, level file, benchmark."""
        from cog_pl.datamodules.images import ImageDataModule

        if dm.root and Path(dm.root).exists():  # a folder, or a file some source reads (a whole tar)
            try:
                return dm.store_meta(split)
            except FileNotFoundError as err:
                reason = str(err)
        else:
            reason = f"no image root {dm.root!r}"
        logger.info("%s %s: images unavailable (%s); its finished store is checked on what needs none", dm.domain,
                    split, reason)
        return ImageDataModule.store_meta(dm, split)

    def _split_file(self, domain: str) -> str | None:
        if not self.split_file_dir:
            return None
        path = Path(self.split_file_dir) / f"{domain}.json"
        return str(path) if path.exists() else None

    def setup(self, stage: str | None = None) -> None:
        """Resolve ``transform="auto"`` and ask the plan (:func:`~cog_pl.extract.stores.plan_extraction`) once,
        with the model meta of the Trainer's extractor (none without one)."""
        self.transform = self.transform_config  # "auto" resolved once, before any store is checked
        module = self.trainer.lightning_module if self.trainer is not None else None
        try:
            self.plan = plan_extraction(self, module.store_meta() if hasattr(module, "store_meta") else {})
        except MissingFileError:
            self._hint_benchmark()
            raise

    def _hint_benchmark(self) -> None:
        """The official concepts are not in the roots and no benchmark file was given: when a benchmark file beside
        them names exactly what they hold (the demo's ``data/benchmark_eval.json``;
        :func:`~cog_pl.data.check.benchmark_of_data`), one line naming the option that takes it, and the images'
        size where the folder's data file records one that this extraction does not read them at."""
        from cog_pl.data.check import benchmark_of_data
        from cog_pl.data.roots import DATA_FILE, read_data_dir

        if self.benchmark is not None:
            return
        found = benchmark_of_data(("in1k" in self.domains and self.in1k_root) or None,
                                  (any(d != "in1k" for d in self.domains) and self.in21k_root) or None)
        if not found:
            return
        roots = " and ".join(r for r in (self.in1k_root, self.in21k_root) if r)
        if len(found) > 1:
            raise MissingFileError(f"{roots} hold the concepts of the benchmark files {', '.join(map(str, found))}, "
                                   "not the official ImageNet-CoG: pass the one to extract with --data.benchmark FILE")
        size = None
        if (found[0].parent / DATA_FILE).is_file():
            try:
                size = read_data_dir(found[0].parent).image_size
            except CogError:
                size = None
        crop = self.transform.crop if isinstance(self.transform, TransformConfig) else None
        also = (f" and --model.transform {size} (its images' size, which {found[0].parent / DATA_FILE} records)"
                if size is not None and size != crop else "")
        raise MissingFileError(f"{roots} hold the concepts of the benchmark file {found[0]}, not the official "
                               f"ImageNet-CoG: pass --data.benchmark {found[0]}{also}")

    def _device(self) -> torch.device:
        if self.device is not None:
            return torch.device(self.device)
        if self.trainer is not None:
            return self.trainer.strategy.root_device
        return torch.device("cpu")

    @property
    def decode_path(self) -> str:
        """The decode path this run reads images with (``decode`` resolved on the device)."""
        if self._decode_path is None:
            self._decode_path = resolve_decode(self.decode, self._device())
        return self._decode_path

    def predict_dataloader(self) -> list[DataLoader]:
        cfg, path, targets = self.transform_config, self.decode_path, self.plan.targets
        streamed = [isinstance(t.dataset, StreamedImages) for t in targets]
        self._pixels = [PixelImages(t.dataset.base if s else t.dataset, cfg, path) for t, s in zip(targets, streamed)]
        self.decoder = BatchDecoder(cfg, self._fallback)
        logger.info("decoding with the %s path on %s, %d loader workers", path, self._device(), self.num_workers)
        loaders = []
        for t, pixels, stream in zip(targets, self._pixels, streamed):
            left = t.rows_left
            if len(left) < t.rows:
                logger.info("resuming %s: %d of %d rows left", t.path, len(left), t.rows)
            rows = None if len(left) == t.rows else left.tolist()
            if stream:  # a source read in one pass: rows come in storage order, each with its index
                data = StreamedImages(pixels, t.dataset.rows if rows is None else rows, self.batch_size)
            else:
                data = pixels if rows is None else Subset(pixels, rows)
            loaders.append(DataLoader(data, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers,
                                      collate_fn=collate_pixels, persistent_workers=False,
                                      pin_memory=self._device().type == "cuda"))
        return loaders

    def _fallback(self, index: int, dataloader_idx: int) -> tuple[dict[str, Any] | None, str]:
        """A row the device decoder refused, through the CPU path, and where it is (for the log)."""
        pixels = self._pixels[dataloader_idx]
        return pixels.cpu_row(index), pixels.source.where(*pixels.samples[index])

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Decode (``gpu`` path), move and normalise a loader batch on ``device`` (:class:`BatchDecoder`)."""
        if self.decoder is None or not isinstance(batch, dict) or "index" not in batch:
            return super().transfer_batch_to_device(batch, device, dataloader_idx)
        return self.decoder(batch, device, dataloader_idx)

    def teardown(self, stage: str | None = None) -> None:
        if self.decoder is not None and self.decoder.images:
            logger.info("decode path %s: %s", self.decode_path, self.decoder.summary())

