"""The attentive and MLP probes (methods ``attentive`` and ``mlp``): heads on a token store, tuned, retrained and
tested like the linear probe, a batch of trials trained as one bank of heads (:mod:`cog_pl.probe.attentive`).

The attentive probe reads every token through a pooler preset (:class:`AttentiveOptions`, ``--attentive-preset``:
V-JEPA's, V-JEPA 2's, CAPI's or EP's, :data:`cog_pl.models.poolers.POOLER_PRESETS`); the MLP probe reads the class
token, or the vector of a vector store (:class:`MLPOptions`, ``--mlp-hidden``). The rows' identity holds the head's
settings (``head``), the protocol, the search, the precision and the features.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cog_pl.defaults import ATTENTIVE_PRESET, MLP_HIDDEN
from cog_pl.errors import CogError
from cog_pl.evaluate.method import Cell, Inputs, Job, Method, register_method

__all__ = ["MLP", "Attentive", "AttentiveOptions", "Heads", "MLPOptions", "planned_width"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class AttentiveOptions:
    """The attentive probe's pooler."""

    preset: str = field(default=ATTENTIVE_PRESET, metadata={
        "help": "the pooler: vjepa, vjepa2, capi or ep, named after their sources (docs/probes.md)",
        "metavar": "PRESET"})

    def __post_init__(self) -> None:
        from cog_pl.models.poolers import POOLER_PRESETS

        if self.preset not in POOLER_PRESETS:
            raise CogError(f"--attentive-preset {self.preset!r}: choose from {', '.join(POOLER_PRESETS)}")


@dataclass(frozen=True)
class MLPOptions:
    """The MLP probe's hidden layer."""

    hidden: int = field(default=MLP_HIDDEN, metadata={"help": "the hidden width", "metavar": "WIDTH"})

    def __post_init__(self) -> None:
        if isinstance(self.hidden, bool) or not isinstance(self.hidden, int) or self.hidden < 1:
            raise CogError(f"--mlp-hidden must be an integer of at least 1, got {self.hidden!r}")


@dataclass
class HeadState:
    """A domain's stores and, on first use, their features as ``[N, T, D]``."""

    pair: Any
    splits: Any = None


class Heads(Method):
    """A probe of trained heads on tokens (the attentive and MLP probes)."""

    kind: ClassVar[str] = ""
    reads = "tokens"

    def settings(self, job: Job) -> Any:
        from cog_pl.probe.attentive import HeadSettings

        options = job.options or self.options()
        return HeadSettings(kind=self.kind, preset=getattr(options, "preset", ATTENTIVE_PRESET),
                            hidden=getattr(options, "hidden", MLP_HIDDEN))

    def open(self, job: Job) -> HeadState:
        return HeadState(super().open(job))

    def identity(self, job: Job, state: HeadState) -> dict[str, Any]:
        from cog_pl.probe.attentive import head_identity
        from cog_pl.results.identity import features_identity

        values = head_identity(features_identity(state.pair), self.settings(job), job.protocol, job.plan,
                               job.plan.precision_on(job.device))
        return {k: v for k, v in values.items() if k != "identity"}

    def run_cell(self, job: Job, state: HeadState, cell: Cell, want: dict[str, Any]) -> dict[str, Any]:
        from cog_pl.device import resolve_device
        from cog_pl.probe.attentive import TokenSplits, probe_cell

        if state.splits is None:
            state.splits = TokenSplits.load(state.pair, "cpu")
        share = 0.9 / (job.protocol.trials + 1)  # of the cell, per trial (the final head: the rest, at its end)
        return probe_cell(state.splits, settings=self.settings(job), seed=cell[1], shots=cell[0], model=job.model,
                          domain=job.domain, protocol=job.protocol, plan=job.plan,
                          device=resolve_device(job.device), want=want,
                          on_trials=(lambda n: job.tick(n * share)) if job.tick else None)


class Attentive(Heads):
    """The attentive probe."""

    name = "attentive"
    label = "attentive probe"
    order = 5.0
    kind = "attentive"
    description = ("attentive pooler on the store's tokens, tuned like the linear probe, a batch of trials trained as "
                   "one bank of heads")
    options = AttentiveOptions

    def precheck(self, inputs: Inputs, options: AttentiveOptions | None) -> None:
        """The preset against the features' width before any extraction, where the network and weights tell it
        (:func:`planned_width`); else after it, on the stores (:meth:`check`)."""
        dim = planned_width(inputs)
        if dim is not None:
            _check_preset((options or AttentiveOptions()).preset, dim, inputs.label)

    def check(self, job: Job, state: HeadState, cells: list[Cell]) -> None:
        _check_preset(self.settings(job).preset, state.pair.train.features.shape[-1], str(state.pair.root))
        super().check(job, state, cells)


def _check_preset(preset: str, dim: int, what: str) -> None:
    """Refuse, in one line naming the presets that fit, a preset that cannot split ``dim`` channels into its heads."""
    from cog_pl.models.poolers import POOLER_PRESETS, fitting_presets

    try:
        POOLER_PRESETS[preset].heads(dim)
    except CogError as err:
        raise CogError(f"--attentive-preset {preset} on {what} ({dim} wide): {err}; the presets that fit {dim} "
                       f"channels: {', '.join(fitting_presets(dim)) or 'none'}") from None


def planned_width(inputs: Inputs) -> int | None:
    """The width of the features a run will extract, known before it: the network built on the meta device with its
    weights file (:func:`cog_pl.extract.module.planned_store_meta`: no tensor read) and the feature definition;
    None where it cannot be told without the weights (random weights, a network that cannot be built so)."""
    if inputs.model is None or inputs.checkpoint is None:
        return None
    from cog_pl.extract.module import planned_store_meta

    reading = {k: v for k, v in inputs.reading.items() if k in ("prefix", "key_map", "in_order", "trust_checkpoint")}
    try:
        return planned_store_meta(inputs.model, inputs.checkpoint, **reading, transform=inputs.transform,
                                  feature=inputs.feature, label=inputs.label)[2]
    except Exception as err:  # (the stores tell it after the extraction, which says why it cannot run if it cannot)
        log.debug("the features' width is not known before the extraction (%s)", err)
        return None


class MLP(Heads):
    """The MLP probe."""

    name = "mlp"
    label = "MLP probe"
    order = 6.0
    kind = "mlp"
    description = ("BatchNorm + hidden layer on the class token or vector, tuned like the linear probe, a batch of "
                   "trials trained as one bank of heads")
    options = MLPOptions


register_method(Attentive())
register_method(MLP())
