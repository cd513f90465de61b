"""One label, one set of weights: what an output folder's stores and rows already file under a model label.

A label (:mod:`cog_pl.models.label`) names the features, the rows and the report lines of one set of weights. Before
any work, ``cog-pl run`` and ``cog-pl extract`` read the weights digests recorded under their label (each feature
store's ``meta.json`` or an interrupted write's ``identity.json``: ``weights`` and ``weights_sha256``; each result
row: its weights digest, :func:`cog_pl.results.weights.row_weights`) and refuse, in one line
naming both files and digests, weights of another digest (``overwrite``: the user replaces them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cog_pl.errors import LabelWeightsError
from cog_pl.results.weights import row_weights

__all__ = ["LabelWeightsError", "check_label_weights", "recorded_weights"]


def _store_records(root: Path) -> list[tuple[str | None, str | None, str]]:
    """(file, digest, where) of each store under ``root`` (``<domain>/<split>``), finished or interrupted."""
    found = []
    for path in sorted([*root.glob("*/*/meta.json"), *root.glob("*/.*.partial/identity.json")]):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a damaged store is named by the store's own check
        if isinstance(meta, dict) and "weights_sha256" in meta:
            found.append((meta.get("weights"), meta["weights_sha256"], str(path.parent)))
    return found


def _row_digests(row: dict[str, Any]) -> list[str]:
    """The weights digest a row records (:func:`cog_pl.results.weights.row_weights`: its stores', or its method's own
    checkpoint digest), as a list: none where it records none."""
    digest = row_weights(row)
    return [digest] if digest else []


def recorded_weights(label: str, features: str | os.PathLike | None = None,
                     results: str | os.PathLike | None = None) -> list[tuple[str | None, str | None, str]]:
    """(weights file or None, sha256 or None, where) of every store under ``features/<label>/`` and every row of
    ``label`` in ``results``."""
    found = _store_records(Path(features) / label) if features is not None else []
    if results is not None and Path(results).is_file():
        from cog_pl.results import read_rows

        for row in read_rows(results, model=label):
            found += [(row.get("checkpoint"), d, f"{results} (row {label}/{row.get('method', 'linear')}/"
                       f"{row.get('domain')})") for d in _row_digests(row)]
    return found


def _short(digest: str | None) -> str:
    return "none (random or built-in weights)" if digest is None else digest[:16]


def check_label_weights(label: str, weights: str | os.PathLike | None, *, sha256: str | None = None,
                        features: str | os.PathLike | None = None, results: str | os.PathLike | None = None,
                        overwrite: bool = False, name_option: str = "--name",
                        overwrite_option: str = "--overwrite") -> None:
    """Refuse ``weights`` (a file, None for weights made in memory) under ``label`` where the stores of
    ``features/<label>/`` or the rows of ``label`` in ``results`` were made from weights of another digest
    (``sha256``: the weights' digest when known, else that of the file ``weights``).

    The line names both files and both digests, and the ways out: another label (``name_option``), another output
    folder, or ``overwrite_option`` to replace them. ``overwrite``: nothing is refused.
    """
    if overwrite or (sha256 is None and weights is not None and not Path(weights).is_file()):
        return  # (a file that is not there: the loader names it)
    from cog_pl.io import file_sha256

    digest = sha256 or (file_sha256(weights) if weights is not None else None)
    for file, other, where in recorded_weights(label, features, results):
        if other is not None and other != digest:
            theirs = f"{file} (sha256 {_short(other)})" if file else f"weights of sha256 {_short(other)}"
            raise LabelWeightsError(
                f"label {label} already names {theirs} in {where}; this run's weights are "
                f"{weights if weights is not None else 'random'} (sha256 {_short(digest)}): one label names one set of "
                f"weights: give these another with {name_option} LABEL, use another output folder, or pass "
                f"{overwrite_option} to replace them")
