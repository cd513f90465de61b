"""Feature stores (v1 on-disk contract) and conversion to and from the released code's X_Y.pth files.

- :mod:`~cog_pl.features.store`: the store format, reading and resumable writing; :mod:`~cog_pl.features.plan`:
  what an extraction does with each store (skip, finish, resume, fresh), decided in one place.
- :mod:`~cog_pl.features.pair`: a domain's train and test stores together; :mod:`~cog_pl.features.missing`: rows
  of unreadable images; :mod:`~cog_pl.features.regroup`: level variants regrouped from the level stores;
  :mod:`~cog_pl.features.convert`: naver/cog's ``X_Y.pth`` files.
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "FeatureStore": ".store",
    "StoreError": ".store",
    "StoreWriter": ".store",
    "open_store": ".store",
    "write_store": ".store",
    "is_complete": ".store",
    "make_meta": ".store",
    "StorePair": ".pair",
    "open_pair": ".pair",
    "regroup_variant": ".regroup",
    "import_pth": ".convert",
    "export_pth": ".convert"
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
