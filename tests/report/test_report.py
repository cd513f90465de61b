"""Results store and report: rows in SQLite, tables and plots computed from rows only."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from cog_pl.cli.main import main
from cog_pl.report.tables import markdown_table, summarize
from cog_pl.results import append_row, has_row, read_rows

DOMAINS = ("in1k", "cog_l1", "cog_l2", "cog_l3", "cog_l4", "cog_l5")


def _row(model, domain, shots, seed, top1):
    return {"model": model, "domain": domain, "shots": shots, "seed": seed, "test_top1": top1,
            "test_top5": min(100.0, top1 + 10)}


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "results.sqlite"
    for model, offset in (("resnet50", 0.0), ("dino", 2.0)):
        for i, d in enumerate(DOMAINS):
            for seed, noise in ((22, -0.5), (37, 0.5)):
                append_row(path, _row(model, d, None, seed, 80 - 8 * i + offset + noise))
                append_row(path, _row(model, d, 4, seed, 40 - 5 * i + offset + noise))
    return path


def test_rows_round_trip_replace_and_skip(results):
    rows = read_rows(results)
    assert len(rows) == 2 * 6 * 2 * 2
    assert has_row(results, ("dino", "linear", "cog_l3", None, 37))
    assert not has_row(results, ("dino", "linear", "cog_l3", 8, 37))
    assert not has_row(results, ("dino", "finetune", "cog_l3", None, 37))
    assert {r["method"] for r in rows} == {"linear"}  # a row naming no method is a linear probe's
    append_row(results, _row("dino", "cog_l3", None, 37, 1.0))  # same key: replaced, not duplicated
    rows = read_rows(results)
    assert len(rows) == 48 and [r["test_top1"] for r in rows if r["model"] == "dino" and r["domain"] == "cog_l3"
                                and r["shots"] is None and r["seed"] == 37] == [1.0]


def _writer(path, k):
    for seed in range(20):
        append_row(path, _row(f"m{k}", "in1k", None, seed, float(seed)))


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "r.sqlite"
    procs = [mp.get_context("spawn").Process(target=_writer, args=(path, k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert len(read_rows(path)) == 60


def test_summary_mean_std_and_relative(results):
    cells = summarize(read_rows(results), baseline="resnet50")
    dino_l1 = next(c for c in cells if c.model == "dino" and c.domain == "cog_l1" and c.shots is None)
    assert dino_l1.top1 == pytest.approx(74.0) and dino_l1.top1_std == pytest.approx(0.7071, abs=1e-4)
    assert dino_l1.relative == pytest.approx(2.0) and dino_l1.seeds == 2
    table = markdown_table(cells)
    assert "| dino | 82.00 ± 0.71 | 74.00 ± 0.71 |" in table


def test_report_command_writes_tables_and_plots(results, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", "--results", str(results), "--baseline", "resnet50", "--out", str(out)]) == 0
    text = capsys.readouterr().out  # the main table, a line per other section, the files: not the whole report
    assert "| dino | 82.00 ± 0.71 | 74.00 ± 0.71 |" in text and "  - Relative to resnet50 (top-1 points)" in text
    assert "  - Few-shot: test top-1 (%) per number of images per concept" in text and "### L5" not in text
    assert f"report: {out / 'report.md'}" in text and f"plot:   {out / 'few_shot.png'}" in text
    assert "### L5" in (out / "report.md").read_text()
    for name in ("report.md", "results.csv", "domains.png", "domains_relative.png", "few_shot.png"):
        assert (out / name).stat().st_size > 100
    assert (out / "domains.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["report", "--results", str(results), "nomodel"]) == 2
    assert "no results for model(s) nomodel" in capsys.readouterr().err


def test_not_a_results_file_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"garbage" * 100)
    assert main(["report", "--results", str(bad)]) == 2
    assert f"results file {bad} is not a cog-pl results database" in capsys.readouterr().err
    con = sqlite3.connect(tmp_path / "empty.sqlite")
    con.close()
    assert main(["report", "--results", str(tmp_path / "empty.sqlite")]) == 2
    assert "holds no rows" in capsys.readouterr().err


def test_results_of_something_else_or_another_format_are_refused_untouched(tmp_path):
    row = {"model": "m", "domain": "in1k", "shots": None, "seed": 22, "test_top1": 50.0}
    other = tmp_path / "optuna.db"  # an Optuna study given as results by mistake
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE studies (study_id INTEGER PRIMARY KEY)")
    con.commit()
    con.close()
    before = other.read_bytes()
    for action in (lambda: read_rows(other), lambda: append_row(other, row)):
        with pytest.raises(ValueError, match=f"results file {other} is not a cog-pl results database.*studies"):
            action()
    assert other.read_bytes() == before  # no tables created in it

    newer = tmp_path / "newer.sqlite"
    append_row(newer, row)
    con = sqlite3.connect(newer)
    con.execute("UPDATE info SET value = 'cog-pl-results v3' WHERE key = 'format'")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match="in format 'cog-pl-results v3'; this cog-pl reads and writes"):
        read_rows(newer)
    with pytest.raises(ValueError, match="v3"):
        append_row(newer, row)


def test_reading_results_writes_nothing_and_waits_for_no_writer(tmp_path):
    path = tmp_path / "r.sqlite"
    append_row(path, {"model": "m", "domain": "in1k", "shots": None, "seed": 22})
    writer = sqlite3.connect(path)
    writer.execute("BEGIN IMMEDIATE")  # a protocol run in the middle of appending a row
    try:
        assert read_rows(path)[0]["seed"] == 22 and has_row(path, ("m", "linear", "in1k", None, 22))
    finally:
        writer.rollback()
        writer.close()


def test_the_reports_inputs_are_refused_before_any_work(results, tmp_path, capsys, monkeypatch):
    """Issue 47, item 6: a results file that does not exist was one that "holds no rows", an --out that is a file
    failed with ``File exists`` after the whole report's work, a --features folder that does not exist was ignored;
    each is now one line naming it, before any row is read."""
    import cog_pl.report.build

    monkeypatch.setattr(cog_pl.report.build, "read_rows", lambda *a, **kw: pytest.fail("work began"))
    afile = tmp_path / "afile"
    afile.write_text("x")
    for argv, said in (
            (["--results", str(tmp_path / "none.sqlite")], f"results file {tmp_path / 'none.sqlite'} does not exist"),
            (["--results", str(results), "--out", str(afile)], f"report folder {afile} cannot be made: it is a file"),
            (["--results", str(results), "--out", str(afile / "sub" / "report")],
             f"report folder {afile / 'sub' / 'report'} cannot be made: a file is in the way ({afile}, a folder "
             "above it, is a file)"),
            (["--results", str(results), "--out", str(tmp_path / "r"), "--features", str(tmp_path / "nowhere")],
             f"features {tmp_path / 'nowhere'} does not exist: give the feature stores' root"),
            (["--results", str(results), "--out", str(tmp_path / "r"), "--features", str(afile)],
             f"features {afile} is a file")):
        assert main(["report", *argv]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("cog-pl report: error: ") and said in line, line
    assert not (tmp_path / "r").exists()


def test_a_report_of_attentive_rows_only_opens_with_their_table(tmp_path, capsys):
    """Issue 46: no linear-probe row: the report opens with the attentive probe's table on all data (well formed, its
    protocol named), not an empty linear table; ``cog-pl report`` prints that table."""
    from cog_pl.protocol import ProbeProtocol, as_record

    path = tmp_path / "results.sqlite"
    record = {**as_record(ProbeProtocol()), "trials": 2, "epochs": 1}
    for i, d in enumerate(DOMAINS):
        for seed in (22, 37):
            append_row(path, {"model": "m+tokens2x2", "method": "attentive", "domain": d, "shots": None, "seed": seed,
                              "test_top1": 60.0 - 5 * i + seed / 37, "test_top5": 90.0, "protocol": record,
                              "identity": "x" * 64, "oracle_test_top1": 70.0, "selected_test_top1": 65.0})
    out = tmp_path / "report"
    assert main(["report", "--results", str(path), "--out", str(out), "--no-html"]) == 0
    text = (out / "report.md").read_text()
    first = text.split("\n## ")[1].split("\n## ")[0]
    assert first.startswith("attentive probe on all training data: test top-1 (%), mean ± std over seeds (no "
                            "linear-probe rows)")
    assert "protocol: custom (2 trials × 1 epoch)" in first
    table = [ln for ln in first.splitlines() if ln.startswith("|")]
    assert table[0] == "| model | method | IN-1K | L1 | L2 | L3 | L4 | L5 |" and len(table) == 3
    assert table[2].startswith("| m+tokens2x2 | attentive probe | 60.") and "–" not in table[2]
    assert "Linear probes on all training data" not in text and "| model | |" not in text
    shown = capsys.readouterr().out
    assert table[2] in shown and "  - Selection optimism" in shown
