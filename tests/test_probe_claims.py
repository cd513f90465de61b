"""Cell claims: one holder per cell, taken over only after ``stale_after`` seconds without a heartbeat; a study whose
claim was taken over is started over, so the grid's row equals an uninterrupted run's."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from dataclasses import replace

import pytest
from test_probe_fixtures import write_features

from cog_pl.probe.claims import claim, claims_path, heartbeat, release, renew, worker_id
from cog_pl.probe.protocol_run import run_protocol
from cog_pl.probe.study import ask_trials, open_study
from cog_pl.probe.tuner import SearchPlan, search_space
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import read_rows

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
    (whole,) = run_protocol(features, tmp_path / "whole.sqlite", storage=tmp_path / "whole.db", **grid)

    results, storage = tmp_path / "r.sqlite", tmp_path / "s.db"
    study = open_study(storage, whole["study"], trials=PROTOCOL.trials)  # the dead worker's half-tuned study
    for t in ask_trials(study, 2, search_space(PROTOCOL), seed=99, startup=2):
        study.tell(t, 50.0)
    assert claim(results, CELL, stale_after=60, worker="dead") is not None
    with caplog.at_level("INFO"):
        (row,) = run_protocol(features, results, storage=storage, **grid)
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
        rows = run_protocol(features, results, wait=False, progress=lines.append, **grid)
    assert [r["seed"] for r in rows] == [37] and len(lines) == 1 and lines[0].startswith("[1/2] shots=all seed=37")
    assert "shots=all seed=22: another worker is making this row" in caplog.text
    threading.Timer(2.0, release, (held,)).start()  # the holder gives the cell up (its run failed, say)
    started = time.monotonic()
    (row,) = run_protocol(features, results, progress=lines.append, **grid)
    assert row["seed"] == 22 and time.monotonic() - started >= 2.0 and len(lines) == 2
    assert sorted(r["seed"] for r in read_rows(results)) == [22, 37]
