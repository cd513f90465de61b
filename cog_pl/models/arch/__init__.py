"""Architectures of the paper's models that neither timm nor torchvision provide (``cog:<name>``), and the demo's
CNN; the backbone table's entries carry their builders (:mod:`cog_pl.models.zoo`)."""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "build_t2t_vit_t_14": ".t2t_vit",
    "build_nat_m4": ".nat",
    "build_efficientnet_b1": ".pycls_effnet",
    "build_efficientnet_b4": ".pycls_effnet",
    "build_simclr_v2_resnet50": ".tf_resnet",
    "build_byol_resnet50": ".tf_resnet",
    "build_clip_resnet50": ".clip_resnet",
    "DemoCNN": ".demo_cnn",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
