"""Defaults that are not protocol values, chosen once: the code, the command line and the packaged configs
(``cog_pl/configs``) read them from here, and tests/test_defaults.py keeps the configs equal to them.

The protocol's own values (batch sizes, precision, the search) are :mod:`cog_pl.protocol`'s frozen objects.
"""

from __future__ import annotations

__all__ = ["ATTENTIVE_IMAGES_PRESET", "ATTENTIVE_PRESET", "MAX_SKIPPED", "MLP_HIDDEN", "NUM_WORKERS"]

#: Loader worker processes of the image datamodules and ``cog-pl data check --decode``: ``"auto"`` takes the cores
#: this process may run on, shared by the Trainer's processes on the node, less one
#: (:func:`cog_pl.device.loader_workers`); a count sets them.
NUM_WORKERS: int | str = "auto"
#: With ``on_error="skip"``, a split fails past this many unreadable images: below 1 a fraction of the split,
#: rounded up, else a count (:func:`cog_pl.data.imagenet.skip_budget`).
MAX_SKIPPED: float = 0.001
#: The attentive probe's pooler preset (``--attentive-preset``): CAPI's (one query, D/64 heads, no query or output
#: projection), the lightest of the four, and the one protocol that selects on a held-out part of train as this
#: benchmark does (docs/probes.md).
ATTENTIVE_PRESET = "capi"
#: The MLP probe's hidden width (``--mlp-hidden``).
MLP_HIDDEN = 1024
#: The preset of the attentive probe trained on images (``--attentive-images-preset``): V-JEPA's, whose protocol
#: trains on augmented images.
ATTENTIVE_IMAGES_PRESET = "vjepa"
