"""Reading ImageNet in place: tar indexes, synset sources, CoG splits, sampling, transforms, data checks.

- :mod:`~cog_pl.data.sources`: the image sources (a :class:`~cog_pl.registry.Registry`): folders and tars per
  synset, flat validation folders, HF tars, webdataset shards, whole tars; :mod:`~cog_pl.data.tar_index` and
  ``index_cache``: the indexes that make tars random-access.
- :mod:`~cog_pl.data.splits`: the CoG train/test splits; :mod:`~cog_pl.data.sampling`: validation splits and
  N-shot samples; :mod:`~cog_pl.data.transforms`: the protocol's input pipeline.
- :mod:`~cog_pl.data.imagenet`: datasets and the unreadable-image policy; :mod:`~cog_pl.data.check`: the data check.
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "ImageSource": ".sources",
    "SynsetSource": ".sources",
    "register_source": ".sources",
    "get_source": ".sources",
    "list_sources": ".sources",
    "unregister_source": ".sources",
    "open_source": ".sources",
    "LevelSplit": ".splits",
    "load_split": ".splits",
    "build_split": ".splits",
    "val_split": ".sampling",
    "few_shot": ".sampling",
    "TransformConfig": ".transforms",
    "protocol_transform": ".transforms",
    "build_transform": ".transforms",
    "ImageDataset": ".imagenet",
    "UnreadableImageError": ".imagenet",
    "check_data": ".check",
    "DataReport": ".check",
    "TarIndex": ".tar_index"
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
