"""Several runs in one report: ``cog-pl report --runs A B`` or ``--results A/results.sqlite --results B/...``.

:func:`read_runs` reads each results store and refuses, before any work and in one line naming both stores, stores
that cannot be set side by side: rows of another benchmark (the ``level_file_sha256`` their feature stores record:
the packaged level file's digest, or a custom benchmark's), another similarity source (the results store's ``info``
``similarity``, :func:`cog_pl.report.concepts.record_similarity_source`), or another protocol (per method, the
protocols in words of the rows each store's report would show, :func:`cog_pl.report.protocol_names.row_protocol`).

Each label's rows come from one run: a label found in several stores is taken from the first store given that holds
it, and the others' rows of it are left out and listed in the report (a cell averages the rows of one run's protocol;
two runs' rows of one label are two measurements, not more seeds of one). A label naming other weights in two stores
(:func:`cog_pl.results.weights.row_weights`) is refused: a report names one set of weights per label. Every row read
keeps its store (:data:`cog_pl.report.concepts.STORE`), beside which its predictions are read, and every label its
run: the report's main table and ``results.csv`` name it (column ``run``), section Runs lists them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cog_pl.errors import CogError, MissingFileError
from cog_pl.evaluate.table import method_label, method_sort_key
from cog_pl.report.concepts import STORE, recorded_similarity, similarity_compared, similarity_where
from cog_pl.report.protocol_names import row_protocol
from cog_pl.report.protocols import split_protocols
from cog_pl.results import method_of, read_info, read_rows, row_times
from cog_pl.results.weights import row_weights

__all__ = ["Run", "Runs", "merge_sections", "read_runs", "run_stores", "runs_markdown", "runs_note", "with_runs"]

#: The results store a run folder holds (``cog-pl run --out DIR`` writes ``DIR/results.sqlite``).
RESULTS_NAME = "results.sqlite"
#: The results store's ``info`` key of the feature stores' root (:data:`cog_pl.report.build.FEATURES_INFO`).
_FEATURES_INFO = "features"


def run_stores(folders: Sequence[str | Path]) -> list[Path]:
    """The results store of each run folder (``DIR/results.sqlite``); a folder without one is refused by name."""
    stores = []
    for folder in folders:
        store = Path(folder) / RESULTS_NAME
        if not store.is_file():
            why = "does not exist" if not Path(folder).exists() else f"has no {RESULTS_NAME}"
            raise MissingFileError(f"--runs {folder}: the folder {why} (cog-pl run --out {folder} writes "
                                   f"{store})")
        stores.append(store)
    return stores


@dataclass(frozen=True)
class Run:
    """One results store of a report: its ``name`` (its folder as given; the store's path where two stores share a
    folder), the ``labels`` it gives the report, what it records (``similarity``, ``features``: the feature stores'
    root where it still exists), the benchmark digests and the protocols (per method, in words) of its rows."""

    name: str
    results: Path
    labels: tuple[str, ...]
    similarity: dict[str, Any]
    features: Path | None
    benchmarks: tuple[str, ...]
    protocols: dict[str, tuple[str, ...]]
    rows: int


@dataclass
class Runs:
    """The runs of a report and the rows it shows: each label's from one run (:data:`~cog_pl.report.concepts.STORE`
    set), with when each was written (``times``), the run of each label, and the labels left out of a later run
    (``left_out``: label, its run, the run it is taken from, rows)."""

    runs: list[Run]
    rows: list[dict[str, Any]]
    times: dict[tuple, str]
    run_of: dict[str, str]
    left_out: list[tuple[str, str, str, int]] = field(default_factory=list)

    def features_of(self) -> dict[str, Path | None]:
        """Each label's feature stores' root (its run's)."""
        by_name = {r.name: r.features for r in self.runs}
        return {label: by_name[name] for label, name in self.run_of.items()}


def _names(stores: Sequence[Path]) -> list[str]:
    folders = [str(s.parent) for s in stores]
    return folders if len(set(folders)) == len(folders) else [str(s) for s in stores]


def _benchmarks(rows: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The benchmark digests (``level_file_sha256``) the feature stores of the rows on the benchmark's own domains
    record (a level variant's stores, ``cog_l3@wup``, record the variant's level file: not the benchmark's)."""
    found = set()
    for row in rows:
        if "@" in str(row.get("domain", "")):
            continue
        features = row.get("features")
        if isinstance(features, dict):
            found |= {v["level_file_sha256"] for v in features.values()
                      if isinstance(v, dict) and v.get("level_file_sha256")}
    return tuple(sorted(found))


def _protocols(rows: Sequence[dict[str, Any]], times: Mapping[tuple, str]) -> dict[str, tuple[str, ...]]:
    """Per method, the protocols in words of the rows a report of them shows (each cell's newest protocol)."""
    kept, _ = split_protocols(rows, times)
    found: dict[str, set[str]] = defaultdict(set)
    for row in kept:
        found[method_of(row)].add(row_protocol(row)[1])
    return {m: tuple(sorted(ws)) for m, ws in found.items()}


def _similarity(run: Run) -> dict[str, Any]:
    """What two runs' similarity sources must share: the values, not the file's path or name."""
    return {k: v for k, v in similarity_compared(run.similarity).items() if k != "source"}


def _refuse_unlike(a: Run, b: Run) -> None:
    """Refuse two runs of other benchmarks, similarity sources or protocols, in one line naming both stores."""
    both = f"results stores {a.results} and {b.results}"
    tail = "a report of several runs sets side by side runs of one benchmark and protocol: report them apart"
    if a.benchmarks and b.benchmarks and a.benchmarks != b.benchmarks:
        raise CogError(f"{both} hold rows of other benchmarks (level file sha256 "
                       f"{', '.join(d[:12] for d in a.benchmarks)} against {', '.join(d[:12] for d in b.benchmarks)});"
                       f" {tail}")
    if _similarity(a) != _similarity(b):
        raise CogError(f"{both} record other similarity sources ({similarity_where(a.similarity)} against "
                       f"{similarity_where(b.similarity)}); {tail}")
    for method in sorted(a.protocols.keys() & b.protocols.keys(), key=method_sort_key):
        if a.protocols[method] != b.protocols[method]:
            raise CogError(f"{both} were made under other protocols: {method_label(method)} rows under "
                           f"{'; '.join(a.protocols[method])} in the first, {'; '.join(b.protocols[method])} in the "
                           f"second; {tail}")


def read_runs(stores: Sequence[str | Path]) -> Runs:
    """The rows of several results stores for one report (the module's docstring); refused in one line: a store given
    twice, stores of other benchmarks, similarity sources or protocols, a label of other weights in two stores."""
    stores = [Path(s) for s in stores]
    seen: dict[Path, Path] = {}
    for store in stores:
        if store.resolve() in seen:
            raise CogError(f"results store {store} is given twice ({seen[store.resolve()]}); give each run once")
        seen[store.resolve()] = store
    runs, rows_of, times = [], [], {}
    for name, store in zip(_names(stores), stores):
        rows = read_rows(store)
        if not rows:
            raise CogError(f"results file {store} holds no rows (run `cog-pl run` or `cog-pl probe` first)")
        when = row_times(store)
        features = read_info(store, _FEATURES_INFO)
        runs.append(Run(name, store, tuple(sorted({r["model"] for r in rows})), recorded_similarity(store),
                        Path(features) if features and Path(features).is_dir() else None, _benchmarks(rows),
                        _protocols(rows, when), len(rows)))
        rows_of.append(rows)
        times.update(when)
    for k, run in enumerate(runs):
        for other in runs[k + 1:]:
            _refuse_unlike(run, other)
    run_of: dict[str, str] = {}
    weights: dict[str, tuple[str, set[str]]] = {}
    out, left_out = [], []
    for run, rows in zip(runs, rows_of):
        for label in run.labels:
            mine = [r for r in rows if r["model"] == label]
            digests = {d for r in mine if (d := row_weights(r))}
            if label in run_of:
                first, theirs = weights[label]
                if digests and theirs and not digests & theirs:
                    raise CogError(f"label {label} names other weights in {first} (sha256 "
                                   f"{', '.join(sorted(d[:16] for d in theirs))}) and in {run.results} ("
                                   f"{', '.join(sorted(d[:16] for d in digests))}): a report names one set of weights "
                                   "per label; report the runs apart, or make one's rows under another --name")
                left_out.append((label, run.name, run_of[label], len(mine)))
                continue
            run_of[label], weights[label] = run.name, (str(run.results), digests)
            out += [{**r, STORE: str(run.results)} for r in mine]
    return Runs(runs, out, times, run_of, left_out)


def runs_markdown(runs: Runs) -> str:
    """The report's section Runs: a line per run (its folder, labels, benchmark, similarity source, protocols and
    rows) and the labels left out of a later run."""
    lines = ["", "## Runs", "", "This report sets side by side the rows of several runs, each label's from one run "
             "(column run of the main table and of results.csv); their predictions are read beside each run's "
             "results store. The runs share their benchmark, similarity source and protocols (checked).", "",
             "| run | results store | labels | benchmark (level file sha256) | similarity | protocols | rows |",
             "|---|---|---|---|---|---|---|"]
    for run in runs.runs:
        labels = [lb for lb in run.labels if runs.run_of.get(lb) == run.name]
        protocols = "; ".join(f"{method_label(m)}: {', '.join(w)}" for m, w in
                              sorted(run.protocols.items(), key=lambda kv: method_sort_key(kv[0])))
        lines.append(f"| {run.name} | {run.results} | {', '.join(labels) or '–'} | "
                     f"{', '.join(d[:12] for d in run.benchmarks) or 'not recorded'} | "
                     f"{similarity_where({**run.similarity, 'file': None})} | {protocols} | {run.rows} |")
    if runs.left_out:
        lines += ["", "Labels found in more than one run, shown from the first run given that holds them (the same "
                  "weights; a cell averages one run's rows): " + "; ".join(
                      f"{label}: {n} row(s) of {name} left out, {kept}'s shown" for label, name, kept, n in
                      runs.left_out) + "."]
    return "\n".join(lines) + "\n"


def merge_sections(sections: Sequence[str]) -> str:
    """One section of the same heading and table from several (per run): the first whole, then the other tables'
    lines; empty sections dropped."""
    sections = [s for s in sections if s]
    if len(sections) < 2:
        return "".join(sections)
    extra = [ln for s in sections[1:] for ln in s.splitlines()[5:] if ln.startswith("| ")]
    return sections[0].rstrip("\n") + "\n" + "".join(f"{ln}\n" for ln in extra)


def runs_note(runs: Runs) -> str:
    """The line above the report's first table: how many runs, and each one's labels."""
    return (f"Rows of {len(runs.runs)} runs, each label's from one (section Runs): " + "; ".join(
        f"{run.name} ({', '.join(lb for lb in run.labels if runs.run_of.get(lb) == run.name) or 'none shown'})"
        for run in runs.runs) + ".")


def with_runs(summary: Mapping[str, Mapping[str, str]], runs: Runs | None,
              rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The main table's columns after the domains (``summary``: model -> column -> text), with a last column ``run``
    naming each label's run where the report has several; every label of ``rows`` gets every column (``–``)."""
    if runs is None:
        return {m: dict(cols) for m, cols in summary.items()}
    columns = list(dict.fromkeys(k for cols in summary.values() for k in cols))
    return {label: {**{k: summary.get(label, {}).get(k, "–") for k in columns}, "run": runs.run_of[label]}
            for label in sorted({r["model"] for r in rows})}
