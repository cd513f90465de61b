"""The embedded demo: a miniature ImageNet-CoG generated on the spot and a small backbone trained on its seen part.

``prepare(root)`` makes both (idempotent) and returns :class:`DemoAssets`: the IN-1K and IN-21K roots, the
benchmark file the demo evaluates (every domain with as many concepts, :mod:`cog_pl.demo.domains`), the checkpoints
of ``external:demo_cnn`` (supervised, the baseline) and ``external:demo_cnn_ssl`` (self-supervised, with
``ssl_epochs``), both entries of the backbone table (:data:`cog_pl.models.zoo.DEMO_MODELS`), and the transform to
use; with ``clip_epochs``, the tiny CLIP ``external:demo_clip`` (:mod:`cog_pl.demo.clip`, ``cog-pl demo --zeroshot``).
:func:`cog_pl.demo.run.run_demo` evaluates them and writes the report relative to the baseline.
:class:`DemoFineTune` is how the demo fine-tunes that backbone on each domain (paper App. C.2).
"""

from cog_pl.demo.backbone import MODEL_NAME, DemoCNN
from cog_pl.demo.clip import pretrain_demo_clip
from cog_pl.demo.finetune import DemoFineTune
from cog_pl.demo.prepare import DemoAssets, prepare
from cog_pl.demo.pretrain import pretrain_demo_backbone
from cog_pl.demo.synthetic import make_demo

__all__ = ["MODEL_NAME", "DemoAssets", "DemoCNN", "DemoFineTune", "make_demo", "prepare", "pretrain_demo_backbone",
           "pretrain_demo_clip"]
