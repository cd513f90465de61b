"""Image DataModules: IN-1K (``train/`` and ``val/``) and the CoG levels (IN-21K), read in place.

Batches are ``{"image": [B,3,S,S], "label": [B], "index": [B]}`` with ``index`` the dataset row. The
``predict`` loaders serve feature extraction (``predict_split``: ``"train"`` or ``"test"``, no shuffling);
under DDP Lightning shards them with a DistributedSampler, and the row index places each feature.
With ``cache_images``, each split is decoded once, at the ``setup`` of the first stage that reads it, and served from
memory (:class:`DecodedImages`).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import lightning as L
from torch.utils.data import DataLoader

from cog_pl import resources
from cog_pl.benchmark import Benchmark, load_benchmark
from cog_pl.data.imagenet import DecodedImages, ImageDataset, check_tolerance, collate_images, skip_budget
from cog_pl.data.sources import ImageSource, get_source, open_source, open_split_source
from cog_pl.data.splits import LevelSplit, build_split, check_split, installed_split_path, load_split
from cog_pl.data.streamed import StreamedImages
from cog_pl.data.transforms import TransformConfig, build_transform
from cog_pl.defaults import NUM_WORKERS
from cog_pl.device import loader_workers
from cog_pl.errors import CogError, MissingFileError
from cog_pl.models.transform import resolve_transform
from cog_pl.protocol import DOMAIN_OF_LEVEL, LEVEL_OF_DOMAIN, SPLITS, FeatureProtocol

log = logging.getLogger(__name__)


class ImageDataModule(L.LightningDataModule):
    """Shared loaders; subclasses define :meth:`_rows` (``(source, samples, labels)`` per split) and ``classes``.

    ``benchmark``: a benchmark file (:mod:`cog_pl.benchmark`) giving the concepts and test images; None = official.
    ``cache_images``: decode each split once at ``setup`` (with ``num_workers`` workers) and serve it from memory,
    for small datasets read for many epochs (fine-tuning on the demo); the loaders then run in the main process.
    ``source``: how the images are stored, a name of :func:`~cog_pl.data.sources.list_sources` or ``"auto"`` (detected
    from the root). ``allow_missing``: how many images of a split may be absent from the source although the split
    lists them (the CoG split, or the devkit's val labels), below 1 a fraction of the split, else a count
    (:func:`~cog_pl.data.imagenet.skip_budget`); 0 (the default) refuses any. ``num_workers="auto"`` (the default)
    takes the cores this process may run on, shared by the Trainer's processes on the node
    (:func:`~cog_pl.device.loader_workers`); ``pin_memory=None`` (the default) pins batches only for a CUDA device.
    """

    domain: str = ""

    def __init__(self, transform: str | TransformConfig | None = "protocol", batch_size: int = 128,
                 num_workers: int | str = NUM_WORKERS, on_error: str = "fail", error_log: str | None = None,
                 shuffle_train: bool = True, predict_split: str = "test", pin_memory: bool | None = None,
                 cache_dir: str | None = None, benchmark: str | None = None, cache_images: bool = False,
                 source: str = "auto", allow_missing: float = 0) -> None:
        super().__init__()
        check_tolerance(allow_missing, "allow_missing")
        self.allow_missing = allow_missing
        self.benchmark = benchmark
        self._definition: Benchmark | None = None
        if predict_split not in SPLITS:
            raise CogError(f"predict_split={predict_split!r}; expected train or test")
        self.transform_config = resolve_transform(transform)
        if num_workers != "auto" and not (isinstance(num_workers, int) and num_workers >= 0):
            raise CogError(f"num_workers={num_workers!r}; expected auto or a count >= 0")
        self.batch_size, self._num_workers, self._pin_memory = batch_size, num_workers, pin_memory
        self.on_error, self.error_log, self.cache_dir = on_error, error_log, cache_dir
        self.shuffle_train, self.predict_split = shuffle_train, predict_split
        self.cache_images, self.source_kind = cache_images, source
        if source != "auto":
            get_source(source)  # an unknown name is refused now, listing the known ones
        self.datasets: dict[str, ImageDataset | DecodedImages] = {}

    @property
    def num_workers(self) -> int:
        """Loader workers: the count given, or for ``"auto"`` this process's share of its cores."""
        if self._num_workers != "auto":
            return self._num_workers
        trainer = self.trainer
        return loader_workers(trainer.num_devices if trainer is not None else 1)

    @property
    def pin_memory(self) -> bool:
        """Pinned batches: as given, or (``None``) only when the Trainer runs on a CUDA device."""
        if self._pin_memory is not None:
            return self._pin_memory
        trainer = self.trainer
        return trainer is not None and trainer.strategy.root_device.type == "cuda"

    def open_source(self, root: str) -> ImageSource:
        """``root`` opened as this datamodule's kind of source."""
        return open_source(root, self.source_kind, self.cache_dir)

    @property
    def definition(self) -> Benchmark:
        """The benchmark definition in use (read once)."""
        if self._definition is None:
            self._definition = load_benchmark(self.benchmark)
        return self._definition

    @property
    def custom(self) -> Benchmark | None:
        """The custom benchmark definition, or None for the official benchmark."""
        return None if self.benchmark is None else self.definition

    @property
    def classes(self) -> tuple[str, ...]:
        raise NotImplementedError

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def _rows(self, split: str) -> tuple[ImageSource, list[tuple[str, str]], list[int]]:
        raise NotImplementedError

    def stage_splits(self, stage: str | None) -> tuple[str, ...]:
        """The splits a stage reads: ``fit`` the train split, ``test`` the test split, ``predict`` the
        ``predict_split``; any other stage (None included) both."""
        return {"fit": ("train",), "test": ("test",), "predict": (self.predict_split,)}.get(stage, SPLITS)

    def setup(self, stage: str | None = None) -> None:
        """Build (with ``cache_images``: decode) the datasets of the splits ``stage`` reads, each once."""
        for split in self.stage_splits(stage):
            self.dataset(split)

    def dataset(self, split: str) -> ImageDataset | DecodedImages:
        """The dataset of one split, built (and decoded, with ``cache_images``) on first use."""
        if split not in self.datasets:
            source, samples, labels = self._rows(split)
            dataset = ImageDataset(source, samples, labels, build_transform(self.transform_config), self.on_error,
                                   self.error_log)
            if not source.random_access:  # gzip: read in one pass, rows placed by index
                dataset = StreamedImages(dataset, batch_size=self.batch_size)
            if self.cache_images:
                dataset = DecodedImages(dataset, max(self.batch_size, 256), self.num_workers)
                log.info("%s %s: decoded into memory (%.1f MiB)", self.domain, split, dataset.nbytes / 2**20)
            self.datasets[split] = dataset
            log.info("%s %s: %d images of %d classes", self.domain, split, len(samples), self.num_classes)
        return self.datasets[split]

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        streamed = isinstance(self.dataset(split), StreamedImages)  # read in storage order, never shuffled
        return DataLoader(self.dataset(split), batch_size=self.batch_size, shuffle=shuffle and not streamed,
                          num_workers=0 if self.cache_images else self.num_workers, collate_fn=collate_images,
                          pin_memory=self.pin_memory,
                          persistent_workers=False)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.shuffle_train)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_split, False)

    def store_meta(self, split: str) -> dict[str, Any]:
        """The data half of a feature store's meta for ``split``: domain, classes, transform, level file hash."""
        meta = {"domain": self.domain, "split": split, "classes": list(self.classes),
                "num_classes": self.num_classes, "transform": self.transform_config.as_record(),
                "level_file_sha256": resources.level_file_sha256()}
        if self.benchmark is not None:  # a custom benchmark's file plays the level file's part
            meta.update(benchmark=self.definition.name, level_file_sha256=self.definition.sha256())
        return meta


