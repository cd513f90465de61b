"""``cog-pl finetune``: see :mod:`cog_pl.finetune.cli` (a LightningCLI with ``fit`` and ``test``)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("finetune", add_help=False, help="fine-tune a backbone on a domain's images (LightningCLI fit/test)")
