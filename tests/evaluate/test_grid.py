"""The one grid runner, on methods defined here (cheap and deterministic, so that what is tested is the runner): the
rows it writes, resuming, refusing rows of other values in one line, overwrite and stale rows, seedless and batched
methods, cells another worker holds, and the check before any work."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
from test_probe_fixtures import write_features

from cog_pl.errors import CogError
from cog_pl.evaluate import Method
from cog_pl.evaluate.grid import run_grid
from cog_pl.evaluate.method import Inputs, Job
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import FORMAT_VERSION, NO_SEED, append_row, get_row, read_rows
from cog_pl.results.claims import claim, release
from cog_pl.results.identity import format_key


@dataclass(frozen=True)
class CountOptions:
    """How the test top-1 is made: ``bias`` points added."""

    bias: float = field(default=0.0, metadata={"help": "points added"})


class Count(Method):
    """A method whose cells count their calls and score ``seed + shots + bias``."""

    name = "count"
    options = CountOptions

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def identity(self, job, state):
        from cog_pl.results.identity import features_identity

        return {"features": features_identity(state), "count": {"bias": job.options.bias}}

    def run_cell(self, job, state, cell, want):
        self.calls.append(cell)
        score = cell[1] + (cell[0] or 0) + job.options.bias
        return {"test_top1": float(score), "test_top5": float(score), "made_with": want["identity"]}


class Seedless(Count):
    name = "seedless"
    seedless = True


class Batched(Count):
    name = "batched"
    batched = True

    def run_cells(self, job, state, cells, want):
        self.calls.append(tuple(cells))  # one call: the whole pass
        for n, seed in cells:
            yield {"test_top1": float(seed + (n or 0)), "test_top5": 0.0}


@pytest.fixture
def stores(tmp_path):
    return write_features(tmp_path / "m" / "cog_l1", classes=3, dim=4, per_class=10, test_per_class=2)


def job(method, stores, results, bias=0.0, seeds=(22, 37), shots=(None, 2), **kw):
    return Job(method, Inputs(label="m"), "cog_l1", results, ProbeProtocol(), seeds, shots,
               options=CountOptions(bias), at=stores, **kw)


def test_rows_carry_the_key_the_identity_and_the_versions_and_a_rerun_skips_them(stores, tmp_path):
    method, results = Count(), tmp_path / "r.sqlite"
    rows = run_grid(job(method, stores, results))
    assert sorted(method.calls, key=str) == sorted([(None, 22), (None, 37), (2, 22), (2, 37)], key=str)
    assert method.calls[:2] == [(None, 22), (None, 37)]  # all data first, the largest cells first
    stored = {(r["shots"], r["seed"]): r for r in read_rows(results)}
    assert len(rows) == len(stored) == 4
    for (n, seed), r in stored.items():
        assert (r["model"], r["method"], r["domain"], r["format_version"]) == ("m", "count", "cog_l1", FORMAT_VERSION)
        assert r["test_top1"] == seed + (n or 0) and r["identity"] == r["made_with"] and r["count"] == {"bias": 0.0}
        assert r["features"]["train"]["plain"] is True and "torch" in r["versions"]
    method.calls.clear()
    assert run_grid(job(method, stores, results)) == [] and method.calls == []  # resumed: nothing made again


def test_a_row_of_other_values_is_refused_in_one_line_before_any_cell_and_overwrite_remakes_it(stores, tmp_path):
    method, results = Count(), tmp_path / "r.sqlite"
    run_grid(job(method, stores, results, shots=(None,)))
    method.calls.clear()
    with pytest.raises(CogError) as err:
        run_grid(job(method, stores, results, bias=1.0, shots=(None, 2)))
    assert str(err.value) == (f"{results}: row m/count/cog_l1/shots=all/seed=22 was made with bias=0.0, this run has "
                              "bias=1.0; pass --overwrite to replace it")
    assert method.calls == [] and len(read_rows(results)) == 2  # refused before any cell, nothing written
    assert run_grid(job(method, stores, results, shots=(None, 2)), check_only=True) == [(2, 22), (2, 37)]
    with pytest.raises(CogError):
        run_grid(job(method, stores, results, bias=1.0), check_only=True)  # the check refuses as the run does
    assert method.calls == [] and len(read_rows(results)) == 2
    made = run_grid(job(method, stores, results, bias=1.0, seeds=(22,), shots=(None,), overwrite=True))
    assert [r["test_top1"] for r in made] == [23.0]
    # the seed-37 row of the other values, outside this grid, is removed: a cell averages rows of one protocol
    assert [(r["seed"], r["count"]["bias"]) for r in read_rows(results)] == [(22, 1.0)]


def test_a_seedless_method_makes_one_row_whatever_the_seeds_and_finds_an_older_seed_keyed_row(stores, tmp_path):
    method, results = Seedless(), tmp_path / "r.sqlite"
    (row,) = run_grid(job(method, stores, results, shots=(None,)))
    assert (row["seed"], row["seedless"]) == (NO_SEED, True)
    assert run_grid(job(method, stores, results, seeds=(5,), shots=(None,))) == []  # other seeds: the same row
    older, results2 = {**row, "seed": 22, "seedless": None, "seed_is_key": True}, tmp_path / "r2.sqlite"
    append_row(results2, older)  # written before seedless rows, keyed by its run's first seed
    method.calls.clear()
    assert run_grid(job(method, stores, results2, shots=(None,))) == [] and method.calls == []
    run_grid(job(method, stores, results2, shots=(None,), overwrite=True))
    assert [r["seed"] for r in read_rows(results2)] == [NO_SEED]  # made again, the seed-keyed row removed


def test_a_batched_method_makes_its_cells_in_one_pass(stores, tmp_path):
    method = Batched()
    rows = run_grid(job(method, stores, tmp_path / "r.sqlite"))
    assert len(method.calls) == 1 and sorted(method.calls[0], key=str) == sorted(
        [(None, 22), (None, 37), (2, 22), (2, 37)], key=str) and len(rows) == 4


def test_a_cell_another_worker_holds_is_left_to_it_or_waited_for(stores, tmp_path):
    method, results = Count(), tmp_path / "r.sqlite"
    key = ("m", "count", "cog_l1", None, 22)
    held = claim(results, format_key(key), stale_after=600, worker="elsewhere")
    rows = run_grid(job(method, stores, results, wait=False))
    assert sorted(((r["shots"], r["seed"]) for r in rows), key=str) == [(2, 22), (2, 37), (None, 37)]
    assert get_row(results, key) is None  # left to its holder

    def holder():  # the other worker writes the row, then lets the cell go
        time.sleep(1.0)
        append_row(results, {**read_rows(results)[0], "shots": None, "seed": 22, "made_by": "elsewhere"})
        release(held)

    thread = threading.Thread(target=holder)
    thread.start()
    assert run_grid(job(method, stores, results)) == []  # waited: the holder's row is the cell's
    thread.join()
    assert get_row(results, key)["made_by"] == "elsewhere"


def test_the_shot_counts_are_checked_against_the_data_before_any_cell(stores, tmp_path):
    method = Count()
    with pytest.raises(CogError, match="--shots 9: class .* has 10 train rows .*8 left for tuning"):
        run_grid(job(method, stores, tmp_path / "r.sqlite", shots=(None, 9)))
    assert method.calls == [] and not (tmp_path / "r.sqlite").exists()


def test_stores_of_tokens_are_refused_by_a_method_of_vectors_naming_those_that_read_them(tmp_path):
    from cog_pl.features.store import make_meta, write_store

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        x, y = rng.normal(size=(6, 5, 4)).astype(np.float32), np.arange(6) % 3
        meta = make_meta(model="m", weights_sha256=None, domain="cog_l1", split=split, num_classes=3,
                         classes=["a", "b", "c"], transform={}, level_file_sha256=None, feature="tokens2x2", tokens=5)
        write_store(tmp_path / "s" / split, x, y, None, meta)
    with pytest.raises(CogError, match="count reads one vector per image: the methods that take token stores: "
                                       "attentive, mlp"):
        run_grid(job(Count(), tmp_path / "s", tmp_path / "r.sqlite"))