def _tolerate(what: str, missing: list[str], rows: int, allow: float) -> None:
    """Refuse a split whose source lacks ``missing`` images of its ``rows`` beyond ``allow`` (``allow_missing``),
    naming them; within it, warn."""
    if not missing:
        return
    names = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
    cap = skip_budget(rows, allow) if allow else 0
    if len(missing) > cap:
        raise MissingFileError(f"{what}: {len(missing)} image(s) the split lists are not in the source: {names} "
                               f"(allow_missing={allow} tolerates {cap}; `cog-pl data check` lists them)")
    log.warning("%s: %d image(s) the split lists are not in the source, left out (allow_missing=%s): %s", what,
                len(missing), allow, names)


def _renamed_root(given: str | None, root: str | None, new: str, cls: str) -> str:
    """The image root of a datamodule given as ``new`` (``in1k_root``, ``in21k_root``), or as ``root``, its former
    name, accepted for one release with one warning naming the new one."""
    if root is not None:
        if given is not None:
            raise CogError(f"{cls}: give {new} (root is its former name), not both")
        warnings.warn(f"{cls}(root=...) is deprecated, use {new}= (--data.{new}); root goes in cog_pl 0.2",
                      FutureWarning, stacklevel=3)
        given = root
    if given is None:
        raise CogError(f"{cls} needs {new}")
    return given


