"""Results format 2: the method in the key, version-1 files migrated in place, one provenance for every artifact."""

from __future__ import annotations

import csv
import io
import multiprocessing as mp
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cog_pl.cli.main import main
from cog_pl.provenance import PACKAGES, created, provenance, versions
from cog_pl.results import FORMAT, METHODS, append_row, check_results_file, has_row, read_rows

V1 = Path(__file__).parent / "data" / "results_v1"  # written by make_v1.py with the format-1 code (commit 0ea763b)

# The format-1 schema and insert, frozen as the code of commit 0ea763b wrote them.
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


def _v1_copy(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    shutil.copyfile(V1 / "results_v1.sqlite", path)
    return path


def _format(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT value FROM info WHERE key='format'").fetchone()[0]
    finally:
        con.close()


def _as_v1_csv(text: str, finetune_relative: bool = True) -> str:
    """A format-2 results.csv as format 1 wrote it: no method column, fine-tuned models named ``<name>@finetune``,
    none of the columns after ``top1_relative``; without ``finetune_relative``, the fine-tuned rows' relative empty
    (format 1's was against the baseline's linear probe, issue 37 sets it against the baseline's fine-tuned row)."""
    lines = list(csv.reader(io.StringIO(text)))
    assert lines[0][:3] == ["model", "method", "domain"]
    end = lines[0].index("top1_relative") + 1
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([lines[0][0], *lines[0][2:end]])
    for model, method, *rest in lines[1:]:
        tuned = method == "finetune"
        rest = rest[: end - 2] if finetune_relative or not tuned else [*rest[: end - 3], ""]
        w.writerow([model + ("@finetune" if method == "finetune" else ""), *rest])
    return out.getvalue()


def _with_method(v1_csv: str) -> str:
    """A format-1 results.csv with format 2's method column (``<name>@finetune``: ``finetune``, else ``linear``)."""
    lines = list(csv.reader(io.StringIO(v1_csv)))
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([lines[0][0], "method", *lines[0][1:]])
    for model, *rest in lines[1:]:
        w.writerow([model.removesuffix("@finetune"), "finetune" if model.endswith("@finetune") else "linear", *rest])
    return out.getvalue()


def _holds_old_report(new: str, old: str) -> bool:
    """Every line of the old report is in the new one, in order; a table line may gain columns on its right (the
    main table's L1-L5 drop, issue 32), everything else the new report adds comes between them."""
    lines = iter(new.splitlines())
    return all(any(n == line or (line.startswith("|") and n.startswith(line)) for n in lines)
               for line in old.splitlines())


@pytest.mark.parametrize("name, baseline", [("report", None), ("report_baseline", "resnet50")])
def test_a_v1_file_migrates_in_place_and_reports_the_same_tables(tmp_path, capsys, name, baseline):
    path = _v1_copy(tmp_path)
    assert _format(path) == "cog-pl-results v1"
    out = tmp_path / "report"
    argv = ["report", "--results", str(path), "--out", str(out), *(["--baseline", baseline] if baseline else [])]
    assert main(argv) == 0
    capsys.readouterr()
    assert _format(path) == FORMAT
    assert _holds_old_report((out / "report.md").read_text(), (V1 / name / "report.md").read_text())
    assert "None of the 32 all-data rows has stored test predictions" in (out / "report.md").read_text()
    got = _as_v1_csv((out / "results.csv").read_text(), finetune_relative=False)
    assert got == _as_v1_csv(_with_method((V1 / name / "results.csv").read_text()), finetune_relative=False)


def test_migrated_rows_carry_the_method_in_key_and_row(tmp_path):
    path = _v1_copy(tmp_path)
    con = sqlite3.connect(path)
    before = {m: n for m, n in con.execute("SELECT model, count(*) FROM rows GROUP BY model")}
    updated = sorted(r[0] for r in con.execute("SELECT updated FROM rows"))
    con.close()
    assert before == {"dino": 46, "dino@finetune": 6, "resnet50": 36, "resnet50@finetune": 2}
    rows = read_rows(path)  # a reader migrates too
    assert len(rows) == sum(before.values()) and {r["model"] for r in rows} == {"dino", "resnet50"}
    tuned = [r for r in rows if r["method"] == "finetune"]
    assert [(r["model"], r["domain"]) for r in tuned] == [
        ("dino", d) for d in ("cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5", "in1k")] + [
        ("resnet50", "cog_l3"), ("resnet50", "in1k")]
    assert {r["method"] for r in rows if r not in tuned} == {"linear"}
    assert {r["format_version"] for r in rows if "format_version" in r} == {2}
    assert has_row(path, ("dino", "finetune", "in1k", None, 22)) and has_row(path, ("dino", "linear", "in1k", 4, 37))
    assert not has_row(path, ("dino@finetune", "finetune", "in1k", None, 22))
    con = sqlite3.connect(path)
    assert sorted(r[0] for r in con.execute("SELECT updated FROM rows")) == updated  # when each row was written
    assert {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")} == {"rows", "info"}
    con.close()
    snapshot = path.read_bytes()
    check_results_file(path)  # migrated once: opening again changes nothing
    assert read_rows(path) == rows and path.read_bytes() == snapshot


def _read(path: str, queue) -> None:
    queue.put(len(read_rows(path)))


def test_processes_opening_a_v1_file_at_once_migrate_it_once(tmp_path):
    path = _v1_copy(tmp_path)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_read, args=(str(path), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [queue.get(timeout=5) for _ in procs] == [90, 90] and len(read_rows(path)) == 90


def test_a_v1_file_that_cannot_migrate_is_left_as_it_was(tmp_path):
    path = tmp_path / "r.sqlite"
    _write_v1(path, [{"model": "m", "domain": "in1k", "shots": None, "seed": 22, "test_top1": 50.0},
                     {"model": "m", "domain": "in1k", "shots": None, "seed": 37, "method": "nearest-mean"}])
    before = path.read_bytes()
    with pytest.raises(ValueError, match=rf"results file {re.escape(str(path))} is in format 'cog-pl-results v1' "
                                         r"and could not be migrated.*left unchanged.*'nearest-mean'"):
        read_rows(path)
    assert path.read_bytes() == before and _format(path) == "cog-pl-results v1"


def test_the_same_model_and_domain_by_two_methods_are_two_rows(tmp_path):
    path = tmp_path / "r.sqlite"
    row = {"model": "m", "domain": "in1k", "shots": None, "seed": 22, "test_top1": 50.0}
    append_row(path, row)
    append_row(path, {**row, "method": "finetune", "test_top1": 70.0})
    append_row(path, {**row, "method": "knn", "test_top1": 40.0})
    assert [(r["method"], r["test_top1"]) for r in read_rows(path)] == [
        ("finetune", 70.0), ("knn", 40.0), ("linear", 50.0)]
    assert list(METHODS) == ["linear", "finetune", "knn"]
    with pytest.raises(ValueError, match="'m' on 'in1k' has method 'svm'; known methods: linear, finetune, knn"):
        append_row(path, {**row, "method": "svm"})
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
