"""The batched and exact TPE searches: repeatable, robust to diverging trials, recorded; the protocol grid resumes."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest
from optuna.trial import TrialState
from test_probe_fixtures import write_features

from cog_pl.evaluate.runner import run_on_stores
from cog_pl.probe.cell import Splits, probe
from cog_pl.probe.storage import close_storage, resolve_storage
from cog_pl.probe.study import ask_trials, open_study
from cog_pl.probe.tuner import SearchPlan, search_space
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import read_rows

PROTOCOL = replace(ProbeProtocol(), trials=8, epochs=3, batch_size=64)
PLAN = SearchPlan(startup_trials=4, trial_batch=2)


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    return Splits.load(write_features(tmp_path_factory.mktemp("feats"), per_class=40))


def test_same_seed_same_result(splits, tmp_path):
    rows = [probe(splits, seed=22, shots=None, storage=tmp_path / f"{i}.db", protocol=PROTOCOL, plan=PLAN)
            for i in range(2)]
    keys = ("lr", "wd", "val_top1", "test_top1", "test_top5")
    assert [rows[0][k] for k in keys] == [rows[1][k] for k in keys]
    other = probe(splits, seed=37, shots=None, storage=tmp_path / "other.db", protocol=PROTOCOL, plan=PLAN)
    assert other["lr"] != rows[0]["lr"]


def test_row_records_mode_protocol_and_timings(splits, tmp_path):
    row = probe(splits, seed=22, shots=4, storage=tmp_path / "s.db", protocol=PROTOCOL, plan=PLAN,
                model="rn50", domain="cog_l1")
    assert row["mode"] == "fast" and row["search"]["trial_batch"] == 2
    assert row["protocol"]["epochs"] == 3 and row["protocol"]["lr_range"] == [0.1, 100.0]
    assert (row["model"], row["domain"], row["shots"], row["seed"]) == ("rn50", "cog_l1", 4, 22)
    assert 0 <= row["test_top1"] <= row["test_top5"] <= 100
    assert row["seconds"] >= row["tune_seconds"] > 0 and "torch" in row["versions"]


def test_fast_mode_batches_trials_and_exact_mode_runs_them_one_by_one(splits, tmp_path):
    for plan, sizes in ((PLAN, {4, 2}), (replace(PLAN, mode="exact"), {1})):
        probe(splits, seed=22, shots=None, storage=tmp_path / f"{plan.mode}.db", protocol=PROTOCOL, plan=plan,
              name=plan.mode)
        study = optuna.load_study(study_name=plan.mode, storage=f"sqlite:///{tmp_path / f'{plan.mode}.db'}")
        trials = study.get_trials(states=(TrialState.COMPLETE,))
        assert len(trials) == PROTOCOL.trials
        assert {t.user_attrs["result"]["batch_heads"] for t in trials} == sizes
        evaluated = {len(t.intermediate_values) for t in trials}
        assert evaluated == ({PROTOCOL.epochs} if plan.mode == "exact" else {0})
        expected = "32-true" if plan.mode == "exact" else plan.precision_on("cpu")
        assert {t.user_attrs["result"]["precision"] for t in trials} == {expected}


def test_precision_is_recorded_and_chosen_explicitly(splits, tmp_path, monkeypatch):
    import cog_pl.probe.tuner as tuner

    used = []

    def recording(*args, **kw):
        used.append(kw["precision"])
        return train_heads(*args, **kw)

    train_heads = tuner.train_heads
    monkeypatch.setattr(tuner, "train_heads", recording)
    rows = {}
    for p in ("32-true", "bf16-mixed"):
        used.clear()
        rows[p] = probe(splits, seed=22, shots=None, storage=tmp_path / f"{p}.db", protocol=PROTOCOL,
                        plan=replace(PLAN, precision=p))
        assert set(used) == {p} and len(used) == 4  # what every batch and the final probe trained with
    assert {p: r["precision"] for p, r in rows.items()} == {"32-true": "32-true", "bf16-mixed": "bf16-mixed"}
    assert rows["32-true"]["study"] != rows["bf16-mixed"]["study"]  # a study never mixes precisions
    assert abs(rows["32-true"]["test_top1"] - rows["bf16-mixed"]["test_top1"]) <= 10
    with pytest.raises(ValueError, match="precision"):
        SearchPlan(precision="fp8")


def test_startup_batch_draws_what_a_sequential_search_would(tmp_path):
    """TPE's random startup trials do not depend on earlier results, so asking them at once changes nothing."""
    space = search_space(PROTOCOL)
    seq = open_study(tmp_path / "a.db", "s", trials=4)
    for _ in range(4):
        (t,) = ask_trials(seq, 1, space, seed=22, startup=4)
        seq.tell(t, t.params["lr"])
    batch = open_study(tmp_path / "b.db", "s", trials=4)
    asked = ask_trials(batch, 4, space, seed=22, startup=4)
    assert [t.params for t in asked] == [t.params for t in seq.trials]
    assert len({t.params["lr"] for t in asked}) == 4


