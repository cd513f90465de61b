"""The linear probe started from the zero-shot text classifier (method ``linear_text_init``): ELEVATER's
``INIT_HEAD_WITH_TEXT_ENCODER``, the few-shot bridge from zero-shot to the linear probe.

Everything is the linear probe's (:mod:`cog_pl.evaluate.linear`) but the heads' start: the domain's text classifier,
built as the zero-shot method builds it (the same :class:`~cog_pl.evaluate.zeroshot.ZeroShotOptions` and cache), its
record in the rows' identity (:mod:`cog_pl.probe.text_init`).
"""

from __future__ import annotations

from typing import Any

from cog_pl.evaluate.linear import Linear, LinearState
from cog_pl.evaluate.method import Inputs, Job, register_method
from cog_pl.evaluate.zeroshot import ZeroShotOptions, require_text_tower

__all__ = ["LinearTextInit"]


class LinearTextInit(Linear):
    """The tuned linear probe, every head starting from the text classifier."""

    name = "linear_text_init"
    label = "linear probe (text-initialised)"
    order = 1.0
    description = ("the linear probe with every head starting from the zero-shot text classifier (ELEVATER's "
                   "INIT_HEAD_WITH_TEXT_ENCODER)")
    options = ZeroShotOptions
    noise_predictions = False

    def precheck(self, inputs: Inputs, options: ZeroShotOptions | None) -> None:
        require_text_tower((options and options.backbone) or inputs.model or inputs.label, self.name)

    def head_start(self, job: Job, state: LinearState, record_only: bool = False) -> Any:
        from cog_pl.device import resolve_device
        from cog_pl.probe.text_init import text_start

        return text_start(state.pair, job.results, model=job.model, domain=job.domain,
                          device=resolve_device(job.device), options=job.options or ZeroShotOptions(),
                          classifier=not record_only)


register_method(LinearTextInit())
