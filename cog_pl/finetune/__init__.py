"""Fine-tuning comparison runs (paper App. C.2): a backbone fine-tuned on each domain, beside the probes.

- :mod:`~cog_pl.finetune.module`: :class:`FineTuneClassifier`, the LightningModule.
- :mod:`~cog_pl.finetune.compare`: fine-tuning a domain; :mod:`~cog_pl.finetune.rows`: its result rows (the method
  over a run's domains: :mod:`cog_pl.evaluate.finetune`).
- :mod:`~cog_pl.finetune.attentive_images`: the attentive probe trained on augmented images, the frozen backbone run
  every batch (method ``attentive_images``).
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "FineTuneClassifier": ".module",
    "DivergedError": ".module",
    "finetune_domain": ".compare",
    "result_row": ".rows",
    "AttentiveImagesProbe": ".attentive_images",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
