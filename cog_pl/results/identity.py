"""What a result row's numbers depend on, one digest of it, and the rules for resuming a grid of rows.

A row's *identity* is everything its numbers depend on. For a linear probe: the features (each store's identity keys
of :func:`~cog_pl.features.store.identity_of` and a digest of its whole meta.json; for a plain store, its shape and
digests of its labels and of the head and tail of its features file), the protocol values and the search (mode,
startup trials, trial batch, resolved precision). A row records the features' part as ``features`` beside
``protocol`` and ``search``, and :func:`digest` of all three as ``identity``; the k-NN and fine-tuning rows record
their own values and digest them the same way. The digest names a cell's Optuna study too (:func:`study_name`), so
a study made under other values is never resumed.

Resuming skips a row only when its identity equals the run's; a row of another identity is refused before any work,
naming the values that differ (:func:`refusal`; ``overwrite``: made again and replaced, and the rows of the same model,
method and domain outside the run's grid that another identity made are removed: :func:`remove_stale`).

The identity holds nothing of a row's seed or shot count (the row's key holds those), so it is also the row's
*protocol key* (:func:`protocol_key`): what two rows of one (model, method, domain, shots) cell must share to be
averaged (:func:`cog_pl.report.protocols.split_protocols`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from cog_pl.errors import CogError
from cog_pl.io import digest  # defined in the floor (models use it too); kept importable here
from cog_pl.protocol import ProbeProtocol, as_record, protocol_words

if TYPE_CHECKING:
    from cog_pl.results import StoredRows

log = logging.getLogger(__name__)

#: Search-plan fields that change a row's numbers (heartbeats and claims do not).
SEARCH_KEYS = ("mode", "startup_trials", "trial_batch")
_SAMPLE = 1 << 20  # bytes of a plain store's features file digested at each end


def _file_ends(path) -> str:
    """Digest of the first and last MiB of a file: a plain store's features are too large to read whole each run."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(_SAMPLE))
        f.seek(0, 2)
        f.seek(max(0, f.tell() - _SAMPLE))
        h.update(f.read())
    return h.hexdigest()


def features_identity(pair) -> dict[str, dict[str, Any]]:
    """The identity of a :class:`~cog_pl.features.pair.StorePair`'s features, per split."""
    from cog_pl.features.pair import SPLITS
    from cog_pl.features.store import identity_of

    out = {}
    for split in SPLITS:
        store = pair[split]
        if store.plain:
            out[split] = {"plain": True, "shape": list(store.features.shape),
                          "labels_sha256": hashlib.sha256(np.ascontiguousarray(store.labels).tobytes()).hexdigest(),
                          "features_ends_sha256": _file_ends(store.path / "features.npy")}
        else:
            out[split] = {**identity_of(store.meta), "meta_sha256": digest(store.meta)}
    return out


def _values(features: Any, protocol: dict, search: dict | None, precision: Any) -> dict[str, Any]:
    values = {"features": features, "protocol": protocol,
              "search": {**{k: (search or {}).get(k) for k in SEARCH_KEYS}, "precision": precision}}
    if (search or {}).get("init") is not None:  # heads started otherwise than at random (cog_pl.probe.tuner.HeadStart)
        values["search"]["init"] = search["init"]
    return values


def wanted(features: dict | None, protocol: ProbeProtocol, search: dict[str, Any], precision: str) -> dict:
    """The identity fields a linear probe's row of this run has (``features``, ``protocol``, ``search``,
    ``precision``, ``identity``): what :func:`differences` compares a stored row with."""
    values = {"protocol": as_record(protocol), "search": search, "precision": precision, "features": features}
    return {**values, "identity": linear_digest(values)}


def linear_digest(values: dict[str, Any]) -> str:
    """The ``identity`` of a linear probe's row from its identity fields (:func:`wanted`): the features, the
    protocol and the search with the precision in it (the composition its rows have always been digested with)."""
    return digest(_values(values["features"], values["protocol"], values["search"], values["precision"]))


