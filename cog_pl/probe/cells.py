"""One cell of a probe grid as every worker makes it, in-process or in a worker process: claim, tune, write, release.

The cell is the unit of ownership (:mod:`cog_pl.probe.claims`). A worker claims a cell whose row is missing, looks
again (the cell's previous holder writes its row before it releases the claim), tunes the cell's study as its one
writer (:func:`cog_pl.probe.protocol_run.probe`, which starts over a study its previous writer left unfinished),
appends the row and releases the claim; a heartbeat renews the claim meanwhile. A worker whose claim was taken over
while it worked (silent past ``stale_after``) drops its row and any error of its study: the new holder makes it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from optuna.storages import BaseStorage

from cog_pl.identity import differences, format_key
from cog_pl.probe.claims import Heartbeat, claim, release, renew
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import append_row, get_row

log = logging.getLogger(__name__)


def heartbeat_seconds(plan: SearchPlan) -> float:
    """How often a held claim is renewed: ``heartbeat_every``, and at least four times per ``stale_after``."""
    return min(plan.heartbeat_every, plan.stale_after / 4)


def _made(results: str | os.PathLike, key: tuple, want: dict[str, Any]) -> bool:
    row = get_row(results, key)
    return row is not None and not differences(row, want)


def make_cell(splits, results: str | os.PathLike, key: tuple, want: dict[str, Any], *,
              storage: str | os.PathLike | BaseStorage, protocol: ProbeProtocol, plan: SearchPlan,
              device: str | torch.device) -> tuple[str, dict[str, Any] | None]:
    """Make the row of ``key`` (model, method, domain, shots, seed) on ``splits``
    (:class:`~cog_pl.probe.protocol_run.Splits`): ``("made", row)`` when this worker made and appended it,
    ``("done", None)`` when a row of identity ``want`` exists, ``("held", None)`` while another worker holds the
    cell."""
    from cog_pl.probe.protocol_run import probe

    if _made(results, key, want):
        return "done", None
    held = claim(results, format_key(key), plan.stale_after)
    if held is None:
        return "held", None
    try:
        if _made(results, key, want):  # written by the holder before this one
            return "done", None
        model, _, domain, shots, seed = key
        with Heartbeat(held, heartbeat_seconds(plan)):
            try:
                row = probe(splits, seed=seed, shots=shots, storage=storage, model=model, domain=domain,
                            protocol=protocol, plan=plan, device=device)
            except Exception:
                if renew(held):  # a failure of its own, not of a study the new holder started over
                    raise
                row = None
        if row is None or not renew(held):
            log.warning("%s: dropped this worker's row, its claim was taken over meanwhile", held.cell)
            return "held", None
        append_row(results, row)
        log.info("wrote row %s", held.cell)
        return "made", row
    finally:
        release(held)
