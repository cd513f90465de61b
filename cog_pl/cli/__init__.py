"""The ``cog-pl`` command: one module per command group, each with a ``register(subparsers)`` function.

:mod:`~cog_pl.cli.main` dispatches (and tells a user's error from a defect); :mod:`~cog_pl.cli.options` holds the
option types, groups and deprecated spellings that several commands share; ``extract``, ``finetune`` and
``probe_lightning`` are LightningCLIs (:mod:`~cog_pl.cli.lightning`).
"""

from cog_pl._lazy import lazy_exports

_EXPORTS = {
    "entry": ".main",
    "build_parser": ".main",
    "CommandError": "cog_pl.errors",  # a bad command line (the errors module holds every error class)
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