def study_name(model: str, domain: str, shots: int | None, seed: int, want: dict[str, Any]) -> str:
    """The name of a cell's study: the cell and the first ten digits of its rows' identity (:func:`wanted`)."""
    return f"{model}/{domain}/shots-{shots or 'all'}/seed-{seed}/{want['identity'][:10]}"


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}
    return {prefix[:-1]: value}


def differences(row: dict[str, Any], want: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, the row's value, the run's value) of each identity value of ``want`` (a method's identity values and
    their digest ``identity``) that a stored row differs in, what the user chose first and the features last; none
    when the row's ``identity`` equals the run's. Nested values are named by their last part (``trials`` for
    ``protocol.trials``, :func:`value_differences`); of ``search``, the values the identity digests."""
    if row.get("identity") == want["identity"]:
        return []
    keys = [k for k in want if k != "identity"]
    have = _recorded({k: row.get(k, NOT_RECORDED) for k in keys}, tuple(keys))
    mine = _recorded(want, tuple(keys))
    diff = [d for d in value_differences({k: have.get(k, NOT_RECORDED) for k in mine}, mine)]  # in the run's order
    diff += [d for d in value_differences(have, mine) if d[0] not in {e[0] for e in diff}]
    depth = {k: k.count(".") for k in [*have, *mine]}
    diff.sort(key=lambda d: (d[0].startswith("features."), min((n for k, n in depth.items()
                                                                if k == d[0] or k.endswith("." + d[0])), default=0)))
    return diff or [("identity", row.get("identity"), want["identity"])]


def format_key(key: tuple) -> str:
    """A row's key (:func:`cog_pl.results.row_key`) as text: also the name of its cell's claim (``seed=none``: a
    seedless row's, key seed :data:`~cog_pl.results.NO_SEED`)."""
    from cog_pl.results.rows import NO_SEED

    model, method, domain, shots, seed = key
    return f"{model}/{method}/{domain}/shots={shots or 'all'}/seed={'none' if seed == NO_SEED else seed}"


def _made_under(row: dict[str, Any] | None, want: dict[str, Any] | None) -> tuple[str, str] | None:
    """(the row's, the run's) protocol in words (:func:`cog_pl.protocol.protocol_words`) where both record one and
    they differ: what a refusal names first (``quick`` against ``paper``), not the seed and shot lists it holds."""
    have, mine = (row or {}).get("protocol"), (want or {}).get("protocol")
    if not (isinstance(have, dict) and isinstance(mine, dict)) or have == mine or "trials" not in have:
        return None
    (name, words), (other, theirs) = protocol_words(have), protocol_words(mine)
    return None if name == other == "custom" else (words, theirs)  # two custom ones: the values that differ


def _values_text(diff: list[tuple[str, Any, Any]], row: dict | None, want: dict | None) -> tuple[str, str]:
    """The row's and the run's side of a refusal: the protocols in words where they differ, then the other values
    that differ (the first three)."""
    under = _made_under(row, want)
    if under is None:
        return describe(diff, 1), describe(diff, 2)
    rest = [d for d in diff if not _is_protocol_value(d[0], row or {}) and not _is_protocol_value(d[0], want or {})]
    more = f", {describe(rest, 1)}" if rest else ""
    return f"protocol {under[0]}{more}", f"protocol {under[1]}" + (f", {describe(rest, 2)}" if rest else "")


def _is_protocol_value(name: str, want: dict[str, Any]) -> bool:
    """Whether a difference's ``name`` is one of the protocol record's values (named by their last part)."""
    record = want.get("protocol")
    return isinstance(record, dict) and (name in record or name in (record.get("extra") or {}))


def refusal(results, key: tuple, diff: list[tuple[str, Any, Any]], row: dict | None = None,
            want: dict | None = None) -> str:
    """The one-line refusal of a row made with other values (``row``, ``want``: the stored row and the run's
    identity, whose protocols are named in words where they differ)."""
    made, mine = _values_text(diff, row, want)
    return f"{results}: row {format_key(key)} was made with {made}, this run has {mine}; pass --overwrite to replace it"


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def cells_todo(results, *, model: str, method: str, domain: str, seeds, shots, want: dict[str, Any],
               overwrite: bool = False, compare: Callable[[dict, dict], list] | None = None,
               announce: bool = True, rows: StoredRows | None = None) -> list[tuple[int | None, int]]:
    """The (shots, seed) cells of a method's grid whose row is missing or, with ``overwrite``, made with other inputs
    (``compare(row, want)``: the values that differ, :func:`differences` by default); a row made with other inputs is
    refused otherwise, before any work, naming the row and the values that differ, and so is a row of another seed
    in one of the grid's (model, method, domain, shots) cells (:func:`refuse_other_protocols`). ``announce``: log
    each row skipped (off for a check made before the run that skips them). ``rows``: the rows a caller read once
    and hands down (:func:`cog_pl.results.read_stored`), used where they hold this grid's; else the rows of
    ``model``, ``method`` and ``domain`` are read now."""
    from cog_pl.results import read_stored, row_key

    compare = compare or differences
    found = [r.values for r in read_stored(results, model=model, method=method, domain=domain, reuse=rows)]
    existing = {row_key(r): r for r in found}
    todo, kept = [], []
    for n in shots:
        for seed in seeds:
            key = (model, method, domain, n, seed)
            row = existing.get(key)
            diff = compare(row, want) if row is not None else None
            if diff and not overwrite:
                raise CogError(refusal(results, key, diff, row, want))
            if row is None or diff:
                todo.append((n, seed))
            else:
                kept.append(key)
    if announce and kept:  # one line per (model, method, domain), not one per row
        log.info("skip %s/%s/%s: %d of %d row(s) exist, made with the same inputs", model, method, domain, len(kept),
                 len(shots) * len(seeds))
    if not overwrite:  # the cells it adds rows to
        refuse_other_protocols(results, found, model=model, method=method, domain=domain, seeds=seeds,
                               shots={n for n, _ in todo}, want=want, compare=compare)
    return todo


#: The fields of a row holding the values its identity digests (the linear probe's ``protocol``, ``search``,
#: ``precision`` and ``features``; the k-NN's ``knn``; fine-tuning's ``finetune``; the attentive and MLP probes'
#: ``head``): the values named when two rows' protocols differ. A row of a method that keeps its values elsewhere is
#: told apart by its ``identity`` alone.
IDENTITY_FIELDS = ("protocol", "search", "precision", "features", "knn", "finetune", "head", "ridge",
                   "attentive_images", "zeroshot", "text_tower")
NOT_RECORDED = "<not recorded>"


def protocol_key(row: dict[str, Any]) -> str | None:
    """What two rows of one cell must share to be averaged: the row's ``identity`` (every value its number depends
    on but its seed and shot count); None for a row that records none (written by hand, or before identities)."""
    return row.get("identity")


def protocol_differences(row: dict[str, Any], other: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, the row's value, the other's) of each value of :data:`IDENTITY_FIELDS` in which two rows differ; the
    identity digests when they differ in nothing recorded there; none when their protocol keys are equal."""
    if protocol_key(row) == protocol_key(other):
        return []
    return value_differences(_recorded(row), _recorded(other)) or [
        ("identity", protocol_key(row), protocol_key(other))]


def value_differences(have: dict[str, Any], mine: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, value in ``have``, value in ``mine``) of each flat value in which the two differ; a nested value is
    named by its last part (``protocol.trials`` is ``trials``, ``search.mode`` ``mode``, a method's own ``knn.ks``
    ``ks``), the features' in full (``features.train.weights_sha256``)."""
    none = NOT_RECORDED
    return [(k.rpartition(".")[2] if not k.startswith("features.") else k, have.get(k, none), mine.get(k, none))
            for k in dict.fromkeys([*have, *mine]) if have.get(k, none) != mine.get(k, none)]


def _recorded(row: dict[str, Any], fields: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The identity values a row records (``fields``, by default :data:`IDENTITY_FIELDS`), flat; of ``search``,
    those the identity digests (the search keys and the heads' start)."""
    values = {k: row[k] for k in (fields or IDENTITY_FIELDS) if k in row}
    if isinstance(values.get("search"), dict):
        values["search"] = {k: v for k, v in values["search"].items() if k in (*SEARCH_KEYS, "init")}
    return _flat(values)


#: Identity values that say what the model is, not what a run chose: the features', a text tower's, and the label,
#: weights and benchmark a method that reads images records in its own values.
_MODEL_VALUES = ("model", "checkpoint_sha256", "benchmark_sha256")


def settings_of(row: dict[str, Any]) -> dict[str, Any]:
    """The protocol values of a row that a run chooses, flat: every recorded identity value but what the model is
    (the features', the text tower's, a method's own record of the label, weights and benchmark) and the protocol's
    seed and shot lists (the grid). The cells of one model and method made with other settings are told apart in a
    report (:func:`cog_pl.report.tables.protocol_marks`)."""
    return {k: v for k, v in _recorded(row).items()
            if not k.startswith(("features.", "text_tower.")) and k not in ("protocol.seeds", "protocol.shots")
            and not (k.count(".") == 1 and k.rpartition(".")[2] in _MODEL_VALUES)}


def describe(diff: list[tuple[str, Any, Any]], side: int, limit: int = 3) -> str:
    """One side (1: the first values, 2: the second) of :func:`differences`' or :func:`protocol_differences`'
    values as ``name=value, ...`` (the first ``limit``, then how many more)."""
    more = f" (and {len(diff) - limit} more)" if len(diff) > limit else ""
    return ", ".join(f"{d[0]}={_short(d[side])}" for d in diff[:limit]) + more


def remove_stale(results, *, model: str, method: str, domain: str, seeds, shots, want: dict[str, Any],
                 compare: Callable[[dict, dict], list] | None = None) -> int:
    """Remove the rows of ``model``, ``method`` and ``domain`` outside the grid of ``seeds`` x ``shots`` that another
    identity made (``compare(row, want)``: the values that differ, :func:`differences` by default): a run with
    ``overwrite`` would not make them again, and a table never averages them with its rows. One log line says how
    many were removed and what made them; returns that count."""
    from cog_pl.results import delete_row, read_rows, row_key

    compare = compare or differences
    grid = {(n, seed) for n in shots for seed in seeds}
    stale = [(row_key(r), compare(r, want)) for r in read_rows(results, model=model, method=method, domain=domain)
             if (r.get("shots"), r["seed"]) not in grid]
    stale = [(key, sorted(diff, key=lambda d: d[0].startswith("features"))) for key, diff in stale if diff]
    for key, _ in stale:
        delete_row(results, key)
    if stale:
        cells = ", ".join(f"shots={k[3] or 'all'}/seed={k[4]}" for k, _ in stale[:6])
        log.info("%s/%s/%s: removed %d stale row(s) outside this run's grid (%s%s), made with %s; this run has %s",
                 model, method, domain, len(stale), cells, ", ..." if len(stale) > 6 else "",
                 describe(stale[0][1], 1), describe(stale[0][1], 2))
    return len(stale)


def refuse_other_protocols(results, rows, *, model: str, method: str, domain: str, seeds, shots, want: dict[str, Any],
                           compare: Callable[[dict, dict], list] | None = None) -> None:
    """Refuse, in one line naming one of them and the values that differ, a run that would add rows to a (model,
    method, domain, shots) cell whose rows of other seeds were made with other inputs: a cell averages rows of one
    protocol, so the run would set them apart as stale without a word."""
    from cog_pl.results import row_key

    compare = compare or differences
    for r in rows:
        key = row_key(r)
        if key[:3] == (model, method, domain) and key[3] in shots and key[4] not in seeds:
            diff = compare(r, want)
            if diff:
                made, mine = _values_text(diff, r, want)
                raise CogError(
                    f"{results}: row {format_key(key)} of a cell this run adds rows to was made with "
                    f"{made}, this run has {mine}; a cell averages rows of one protocol: "
                    "run with its settings, or pass --overwrite (a grid then removes the rows of other settings "
                    "outside it; the report lists any left as stale)")
