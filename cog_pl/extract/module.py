"""``FeatureExtractor``: a frozen backbone as a LightningModule whose ``predict_step`` yields features."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cog_pl.data.transforms import TransformConfig, protocol_transform
from cog_pl.extract.writer import FeatureStoreWriter
from cog_pl.features.store import make_meta
from cog_pl.models import build_backbone
from cog_pl.models.build import Backbone, check_input_size
from cog_pl.models.features import token_layout, with_feature
from cog_pl.models.files import EXTRACT_OPTIONS, resolve_checkpoint
from cog_pl.models.label import check_label, check_paper_name, model_label
from cog_pl.models.module import BackboneModule
from cog_pl.models.transform import resolve_transform


class FeatureExtractor(BackboneModule):
    """Penultimate-layer features (or the layer the registry names) of a frozen backbone.

    Args:
        model: a backbone name of :func:`~cog_pl.models.list_backbones` (a paper model such as ``resnet50`` or
            ``dino``, ``efficientnet_lite0``, one of :func:`~cog_pl.models.register_backbone`), ``timm:<name>``,
            ``torchvision:<name>``, ``external:<registered name>`` or ``external:<module>:<function>`` (a builder
            imported by its path); or your own ``nn.Module`` (or a callable) mapping normalised images to features,
            used with its weights as they are (from a config: ``class_path`` of the module). Frozen and put in eval
            mode for extraction.
        checkpoint: the weights file (the authors' layout for paper models); when omitted, a paper model's file in
            the models dir (``cog-pl models download``; :func:`~cog_pl.models.files.resolve_checkpoint`), and a
            network that needs weights and has none is refused unless ``random_weights``.
        prefix: override the checkpoint's key prefix (a Lightning checkpoint of your LightningModule: the attribute
            holding the backbone, e.g. ``"backbone."``).
        key_map: regex -> replacement applied to the checkpoint's keys.
        in_order: map checkpoint tensors by position instead of by name.
        trust_checkpoint: read a checkpoint that safe loading refuses (a TorchScript archive, a ``dill`` pickle):
            its code runs. Recorded in every store made.
        channels_last: run convolutions in NHWC memory format (faster on GPUs with tensor cores).
        write_stores: add the :class:`FeatureStoreWriter` callback to the Trainer (``trainer.predict`` writes the
            stores); False to use ``predict_step``'s features yourself.
        name: the label the stores are filed under (``features/<name>/``) and rows and reports show; default:
            the paper name for a paper model's published file, ``<name>@<checkpoint stem>`` for other weights of a
            paper model's network, ``<name>@random`` for random weights, the class name (lower case) of your own
            module (:mod:`cog_pl.models.label`).
        random_weights: initialise a network that needs weights at random (a fixed seed) instead of refusing it;
            its label says so (``resnet50@random``) and its stores' meta.json records ``weights: random``.
        transform: the input pipeline (anything :func:`~cog_pl.models.transform.resolve_transform` takes: an image
            size, a dict, a :class:`~cog_pl.data.transforms.TransformConfig`); default: the model's own (the
            protocol's 224 px for a module of yours, timm's configured input for ``timm:<name>``). The
            :class:`ExtractionDataModule` takes it from here. A network that takes its own input size only (a timm
            ViT of fixed position embeddings, :attr:`~cog_pl.models.build.Backbone.fixed_input`) refuses another.
        feature: a feature definition by name (:mod:`cog_pl.models.definitions`: ``cls``, ``cls_last4``,
            ``patch_mean``, ``cls_last4+patch_mean``, ``mean_last6``, ``tokens2x2``, ``tokens_full``, ...) instead of
            the paper's feature (None, the default); recorded in every store (``feature``, ``definition``). A token
            definition makes token stores (``[N, T, D]``, meta ``tokens`` and ``token_layout``).

    Mixed precision comes from the Trainer (``precision="bf16-mixed"`` or ``"16-mixed"``). ``trainer.predict``
    returns nothing: the features go into the stores (:class:`FeatureStoreWriter`), not into memory.

    Example:
        >>> import lightning as L
        >>> from cog_pl import ExtractionDataModule, FeatureExtractor
        >>> model = FeatureExtractor("resnet50", checkpoint="resnet50-19c8e357.pth")  # doctest: +SKIP
        >>> data = ExtractionDataModule(out="features", in1k_root="/data/in1k",
        ...                             in21k_root="/data/in21k")  # doctest: +SKIP
        >>> L.Trainer(precision="bf16-mixed").predict(model, data)  # doctest: +SKIP
    """

    def __init__(self, model: str | nn.Module = "resnet50", checkpoint: str | None = None, prefix: str | None = None,
                 key_map: dict[str, str] | None = None, in_order: bool = False, channels_last: bool = False,
                 write_stores: bool = True, trust_checkpoint: bool = False, name: str | None = None,
                 transform: Any = None, random_weights: bool = False, feature: str | None = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=[] if isinstance(model, str) else ["model"])
        self._transform = None if transform is None else resolve_transform(transform)
        size = (self._transform or protocol_transform()).crop
        if name is not None:
            check_label(name, "--model.name")
            if not isinstance(model, str):  # a module of yours never takes a paper model's label
                check_paper_name(name, model, checkpoint, "--model.name")
        if isinstance(model, str):  # a refused model fails here, before a Trainer or a store exists
            checkpoint = resolve_checkpoint(model, checkpoint, random_weights, options=EXTRACT_OPTIONS)
            self._label = model_label(model, checkpoint, name, random_weights, "--model.name")
        backbone = _extractor_backbone(model, checkpoint, prefix, key_map, in_order, trust_checkpoint, name, size,
                                       self._transform, random_weights, feature)
        self.set_backbone(backbone, channels_last)
        if not isinstance(model, str):
            self._label = self.backbone.spec.name
            self.hparams["model"] = self.backbone.spec.arch  # what the module was, for the checkpoint's record

    @property
    def model_name(self) -> str:
        """The label the stores are filed under (:mod:`cog_pl.models.label`)."""
        return self._label

    @property
    def transform_config(self) -> TransformConfig:
        """The input pipeline: ``transform`` when given, else the backbone's."""
        return self._transform or self.backbone.transform_config

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.features(images)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> dict:
        images = batch["image"]
        features = self(images).float() if len(images) else images.new_zeros(0, *self.feature_shape)
        out = {"features": features, "label": batch["label"], "index": batch["index"]}
        if "skipped" in batch:  # unreadable images (on_error="skip"): the writer records their rows as missing
            out["skipped"] = batch["skipped"]
        return out

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """One image's features: ``(D,)``, or ``(T, D)`` for a token definition (at the extractor's input size)."""
        layout = self.token_layout()
        return (self.feature_dim,) if layout is None else (_count(layout), self.feature_dim)

    def token_layout(self, transform: TransformConfig | None = None) -> dict[str, Any] | None:
        """A token definition's ``{"cls": 1, "grid": [h, w]}`` at ``transform``'s crop (default: the extractor's);
        None for a vector feature."""
        return token_layout(self.backbone.model, (transform or self.transform_config).crop, self.backbone.spec.name)

    def on_predict_start(self) -> None:
        self.net.eval()

    def configure_callbacks(self) -> list:
        return [FeatureStoreWriter()] if self.hparams.write_stores else []

    def store_meta(self, precision: str | None = None, transform: TransformConfig | None = None) -> dict[str, Any]:
        """What every feature store made by this extractor records about the model: a store meta
        (:func:`~cog_pl.features.store.make_meta`), asked once per extraction by the datamodule's plan. Its definition
        and transform are of the transform the images are read with, whoever was given it: ``transform``, else the
        attached datamodule's (an :class:`~cog_pl.extract.datamodule.ExtractionDataModule` given one of its own), else
        this extractor's."""
        transform = transform or self._datamodule_transform() or self.transform_config
        return _model_meta(self.backbone, self.model_name, transform,
                           precision or (str(self.trainer.precision) if self._trainer is not None else None))

    def _datamodule_transform(self) -> TransformConfig | None:
        """The transform of the datamodule the Trainer runs this extractor with, where it has one."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        try:
            found = getattr(datamodule, "transform_config", None)
        except ValueError:  # an ExtractionDataModule of transform "auto" that has nothing to take it from yet
            return None
        return found if isinstance(found, TransformConfig) else None


def _extractor_backbone(model: str | nn.Module, checkpoint: str | None, prefix: str | None,
                        key_map: dict[str, str] | None, in_order: bool, trust_checkpoint: bool, name: str | None,
                        size: int, transform: TransformConfig | None, random_weights: bool, feature: str | None,
                        read_weights: bool = True) -> Backbone:
    """The backbone of a :class:`FeatureExtractor` (``read_weights``: :func:`~cog_pl.models.build_backbone`'s)."""
    backbone = build_backbone(model, checkpoint, prefix, key_map, in_order, trust_checkpoint,
                              label=None if isinstance(model, str) else name, image_size=size,
                              random_weights=random_weights, read_weights=read_weights)
    if transform is not None:  # a network of one input size refuses another before any image is read
        check_input_size(backbone, transform.crop)
    if feature is not None:
        backbone = with_feature(backbone, feature, (transform or backbone.transform_config).crop)
    return backbone


def _model_meta(backbone: Backbone, label: str, transform: TransformConfig, precision: str | None) -> dict[str, Any]:
    """The model half of a store's meta: what :meth:`FeatureExtractor.store_meta` records."""
    spec = backbone.spec
    check_input_size(backbone, transform.crop)
    layout = token_layout(backbone.model, transform.crop, spec.name)
    tokens = {} if layout is None else {"tokens": _count(layout), "token_layout": layout}
    return make_meta(**tokens, model=label, arch=spec.arch, feature=spec.feature,
                     definition=spec.definition(transform), weights=backbone.weights,
                     weights_sha256=backbone.weights_sha256, trusted_checkpoint=backbone.trusted,
                     transform=transform.as_record(), precision=precision)


def planned_store_meta(model: str, checkpoint: str, *, prefix: str | None = None,
                       key_map: dict[str, str] | None = None, in_order: bool = False, trust_checkpoint: bool = False,
                       name: str | None = None, transform: Any = None, feature: str | None = None,
                       label: str | None = None, precision: str | None = None
                       ) -> tuple[dict[str, Any], TransformConfig, int]:
    """The store meta ``FeatureExtractor(model, checkpoint, ...)`` would record under a Trainer of ``precision``,
    the transform it reads images with and its feature size, without reading the checkpoint's tensors: the network
    built on the meta device, the weights known by the file's digest (:func:`~cog_pl.models.build_backbone`'s
    ``read_weights=False``). What decides that the stores it would make exist (``cog-pl run`` skips the load
    then); never the weights of features. Its ``trusted_checkpoint`` is ``trust_checkpoint``: a file that records
    its own trusted reading (``cog-pl models convert``) differs from a store of it, and the caller loads.
    ``label``: the stores' label when the caller has it (:func:`~cog_pl.models.label.model_label`, which may read
    the file's digest once more)."""
    given = None if transform is None else resolve_transform(transform)
    size = (given or protocol_transform()).crop
    backbone = _extractor_backbone(model, checkpoint, prefix, key_map, in_order, trust_checkpoint, name, size, given,
                                   False, feature, read_weights=False)
    used = given or backbone.transform_config
    label = label or model_label(model, checkpoint, name, False)
    return _model_meta(backbone, label, used, precision), used, int(backbone.spec.feature_dim)


def _count(layout: dict[str, Any]) -> int:
    """T of a token layout: the class token and the grid's cells."""
    return int(layout["cls"]) + int(layout["grid"][0]) * int(layout["grid"][1])
