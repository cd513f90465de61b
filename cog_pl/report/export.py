"""A results file others can read: one JSON file per model (``cog-pl report --export``) and a leaderboard.

:func:`export_records` makes, per label of a report, one record of format ``cog-pl-export`` version 1
(docs/reference/export.md; its JSON Schema ships as ``cog_pl/assets/export.schema.json``, :func:`export_schema`)::

    {"format": "cog-pl-export", "version": 1, "made_by": "cog_pl 0.x",
     "model": {"label", "arch", "weights", "weights_sha256", "definition"},
     "benchmark": {"name", "sha256"},                # the level_file_sha256 its feature stores record
     "run": "runs/a" | null,                          # its run, in a report of several (cog_pl.report.runs)
     "methods": {"linear": {"label": "linear probe",
                            "protocol": {"name": "paper" | "quick" | "custom" | null, "words": "...",
                                         "record": {...} | null},
                            "domains": {"in1k": {"top1", "std", "seeds", "interval": {...} | null}, ..., "cog_l5": ...},
                            "drop_l1_l5": {"mean", "std", "seeds"} | null}, ...}}

Every number is of all training data, the report's cells (each cell's newest protocol); ``interval``: the 95 %
percentile bootstrap interval of the top-1 over test images (:func:`cog_pl.analysis.intervals.top1_interval`), null
where the cell's rows have no stored predictions. :func:`leaderboard_markdown` ranks records' linear probes by L5 and by
the L1−L5 drop; :func:`read_exports` reads records others contributed and refuses, in one line naming the file, one
of another format, benchmark or protocol than the first: what a shared leaderboard accepts.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.parse
from collections import defaultdict
from collections.abc import Mapping, Sequence
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

import numpy as np

from cog_pl.analysis.concepts import LEVEL, N_BOOT
from cog_pl.analysis.intervals import top1_interval
from cog_pl.benchmark import OFFICIAL_NAME
from cog_pl.errors import CogError
from cog_pl.evaluate.table import method_label, method_sort_key
from cog_pl.io import read_json, write_json
from cog_pl.protocol import DOMAINS
from cog_pl.provenance import versions
from cog_pl.report.protocol_names import row_protocol
from cog_pl.report.tables import Cell, domain_label, mean_std
from cog_pl.resources import level_file_sha256
from cog_pl.results import DEFAULT_METHOD, method_of
from cog_pl.results.predictions import Predictions
from cog_pl.results.weights import row_weights

__all__ = ["FORMAT", "VERSION", "export_records", "export_schema", "leaderboard_markdown", "read_exports",
           "write_exports"]

log = logging.getLogger(__name__)

FORMAT = "cog-pl-export"
VERSION = 1
#: The folder of a report the export files go in, and the leaderboard's file.
FOLDER, LEADERBOARD = "export", "leaderboard.md"


def export_schema() -> dict[str, Any]:
    """The JSON Schema of a record (draft 2020-12), shipped with the package."""
    return json.loads((importlib_resources.files("cog_pl") / "assets" / "export.schema.json").read_text())


def _benchmark(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The benchmark a label's rows were made on: the digest and name their feature stores record (the packaged level
    file's digest is the official benchmark's); nulls where the rows record none."""
    digests, names = set(), set()
    for row in rows:
        for split in (row.get("features") or {}).values() if isinstance(row.get("features"), dict) else ():
            if isinstance(split, dict) and split.get("level_file_sha256"):
                digests.add(split["level_file_sha256"])
                names.add(split.get("benchmark") or (OFFICIAL_NAME if split["level_file_sha256"]
                                                      == level_file_sha256() else None))
    if len(digests) != 1:
        return {"name": None, "sha256": None}
    return {"name": next(iter(names)), "sha256": next(iter(digests))}


def _weights(rows: Sequence[dict[str, Any]]) -> str | None:
    """The one weights digest a label's rows record (:func:`cog_pl.results.weights.row_weights`), else None."""
    found = {d for r in rows if (d := row_weights(r))}
    return next(iter(found)) if len(found) == 1 else None


def _interval(by_seed: Mapping[int, Predictions] | None, seed: int) -> dict[str, Any] | None:
    if not by_seed:
        return None
    correct = np.stack([p.correct for _, p in sorted(by_seed.items())])
    _, low, high = top1_interval(correct, seed=seed)
    return {"low": round(low, 4), "high": round(high, 4), "level": LEVEL, "resamples": N_BOOT, "seed": seed,
            "images": int(correct.shape[1])}


