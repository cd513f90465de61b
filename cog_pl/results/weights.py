"""Which weights a result row was made from: the one rule every reader of rows uses.

A label (:mod:`cog_pl.models.label`) names one set of feature stores, so the same weights can sit under several
labels (``resnet50`` and ``resnet50+tokens2x2``: one checkpoint, two feature definitions). What identifies the weights
is their digest, recorded where each method records what its numbers depend on:

- a row made from feature stores (the linear probe, k-NN, the attentive and MLP probes, zero-shot) records the stores'
  identity under ``features`` (:func:`cog_pl.results.identity.features_identity`), whose ``train`` and ``test``
  parts hold each store's ``weights_sha256`` (:data:`cog_pl.features.store.IDENTITY_KEYS`);
- a row made from images with no store (fine-tuning, ``attentive_images``) records the checkpoint's digest in its
  method's own identity record, ``row[<method>]["checkpoint_sha256"]`` (``finetune``, ``attentive_images``).

:func:`row_weights` reads that digest (None where the weights have none: random weights, a package's own, a plain
store, a row written by hand). :func:`weights_key` is what two rows must share to be of the same weights: the digest,
else the row's label, so rows of unknown weights pair only within their label.
"""

from __future__ import annotations

from typing import Any

from cog_pl.results.rows import method_of

__all__ = ["row_weights", "weights_key"]


def row_weights(row: dict[str, Any]) -> str | None:
    """The sha256 of the weights ``row`` was made from (the module's docstring says where each method records it);
    None where it records none, or where its train and test stores name other weights."""
    features = row.get("features")
    if isinstance(features, dict):
        found = {v.get("weights_sha256") for v in features.values() if isinstance(v, dict)}
        if len(found) == 1:
            return next(iter(found))
        return None if found else _own(row)
    return _own(row)


def _own(row: dict[str, Any]) -> str | None:
    """The checkpoint digest in the method's own identity record (``row[method]``), where it records one."""
    own = row.get(method_of(row))
    digest = own.get("checkpoint_sha256") if isinstance(own, dict) else None
    return str(digest) if digest else None


def weights_key(row: dict[str, Any]) -> tuple[str, str]:
    """What rows of the same weights share: ``("sha256", digest)``, else ``("label", model)`` for a row whose weights
    have no digest (:func:`row_weights`): those pair only with rows of their own label."""
    digest = row_weights(row)
    return ("sha256", digest) if digest else ("label", str(row["model"]))
