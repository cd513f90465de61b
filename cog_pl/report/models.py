"""The report's models table (each label's architecture, weights file, sha256 prefix and feature definition) and the
baseline a user names, resolved to a label of the results."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError

__all__ = ["model_facts", "models_markdown", "resolve_baseline"]

#: Digits of the weights' sha256 the table shows.
SHA_DIGITS = 12


def resolve_baseline(baseline: str | None, labels: Sequence[str]) -> str | None:
    """The label ``baseline`` names among ``labels`` (those of the results): itself, else the model name it spells
    (``ResNet-50`` -> ``resnet50``, the paper model's label); a name of no label is refused, listing them."""
    if baseline is None or baseline in labels:
        return baseline
    from cog_pl.models.zoo import resolve_spec

    try:
        name = resolve_spec(baseline).name
    except ValueError:
        name = None
    if name in labels:
        return name
    raise CogError(f"--baseline {baseline}: no results under that label; the labels are {', '.join(labels)}")


def _from_rows(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    facts: dict[str, dict[str, Any]] = {}
    for row in rows:
        features = row.get("features")
        split = next((v for v in features.values() if isinstance(v, dict) and "arch" in v), None) if isinstance(
            features, dict) else None
        if split is not None and row["model"] not in facts:
            facts[row["model"]] = {"arch": split.get("arch"), "weights": None,
                                   "weights_sha256": split.get("weights_sha256"), "definition": split.get("definition")}
    return facts


def model_facts(rows: Sequence[dict[str, Any]], features: str | Path | Mapping[str, Path | None] | None = None
                ) -> dict[str, dict[str, Any]]:
    """Per label of ``rows``: ``arch``, ``weights`` (the file, ``random``, a package), ``weights_sha256`` and
    ``definition``, from its feature stores' meta.json under ``features`` (a root, or each label's) where there,
    else from its rows."""
    facts = _from_rows(rows)
    for label in sorted({r["model"] for r in rows}):
        root = features.get(label) if isinstance(features, Mapping) else features
        if root is None:
            continue
        for meta_path in sorted(Path(root).glob(f"{label}/*/*/meta.json")):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            facts[label] = {k: meta.get(k) for k in ("arch", "weights", "weights_sha256", "definition")}
            break
    return facts


def models_markdown(rows: Sequence[dict[str, Any]], features: str | Path | Mapping[str, Path | None] | None = None,
                    runs: Mapping[str, str] | None = None) -> str:
    """The report's "Models" section: one line per label of ``rows``; empty when nothing is known of any. ``runs``
    (a report of several runs): each label's run, in a last column."""
    facts = model_facts(rows, features)
    if not facts:
        return ""
    lines = ["", "## Models", "", "Each label names one set of weights (`cog-pl run --name`; paper names only for "
             "the published files).", "", "| model | architecture | weights | sha256 | definition |"
             + (" run |" if runs else ""), "|---|---|---|---|---|" + ("---|" if runs else "")]
    for label in sorted(facts):
        f = facts[label]
        digest = f["weights_sha256"][:SHA_DIGITS] if f.get("weights_sha256") else "–"
        weights = Path(f["weights"]).name if f.get("weights") and f["weights"] not in ("random", "module") \
            else (f.get("weights") or "–")
        lines.append(f"| {label} | {f.get('arch') or '–'} | {weights} | {digest} | {f.get('definition') or '–'} |"
                     + (f" {runs.get(label, '–')} |" if runs else ""))
    return "\n".join(lines) + "\n"