def test_a_diverging_trial_does_not_stop_the_search(splits, tmp_path):
    protocol = replace(PROTOCOL, lr_range=(0.1, 1e45))  # lr beyond float32: those trials overflow at once
    row = probe(splits, seed=22, shots=None, storage=tmp_path / "d.db", protocol=protocol, plan=PLAN, name="d")
    study = optuna.load_study(study_name="d", storage=f"sqlite:///{tmp_path / 'd.db'}")
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    diverged = [t for t in trials if t.user_attrs["result"]["diverged_epoch"] is not None]
    assert len(trials) == protocol.trials and diverged and len(diverged) < len(trials)
    assert all(t.value == 0.0 for t in diverged if t.user_attrs["result"]["diverged_epoch"] == 0)
    assert row["val_top1"] > 0 and row["lr"] < 1e38 and row["final_diverged_epoch"] is None


def test_exact_mode_values_a_diverged_trial_by_the_model_it_stopped_with(splits, tmp_path):
    """Exact mode, as published: a trial whose loss turns non-finite is evaluated as it stopped, in the epoch it
    diverged, and that is its value (also when that is its first epoch); fast mode rolls it back instead."""
    assert SearchPlan(mode="exact").on_divergence == "halt" and SearchPlan().on_divergence == "rollback"
    protocol = replace(PROTOCOL, lr_range=(1e37, 1e38), trials=6)  # lr near float32's limit: they diverge
    probe(splits, seed=22, shots=None, storage=tmp_path / "x.db", protocol=protocol,
          plan=replace(PLAN, mode="exact"), name="x")
    study = optuna.load_study(study_name="x", storage=f"sqlite:///{tmp_path / 'x.db'}")
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    diverged = [t for t in trials if t.user_attrs["result"]["diverged_epoch"] is not None]
    assert any(t.user_attrs["result"]["diverged_epoch"] == 0 for t in diverged)
    for t in diverged:
        assert t.value == t.intermediate_values[t.user_attrs["result"]["diverged_epoch"]]


def test_protocol_grid_writes_one_row_per_cell_and_resumes(splits, tmp_path):
    results, storage = tmp_path / "rows.sqlite", tmp_path / "grid.db"
    kw = {"model": "m", "domain": "cog_l3", "storage": storage, "protocol": replace(PROTOCOL, trials=4),
          "plan": PLAN, "seeds": (22, 37), "shots": (None, 2)}
    root = tmp_path / "feats"
    write_features(root, per_class=40)
    assert len(run_on_stores("linear", root, results, **kw)) == 4
    assert not (tmp_path / "grid.db-wal").exists()  # the grid's one storage is closed: the file alone holds it
    rows = read_rows(results)
    assert sorted((r["shots"] or 0, r["seed"]) for r in rows) == [(0, 22), (0, 37), (2, 22), (2, 37)]
    assert run_on_stores("linear", root, results, **kw) == []
    assert read_rows(results) == rows


def test_a_storage_handed_to_probe_stays_open_for_its_owner(splits, tmp_path):
    storage = resolve_storage(tmp_path / "s.db")
    try:
        for seed in (22, 37):  # two cells through one storage
            probe(splits, seed=seed, shots=2, storage=storage, protocol=replace(PROTOCOL, trials=3), plan=PLAN)
        assert storage.engine.pool.checkedin() >= 1  # its connections kept: not disposed behind its owner's back
        assert len(optuna.get_all_study_summaries(storage)) == 2
    finally:
        close_storage(storage)
