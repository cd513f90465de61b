"""Test predictions kept beside result rows (cog_pl.results.predictions): the format on disk, what the final linear and
k-NN probes store, refusals of predictions that are not their row's, rows made before them, and the label-noise check's
predictions."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cog_pl import resources
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.features.store import make_meta, write_store
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import append_row, read_rows
from cog_pl.results.predictions import (
    Predictions,
    PredictionsError,
    load_predictions,
    missing_reason,
    predictions_root,
    read_row_predictions,
    write_predictions,
)

PROTOCOL = replace(ProbeProtocol(), trials=2, epochs=3, batch_size=32)
PLAN = SearchPlan(startup_trials=2, trial_batch=1)


def _row(preds: Predictions, **kw) -> dict:
    return {"model": "m", "method": "linear", "domain": "cog_l2", "shots": None, "seed": 22,
            "test_top1": preds.top1, "predictions": preds, **kw}


def _preds(n=40, classes=4, seed=0, images=None) -> Predictions:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    first = np.where(rng.random(n) < 0.6, labels, rng.integers(0, classes, n))
    ranked = np.stack([(first + k) % classes for k in range(min(5, classes))], 1)
    names = [f"n0000000{i}" for i in range(classes)]
    return Predictions.of(ranked, labels, np.arange(n) if images is None else images, names)


def test_predictions_are_written_beside_the_row_and_read_back(tmp_path):
    results = tmp_path / "runs" / "results.sqlite"
    preds = _preds(images=np.array([*range(30), *range(35, 45)]))  # a gap: images skipped at extraction
    row = _row(preds)
    append_row(results, row)
    record = row["predictions"]  # the caller's row holds the record too
    path = predictions_root(results) / "m" / "linear" / "cog_l2" / "shots-all" / "seed-22.npz"
    assert predictions_root(results) == tmp_path / "runs" / "results.predictions" and path.is_file()
    (stored,) = read_rows(results)
    back = read_row_predictions(results, stored)
    assert record == stored["predictions"] == {
        "format": "cog-pl-predictions v1", "path": "m/linear/cog_l2/shots-all/seed-22.npz",
        "sha256": back.digest(), "images": 40, "bytes": path.stat().st_size}  # the digest covers the row's key
    assert np.array_equal(back.top5, preds.top5) and np.array_equal(back.label, preds.label)
    assert np.array_equal(back.image, preds.image) and back.classes == preds.classes
    assert back.meta == {"model": "m", "method": "linear", "domain": "cog_l2", "shots": None, "seed": 22}
    assert back.top5.dtype == np.int16 and back.top1 == pytest.approx(stored["test_top1"])
    with zipfile.ZipFile(path) as z:  # a plain npz: numpy alone reads it
        assert sorted(z.namelist()) == ["image_step.npy", "label.npy", "meta.npy", "sha256.npy", "top5.npy"]
    meta = json.loads(str(np.load(path)["meta"]))
    assert meta["format"] == "cog-pl-predictions" and meta["version"] == 1 and meta["classes"][0] == "n00000000"
    assert missing_reason(results, stored) is None
    # a model name with a slash stays one folder level
    append_row(results, _row(preds, model="org/model", seed=37))
    assert (predictions_root(results) / "org%2Fmodel" / "linear").is_dir()


def test_predictions_of_another_run_damaged_ones_and_wrong_ones_are_refused(tmp_path):
    results = tmp_path / "results.sqlite"
    append_row(results, _row(_preds()))
    (row,) = read_rows(results)
    path = predictions_root(results) / row["predictions"]["path"]
    other = _preds(seed=1)
    write_predictions(predictions_root(results), row["predictions"]["path"],
                      replace(other, meta={k: row[k] for k in ("model", "method", "domain", "shots", "seed")}))
    with pytest.raises(PredictionsError, match=r"does not match its row m/linear/cog_l2/None/22 .* made by another "
                                               r"run; make the row again \(--overwrite\) or remove the file"):
        read_row_predictions(results, row)
    data = bytearray(Predictions.to_bytes(_preds()))
    path.write_bytes(bytes(data[: len(data) // 2]))  # cut short
    with pytest.raises(PredictionsError, match="is not readable as cog-pl-predictions v1"):
        read_row_predictions(results, row)
    with pytest.raises(PredictionsError, match=r"predictions' top-1 .* is not the row's test_top1 12\.0000"):
        append_row(results, _row(_preds(), seed=37, test_top1=12.0))  # a bug upstream: never stored
    assert [r["seed"] for r in read_rows(results)] == [22]
    path.unlink()
    assert read_row_predictions(results, row) is None and "is missing" in missing_reason(results, row)


def test_a_file_whose_content_changed_is_refused(tmp_path):
    path = tmp_path / "p.npz"
    preds = _preds()
    path.write_bytes(preds.to_bytes())
    assert load_predictions(path).digest() == preds.digest()
    with np.load(path) as npz:
        members = {k: npz[k] for k in npz.files}
    members["label"] = members["label"][::-1].copy()  # the same digest member over other labels
    np.savez_compressed(path, **members)
    with pytest.raises(PredictionsError, match="is damaged: its content does not match its digest"):
        load_predictions(path)


def test_rows_made_before_predictions_stay_valid(tmp_path):
    results = tmp_path / "results.sqlite"
    append_row(results, {"model": "m", "domain": "in1k", "shots": None, "seed": 22, "test_top1": 50.0})
    (row,) = read_rows(results)
    assert "predictions" not in row and read_row_predictions(results, row) is None
    assert missing_reason(results, row) == "made before predictions were kept"


def _stores(root: Path, domain: str, classes: list[str], seed: int, per_class=30, test_per_class=8, dim=12):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(len(classes), dim)) * 2
    for split, n in (("train", per_class), ("test", test_per_class)):
        y = np.repeat(np.arange(len(classes)), n)
        x = means[y] + rng.normal(size=(len(y), dim))
        index = np.arange(len(y)) * 2 + 1  # dataset rows, not positions
        write_store(root / domain / split, x.astype(np.float16), y, index,
                    make_meta(model="m", weights_sha256="ab" * 32, domain=domain, split=split, transform={"crop": 8},
                              num_classes=len(classes), classes=classes, level_file_sha256="cd" * 32))
    return root / domain


def test_final_probes_store_the_predictions_their_rows_score(tmp_path):
    classes = list(resources.official_levels()["L2"][:5])
    root = _stores(tmp_path / "features" / "m", "cog_l2", classes, 0)
    results = tmp_path / "results.sqlite"
    rows = run_on_stores("linear", root, results, storage=tmp_path / "optuna.db", protocol=PROTOCOL, plan=PLAN,
                        seeds=(22,), shots=(None, 2), device="cpu")
    rows += run_on_stores("knn", root, results, protocol=PROTOCOL, seeds=(22,), shots=(None, 2), device="cpu")
    assert len(rows) == 4
    test_index = np.load(root / "test" / "index.npy")
    labels = np.load(root / "test" / "labels.npy")
    for row in read_rows(results):
        preds = read_row_predictions(results, row)
        assert preds.classes == tuple(classes) and np.array_equal(preds.image, test_index)
        assert np.array_equal(preds.label, labels) and preds.top5.shape == (40, 5)
        assert preds.top1 == pytest.approx(row["test_top1"], abs=1e-4)  # the row's own number, image for image
        top5 = 100 * np.mean([lab in top for lab, top in zip(preds.label, preds.top5)])
        assert top5 == pytest.approx(row["test_top5"], abs=1e-4)
        assert all(len(set(t)) == 5 for t in preds.top5)
    assert {(r["method"], r["shots"]) for r in read_rows(results)} == {("linear", None), ("linear", 2),
                                                                       ("knn", None), ("knn", 2)}


def test_the_label_noise_predictions_are_the_rows_probe_on_the_levels(tmp_path):
    from cog_pl.analysis.label_noise import store_noise_predictions
    from cog_pl.results.predictions import read_noise_predictions

    features = tmp_path / "features"
    seen = list(resources.in1k_wnids()[:4])
    unseen = list(resources.official_levels()["L1"][:3])
    src = _stores(features / "m", "in1k", seen, 1)
    _stores(features / "m", "cog_l1", unseen, 2)
    results = tmp_path / "results.sqlite"
    (row,) = run_on_stores("linear", src, results, storage=tmp_path / "optuna.db", protocol=PROTOCOL, plan=PLAN,
                           seeds=(22,), shots=(None,), device="cpu")
    (row,) = read_rows(results)
    (path,) = store_noise_predictions(features, results, row, ["cog_l1"])
    assert path == predictions_root(results) / "m" / "noise" / "in1k" / "cog_l1" / "seed-22.npz"
    preds = read_noise_predictions(results, row, "cog_l1")
    assert preds.classes == tuple(seen) and preds.meta["label_classes"] == unseen
    assert preds.meta["source"]["agreement"] == 1.0  # the probe made again is the row's, image for image
    assert np.array_equal(preds.label, np.load(features / "m" / "cog_l1" / "test" / "labels.npy"))
    assert preds.top5.max() < len(seen) and len(preds) == 24
    # the IN-1K row made again since (its predictions another digest): the label-noise predictions are stale, refused
    append_row(results, {**row, "predictions": {**row["predictions"], "sha256": "0" * 64}})
    (again,) = read_rows(results)
    with pytest.raises(PredictionsError, match="were made from another in1k row than the one in the results"):
        read_noise_predictions(results, again, "cog_l1")
