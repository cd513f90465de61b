"""The probe's learning-rate rule: a cosine decay stepped once per epoch, after the epoch, with a one-epoch lag.

The released code sets ``lr = base * 0.5 * (1 + cos(pi * e / E))`` *after* epoch ``e``, so epochs 0 and 1 both run at
the base rate and epoch ``k >= 1`` runs at ``base * 0.5 * (1 + cos(pi * (k - 1) / E))``; the last epoch never reaches
zero. Every trainer of the package (the fused multi-head loop and the Lightning module) reads these functions.
"""

from __future__ import annotations

import math

from cog_pl.errors import CogError


def cosine_factor(epoch: int, epochs: int) -> float:
    """Multiplier of the base learning rate during ``epoch`` (0-based) of an ``epochs``-long run."""
    if epochs <= 0:
        raise CogError(f"epochs must be positive, got {epochs}")
    if epoch <= 0:
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / epochs))


def lr_at(base: float, epoch: int, epochs: int) -> float:
    """Learning rate used during ``epoch``."""
    return base * cosine_factor(epoch, epochs)


def lr_sequence(base: float, epochs: int) -> list[float]:
    """The learning rate of every epoch of a run, in order."""
    return [lr_at(base, e, epochs) for e in range(epochs)]