def _require(source: ImageSource, wnids: list[str] | tuple[str, ...], what: str) -> None:
    missing = [w for w in wnids if not source.has(w)]
    if missing:
        raise MissingFileError(f"{len(missing)} {what} synset(s) missing under {source.root}: "
                               + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))


class ImageNetDataModule(ImageDataModule):
    """IN-1K: ``<in1k_root>/train/<wnid>/`` (or ``<wnid>.tar``) for train, ``<in1k_root>/val/<wnid>/`` as test.

    Args:
        in1k_root: IN-1K's image root, in any layout :func:`~cog_pl.data.sources.open_split_source` reads.
        root: the former name of ``in1k_root``, accepted until cog_pl 0.2 (a ``FutureWarning``).
        **kwargs: the loaders' options of :class:`ImageDataModule` (``transform``, ``batch_size``, ...).

    Example:
        >>> data = ImageNetDataModule("/data/in1k", transform="resnet50", batch_size=128)  # doctest: +SKIP
        >>> data.setup("fit")  # doctest: +SKIP
    """

    domain = "in1k"

    def __init__(self, in1k_root: str | None = None, root: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.save_hyperparameters()
        self.root = _renamed_root(in1k_root, root, "in1k_root", "ImageNetDataModule")
        self._sources: dict[str, ImageSource] = {}

    @property
    def classes(self) -> tuple[str, ...]:
        return self.definition.in1k

    def split_source(self, split: str) -> ImageSource:
        """The source of IN-1K's ``split`` (train, or val as test), whichever layout holds it."""
        if split not in self._sources:
            self._sources[split] = open_split_source(self.root, split, self.source_kind, self.cache_dir)
        return self._sources[split]

    def _rows(self, split: str) -> tuple[ImageSource, list[tuple[str, str]], list[int]]:
        source = self.split_source(split)
        _require(source, self.classes, f"IN-1K {'train' if split == 'train' else 'val'}")
        samples, labels = [], []
        for label, wnid in enumerate(self.classes):
            names = source.list(wnid)
            samples += [(wnid, n) for n in names]
            labels += [label] * len(names)
        absent = [f"{w}/{n}" for w in self.classes for n in source.absent(w)]
        _tolerate(f"in1k {split} under {source.root}", absent, len(samples) + len(absent), self.allow_missing)
        return source, samples, labels

    def store_meta(self, split: str) -> dict[str, Any]:
        return {**super().store_meta(split), "source": self.split_source(split).record(self.classes)}


class CoGLevelDataModule(ImageDataModule):
    """One CoG level over an IN-21K root (tars or folders): the official test split and the documented train split.

    The split comes from ``split_file`` when given, else from the one installed by ``cog-pl data split import``
    (official benchmark only), else it is built from the images under ``in21k_root`` (:mod:`cog_pl.data.splits`).
    A custom ``benchmark`` gives the concepts, the test images and, unless ``protocol`` is given, the image counts.

    Args:
        level: ``L1`` .. ``L5`` or ``cog_l1`` .. ``cog_l5``.
        in21k_root: IN-21K's image root (a folder or a tar per synset, webdataset shards, whole tars).
        split_file: a split file (``cog-pl data split export``) instead of the installed or built split.
        split_seed: the seed of the train selection rule when the split is built.
        protocol: the image counts of a built split; default: the benchmark's.
        root: the former name of ``in21k_root``, accepted until cog_pl 0.2 (a ``FutureWarning``).
        **kwargs: the loaders' options of :class:`ImageDataModule` (``transform``, ``batch_size``, ...).

    Example:
        >>> data = CoGLevelDataModule("cog_l3", "/data/in21k", transform="resnet50")  # doctest: +SKIP
        >>> len(data.classes)  # doctest: +SKIP
        1000
    """

    def __init__(self, level: str, in21k_root: str | None = None, split_file: str | None = None,
                 split_seed: int = 0, protocol: FeatureProtocol | None = None, root: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.save_hyperparameters(ignore=["protocol"])
        self.level = LEVEL_OF_DOMAIN.get(level, level)
        if self.level not in resources.LEVELS:
            raise CogError(f"unknown level {level!r}; expected L1..L5 or cog_l1..cog_l5")
        self.domain = DOMAIN_OF_LEVEL[self.level]
        self.root = _renamed_root(in21k_root, root, "in21k_root", "CoGLevelDataModule")
        self.split_file, self.split_seed = split_file, split_seed
        self.protocol = protocol or (self.custom.feature_protocol() if self.custom else FeatureProtocol())
        self._source: ImageSource | None = None
        self._split: LevelSplit | None = None

    @property
    def classes(self) -> tuple[str, ...]:
        return self.definition.classes(self.level)

    @property
    def source(self) -> ImageSource:
        if self._source is None:
            self._source = self.open_source(self.root)
        return self._source

    @property
    def split(self) -> LevelSplit:
        """The level's split, verified against the images on disk."""
        if self._split is None:
            installed = installed_split_path(self.level, self.cache_dir)
            if self.benchmark is not None or not installed.exists():
                installed = None
            path = self.split_file or installed
            _require(self.source, self.classes, f"{self.domain}")
            if path is not None:
                split = load_split(path, self.level, self.custom)
                log.info("%s: split %s from %s", self.domain, split.sha256()[:12], path)
            else:
                split = build_split(self.level, self.source, self.split_seed, self.protocol, self.custom)
                log.info("%s: split %s built from %s", self.domain, split.sha256()[:12], self.root)
            split = self._present(split)
            issues = check_split(split, self.protocol, self.source)
            missing = [i for i in issues if "missing" in i.problem]
            for issue in issues[:10]:
                if issue not in missing:
                    log.warning("%s: %s: %s (outside the protocol)", self.domain, issue.wnid, issue.problem)
            if missing:
                raise MissingFileError(f"{self.domain} under {self.root}: " + "; ".join(
                    f"{i.wnid}: {i.problem}" for i in missing[:10]) + (" ..." if len(missing) > 10 else ""))
            self._split = split
        return self._split

    def _present(self, split: LevelSplit) -> LevelSplit:
        """``split`` less the images the source lacks, when ``allow_missing`` tolerates them (the result's hash, in
        the stores' identity, then differs); else ``split`` unchanged (the check refuses it)."""
        present = {w: set(self.source.list(w)) for w in split.classes if self.source.has(w)}
        if not self.allow_missing or len(present) < len(split.classes):
            return split
        keep = {part: {w: tuple(n for n in names if n in present[w]) for w, names in table.items()}
                for part, table in (("train", split.train), ("test", split.test))}
        absent = [f"{w}/{n}" for part, table in (("train", split.train), ("test", split.test))
                  for w, names in table.items() for n in names if n not in present[w]]
        total = sum(len(v) for table in (split.train, split.test) for v in table.values())
        _tolerate(f"{self.domain} under {self.root}", absent, total, self.allow_missing)
        if not absent:
            return split
        return LevelSplit(split.level, keep["train"], keep["test"], split.seed, split.max_train)

    def _rows(self, split: str) -> tuple[ImageSource, list[tuple[str, str]], list[int]]:
        samples, labels = self.split.samples(split)
        return self.source, samples, labels

    def store_meta(self, split: str) -> dict[str, Any]:
        return {**super().store_meta(split), "split_sha256": self.split.sha256(),
                "source": self.source.record(self.classes)}
