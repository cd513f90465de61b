"""The results layer: what a run keeps of its probes and fine-tuning runs, and how it resumes them.

- :mod:`cog_pl.results.rows`: the results store, one row per (model, method, domain, shots, seed) in one SQLite
  file; what ``from cog_pl.results import ...`` gives (every name below).
- :mod:`cog_pl.results.predictions`: the test predictions kept beside the rows.
- :mod:`cog_pl.results.identity`: what a row's numbers depend on, its digest, and the rules for resuming a grid.
- :mod:`cog_pl.results.labels`: one label, one set of weights, in an output folder's stores and rows.
- :mod:`cog_pl.results.weights`: which weights a row was made from, the one rule for every method's rows.
- :mod:`cog_pl.results.claims`: which worker makes which cell of a probe grid (the claims file beside the rows).
"""

from cog_pl.results.rows import (
    DEFAULT_METHOD,
    FORMAT,
    FORMAT_VERSION,
    KEY_FIELDS,
    NO_SEED,
    SCOPE_FIELDS,
    StoredRow,
    StoredRows,
    append_row,
    check_results_file,
    count_rows,
    delete_row,
    get_row,
    has_row,
    is_seedless,
    method_of,
    one_per_seedless_cell,
    read_info,
    read_rows,
    read_stored,
    row_key,
    row_times,
    write_info,
)

__all__ = ["DEFAULT_METHOD", "FORMAT", "FORMAT_VERSION", "KEY_FIELDS", "NO_SEED", "SCOPE_FIELDS", "StoredRow",
           "StoredRows", "append_row", "check_results_file", "count_rows", "delete_row", "get_row", "has_row",
           "is_seedless", "method_of", "one_per_seedless_cell", "read_info", "read_rows", "read_stored", "row_key",
           "row_times", "write_info"]
