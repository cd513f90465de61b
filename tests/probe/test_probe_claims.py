"""Cell claims: one holder per cell, taken over only after ``stale_after`` seconds without a heartbeat; a study whose
claim was taken over is started over, so the grid's row equals an uninterrupted run's."""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_probe_fixtures import write_features

from cog_pl.evaluate.runner import run_on_stores
from cog_pl.probe.study import ask_trials, open_study
from cog_pl.probe.tuner import SearchPlan, search_space
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import read_rows
from cog_pl.results.claims import claim, claims_path, heartbeat, release, renew, this_machine, worker_id

CELL = "m/linear/d/shots=all/seed=22"
PROTOCOL = replace(ProbeProtocol(), trials=4, epochs=2, batch_size=64)


def _age(results, cell: str, seconds: float) -> None:
    """Make the cell's claim look silent for ``seconds`` (its worker killed that long ago)."""
    with sqlite3.connect(claims_path(results)) as con:
        con.execute("UPDATE claims SET heartbeat=heartbeat-? WHERE cell=?", (seconds, cell))


def test_a_cell_has_one_holder_and_an_expired_claim_is_taken_over(tmp_path):
    results = tmp_path / "r.sqlite"
    mine = claim(results, CELL, stale_after=60, worker="a")
    assert mine is not None and not mine.taken_over and claims_path(results).exists()
    assert claim(results, CELL, stale_after=60, worker="b") is None  # a's heartbeat is fresh
    assert claim(results, CELL, stale_after=60, worker="a") is not None  # its own again
    _age(results, CELL, 61)
    theirs = claim(results, CELL, stale_after=60, worker="b")
    assert theirs is not None and theirs.taken_over
    assert not renew(mine)  # a learns it lost the cell
    release(mine)  # and leaves b's claim alone
    assert claim(results, CELL, stale_after=60, worker="c") is None
    release(theirs)
    assert claim(results, CELL, stale_after=60, worker="c") is not None  # released: free at once


def test_a_live_claim_is_renewed_by_its_heartbeat_and_never_taken(tmp_path):
    results = tmp_path / "r.sqlite"
    mine = claim(results, CELL, stale_after=0.5)
    assert mine is not None and mine.worker == worker_id()
    with heartbeat(mine, every=0.1):
        end = time.monotonic() + 2.0  # four times the stale limit
        while time.monotonic() < end:
            assert claim(results, CELL, stale_after=0.5, worker="other") is None
            time.sleep(0.05)
    time.sleep(0.6)  # no heartbeat since the block ended
    assert claim(results, CELL, stale_after=0.5, worker="other") is not None


def _race(results: str, start: float, wins) -> None:
    time.sleep(max(0.0, start - time.time()))
    if claim(results, CELL, stale_after=600) is not None:
        wins.put(1)


