"""The unreadable-image policy of extraction and ``cog-pl data check``, and how many images a split may skip or lack.

Standard library only, so that the plan of a feature store's life (:mod:`cog_pl.features.plan`) applies it without
importing torch; :mod:`cog_pl.data.imagenet` re-exports every name.
"""

from __future__ import annotations

import math

from cog_pl.defaults import MAX_SKIPPED
from cog_pl.errors import CogError

#: What extraction (and ``cog-pl data check``) does with an unreadable image: stop naming it, or skip and record it.
ERROR_POLICIES = ("fail", "skip")


def check_policy(on_error: str, max_skipped: float = MAX_SKIPPED) -> None:
    """Refuse an unknown ``on_error`` or a negative ``max_skipped``, naming the option."""
    if on_error not in ERROR_POLICIES:
        raise CogError(f"on_error={on_error!r}; expected one of {', '.join(ERROR_POLICIES)}")
    check_tolerance(max_skipped, "max_skipped")


def check_tolerance(value: float, name: str) -> None:
    """Refuse a number of images a split may lack or skip (``max_skipped``, ``allow_missing``) that is negative or
    not a number, naming the option (:func:`skip_budget` reads it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise CogError(f"{name}={value!r}; expected a fraction of a split in [0, 1) or a count >= 1")


def skip_budget(rows: int, max_skipped: float = MAX_SKIPPED) -> int:
    """How many of a split's ``rows`` images ``on_error="skip"`` may skip before the split fails: ``max_skipped`` below
    1 is a fraction of the split, rounded up (a small split may skip one image), 1 or more an absolute count. The cap
    keeps a broken mount from producing a store of zeros; extraction and ``cog-pl data check`` both use it."""
    check_policy("skip", max_skipped)
    return int(max_skipped) if max_skipped >= 1 else math.ceil(max_skipped * rows)
