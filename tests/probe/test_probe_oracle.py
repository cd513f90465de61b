"""Selection optimism, measured (issue 40): every tuned linear-probe and k-NN row records what selecting on test would
have reported (``oracle_test_top1``), recomputed here from the trials the study ran and the ks validation tried; the
held-out-selected result does not change."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import optuna
import pytest
import torch
from optuna.trial import TrialState
from test_knn import brute_force
from test_probe_fixtures import write_features

from cog_pl.data.sampling import final_indices
from cog_pl.features.pair import open_pair
from cog_pl.probe.cell import Splits, probe
from cog_pl.probe.data import ProbeData, sub_seed, tuning_indices
from cog_pl.probe.knn import KNNSettings
from cog_pl.probe.knn_protocol import knn_rows
from cog_pl.probe.study import open_study
from cog_pl.probe.tuner import RESULT_ATTR, TEST_TOP1, SearchPlan, run_search, train_probe
from cog_pl.protocol import ProbeProtocol

PROTOCOL = replace(ProbeProtocol(), trials=5, epochs=3, batch_size=64)
PLAN = SearchPlan(startup_trials=3, trial_batch=2)


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    return Splits.load(write_features(tmp_path_factory.mktemp("feats"), classes=6, dim=16, per_class=30,
                                      test_per_class=15))


def _trials(path, name):
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{path}")
    return study.get_trials(states=(TrialState.COMPLETE,))


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_the_linear_oracle_is_the_best_trials_test_top1_each_head_trained_again(splits, tmp_path, mode):
    """Each trial's head trained again from its lr, wd and seeds on the tuning rows (exact mode: alone; fast mode:
    with its batch, the heads it shared its batches with) and tested: the row's oracle is the best of them, its
    selected trial's is the held-out choice's, and selected <= oracle."""
    seed, shots, plan = 22, 8, replace(PLAN, mode=mode)
    row = probe(splits, seed=seed, shots=shots, storage=tmp_path / "s.db", protocol=PROTOCOL, plan=plan, name="s")
    train_idx, _ = tuning_indices(splits.train_y, PROTOCOL.val_fraction, seed, shots)
    on_test = ProbeData(splits.train_x[train_idx], splits.train_y[train_idx], splits.test_x, splits.test_y,
                        splits.num_classes)
    trials, again = sorted(_trials(tmp_path / "s.db", "s"), key=lambda t: t.number), {}
    while len(again) < len(trials):
        batch = trials[len(again):len(again) + trials[len(again)].user_attrs[RESULT_ATTR]["batch_heads"]]
        heads = train_probe(on_test, [t.params["lr"] for t in batch], [t.params["wd"] for t in batch],
                            protocol=PROTOCOL, seeds=[sub_seed(seed, 10, t.number) for t in batch],
                            perm_seed=sub_seed(seed, 11, batch[0].number), eval_every_epoch=mode == "exact",
                            precision=batch[0].user_attrs[RESULT_ATTR]["precision"], on_divergence=plan.on_divergence)
        for t, top1 in zip(batch, heads.top1.tolist(), strict=True):
            again[t.number] = top1
            assert t.user_attrs[RESULT_ATTR][TEST_TOP1] == top1
    assert mode == "exact" or max(t.user_attrs[RESULT_ATTR]["batch_heads"] for t in trials) > 1
    best = max(again, key=lambda n: (again[n], -n))
    assert len(again) == PROTOCOL.trials and len(set(again.values())) > 1  # trials that differ on test
    assert (row["oracle_test_top1"], row["oracle_trial"]) == (again[best], best)
    assert row["selected_test_top1"] == again[row["best_trial"]] <= row["oracle_test_top1"]


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_testing_the_trials_changes_nothing_the_search_selects(splits, tmp_path, mode):
    """The same search with and without the heads tested: the same proposals, values and attributes, trial by
    trial (exact mode, the reference-equal path, bit for bit), and fast mode's batches each one evaluation."""
    plan = replace(PLAN, mode=mode)
    train_idx, val_idx = tuning_indices(splits.train_y, PROTOCOL.val_fraction, 22, None)
    data = ProbeData(splits.train_x[train_idx], splits.train_y[train_idx], splits.train_x[val_idx],
                     splits.train_y[val_idx], splits.num_classes)
    made = {}
    for tested in (False, True):
        study = open_study(tmp_path / f"{tested}.db", "s", PROTOCOL.trials)
        run_search(study, data, PROTOCOL, plan, 22, test=(splits.test_x, splits.test_y) if tested else None)
        made[tested] = study.get_trials(states=(TrialState.COMPLETE,))
    for a, b in zip(made[False], made[True], strict=True):
        attrs = {k: v for k, v in b.user_attrs[RESULT_ATTR].items() if k not in (TEST_TOP1, "batch_seconds")}
        assert (a.params, a.value, a.intermediate_values) == (b.params, b.value, b.intermediate_values)
        assert attrs == {k: v for k, v in a.user_attrs[RESULT_ATTR].items() if k != "batch_seconds"}
        assert TEST_TOP1 not in a.user_attrs[RESULT_ATTR] and 0 <= b.user_attrs[RESULT_ATTR][TEST_TOP1] <= 100


