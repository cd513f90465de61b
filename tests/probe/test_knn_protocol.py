"""The k-NN protocol on real feature stores: k chosen on the validation split only, the linear probe's samples,
rows that resume like the linear probe's, and DDP over two gloo processes equal to one process."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from test_knn import brute_force
from test_probe_fixtures import write_features

import cog_pl.probe.cell as cell
from cog_pl.data.sampling import final_indices, tuning_indices
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.features.pair import open_pair
from cog_pl.probe.data import l2_normalize, load_store
from cog_pl.probe.knn import KNNSettings
from cog_pl.probe.knn_protocol import KNNData, choose_k, knn_rows, rows_digest, score_test, validate
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import read_rows

SETTINGS = KNNSettings(ks=(1, 3, 10, 30))


def _splits(root):
    pair = open_pair(root)
    (x, y), (tx, ty) = load_store(pair.train), load_store(pair.test)
    return pair, l2_normalize(x), y, l2_normalize(tx), ty


def test_k_is_chosen_on_the_validation_split_and_test_labels_do_not_change_it(tmp_path):
    root = write_features(tmp_path / "f", classes=5, dim=8, per_class=40, test_per_class=12)
    _, x, y, tx, ty = _splits(root)
    data = KNNData.place(x, y, 5, "cpu")
    found = validate(data, 22, [None, 4], SETTINGS, 0.2, "32-true")
    for shots in (None, 4):
        train_idx, val_idx = tuning_indices(y.numpy(), 0.2, 22, shots)
        expected = {}
        for k in sorted({min(k, len(train_idx)) for k in SETTINGS.ks}):  # 4 shots: 20 rows, k 30 runs as k 20
            _, ranked = brute_force(x.numpy(), y.numpy(), x[val_idx].numpy(), 5, k, rows=train_idx)
            expected[k] = 100.0 * float(np.mean(ranked[:, 0] == y.numpy()[val_idx]))
        assert found[shots]["val_top1_by_k"] == pytest.approx(expected)
        assert found[shots]["k"] == choose_k(expected) and found[shots]["val_rows"] == len(val_idx)
    assert choose_k({1: 50.0, 3: 60.0, 10: 60.0}) == 3  # the smaller k among equals
    chosen = {(None, 22): found[None]["k"], (4, 22): found[4]["k"]}
    tested = score_test(data, tx, ty, chosen, SETTINGS, "32-true")
    for (shots, seed), k in chosen.items():
        rows = None if shots is None else final_indices(y.numpy(), seed, shots)
        _, ranked = brute_force(x.numpy(), y.numpy(), tx.numpy(), 5, k, rows=rows)
        assert tested[shots, seed]["test_top1"] == pytest.approx(100.0 * np.mean(ranked[:, 0] == ty.numpy()))
        assert tested[shots, seed]["test_top5"] == pytest.approx(
            100.0 * np.mean((ranked == ty.numpy()[:, None]).any(1)))
    # the same train split with other test labels: the same choice and validation figures, other test figures
    np.save(root / "test" / "labels.npy", np.roll(np.load(root / "test" / "labels.npy"), 7))
    kw = {"model": "m", "domain": "cog_l1", "protocol": ProbeProtocol(), "settings": SETTINGS, "device": "cpu",
          "precision": "32-true"}
    rows = knn_rows(open_pair(root), [(None, 22), (4, 22)], **kw)
    assert [r["k"] for r in rows] == [found[None]["k"], found[4]["k"]]
    assert [r["val_top1"] for r in rows] == [found[n]["val_top1_by_k"][found[n]["k"]] for n in (None, 4)]
    assert rows[0]["test_top1"] != tested[None, 22]["test_top1"]


def test_few_shot_samples_are_the_linear_probes(tmp_path, monkeypatch):
    root = write_features(tmp_path / "f", classes=4, dim=8, per_class=30, test_per_class=5)
    seen = {}

    def spy(name, fn):  # records what the real function returns to the linear probe
        def wrapped(*args, **kw):
            out = fn(*args, **kw)
            seen[name] = out[0] if isinstance(out, tuple) else out
            return out
        monkeypatch.setattr(cell, name, wrapped)

    spy("tuning_indices", cell.tuning_indices)
    spy("final_indices", cell.final_indices)
    splits = cell.Splits.load(root)
    cell.probe(splits, seed=37, shots=2, storage=tmp_path / "s.db", protocol=replace(
        ProbeProtocol(), trials=1, epochs=1), plan=SearchPlan(mode="exact"))
    (row,) = knn_rows(open_pair(root), [(2, 37)], model="m", domain="d", protocol=ProbeProtocol(), settings=SETTINGS,
                      device="cpu", precision="32-true")
    assert row["tuning_rows_sha256"] == rows_digest(seen["tuning_indices"])
    assert row["train_rows_sha256"] == rows_digest(seen["final_indices"])
    assert row["train_rows"] == len(seen["final_indices"]) == 8


def test_grid_rows_resume_and_refuse_other_values(tmp_path):
    root = write_features(tmp_path / "f", classes=4, dim=8, per_class=30, test_per_class=5)
    results = tmp_path / "r.sqlite"
    kw = {"model": "m", "domain": "cog_l2", "seeds": (22, 37), "shots": (None, 1, 4), "device": "cpu",
          "options": {"precision": "32-true"}}
    rows = run_on_stores("knn", root, results, **kw)
    stored = read_rows(results)
    assert len(rows) == len(stored) == 6 and {r["method"] for r in stored} == {"knn"}
    for r in stored:  # a k above the tuning rows (4 for 1 shot, 16 for 4, 96 for all) is recorded as what ran
        assert 0 <= r["test_top1"] <= r["test_top5"] <= 100 and r["k"] <= r["tuning_rows"]
        assert set(r["val_top1_by_k"]) == {str(min(k, r["tuning_rows"])) for k in (10, 20, 100, 200)}
        assert r["val_top1"] == r["val_top1_by_k"][str(r["k"])]
    assert {r["tuning_rows"]: set(r["val_top1_by_k"]) for r in stored} == {
        4: {"4"}, 16: {"10", "16"}, 96: {"10", "20", "96"}}
    assert {r["train_rows"] for r in stored if r["shots"] == 1} == {4}
    assert run_on_stores("knn", root, results, **kw) == []  # same values: skipped
    with pytest.raises(ValueError, match=r"row m/knn/cog_l2/shots=all/seed=22 was made with precision=32-true, "
                                         r"this run has precision=64-true; pass --overwrite"):
        run_on_stores("knn", root, results, **{**kw, "options": {"precision": "64-true"}})
    redo = {**kw, "options": {"precision": "64-true"}, "overwrite": True}
    assert len(run_on_stores("knn", root, results, **redo)) == 6


def _rank(rank, world, init, root, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        pair, x, y, tx, ty = _splits(root)
        group = True if world > 1 else None
        data = KNNData.place(x, y, pair.num_classes, "cpu", group=group)
        assert len(data.database) < len(x) or world == 1
        found = validate(data, 45, [None, 2, 8], SETTINGS, 0.2, "32-true")
        chosen = {(n, 45): r["k"] for n, r in found.items()}
        tested = score_test(data, tx, ty, chosen, SETTINGS, "32-true")
        near = data.search(tx, 30, [None, torch.arange(0, len(x), 3)], "32-true")
        if rank == 0:
            torch.save({"found": found, "tested": tested, "near": near}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two process groups of spawned interpreters: about 15 s alone, a minute on a loaded machine
@pytest.mark.parametrize("world", [2])
def test_ddp_with_two_gloo_processes_equals_one_process(tmp_path, world):
    root = write_features(tmp_path / "f", classes=6, dim=8, per_class=23, test_per_class=7)  # 138 rows: 69 a rank
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    _spawn(1, tmp_path / "s1", root, one)
    _spawn(world, tmp_path / "s2", root, two)
    a, b = torch.load(one, weights_only=False), torch.load(two, weights_only=False)
    assert a["found"] == b["found"] and a["tested"] == b["tested"]
    for (sa, ra), (sb, rb) in zip(a["near"], b["near"]):
        assert torch.equal(ra, rb) and torch.equal(sa, sb)


def _spawn(world, store, root, out):
    mp.spawn(_rank, args=(world, f"file://{store}", root, out), nprocs=world, join=True)


def test_auto_precision_is_float32_on_the_host_whatever_its_instruction_set():
    """A CPU's bfloat16 product returns bfloat16 similarities: ties, slower exact tie-breaking, other top-5 sets."""
    from cog_pl.probe.knn_protocol import resolve_knn_precision

    assert resolve_knn_precision(None, "cpu") == resolve_knn_precision("auto", "cpu") == "32-true"
    assert resolve_knn_precision("bf16-mixed", "cpu") == "bf16-mixed"  # asked for: kept
