"""Validation split and N-shot samples: seeded, per class, and never touching test data."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from test_probe_fixtures import write_features

from cog_pl.probe.data import few_shot, final_indices, tuning_indices, val_split
from cog_pl.probe.protocol_run import Splits, probe
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol

LABELS = np.repeat(np.arange(5), [10, 11, 7, 20, 5])


def test_val_split_takes_a_fifth_of_every_class_and_is_seeded():
    train, val = val_split(LABELS, 0.2, seed=22)
    assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == len(LABELS)
    for c, n in enumerate([10, 11, 7, 20, 5]):
        assert (LABELS[val] == c).sum() == int(n * 0.2)
    again, other = val_split(LABELS, 0.2, seed=22), val_split(LABELS, 0.2, seed=37)
    assert np.array_equal(again[1], val) and not np.array_equal(other[1], val)


def test_few_shot_draws_n_per_class_from_the_candidates_only():
    train, val = val_split(LABELS, 0.2, seed=1)
    picked = few_shot(LABELS, train, 4, seed=3)
    assert set(picked) <= set(train) and not set(picked) & set(val)
    assert np.bincount(LABELS[picked]).tolist() == [4, 4, 4, 4, 4]
    assert np.bincount(LABELS[few_shot(LABELS, train, 100, seed=3)]).tolist() == np.bincount(LABELS[train]).tolist()
    assert np.array_equal(picked, few_shot(LABELS, train, 4, seed=3))


def test_tuning_sample_is_cut_after_validation_and_final_sample_is_fresh():
    tr, va = tuning_indices(LABELS, 0.2, seed=5, shots=2)
    assert not set(tr) & set(va)
    final = final_indices(LABELS, seed=5, shots=2)
    assert np.bincount(LABELS[final]).tolist() == [2] * 5
    assert len(final_indices(LABELS, seed=5, shots=None)) == len(LABELS)


def test_test_rows_never_enter_tuning_or_training(tmp_path):
    """Test features are NaN: one test row in any training batch would make a loss non-finite."""
    root = write_features(tmp_path / "feats", classes=4, dim=8, per_class=20, test_value=float("nan"))
    protocol = replace(ProbeProtocol(), trials=4, epochs=2, batch_size=16)
    for shots in (None, 2):
        row = probe(Splits.load(root), seed=22, shots=shots, storage=tmp_path / f"s{shots}.db", protocol=protocol,
                    plan=SearchPlan(startup_trials=2, trial_batch=2))
        assert row["final_diverged_epoch"] is None
        assert np.isfinite(row["val_top1"]) and row["val_top1"] > 0
        assert row["train_rows"] == (80 if shots is None else 8)
