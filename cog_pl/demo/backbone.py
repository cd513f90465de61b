"""The demo's backbone: a small CNN for the miniature benchmark's tiny images, the backbone ``demo_cnn`` (also named
``external:demo_cnn``). Its definition and its entry live in :mod:`cog_pl.models` (:mod:`cog_pl.models.arch.demo_cnn`,
:data:`cog_pl.models.zoo.DEMO_MODELS`); these names stay for the demo's modules and users' code."""

from __future__ import annotations

from cog_pl.models.arch.demo_cnn import WIDTH, DemoCNN

__all__ = ["ARCH", "MODEL_NAME", "WIDTH", "DemoCNN"]

ARCH = "demo_cnn"
MODEL_NAME = f"external:{ARCH}"
