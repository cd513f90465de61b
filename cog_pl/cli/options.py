"""Argparse types and option groups shared by several ``cog-pl`` commands (no heavy imports: parsing stays fast)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

#: ``--max-skipped``'s default; equal to :data:`cog_pl.data.imagenet.MAX_SKIPPED` (a test keeps them equal).
MAX_SKIPPED = 0.001


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``low`` (argparse names the option in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum, {low}")
        return value
    return parse


def parse_max_skipped(text: str) -> float:
    """``--max-skipped``: a fraction in [0, 1) or a count >= 1 (:func:`cog_pl.data.imagenet.skip_budget`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a fraction in [0, 1) or a count >= 1") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a fraction in [0, 1) or a count >= 1, not negative")
    return value


def add_skip_policy(parser: argparse.ArgumentParser | argparse._ArgumentGroup, on_error_help: str) -> None:
    """``--on-error {fail,skip}`` and ``--max-skipped``: what an unreadable image does."""
    parser.add_argument("--on-error", choices=("fail", "skip"), default="fail", help=on_error_help)
    parser.add_argument("--max-skipped", type=parse_max_skipped, default=MAX_SKIPPED,
                        help=f"with --on-error skip, a split fails past this many unreadable images: below 1 a "
                             f"fraction of the split (default {MAX_SKIPPED}, rounded up), else a count")