def test_a_study_of_trials_never_tested_gives_no_oracle(splits, tmp_path):
    """A finished study made before trials were tested (its row made again after a kill in the final retrain) is
    kept; the row says it has no oracle rather than assuming one."""
    train_idx, val_idx = tuning_indices(splits.train_y, PROTOCOL.val_fraction, 22, None)
    data = ProbeData(splits.train_x[train_idx], splits.train_y[train_idx], splits.train_x[val_idx],
                     splits.train_y[val_idx], splits.num_classes)
    run_search(open_study(tmp_path / "old.db", "old", PROTOCOL.trials), data, PROTOCOL, PLAN, 22)
    row = probe(splits, seed=22, shots=None, storage=tmp_path / "old.db", protocol=PROTOCOL, plan=PLAN, name="old")
    assert row["oracle_test_top1"] is None and row["oracle_trial"] is None and row["selected_test_top1"] is None
    assert row["test_top1"] > 0


def test_the_knn_oracle_is_the_best_tried_ks_test_top1(tmp_path):
    """Every k validation tried, voted on test by a brute-force k-NN written here: the row records each one's test
    top-1, the best as the oracle (smaller k among equals), the chosen k's as selected, and selected <= oracle."""
    root = write_features(tmp_path / "f", classes=5, dim=8, per_class=40, test_per_class=12)
    settings = KNNSettings(ks=(1, 3, 10, 30))
    pair = open_pair(root)
    rows = knn_rows(pair, [(None, 22), (4, 22)], model="m", domain="cog_l1", protocol=ProbeProtocol(),
                    settings=settings, device="cpu", precision="32-true")
    x = torch.nn.functional.normalize(torch.from_numpy(np.asarray(pair.train.features, np.float32)), dim=1).numpy()
    tx = torch.nn.functional.normalize(torch.from_numpy(np.asarray(pair.test.features, np.float32)), dim=1).numpy()
    y, ty = np.asarray(pair.train.labels, np.int64), np.asarray(pair.test.labels, np.int64)
    for row in rows:
        sample = None if row["shots"] is None else final_indices(y, 22, row["shots"])
        want = {}
        for k in map(int, row["val_top1_by_k"]):  # the ks validation tried (4 shots: 20 rows, k 30 runs as 20)
            _, ranked = brute_force(x, y, tx, 5, k, rows=sample)
            want[k] = 100.0 * float(np.mean(ranked[:, 0] == ty))
        assert {int(k): v for k, v in row["test_top1_by_k"].items()} == pytest.approx(want)
        best = min(want, key=lambda k: (-want[k], k))
        assert row["oracle_k"] == best and row["oracle_test_top1"] == pytest.approx(want[best])
        assert row["selected_test_top1"] == row["test_top1"] == pytest.approx(want[row["k"]])
        assert row["test_top1"] <= row["oracle_test_top1"]
    assert len(rows[1]["test_top1_by_k"]) == 4 and "20" in rows[1]["test_top1_by_k"]
