"""The plan of a feature store's life: what an extraction does with each store it is asked for, decided in one place.

:func:`plan_store` looks at a store's folder (its ``meta.json``, or the partial directory of an interrupted write:
``identity.json``, ``written.npy``, ``missing.npy``), the identity this run would make it with
(:func:`store_identity`) and the :class:`Policy`, and returns one frozen :class:`StorePlan`:

- ``SKIP``: finished by the same inputs, its missing rows (images skipped as unreadable) within the policy; kept.
- ``FINISH``: an interrupted write of the same inputs with every row written; only finishing is left.
- ``RESUME``: an interrupted write of the same inputs with rows left (``rows_left``).
- ``FRESH``: nothing written yet, or ``overwrite``: every row (again).

A store made by other inputs, finished or interrupted, is refused (:class:`~cog_pl.features.store.StoreError`
naming each difference and ``--overwrite``, :func:`~cog_pl.features.store.check_identity`) unless ``overwrite``; so
is a finished store that lacks more rows than the policy allows. Planning reads the store and writes nothing (no
tidying, no finishing: the caller does what the plan says), and imports no torch.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from cog_pl.data.policy import check_policy, skip_budget
from cog_pl.defaults import MAX_SKIPPED
from cog_pl.errors import CogError
from cog_pl.features.missing import missing_rows
from cog_pl.features.paths import is_complete
from cog_pl.features.store import StoreError, check_identity, written_rows


class Action(enum.Enum):
    """What an extraction does with a store."""

    SKIP = "skip"
    RESUME = "resume"
    FINISH = "finish"
    FRESH = "fresh"


@dataclass(frozen=True)
class Policy:
    """How a run treats the stores it finds: ``overwrite`` extracts every store again (replacing finished ones,
    discarding interrupted ones); ``on_error`` (``"fail"`` or ``"skip"``) and ``max_skipped`` say how many rows of
    unreadable images a store may lack (:func:`~cog_pl.data.policy.skip_budget`)."""

    overwrite: bool = False
    on_error: str = "fail"
    max_skipped: float = MAX_SKIPPED

    def __post_init__(self) -> None:
        check_policy(self.on_error, self.max_skipped)

    def max_missing(self, rows: int) -> int:
        """The most rows of unreadable images a store of ``rows`` rows may lack: none under ``on_error="fail"``."""
        return skip_budget(rows, self.max_skipped) if self.on_error == "skip" else 0


@dataclass(frozen=True, eq=False)
class StorePlan:
    """One store's decision. ``want``: the meta the store is checked on and made with, less what the writer adds
    (:func:`store_identity`); ``num_rows`` (None for a skipped store planned without its images), ``rows_left``
    (the rows to extract, sorted, read-only; empty for ``SKIP`` and ``FINISH``), ``max_missing`` (the rows of
    unreadable images the store may lack) and ``overwrite`` (a finished store is replaced, an interrupted write
    discarded)."""

    path: Path
    action: Action
    want: Mapping[str, Any]
    num_rows: int | None = None
    rows_left: np.ndarray = field(default_factory=lambda: _frozen(np.zeros(0, dtype=np.int64)), repr=False)
    max_missing: int = 0
    overwrite: bool = False


def store_identity(model_meta: Mapping[str, Any], data_meta: Mapping[str, Any], dtype: str,
                   decode: str) -> dict[str, Any]:
    """The meta a store of a run gets, less what the writer adds: the model's half, the data's half (which wins: it
    names the transform the images were read with), the features' dtype and the decode path. Its identity keys are
    compared against existing stores and recorded in new ones."""
    return {**model_meta, **data_meta, "dtype": dtype, "decode": decode}


def refuse_mixed(model_root: str | os.PathLike, want: Mapping[str, Any], replaced: tuple[Path, ...] = ()) -> None:
    """Refuse to make stores of ``want``'s feature definition under ``model_root`` (``<features>/<label>``) when a
    store there (finished, or an interrupted write) holds another definition and one of the two is a token
    definition (``tokens`` recorded): one label, one kind of store. ``replaced``: the stores this run overwrites."""
    root, mine = Path(model_root), want.get("tokens") is not None
    records = [(f.parent, f) for f in root.glob("*/*/meta.json")]
    records += [(f.parent.parent / f.parent.name[1:-len(".partial")], f)
                for f in root.glob("*/.*.partial/identity.json")]
    for store, file in sorted(records):
        if store in replaced:
            continue
        try:
            have = json.loads(file.read_text())
        except (OSError, ValueError):
            continue  # a damaged store is refused when it is planned
        theirs = have.get("tokens") is not None
        if "feature" in have and theirs != mine and have["feature"] != want.get("feature"):
            kind = {True: "token store", False: "vector store"}
            raise StoreError(f"{store}: a {kind[theirs]} (feature {have['feature']!r}) where this run makes "
                             f"{kind[mine]}s (feature {want.get('feature')!r}): token and vector definitions are "
                             "never mixed under one label; give this run another --name (cog-pl extract: "
                             "--model.name)")


def needs_rows(path: str | os.PathLike, policy: Policy) -> bool:
    """Whether planning the store at ``path`` needs its rows (the images listed): False only for a finished store
    the policy keeps, which is checked on the meta that needs no image."""
    return policy.overwrite or not is_complete(path)


def plan_store(path: str | os.PathLike, want: Mapping[str, Any], policy: Policy,
               num_rows: int | None = None) -> StorePlan:
    """The :class:`StorePlan` of the store at ``path`` for a run that would make it with ``want``
    (:func:`store_identity`) under ``policy``; ``num_rows``, the rows it has, is needed unless
    :func:`needs_rows` says otherwise. Refuses (:class:`~cog_pl.features.store.StoreError`) a store made by other
    inputs and a finished store lacking more rows than the policy allows."""
    path, want = Path(path), MappingProxyType(dict(want))
    if not needs_rows(path, policy):  # reused only when made by this run's inputs
        check_identity(path, dict(want))
        _refuse_missing_past_policy(path, policy)
        return StorePlan(path, Action.SKIP, want, overwrite=False)
    if num_rows is None:
        raise CogError(f"{path}: planning this store needs its number of rows")
    cap = policy.max_missing(num_rows)
    if policy.overwrite:
        return StorePlan(path, Action.FRESH, want, num_rows, _frozen(np.arange(num_rows, dtype=np.int64)), cap, True)
    check_identity(path, dict(want))  # an interrupted write of other inputs is refused, never mixed with
    done = _done(path, num_rows, policy)
    left = _frozen(np.flatnonzero(~done).astype(np.int64))
    if num_rows > 0 and not len(left):
        return StorePlan(path, Action.FINISH, want, num_rows, left, cap)
    return StorePlan(path, Action.RESUME if len(left) < num_rows else Action.FRESH, want, num_rows, left, cap)


def _done(path: Path, rows: int, policy: Policy) -> np.ndarray:
    """Rows of a store an interrupted run wrote; under ``on_error="fail"`` less those it recorded as missing
    (skipped as unreadable): they are read again, so this run's policy holds."""
    done = written_rows(path, rows)
    return done & ~missing_rows(path, rows) if policy.on_error == "fail" else done


def _refuse_missing_past_policy(path: Path, policy: Policy) -> None:
    """A finished store is reused only when the rows it lacks (skipped as unreadable when it was made) are within
    this run's policy: none under ``on_error="fail"``, at most the skip budget under ``"skip"``."""
    meta = json.loads((path / "meta.json").read_text())
    missing, rows = len(meta.get("missing") or ()), int(meta.get("num_rows", 0))
    cap = policy.max_missing(rows)
    if missing > cap:
        rule = ("on_error=fail allows none" if policy.on_error == "fail"
                else f"max_skipped={policy.max_skipped} allows {cap}")
        raise StoreError(f"{path}: finished with {missing} of {rows} images missing (skipped as unreadable), but "
                         f"this run's {rule}; pass --overwrite to extract it again, or a policy that allows "
                         "them (--on-error skip --max-skipped N; cog-pl extract: --data.overwrite true, "
                         "--data.on_error skip --data.max_skipped N)")


def _frozen(rows: np.ndarray) -> np.ndarray:
    rows.setflags(write=False)
    return rows
