"""How the demo fine-tunes its backbone on each domain (paper App. C.2 on the miniature benchmark).

One recipe, used by ``cog-pl demo --finetune`` (the ``finetune`` method's options,
:class:`~cog_pl.evaluate.finetune.FinetuneOptions`) and spelt out for ``cog-pl finetune fit/test`` in
``configs/finetune/demo.yaml`` (a test keeps the two equal). Tuned on the default
demo for speed and margin: 6 epochs on images decoded once and kept in memory, bf16 autocast where the machine has
native bf16, channels-last convolutions (the README gives its time).
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, fields
from typing import Any

from cog_pl.finetune.module import FineTuneClassifier


@dataclass(frozen=True)
class DemoFineTune:
    """The demo's fine-tuning recipe: the Trainer's and data's settings, then the module's."""

    epochs: int = 6
    batch_size: int = 128
    precision: str = "auto"  # bf16-mixed where bf16 is native (AMX / AVX512-BF16 CPUs, recent GPUs), else 32-true
    cache_images: bool = True  # decode each domain once: decoding costs as much as a training step of the demo CNN
    optimizer: str = "sgd"
    lr: float = 0.1  # the new head's; the backbone's is lr * backbone_lr_scale
    backbone_lr_scale: float = 0.5
    weight_decay: float = 1e-4
    momentum: float = 0.9
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.0  # 0.1 costs 2-3 points on every domain of the demo
    augment: bool = False  # random resized crops rescale the motifs that tell the demo's concepts apart
    channels_last: bool = True

    def model_kwargs(self) -> dict[str, Any]:
        """Arguments of :class:`~cog_pl.finetune.module.FineTuneClassifier`."""
        return {k: v for k, v in asdict(self).items() if k in MODEL_FIELDS}

    def finetune_kwargs(self) -> dict[str, Any]:
        """The ``finetune`` method's options (:class:`~cog_pl.evaluate.finetune.FinetuneOptions`, as
        ``RunConfig.method_options["finetune"]``): the other fields, and the module's as ``recipe``."""
        return {**{k: v for k, v in asdict(self).items() if k not in MODEL_FIELDS}, "recipe": self.model_kwargs()}


#: Fields of :class:`DemoFineTune` that are arguments of :class:`~cog_pl.finetune.module.FineTuneClassifier`.
MODEL_FIELDS = tuple(f.name for f in fields(DemoFineTune) if f.name in inspect.signature(FineTuneClassifier).parameters)
