"""Phase 1 of ImageNet-CoG: frozen features of a backbone for IN-1K and L1..L5, written to feature stores.

- :mod:`~cog_pl.extract.module`: :class:`FeatureExtractor`, the LightningModule whose ``predict_step`` gives features.
- :mod:`~cog_pl.extract.datamodule`: :class:`ExtractionDataModule`, one predict loader per domain and split.
- :mod:`~cog_pl.extract.writer`: :class:`FeatureStoreWriter`, the callback writing the stores (resumable).
- :mod:`~cog_pl.extract.stores`: the plan of an extraction's stores (:mod:`cog_pl.features.plan` per store), asked
  once at the datamodule's ``setup``.
- :mod:`~cog_pl.extract.decode`, ``decode_data``, ``decode_device``: the decode paths (PIL, libjpeg-turbo, GPU);
  :mod:`~cog_pl.extract.fidelity`: how far a fast path's pixels are from the reference's.
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "FeatureExtractor": ".module",
    "ExtractionDataModule": ".datamodule",
    "ExtractionTarget": ".stores",
    "FeatureStoreWriter": ".writer",
    "resolve_decode": ".decode",
    "Fidelity": ".fidelity"
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
