"""Unreadable images at extraction: ``fail`` stops naming the file in one line; ``skip`` records the row as missing
in the store's meta.json, every reader leaves it out, the report counts it, and a cap keeps a broken copy from
producing a store of zeros."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from conftest_data import tiny  # noqa: F401 - fixture

from cog_pl.cli.main import build_parser, main
from cog_pl.data.imagenet import UnreadableImageError, skip_budget
from cog_pl.datamodules.features import FeatureDataModule
from cog_pl.features.convert import export_pth
from cog_pl.features.missing import clear_missing, mark_missing
from cog_pl.features.pair import open_pair
from cog_pl.features.store import StoreWriter, is_complete, make_meta, open_store
from cog_pl.probe.data import load_store
from cog_pl.report.build import skipped_markdown

MODEL = "timm:resnet10t"


def test_missing_rows_are_recorded_across_writers_and_resumes_and_listed_in_meta(tmp_path):
    path = tmp_path / "m" / "cog_l1" / "train"
    meta = make_meta(model="m", weights_sha256="ab" * 32, domain="cog_l1", split="train", num_classes=2,
                     classes=["n1", "n2"], transform={"crop": 8}, level_file_sha256="cd" * 32)
    a, b = StoreWriter(path, 6, 3), StoreWriter(path, 6, 3)  # two DDP ranks share the partial store
    a.write([0, 1], np.ones((2, 3)), [0, 0])
    assert mark_missing(b, [4], [1], ["/x/n2/bad.JPEG"], ["not an image"]) == 1
    assert mark_missing(a, [2], [0], ["/x/n1/cut.JPEG"], ["truncated"]) == 2
    del a, b
    w = StoreWriter(path, 6, 3)  # resumed after a kill: a row recorded missing that reads fine this time is kept
    w.write([2, 3, 5], np.ones((3, 3)), [0, 1, 1])
    clear_missing(w, [2, 3, 5])
    store = open_store(w.finish(meta))
    assert store.meta["missing"] == [{"row": 4, "path": "/x/n2/bad.JPEG", "error": "not an image"}]
    assert store.valid.tolist() == [True] * 4 + [False, True] and store.labels[4] == 1
    assert sorted(p.name for p in path.iterdir()) == ["features.npy", "index.npy", "labels.npy", "meta.json"]
    x, y = load_store(store)
    assert len(x) == 5 and y.tolist() == [0, 0, 0, 1, 1]


@pytest.fixture
def broken(tiny, tmp_path):  # noqa: F811
    wnid = tiny.levels["L2"][1]
    bad = f"{wnid}/{wnid}_90003.JPEG"
    return tiny.make_in21k(tmp_path / "in21k", "folder", bad={bad: "corrupt"}), bad


def _args(in21k, out, *extra):
    return ["extract", "--model.model", MODEL, "--model.random_weights", "true", "--data.in21k_root", str(in21k),
            "--data.domains", '["cog_l2"]',
            "--data.out", str(out), "--data.num_workers", "0", "--data.batch_size", "4",
            "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.enable_progress_bar", "false",
            *extra]


@pytest.mark.slow
def test_skip_records_the_image_and_readers_probes_and_report_leave_it_out(broken, tmp_path, capsys):
    in21k, bad = broken
    out = tmp_path / "features"
    assert main(_args(in21k, out, "--data.on_error", "skip")) == 0
    root = out / "resnet10t@random" / "cog_l2"
    assert is_complete(root / "train") and is_complete(root / "test")
    store = open_store(root / "train")
    [record] = store.meta["missing"]
    assert record["path"].endswith(bad) and "not a recognised image format" in record["error"]
    row = record["row"]
    assert store.meta["classes"][store.labels[row]] == bad.split("/")[0]  # the row keeps its label
    assert not np.asarray(store.features[row], np.float32).any() and np.flatnonzero(~store.valid).tolist() == [row]
    assert "missing" not in open_store(root / "test").meta and not list(root.rglob("missing.*"))
    pair = open_pair(root)
    x, y = load_store(pair.train)  # the probe's reader
    assert len(x) == len(y) == len(store) - 1
    for mode in ("final", "tune"):  # the Lightning probe's reader
        dm = FeatureDataModule(str(root), stage_mode=mode, device="cpu")
        dm.setup()
        used = np.concatenate([dm.train_idx, dm.val_idx if mode == "tune" else []]).astype(int)
        assert row not in used and len(np.unique(used)) == len(store) - 1
    export = export_pth(pair.train, tmp_path / "X_Y.pth")  # the released code's format
    assert len(torch.load(export)["Y"]) == len(store) - 1
    section = skipped_markdown(out)
    assert "| resnet10t@random | cog_l2 | train | 1 |" in section and bad in section
    capsys.readouterr()
    assert main(_args(in21k, out)) == 2  # under "fail", the finished store that lacks an image is not reused
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(r"cog_l2/train: finished with 1 of \d+ images missing .* on_error=fail allows none; pass "
                     r"--overwrite", message), message
    assert main(_args(in21k, out, "--data.on_error", "skip")) == 0  # its own policy reuses it
    assert open_store(root / "train").meta["missing"] == [record]


@pytest.mark.slow
def test_fail_stops_with_one_line_naming_the_file(broken, tmp_path, capsys):
    in21k, bad = broken
    args = _args(in21k, tmp_path / "features", "--data.num_workers", "1")  # the error crosses a worker process
    try:
        code, message = main(args), capsys.readouterr().err.strip().splitlines()[-1]
    except UnreadableImageError as err:
        code, message = 2, str(err)
    assert code != 0 and bad in message and "\n" not in message and "unreadable image" in message
    assert not is_complete(tmp_path / "features" / "resnet10t@random" / "cog_l2" / "train")


@pytest.mark.slow
def test_skipping_more_than_the_cap_fails_naming_the_store(broken, tmp_path, capsys):
    in21k, bad = broken
    out = tmp_path / "features"
    assert main(_args(in21k, out, "--data.on_error", "skip", "--data.max_skipped", "0")) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(r"cog_l2/train: 1 of \d+ images unreadable, more than max_skipped allows \(0\); the last: "
                     rf".*{bad}", message), message
    assert not is_complete(out / "resnet10t@random" / "cog_l2" / "train")
    assert main(_args(in21k, out)) != 0  # resumed under "fail": the row skipped before is read again, and fails
    assert bad in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(_args(in21k, out, "--data.on_error", "skip", "--data.max_skipped", "1")) == 0
    assert len(open_store(out / "resnet10t@random" / "cog_l2" / "train").meta["missing"]) == 1
    assert skip_budget(1_281_167) == 1282 and skip_budget(50) == 1 and skip_budget(10, 3) == 3  # the default cap


def test_run_takes_the_policy():
    args = build_parser(only="run").parse_args(["run", "--model", "resnet50", "--on-error", "skip",
                                                "--max-skipped", "20"])
    assert args.on_error == "skip" and args.max_skipped == 20
    with pytest.raises(SystemExit):
        build_parser(only="run").parse_args(["run", "--model", "resnet50", "--on-error", "ignore"])


@pytest.mark.slow
def test_run_skips_records_probes_without_and_reports_the_unreadable_images(onto, tmp_path, capsys):
    from cog_pl.demo.synthetic import make_demo
    from cog_pl.results import read_rows

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    bad = [sorted(folder.glob("*.JPEG"))[2] for folder in sorted((tmp_path / "d" / "in21k").iterdir())]
    for path in bad:  # one corrupt image in every concept's folder
        path.write_bytes(b"not a JPEG" * 20)
    out = tmp_path / "out"
    argv = ["run", "--model", "external:demo_cnn", "--random-weights", "--in21k-root", str(tmp_path / "d" / "in21k"),
            "--benchmark",
            str(bench), "--out", str(out), "--domains", "cog_l2", "--no-check", "--num-workers", "0", "--seeds", "22",
            "--shots", "all", "--trials", "1", "--epochs", "1", "--accelerator", "cpu", "--probe-device", "cpu"]
    assert main(argv) != 0  # fail, the default: one line naming the file
    [message] = capsys.readouterr().err.strip().splitlines()
    assert message.startswith("cog-pl run: error: unreadable image ") and any(str(p) in message for p in bad)
    assert main([*argv, "--on-error", "skip", "--max-skipped", "5"]) == 0, capsys.readouterr().err
    stores = {s: open_store(out / "features" / "demo_cnn@random" / "cog_l2" / s) for s in ("train", "test")}
    skipped = {s: len(store.meta.get("missing", [])) for s, store in stores.items()}
    assert sum(skipped.values()) == 2  # the level's two concepts, one image each
    [row] = [r for r in read_rows(out / "results.sqlite") if r["method"] == "linear"]
    assert row["train_rows"] == len(stores["train"]) - skipped["train"]  # the probe trained without them
    report = (out / "report" / "report.md").read_text()
    assert "Images skipped at extraction" in report
    for split, n in skipped.items():
        assert (f"| demo_cnn@random | cog_l2 | {split} | {n} |" in report) == (n > 0)


def test_the_command_line_default_skip_budget_is_the_librarys():
    from cog_pl.cli.options import MAX_SKIPPED as cli_default
    from cog_pl.data.imagenet import MAX_SKIPPED

    assert cli_default == MAX_SKIPPED
