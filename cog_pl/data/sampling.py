"""Seeded, per-class sampling for the probes: the 20 % validation split and N-shot samples (docs/protocol.md).

Plain numpy functions of the labels and an explicit seed. Each class draws from its own generator,
``numpy.random.default_rng([seed, class])``, so a class's draw does not depend on the other classes, on the order
of the rows or on the machine. Results are sorted row indices (int64).

Protocol use: tuning cuts ``val_split(train_labels, 0.2, seed)`` from the full train set first and draws
``few_shot(train_labels, train_idx, n, tuning_seed(seed))`` from the remaining 80 %; the final classifier draws a
fresh ``few_shot(train_labels, all_rows, n, final_seed(seed))``. Test rows live in another store and never enter
either. Each draw has a seed of its own: a draw seeded like the validation split would replay the split's stream
on the rows it left, and pick a class's first rows more often than the others (``tests/data/test_data_sampling.py``).

An N-shot cell holds N rows of every class, or is not made: :func:`check_shots` refuses an N that some class of the
train split cannot fill in the tuning sample (and so in the final one), and both index functions apply it, so no
draw of fewer rows is ever filed under N shots.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from cog_pl.errors import CogError


def _by_class(labels: np.ndarray, rows: np.ndarray) -> dict[int, np.ndarray]:
    rows = np.sort(np.asarray(rows, dtype=np.int64))
    cls = np.asarray(labels)[rows]
    order = np.argsort(cls, kind="stable")
    rows, cls = rows[order], cls[order]
    bounds = np.flatnonzero(np.diff(cls)) + 1
    return {int(c[0]): r for c, r in zip(np.split(cls, bounds), np.split(rows, bounds)) if len(r)}


def _sorted_cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)


def val_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hold out ``floor(fraction * n_c)`` random rows of each class ``c``: returns ``(train_idx, val_idx)``."""
    if not 0.0 <= fraction < 1.0:
        raise CogError(f"validation fraction must be in [0, 1), got {fraction}")
    labels = np.asarray(labels)
    train, val = [], []
    for c, rows in _by_class(labels, np.arange(len(labels))).items():
        perm = rows[np.random.default_rng([seed, c]).permutation(len(rows))]
        n_val = int(len(rows) * fraction)
        val.append(perm[len(rows) - n_val:])
        train.append(perm[: len(rows) - n_val])
    return _sorted_cat(train), _sorted_cat(val)


def few_shot(labels: np.ndarray, candidates_idx: np.ndarray, shots: int, seed: int) -> np.ndarray:
    """``shots`` random rows of each class among ``candidates_idx`` (all of them when a class has fewer)."""
    if shots < 1:
        raise CogError(f"shots must be >= 1, got {shots}")
    picked = [rows[np.random.default_rng([seed, c]).permutation(len(rows))[:shots]]
              for c, rows in _by_class(np.asarray(labels), candidates_idx).items()]
    return _sorted_cat(picked)


def _derived_seed(draw: str, seed: int) -> int:
    """The seed of one draw of a run (``draw``: its key): a stream of its own, derived from the run's seed."""
    return int.from_bytes(hashlib.sha256(f"cog-pl/{draw}/{seed}".encode()).digest()[:8], "little") >> 1


def final_seed(seed: int) -> int:
    """The seed of the final N-shot sample: a fresh stream derived from the run's seed."""
    return _derived_seed("final-shots", seed)


def tuning_seed(seed: int) -> int:
    """The seed of the tuning N-shot sample, drawn from the rows the validation split (seeded with ``seed``) left."""
    return _derived_seed("tuning-shots", seed)


def check_shots(labels: np.ndarray, fraction: float, shots: Iterable[int | None]) -> None:
    """Refuse each N of ``shots`` (None: all data) that a class of the train split (``labels``) cannot fill: its
    tuning sample draws from the rows the validation split leaves (``n - floor(fraction * n)`` of a class of
    ``n``), the final one from all ``n``; a class with fewer would be drawn short and the cell filed as N shots."""
    classes, counts = np.unique(np.asarray(labels), return_counts=True)
    check_shot_counts(dict(zip(classes.tolist(), counts.tolist(), strict=True)), fraction, shots)


def check_shot_counts(counts: Mapping[Any, int], fraction: float, shots: Iterable[int | None],
                      option: str = "--shots", unit: str = "train rows", name: Callable[[Any], str] = str) -> None:
    """:func:`check_shots` on each class's number of train rows (``counts``: class -> rows), e.g. the images a data
    check found before any extraction; ``option`` names the setting and ``name`` the class in the message."""
    if not counts:
        return
    left = {c: n - int(n * fraction) for c, n in counts.items()}  # val_split's floor(fraction * n) per class
    fewest = min(left, key=left.__getitem__)
    for n in shots:
        if n is not None and n > left[fewest]:
            tuning = f" ({left[fewest]} left for tuning by the {fraction:.0%} validation split)" if fraction else ""
            raise CogError(f"{option} {n}: class {name(fewest)} has {counts[fewest]} {unit}{tuning}, fewer than {n};"
                           f" an N-shot cell needs N rows of every class (here at most {left[fewest]} shots)")


def tuning_indices(labels: np.ndarray, fraction: float, seed: int, shots: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) rows for tuning: the validation split first, then N per class from the rest
    (:func:`check_shots`)."""
    labels = np.asarray(labels)
    check_shots(labels, fraction, [shots])
    train_idx, val_idx = val_split(labels, fraction, seed)
    if shots is not None:
        train_idx = few_shot(labels, train_idx, shots, tuning_seed(seed))
    return train_idx, val_idx


def final_indices(labels: np.ndarray, seed: int, shots: int | None) -> np.ndarray:
    """Training rows of the final probe: all of the train split, or a fresh N-shot sample of it (refused where a
    class has fewer than N rows, :func:`check_shots`)."""
    everything = np.arange(len(labels), dtype=np.int64)
    if shots is None:
        return everything
    check_shots(labels, 0.0, [shots])
    return few_shot(np.asarray(labels), everything, shots, final_seed(seed))
