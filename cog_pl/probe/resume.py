"""What makes a probe's result row, and the rules for resuming a grid of them.

A row's *identity* is everything its numbers depend on: the features (each store's identity keys of
:func:`~cog_pl.features.store.identity_of` and a digest of its whole meta.json; for a plain store, its shape and digests
of its labels and of the head and tail of its features file), the protocol values and the search (mode, startup trials,
trial batch, resolved precision). A row records the features' part as ``features`` beside ``protocol`` and ``search``,
and a digest of all three as ``identity``. Resuming skips a row only when its identity equals the run's; a row of
another identity is refused, naming the values that differ (``overwrite``: replaced). A row written before identities
(no ``identity`` field) is compared on the protocol and search values it records.

A cell's study that a killed worker left unfinished (a trial failed or left running by a worker that is gone) is
started over when no live worker holds a trial of it, so a resumed grid equals an uninterrupted one, row for row; a
study some live worker still works on is joined (several workers sharing a study never give a repeatable order of
trials anyway). A worker counts as live while its lease on a trial, running or finished, is (its heartbeat younger
than ``stale_after`` and its process not provably dead: :mod:`cog_pl.probe.study`), so a worker between two batches
is not restarted under; a worker killed on this machine is provably dead at once, one elsewhere after
``stale_after`` seconds. Restarting costs the trials the study had: the price of a repeatable result. Each cell's
final retrain is claimed in the results file (:func:`cog_pl.results.claim_row`): one worker makes each row; with
``claim_cells`` (:func:`cog_pl.probe.protocol_run.run_protocol`) the whole cell is claimed before it is tuned, its
claim renewed by a heartbeat (:func:`renewing`), so that one worker alone tunes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from cog_pl.features.pair import SPLITS, StorePair
from cog_pl.features.store import identity_of
from cog_pl.probe.study import fail_stale_trials, held_lease, provably_dead, worker_id
from cog_pl.protocol import ProbeProtocol, as_record

log = logging.getLogger(__name__)

#: Search-plan fields that change a row's numbers (heartbeats and leases do not).
SEARCH_KEYS = ("mode", "startup_trials", "trial_batch")
_SAMPLE = 1 << 20  # bytes of a plain store's features file digested at each end


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _file_ends(path) -> str:
    """Digest of the first and last MiB of a file: a plain store's features are too large to read whole each run."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(_SAMPLE))
        f.seek(0, 2)
        f.seek(max(0, f.tell() - _SAMPLE))
        h.update(f.read())
    return h.hexdigest()


def features_identity(pair: StorePair) -> dict[str, dict[str, Any]]:
    """The identity of a pair's features, per split."""
    out = {}
    for split in SPLITS:
        store = pair[split]
        if store.plain:
            out[split] = {"plain": True, "shape": list(store.features.shape),
                          "labels_sha256": hashlib.sha256(np.ascontiguousarray(store.labels).tobytes()).hexdigest(),
                          "features_ends_sha256": _file_ends(store.path / "features.npy")}
        else:
            out[split] = {**identity_of(store.meta), "meta_sha256": _digest(store.meta)}
    return out


def row_identity(features: dict | None, protocol: ProbeProtocol, search: dict[str, Any], precision: str) -> dict:
    """The identity fields a row adds to its ``protocol``, ``search`` and ``precision``: ``features`` and
    ``identity``, the digest of the features, the protocol values and the search values that change results."""
    values = _identity_values(features, as_record(protocol), search, precision)
    return {"features": features, "identity": _digest(values)}


def wanted(features: dict | None, protocol: ProbeProtocol, search: dict[str, Any], precision: str) -> dict:
    """The identity fields a row of this run has (``features``, ``protocol``, ``search``, ``precision``,
    ``identity``): what :func:`differences` compares a stored row with."""
    return {"protocol": as_record(protocol), "search": search, "precision": precision,
            **row_identity(features, protocol, search, precision)}


def _identity_values(features: Any, protocol: dict, search: dict, precision: Any) -> dict[str, Any]:
    return {"features": features, "protocol": protocol,
            "search": {**{k: (search or {}).get(k) for k in SEARCH_KEYS}, "precision": precision}}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}
    return {prefix[:-1]: value}


