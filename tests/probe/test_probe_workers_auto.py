"""``probe protocol --probe-workers N|auto``: worker processes on one storage and one results file, each cell tuned
by one worker; the grid's rows equal a one-worker run's, and the plan of workers follows the machine."""

from __future__ import annotations

import pytest
from run_stages import probe_stage
from test_probe_fixtures import write_features

from cog_pl.cli.main import main
from cog_pl.probe.workers import grid_flops, plan_workers, threads_per_worker
from cog_pl.results import read_rows

SAME = ("lr", "wd", "best_trial", "val_top1", "test_top1", "test_top5", "train_rows", "identity", "study")


def grid(features, results, storage, *extra):
    return ["probe", "protocol", "--features", str(features), "--results", str(results), "--storage", str(storage),
            "--trials", "6", "--epochs", "4", "--batch-size", "64", "--seeds", "22", "37", "--shots", "all", "2",
            "--probe-device", "cpu", "--model", "m", "--domain", "d", *extra]


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["2", "auto"])
def test_the_rows_of_n_workers_equal_a_one_worker_run(tmp_path, workers, capsys):
    features = write_features(tmp_path / "feats", classes=8, dim=24, per_class=40)
    assert main(grid(features, tmp_path / "one.sqlite", tmp_path / "one.db")) == 0
    assert main(grid(features, tmp_path / "many.sqlite", tmp_path / "many.log", "--probe-workers", workers)) == 0
    err = capsys.readouterr().err
    one = {(r["shots"], r["seed"]): r for r in read_rows(tmp_path / "one.sqlite")}
    many = {(r["shots"], r["seed"]): r for r in read_rows(tmp_path / "many.sqlite")}
    assert sorted(one, key=str) == sorted(many, key=str) and len(one) == 4
    for key, row in one.items():
        assert {k: row[k] for k in SAME} == {k: many[key][k] for k in SAME}, key
    if workers == "2":
        assert "4 cells on 2 workers" in err and "[4/4] worker" in err  # the merged display
    # resumed: every row exists, nothing is made again
    assert main(grid(features, tmp_path / "many.sqlite", tmp_path / "many.log", "--probe-workers", workers)) == 0
    assert [r["worker"] for r in read_rows(tmp_path / "many.sqlite")] == [r["worker"] for r in many.values()]


def test_the_plan_splits_the_cores_and_never_exceeds_the_cells(monkeypatch):
    monkeypatch.setattr("cog_pl.probe.workers.available_cores", lambda: 16)
    slots = plan_workers("auto", "cpu", cells=100)
    assert threads_per_worker(16) == 2 and len(slots) == 8 and {s.threads for s in slots} == {2}
    assert {s.env["OMP_NUM_THREADS"] for s in slots} == {"2"} and all(s.device == "cpu" for s in slots)
    assert len(plan_workers("auto", "cpu", cells=3)) == 3
    assert [s.threads for s in plan_workers(4, "cpu", cells=10)] == [4] * 4
    monkeypatch.setattr("cog_pl.probe.workers.available_cores", lambda: 2)
    assert [s.threads for s in plan_workers("auto", "cpu", cells=10)] == [2]  # one process's threads win here
    assert [s.threads for s in plan_workers(2, "cpu", cells=10)] == [1, 1]  # a count is the user's
    monkeypatch.setattr("cog_pl.probe.workers.available_cores", lambda: 8)
    monkeypatch.setattr("cog_pl.probe.workers.available_memory", lambda: 10 * 2**30)
    assert len(plan_workers("auto", "cpu", cells=10, feature_bytes=2**30)) == 1  # two copies would not fit
    monkeypatch.setattr("cog_pl.probe.workers.available_memory", lambda: 100 * 2**30)
    grid = grid_flops(cells=10, rows=300_000, dim=512, classes=100, trials=10, epochs=10)
    tiny = grid_flops(cells=10, rows=300, dim=16, classes=6, trials=6, epochs=15)
    assert len(plan_workers("auto", "cpu", cells=10, flops=grid)) == 8  # long work on 8 cores: 8 workers
    assert len(plan_workers("auto", "cpu", cells=10, flops=tiny)) == 1  # done before a worker would have started
    assert len(plan_workers(2, "cpu", cells=10, flops=tiny)) == 2  # a count is the user's
    with pytest.raises(ValueError, match="--probe-workers 0"):
        plan_workers(0, "cpu", cells=3)


