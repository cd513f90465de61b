"""Which rows a report's cells average: one protocol per (model, method, domain, shots) cell, the newest.

A row's protocol key (:func:`cog_pl.results.identity.protocol_key`, its ``identity``) holds every value its number
depends on but its seed and shot count. Where one cell holds rows of several protocols (an ``--overwrite`` run stopped
half-way, rows copied in from another store, a single ``probe tune --overwrite``), :func:`split_protocols` keeps the
rows of the protocol of the cell's newest row (the results store's ``updated``) and sets the others apart;
:func:`stale_markdown` lists them in the report, with the values that differ.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from cog_pl.evaluate.table import method_label, method_sort_key
from cog_pl.report.tables import cell_of, domain_key, domain_label
from cog_pl.results import row_key
from cog_pl.results.identity import describe, protocol_differences, protocol_key


def split_protocols(rows: Iterable[dict], times: Mapping[tuple, str] | None = None) -> tuple[list[dict], list[dict]]:
    """(rows kept, stale rows): in each (model, method, domain, shots) cell holding rows of several protocols
    (:func:`cog_pl.results.identity.protocol_key`), the rows of the protocol of the cell's newest row (``times``: when
    each row was written, by key, :func:`cog_pl.results.row_times`) are kept and the others are stale, in their
    order."""
    rows, times = list(rows), times or {}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[cell_of(r)].append(r)
    stale_ids = set()
    for rs in groups.values():
        if len({protocol_key(r) for r in rs}) > 1:
            newest = max(rs, key=lambda r: times.get(row_key(r), ""))
            stale_ids |= {id(r) for r in rs if protocol_key(r) != protocol_key(newest)}
    return [r for r in rows if id(r) not in stale_ids], [r for r in rows if id(r) in stale_ids]


def stale_markdown(stale: Sequence[dict], kept: Sequence[dict]) -> str:
    """A report section listing the ``stale`` rows (per cell and protocol: the seeds and the values that differ
    from the cell's kept rows); empty when there are none."""
    if not stale:
        return ""
    cells: dict[tuple, dict] = {}
    for r in kept:
        cells.setdefault(cell_of(r), r)
    by: dict[tuple, list[dict]] = defaultdict(list)
    for r in stale:
        by[(*cell_of(r), protocol_key(r) or "")].append(r)
    lines = ["", "## Stale rows: made under another protocol than their cell's newest rows, left out of every table",
             "", "Not averaged with the cell's rows, nor used by any figure or analysis. `cog-pl run ... --overwrite` "
             "removes the rows of its model, method and domain that its settings would not make again.", "",
             "| model | method | domain | shots | seeds | made with | the cell's rows have |", "|---" * 7 + "|"]
    for (model, method, domain, shots, _), rs in sorted(by.items(), key=lambda kv: (
            kv[0][0], method_sort_key(kv[0][1]), domain_key(kv[0][2]), -1 if kv[0][3] is None else kv[0][3])):
        diff = protocol_differences(rs[0], cells[model, method, domain, shots])
        seeds = ", ".join(str(s) for s in sorted({r["seed"] for r in rs}))
        lines.append(f"| {model} | {method_label(method)} | {domain_label(domain)} | "
                     f"{'All' if shots is None else shots} | {seeds} | {describe(diff, 1)} | {describe(diff, 2)} |")
    return "\n".join(lines) + "\n"