@pytest.mark.slow  # spawned processes: about 10 s on 2 shared cores
def test_processes_racing_for_one_cell_have_exactly_one_winner(tmp_path):
    context = multiprocessing.get_context("spawn")
    wins = context.Queue()
    start = time.time() + 8.0  # after every process imported the module
    procs = [context.Process(target=_race, args=(str(tmp_path / "r.sqlite"), start, wins)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 4
    won = 0
    while not wins.empty():
        won += wins.get()
    assert won == 1


def test_an_unfinished_study_is_started_over_and_a_finished_one_kept(tmp_path):
    storage, space = tmp_path / "s.db", search_space(PROTOCOL)
    study = open_study(storage, "s", trials=4)
    for t in ask_trials(study, 2, space, seed=22, startup=2):
        study.tell(t, 1.0)
    assert len(open_study(storage, "s", trials=4).trials) == 0  # its writer is gone: started over
    study = open_study(storage, "s", trials=2)
    for t in ask_trials(study, 2, space, seed=22, startup=2):
        study.tell(t, 1.0)
    assert len(open_study(storage, "s", trials=2).trials) == 2  # tuned: kept for the final retrain


def test_a_cell_whose_claim_expired_is_taken_over_and_its_study_restarted(tmp_path, caplog):
    """A worker killed while tuning left its claim and half a study; the next worker waits for the claim to
    expire, takes it over, tunes the cell from scratch and writes the row an uninterrupted run writes."""
    features = write_features(tmp_path / "m" / "d", classes=3, dim=8, per_class=20, test_per_class=4)
    plan = SearchPlan(startup_trials=2, trial_batch=1, stale_after=1.0)
    grid = {"model": "m", "domain": "d", "protocol": PROTOCOL, "plan": plan, "seeds": (22,), "shots": (None,),
            "device": "cpu"}
    (whole,) = run_on_stores("linear", features, tmp_path / "whole.sqlite", storage=tmp_path / "whole.db", **grid)

    results, storage = tmp_path / "r.sqlite", tmp_path / "s.db"
    study = open_study(storage, whole["study"], trials=PROTOCOL.trials)  # the dead worker's half-tuned study
    for t in ask_trials(study, 2, search_space(PROTOCOL), seed=99, startup=2):
        study.tell(t, 50.0)
    assert claim(results, CELL, stale_after=60, worker="dead") is not None
    with caplog.at_level("INFO"):
        (row,) = run_on_stores("linear", features, results, storage=storage, **grid)
    assert "took over the claim of worker dead" in caplog.text and "restarting the study" in caplog.text
    keys = ("lr", "wd", "best_trial", "val_top1", "test_top1", "identity", "study")
    assert {k: row[k] for k in keys} == {k: whole[k] for k in keys}
    assert [r["worker"] for r in read_rows(results)] == [worker_id()]


def test_a_grid_leaves_a_held_cell_to_its_holder_or_waits_for_its_row(tmp_path, caplog):
    """``wait=False`` makes the free cells and returns, the held one left to the worker holding it; ``wait=True``
    asks again until the holder lets it go, then makes it. Each cell made shows one progress line."""
    import threading

    features = write_features(tmp_path / "m" / "d", classes=3, dim=8, per_class=20, test_per_class=4)
    plan = SearchPlan(startup_trials=2, trial_batch=1, stale_after=60)
    grid = {"model": "m", "domain": "d", "protocol": PROTOCOL, "plan": plan, "seeds": (22, 37), "shots": (None,),
            "device": "cpu", "storage": tmp_path / "s.db"}
    results, lines = tmp_path / "r.sqlite", []
    held = claim(results, CELL, stale_after=60, worker="elsewhere")  # seed 22's cell, another machine's
    with caplog.at_level("INFO"):
        rows = run_on_stores("linear", features, results, wait=False, show=lines.append, **grid)
    assert [r["seed"] for r in rows] == [37] and len(lines) == 1 and lines[0].startswith("[1/2] shots=all seed=37")
    assert "shots=all seed=22: another worker is making this row" in caplog.text
    threading.Timer(2.0, release, (held,)).start()  # the holder gives the cell up (its run failed, say)
    started = time.monotonic()
    (row,) = run_on_stores("linear", features, results, show=lines.append, **grid)
    assert row["seed"] == 22 and time.monotonic() - started >= 2.0 and len(lines) == 2
    assert sorted(r["seed"] for r in read_rows(results)) == [22, 37]


# --- issue 37: a claim names its holder's process; a resume on its machine takes over from a dead one at once -------

DIES_HOLDING = """
import os, sys
from cog_pl.results.claims import claim
held = claim(sys.argv[1], sys.argv[2], stale_after=3600)
assert held is not None
print(os.getpid(), flush=True)
os._exit(0)  # killed: its claim stays behind, never released
"""


def _dead_holder(results, cell: str = CELL) -> int:
    """A process that claimed ``cell`` and died without releasing it; its process id (reaped: gone)."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", DIES_HOLDING, str(results), cell], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout)


def test_a_claim_of_a_dead_process_on_this_machine_is_taken_over_at_once(tmp_path, caplog):
    """A killed run's claims do not stall its resume: the holder's process no longer runs here, so its claim is
    taken at once, long before its heartbeat would go stale."""
    results = tmp_path / "r.sqlite"
    pid = _dead_holder(results)
    with caplog.at_level("WARNING", logger="cog_pl.results.claims"):
        mine = claim(results, CELL, stale_after=3600, worker="resumed")
    assert mine is not None and mine.taken_over
    assert f":{pid} (its process no longer runs on this machine)" in caplog.text
    with sqlite3.connect(claims_path(results)) as con:  # the new holder recorded in its place
        assert con.execute("SELECT worker, pid FROM holders WHERE cell=?", (CELL,)).fetchone() == ("resumed",
                                                                                                     os.getpid())


def test_a_live_holder_keeps_its_claim_and_a_reused_process_id_is_not_it(tmp_path):
    """A holder whose process runs keeps its claim; a process that only reuses the holder's id (another start
    time) is not the holder, whose claim is then taken at once."""
    results = tmp_path / "r.sqlite"
    assert claim(results, CELL, stale_after=3600, worker="live") is not None  # held by this very process
    assert claim(results, CELL, stale_after=3600, worker="other") is None
    with sqlite3.connect(claims_path(results)) as con:  # the holder's id now names a process started at another time
        con.execute("UPDATE holders SET started='1' WHERE cell=?", (CELL,))
    taken = claim(results, CELL, stale_after=3600, worker="other")
    assert taken is not None and taken.taken_over


def test_a_claim_of_another_host_waits_for_its_heartbeat(tmp_path):
    """A process id means nothing on another machine: the claim of a holder on another host (here a dead process
    of this one, its row saying another host) is left to it until its heartbeat is stale, then taken over."""
    results = tmp_path / "r.sqlite"
    _dead_holder(results)
    with sqlite3.connect(claims_path(results)) as con:
        con.execute("UPDATE holders SET machine=? WHERE cell=?", (f"other-host {this_machine()}", CELL))
        con.execute("UPDATE claims SET host=replace(host, ?, 'other-host') WHERE cell=?", (socket.gethostname(), CELL))
    assert claim(results, CELL, stale_after=60, worker="resumed") is None  # its heartbeat is fresh: left to it
    _age(results, CELL, 61)
    taken = claim(results, CELL, stale_after=60, worker="resumed")
    assert taken is not None and taken.taken_over


def test_a_claims_file_of_format_1_is_judged_by_heartbeats_as_before(tmp_path):
    """A claims file an earlier cog_pl wrote (no holders table): its claims wait for their heartbeat, and the file
    takes new claims with their holders."""
    results = tmp_path / "r.sqlite"
    with sqlite3.connect(claims_path(results)) as con:
        con.execute("CREATE TABLE claims (cell TEXT PRIMARY KEY, worker TEXT NOT NULL, host TEXT NOT NULL, "
                    "heartbeat REAL NOT NULL)")
        con.execute("INSERT INTO claims VALUES (?, 'old', 'h:999999', ?)", (CELL, time.time()))
    con.close()
    assert claim(results, CELL, stale_after=60) is None  # no holder recorded: its process is not judged
    other = claim(results, CELL.replace("22", "37"), stale_after=60)
    assert other is not None and not other.taken_over
    _age(results, CELL, 61)
    assert claim(results, CELL, stale_after=60) is not None


@pytest.mark.parametrize("kind", ["not a database", "a folder"])
def test_a_claims_file_that_cannot_hold_claims_is_named(tmp_path, kind):
    from cog_pl.results.claims import ClaimsFileError

    results = tmp_path / "r.sqlite"
    if kind == "a folder":
        claims_path(results).mkdir()
    else:
        claims_path(results).write_bytes(b"garbage, not SQLite\n" * 100)
    with pytest.raises(ClaimsFileError, match=rf"^{re.escape(str(claims_path(results)))}: the probe grid's claims "
                                              "file"):
        claim(results, CELL, stale_after=60)


def test_a_claims_file_that_cannot_be_written_is_named(tmp_path, monkeypatch):
    """SQLite's own error (read-only, locked) comes with the file's path and role; a heartbeat retries it."""
    from cog_pl.results import claims
    from cog_pl.results.claims import ClaimsFileUnusable

    results = tmp_path / "r.sqlite"
    real = sqlite3.connect

    def read_only(path, **kw):  # as SQLite opens a file this user may not write
        return real(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, **kw)

    claim(results, "other", stale_after=60)  # the file exists
    monkeypatch.setattr(claims.sqlite3, "connect", read_only)
    with pytest.raises(ClaimsFileUnusable, match=rf"^{re.escape(str(claims_path(results)))}: cannot use the probe "
                                                 "grid's claims file .*readonly database"):
        claim(results, CELL, stale_after=60)