def _drop(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The L1 - L5 top-1 drop of one (model, method)'s all-data rows, paired by seed."""
    by: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r["domain"] in ("cog_l1", "cog_l5"):
            by[r["domain"]][int(r["seed"])] = float(r["test_top1"])
    paired = [by["cog_l1"][s] - by["cog_l5"][s] for s in sorted(by["cog_l1"].keys() & by["cog_l5"].keys())]
    if not paired:
        return None
    mean, std = mean_std(paired)
    return {"mean": round(mean, 4), "std": round(std, 4), "seeds": len(paired)}


def export_records(cells: Sequence[Cell], rows: Sequence[dict[str, Any]], facts: Mapping[str, Mapping[str, Any]],
                   predictions: Mapping[tuple[str, str, str], Mapping[int, Predictions]],
                   runs: Mapping[str, str] | None = None, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per label of ``cells`` with all-data cells on the official domains: its record (the module's docstring).
    ``rows``: the report's (each cell's newest protocol), ``facts``: each label's model facts
    (:func:`cog_pl.report.models.model_facts`), ``predictions``: the stored ones per (model, method, domain) and seed,
    ``runs``: each label's run; every interval's bootstrap draws from ``seed``."""
    made_by = f"cog_pl {versions()['cog_pl']}"
    all_data = [r for r in rows if r.get("shots") is None and r["domain"] in DOMAINS]
    out: dict[str, dict[str, Any]] = {}
    for label in sorted({c.model for c in cells}):
        mine = [c for c in cells if c.model == label and c.shots is None and c.domain in DOMAINS]
        if not mine:
            continue
        label_rows = [r for r in all_data if r["model"] == label]
        methods: dict[str, Any] = {}
        for method in sorted({c.method for c in mine}, key=method_sort_key):
            method_rows = [r for r in label_rows if method_of(r) == method]
            name, words = row_protocol(method_rows[0]) if method_rows else (None, mine[0].protocol_words)
            record = method_rows[0].get("protocol") if method_rows else None
            methods[method] = {
                "label": method_label(method),
                "protocol": {"name": name, "words": words, "record": record if isinstance(record, dict) else None},
                "domains": {c.domain: {"top1": round(c.top1, 4), "std": round(c.top1_std, 4), "seeds": c.seeds,
                                       "interval": _interval(predictions.get((label, method, c.domain)), seed)}
                            for c in sorted(mine, key=lambda c: DOMAINS.index(c.domain)) if c.method == method},
                "drop_l1_l5": _drop(method_rows)}
        f = facts.get(label, {})
        weights = f.get("weights")
        out[label] = {"format": FORMAT, "version": VERSION, "made_by": made_by,
                      "model": {"label": label, "arch": f.get("arch"),
                                "weights": Path(weights).name if weights and weights not in ("random", "module")
                                else weights, "weights_sha256": f.get("weights_sha256") or _weights(label_rows),
                                "definition": f.get("definition")},
                      "benchmark": _benchmark(label_rows), "run": (runs or {}).get(label), "methods": methods}
    return out


def export_name(label: str) -> str:
    """The file name of a label's record: the label, ``/`` and a leading dot escaped, ``.json``."""
    part = urllib.parse.quote(label, safe="._@:+=-")
    return ("%2E" + part[1:] if part.startswith(".") else part) + ".json"


def write_exports(folder: str | Path, records: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """Write each record as ``folder/<label>.json`` (atomically) and remove the records of other labels an earlier
    report left there; returns the files written."""
    folder = Path(folder)
    written = []
    for label, record in records.items():
        write_json(folder / export_name(label), dict(record), indent=2)
        written.append(folder / export_name(label))
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        if path not in written and _is_export(path):
            path.unlink()
            log.info("removed %s: this report does not export its label", path)
    return written


def _is_export(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def read_exports(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Records others contributed, checked as a shared leaderboard checks them: each of this format and version,
    with a linear probe's results, and all of the first's benchmark digest and linear-probe protocol; a label given
    twice is refused. Each refusal is one line naming the file."""
    records: list[dict[str, Any]] = []
    labels: dict[str, Path] = {}
    for path in map(Path, paths):
        rec = read_json(path, "export file")
        if not isinstance(rec, dict) or rec.get("format") != FORMAT or rec.get("version") != VERSION:
            found = f"{rec.get('format')} v{rec.get('version')}" if isinstance(rec, dict) else "not a JSON object"
            raise CogError(f"export file {path} is {found}; a leaderboard reads {FORMAT} v{VERSION} "
                           "(cog-pl report --export writes it)")
        linear = (rec.get("methods") or {}).get(DEFAULT_METHOD)
        label = (rec.get("model") or {}).get("label")
        if not label or not isinstance(linear, dict) or not (rec.get("benchmark") or {}).get("sha256"):
            raise CogError(f"export file {path} has no model label, linear probe results or benchmark digest: a "
                           "leaderboard ranks linear probes of one benchmark")
        _check_linear(linear, path)
        if label in labels:
            raise CogError(f"export file {path} is of label {label}, as {labels[label]} is: a leaderboard holds one "
                           "line per label")
        if records:
            first, first_path = records[0], next(iter(labels.values()))
            if rec["benchmark"]["sha256"] != first["benchmark"]["sha256"]:
                raise CogError(f"export file {path} is of benchmark {rec['benchmark']['sha256'][:12]}, "
                               f"{first_path} of {first['benchmark']['sha256'][:12]}: a leaderboard ranks one "
                               "benchmark")
            theirs, ours = linear["protocol"]["words"], first["methods"][DEFAULT_METHOD]["protocol"]["words"]
            if theirs != ours:
                raise CogError(f"export file {path} was made under protocol {theirs}, {first_path} under {ours}: a "
                               "leaderboard ranks linear probes of one protocol")
        labels[label] = path
        records.append(rec)
    return records


def _check_linear(linear: Mapping[str, Any], path: Path) -> None:
    """Refuse, in one line naming the file, a linear probe's entry without what a leaderboard reads of it."""
    try:
        ok = isinstance(linear["protocol"]["words"], str) and all(
            isinstance(cell["top1"], (int, float)) and (cell.get("interval") is None or {"low", "high"} <= set(
                cell["interval"])) for cell in linear["domains"].values())
        drop = linear.get("drop_l1_l5")
        ok = ok and (drop is None or all(isinstance(drop[k], (int, float)) for k in ("mean", "std", "seeds")))
    except (KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise CogError(f"export file {path}: its linear probe's entry lacks the protocol's words, a domain's top1 or "
                       f"a drop's mean, std and seeds ({FORMAT} v{VERSION}, docs/reference/export.md)")


def _num(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _line(rank: int, rec: Mapping[str, Any], key: str) -> str:
    linear = rec["methods"][DEFAULT_METHOD]
    domains = linear["domains"]
    cols = []
    for d in DOMAINS:
        got = domains.get(d)
        text = _num(got["top1"]) if got else "–"
        if got and d == key and got.get("interval"):
            text += f" [{_num(got['interval']['low'])}, {_num(got['interval']['high'])}]"
        cols.append(text)
    drop = linear.get("drop_l1_l5")
    drop_text = "–" if not drop else f"{_num(drop['mean'])} ± {_num(drop['std'])}" if drop["seeds"] > 1 \
        else f"{_num(drop['mean'])} (n = 1)"
    digest = (rec["model"].get("weights_sha256") or "–")[:12]
    return (f"| {rank} | {rec['model']['label']} | {digest} | {linear['protocol']['words']} | "
            + " | ".join(cols) + f" | {drop_text} |")


def leaderboard_markdown(records: Sequence[Mapping[str, Any]], source: str = "") -> str:
    """``leaderboard.md``: the linear probes of ``records`` (all data) ranked by L5 top-1 (highest first) and by the
    L1−L5 drop (smallest first), a model lacking the value last; each line with its weights' digest and protocol in
    words. ``source``: where the records come from, said under the title."""
    recs = [r for r in records if DEFAULT_METHOD in r.get("methods", {})]
    benchmarks = sorted({f"{r['benchmark'].get('name') or 'unnamed'} (sha256 "
                         f"{(r['benchmark'].get('sha256') or '–')[:12]})" for r in recs})
    protocols = sorted({r["methods"][DEFAULT_METHOD]["protocol"]["words"] for r in recs})

    def l5(r: Mapping[str, Any]) -> float:
        got = r["methods"][DEFAULT_METHOD]["domains"].get("cog_l5")
        return -got["top1"] if got else math.inf

    def drop(r: Mapping[str, Any]) -> float:
        got = r["methods"][DEFAULT_METHOD].get("drop_l1_l5")
        return got["mean"] if got else math.inf

    head = ("| rank | model | weights sha256 | protocol | " + " | ".join(domain_label(d) for d in DOMAINS)
            + " | L1−L5 |\n" + "|---" * (len(DOMAINS) + 5) + "|")
    parts = ["# ImageNet-CoG leaderboard", "",
             f"Linear probes on all training data: test top-1 (%), mean over seeds; benchmark "
             f"{', '.join(benchmarks) or 'not recorded'}" + (f"; from {source}" if source else "") + ". The ranked "
             "column shows its 95 % bootstrap interval over test images where predictions were stored; L1−L5: the "
             "top-1 drop from L1 to L5, paired by seed, mean ± std over seeds. Each line is one model's export file "
             f"(format {FORMAT} v{VERSION})."]
    if len(protocols) > 1 or len(benchmarks) > 1:
        parts += ["", "**These lines were made under other protocols or benchmarks (" + "; ".join(protocols)
                  + "): their ranks are not comparable.**"]
    for title, key, order in (("Sorted by L5 top-1 (highest first)", "cog_l5", l5),
                              ("Sorted by the L1−L5 drop (smallest first)", "", drop)):
        ranked = sorted(recs, key=lambda r: (order(r), r["model"]["label"]))
        parts += ["", f"## {title}", "", head, *(_line(i + 1, r, key) for i, r in enumerate(ranked))]
    return "\n".join(parts) + "\n"
