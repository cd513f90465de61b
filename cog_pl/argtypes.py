"""Argparse value types shared by the ``cog-pl`` commands (:mod:`cog_pl.cli.options` re-exports them) and the cluster
launcher's option table (:mod:`cog_pl.pipeline.cluster.options`), which sits below the command line: a floor
module, standard library only."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["at_least"]


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
