"""Results format 2: the method in the key, version-1 files refused untouched, one provenance for every artifact."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cog_pl.cli.main import main
from cog_pl.provenance import PACKAGES, created, provenance, versions
from cog_pl.results import append_row, check_results_file, has_row, read_rows

# The format-1 schema and insert, frozen as the development code of commit 0ea763b wrote them.
V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    model TEXT NOT NULL, domain TEXT NOT NULL, shots INTEGER NOT NULL, seed INTEGER NOT NULL,
    row TEXT NOT NULL, updated TEXT NOT NULL, PRIMARY KEY (model, domain, shots, seed));
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def _write_v1(path: Path, rows: list[dict]) -> None:
    import json

    con = sqlite3.connect(path)
    con.executescript(f"BEGIN IMMEDIATE; {V1_SCHEMA} INSERT OR IGNORE INTO info VALUES ('format', "
                      "'cog-pl-results v1'); COMMIT;")
    with con:
        for r in rows:
            con.execute("INSERT OR REPLACE INTO rows VALUES (?, ?, ?, ?, ?, ?)",
                        (r["model"], r["domain"], r["shots"] or 0, r["seed"], json.dumps(r, sort_keys=True),
                         "2025-01-01T00:00:00+00:00"))
    con.close()


def _format(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT value FROM info WHERE key='format'").fetchone()[0]
    finally:
        con.close()


def test_a_v1_file_is_refused_untouched_in_one_line(tmp_path, capsys):
    """Format 1 was a development format no release wrote (issue 37): refused by readers, writers and the report,
    naming the file and the format, and never migrated or otherwise changed."""
    path = tmp_path / "results.sqlite"
    row = {"model": "m", "domain": "in1k", "shots": None, "seed": 22, "test_top1": 50.0}
    _write_v1(path, [row, {"model": "m@finetune", "domain": "in1k", "shots": None, "seed": 22, "test_top1": 70.0}])
    before = path.read_bytes()
    said = (rf"results file {re.escape(str(path))} is in format 'cog-pl-results v1'; this cog-pl reads and writes "
            r"'cog-pl-results v2' \(a development format no release wrote; make its rows again\)")
    for action in (lambda: read_rows(path), lambda: check_results_file(path), lambda: append_row(path, row),
                   lambda: has_row(path, ("m", "linear", "in1k", None, 22))):
        with pytest.raises(ValueError, match=said):
            action()
    assert main(["report", "--results", str(path), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.fullmatch(f"cog-pl report: error: {said}", err)
    assert path.read_bytes() == before and _format(path) == "cog-pl-results v1"
    assert not (tmp_path / "report").exists()


def test_the_same_model_and_domain_by_two_methods_are_two_rows(tmp_path):
    path = tmp_path / "r.sqlite"
    row = {"model": "m", "domain": "in1k", "shots": None, "seed": 22, "test_top1": 50.0}
    append_row(path, row)
    append_row(path, {**row, "method": "finetune", "test_top1": 70.0})
    append_row(path, {**row, "method": "knn", "test_top1": 40.0})
    assert [(r["method"], r["test_top1"]) for r in read_rows(path)] == [
        ("finetune", 70.0), ("knn", 40.0), ("linear", 50.0)]
    append_row(path, {**row, "method": "svm", "test_top1": 30.0})  # any method: the store keeps no list of them
    assert ("svm", 30.0) in [(r["method"], r["test_top1"]) for r in read_rows(path)]
    with pytest.raises(TypeError, match="'m' on 'in1k' has method 'k nn'; a method's name is a Python identifier"):
        append_row(path, {**row, "method": "k nn"})
    with pytest.raises(ValueError, match=r"a result key is \(model, method, domain, shots, seed\)"):
        has_row(path, ("m", "in1k", None, 22))


def test_one_provenance_for_rows_level_files_and_stores(tmp_path):
    from cog_pl.features.store import make_meta

    got = provenance(wordnet="3.0")
    assert set(got) == {"versions", "created"}
    assert set(got["versions"]) == {"cog_pl", "python", *PACKAGES, "wordnet"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", created())
    meta = make_meta(model="m", created="then")
    assert meta["versions"] == versions() and meta["created"] == "then"  # fields win
    assert versions()["torch"] != "absent"


def test_store_metadata_imports_no_torch():
    code = ("import sys; from cog_pl.features.store import make_meta; m = make_meta(model='m'); "
            "assert 'torch' not in sys.modules, 'torch imported'; print(m['versions']['torch'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