def test_a_bad_workers_value_is_one_line_naming_it(tmp_path, capsys):
    features = write_features(tmp_path / "feats", classes=4, dim=8, per_class=10)
    with pytest.raises(SystemExit) as exit:
        main(grid(features, tmp_path / "r.sqlite", tmp_path / "s.db", "--probe-workers", "0"))
    assert exit.value.code == 2
    [line] = [x for x in capsys.readouterr().err.splitlines() if "error" in x]
    assert "argument --probe-workers: workers value '0'" in line


@pytest.mark.slow
def test_the_run_probe_stage_with_two_workers_writes_the_rows_of_one_process(tmp_path):
    """``cog-pl run --probe-workers 2`` goes through :func:`cog_pl.probe.workers.worker_pool` per domain."""
    from cog_pl.pipeline import ProbeOptions, RunConfig

    def run(out, workers):
        write_features(out / "features" / "m" / "cog_l1", classes=4, dim=8, per_class=20, test_per_class=4)
        (tmp_path / "in21k").mkdir(exist_ok=True)
        config = RunConfig(model="resnet50", random_weights=True, in1k_root=None, in21k_root=str(tmp_path / "in21k"),
                           out=str(out), domains=("cog_l1",), seeds=(22, 37), shots=(None, 2), check=False,
                           probe=ProbeOptions(trials=3, epochs=2, device="cpu", trial_batch=1, workers=workers))
        assert probe_stage(config, out, "m") == 4
        return {(r["shots"], r["seed"]): {k: r[k] for k in SAME} for r in read_rows(out / "results.sqlite")}

    from cog_pl.results.claims import worker_id

    one, two = run(tmp_path / "one", None), run(tmp_path / "two", 2)
    assert one == two and len(one) == 4
    made_by = {r["worker"] for r in read_rows(tmp_path / "two" / "results.sqlite")}
    assert worker_id() not in made_by and {r["worker"] for r in read_rows(tmp_path / "one" / "results.sqlite")} == {
        worker_id()}  # the rows of the two-worker run were made in the worker processes


def test_worker_processes_are_handed_a_storage_path_not_an_open_storage(tmp_path):
    """Each worker process opens the storage itself: an open storage object, which cannot cross processes, is
    refused before any process starts."""
    from cog_pl.evaluate.runner import run_on_stores
    from cog_pl.probe.storage import resolve_storage

    features = write_features(tmp_path / "feats", classes=4, dim=8, per_class=10)
    with pytest.raises(TypeError, match="pass its path or URL"):
        run_on_stores("linear", features, tmp_path / "r.sqlite", storage=resolve_storage(tmp_path / "s.db"), workers=2,
                     seeds=(22, 37), shots=(None,))
    assert not (tmp_path / "r.sqlite").exists()


@pytest.mark.slow
def test_the_run_probe_stage_with_two_workers_waits_for_a_cell_another_machine_holds(tmp_path):
    """The workers' first pass leaves a held cell to its holder; the run's wait pass makes it once released, so
    ``cog-pl run --probe-workers 2`` still ends with every row."""
    import threading

    from cog_pl.pipeline import ProbeOptions, RunConfig
    from cog_pl.results.claims import claim, release
    from cog_pl.results.identity import format_key

    out = tmp_path / "out"
    write_features(out / "features" / "m" / "cog_l1", classes=4, dim=8, per_class=20, test_per_class=4)
    (tmp_path / "in21k").mkdir()
    config = RunConfig(model="resnet50", random_weights=True, in1k_root=None, in21k_root=str(tmp_path / "in21k"),
                       out=str(out), domains=("cog_l1",), seeds=(22, 37), shots=(None,), check=False,
                       probe=ProbeOptions(trials=3, epochs=2, device="cpu", trial_batch=1, workers=2))
    held = claim(out / "results.sqlite", format_key(("m", "linear", "cog_l1", None, 22)), 600, worker="elsewhere")
    threading.Timer(15.0, release, (held,)).start()  # after the workers' pass has left it
    assert probe_stage(config, out, "m") == 2
    assert sorted(r["seed"] for r in read_rows(out / "results.sqlite")) == [22, 37]
