"""A run's evaluation stages on the stores of a label of the tests' choosing (plain stores written under
``features/<label>/``), as ``cog-pl run`` runs them: every grid checked first, then run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path


def probe_stage(cfg, out: Path, label: str, stage: str = "probe") -> int:
    """The rows the ``stage`` methods of ``cfg`` write on the stores of ``label`` under ``out``."""
    from cog_pl.evaluate.runner import run_methods

    inputs = replace(cfg.inputs, label=label, features=Path(out) / "features" / label)
    return run_methods(cfg.methods_of(stage), inputs, cfg.grids(), cfg.evaluation_plan())
