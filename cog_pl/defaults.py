"""Defaults that are not protocol values, chosen once: the code, the command line and the packaged configs
(``cog_pl/configs``) read them from here, and tests/test_defaults.py keeps the configs equal to them.

The protocol's own values (batch sizes, precision, the search) are :mod:`cog_pl.protocol`'s frozen objects.
"""

from __future__ import annotations

__all__ = ["MAX_SKIPPED", "NUM_WORKERS"]

#: Loader worker processes of the image datamodules and ``cog-pl data check --decode``: ``"auto"`` takes the cores
#: this process may run on, shared by the Trainer's processes on the node, less one
#: (:func:`cog_pl.device.loader_workers`); a count sets them.
NUM_WORKERS: int | str = "auto"
#: With ``on_error="skip"``, a split fails past this many unreadable images: below 1 a fraction of the split,
#: rounded up, else a count (:func:`cog_pl.data.imagenet.skip_budget`).
MAX_SKIPPED: float = 0.001