def differences(row: dict[str, Any], want: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, the row's value, the run's value) of each identity value that differs; none when the row's
    ``identity`` equals the run's. A row without ``identity`` is compared on its protocol and search values."""
    if row.get("identity") == want["identity"]:
        return []
    have = _identity_values(row.get("features"), row.get("protocol") or {}, row.get("search"), row.get("precision"))
    mine = _identity_values(want["features"], want["protocol"], want["search"], want["precision"])
    if "identity" not in row:  # written before identities: its protocol and search values
        del have["features"], mine["features"]
    mine, theirs = _flat(mine), _flat(have)
    diff = [(k.rpartition(".")[2] if k.startswith(("protocol.", "search.")) else k, theirs.get(k, "<not recorded>"),
             v) for k, v in mine.items() if theirs.get(k, "<not recorded>") != v]
    if not diff and "identity" in row:  # the same values, hashed otherwise (another cog-pl): named as the digest
        diff = [("identity", row["identity"], want["identity"])]
    return diff


def cells_todo(results, *, model: str, method: str, domain: str, seeds, shots, want: dict[str, Any],
               overwrite: bool = False, compare: Any = None) -> list[tuple[int | None, int]]:
    """The (shots, seed) cells of a method's grid whose row is missing or, with ``overwrite``, made with other inputs
    (``compare(row, want)``: the values that differ, :func:`differences` by default); a row made with other inputs is
    refused otherwise, before any work, naming the row and the values that differ."""
    from cog_pl.results import read_rows, row_key

    compare = compare or differences
    existing = {row_key(r): r for r in read_rows(results)}
    todo = []
    for n in shots:
        for seed in seeds:
            key = (model, method, domain, n, seed)
            row = existing.get(key)
            diff = compare(row, want) if row is not None else None
            if diff and not overwrite:
                raise ValueError(refusal(results, key, diff))
            if row is None or diff:
                todo.append((n, seed))
            else:
                log.info("skip %s: row exists, made with the same inputs", format_key(key))
    return todo


def format_key(key: tuple) -> str:
    model, method, domain, shots, seed = key
    return f"{model}/{method}/{domain}/shots={shots or 'all'}/seed={seed}"


def refusal(results, key: tuple, diff: list[tuple[str, Any, Any]]) -> str:
    """The one-line refusal of a row made with other values."""
    shown = diff[:3]
    more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
    return (f"{results}: row {format_key(key)} was made with "
            + ", ".join(f"{k}={_short(a)}" for k, a, _ in shown) + ", this run has "
            + ", ".join(f"{k}={_short(b)}" for k, _, b in shown) + f"{more}; pass --overwrite to replace it")


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def restart_orphaned_study(storage: BaseStorage, name: str, trials: int, stale_after: float) -> bool:
    """Delete the study ``name`` when a killed worker left it unfinished and no live worker holds a trial of it: it
    has fewer than ``trials`` complete trials, no trial running under a live lease, and no trial whose worker
    lives. Returns whether it did. A study
    its dead worker left between two batches is restarted too: a new process's sampler would not propose what the
    uninterrupted run's did (the fault-injection tests found such grids differing), so a single worker's resumed
    grid equals an uninterrupted one; studies shared with live workers are joined, never restarted."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return False
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) >= trials:
        return False
    fail_stale_trials(study, stale_after)
    states = study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.FAIL))
    if any(t.state == TrialState.RUNNING for t in states):
        return False  # a live worker tunes it: join it
    if any(not claim_expired(held_lease(t), stale_after) for t in complete):
        return False  # a worker that finished a trial lives (between two batches, say): join it
    if not complete and not states:
        return False  # nothing tuned yet (a worker may just have created it)
    optuna.delete_study(study_name=name, storage=storage)
    log.info("restarting the study %s, left unfinished by a worker that is gone", name)
    return True


def claim_lease() -> dict[str, Any]:
    """This worker's lease on a row it makes (:func:`cog_pl.probe.study.lease`'s fields)."""
    from cog_pl.probe.study import lease

    return lease()


@contextlib.contextmanager
def renewing(renew: Callable[[], None], every: float) -> Iterator[None]:
    """Call ``renew`` every ``every`` seconds on a thread while the block runs: the heartbeat of a claim held while a
    cell is tuned (a renewal that fails is logged and tried again at the next beat)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            try:
                renew()
            except Exception as err:  # a busy results file: the next beat renews it
                log.warning("could not renew a claim (%s); retrying in %.0f s", err, every)

    thread = threading.Thread(target=beat, name="claim-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def claim_expired(held: dict[str, Any], stale_after: float) -> bool:
    """Whether another worker's claim is void: its heartbeat older than ``stale_after`` or its worker provably dead."""
    if held.get("worker") == worker_id():
        return False
    return time.time() - float(held.get("heartbeat", 0)) > stale_after or provably_dead(held)
