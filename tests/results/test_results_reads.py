"""How often a default `cog-pl run` reads the results file (issue 38): each read of many rows is counted."""

from __future__ import annotations

import sys
from collections import Counter

from run_stages import probe_stage

from cog_pl.cli.main import main


def _count_reads(monkeypatch) -> Counter:
    """Count every call of the functions that read many rows of a results file, wherever a module bound them, by
    function and the key fields it was narrowed to (``()``: the whole file)."""
    import cog_pl.results.rows as results

    calls: Counter = Counter()
    for name in ("read_rows", "row_times"):
        original = getattr(results, name)

        def counting(*args, _name=name, _original=original, **kwargs):
            calls[_name, tuple(k for k, v in kwargs.items() if v is not None)] += 1
            return _original(*args, **kwargs)

        for module in list(sys.modules.values()):  # `from cog_pl.results import read_rows` bound before the patch
            if module is not None and getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counting)
    return calls


def test_a_default_run_reads_the_results_file_once_for_its_probes(onto, tmp_path, monkeypatch, capsys):
    """A `cog-pl run` of the default shape (the six domains, the linear probe, the label-noise check, the report)
    on the miniature benchmark reads the model's rows once for every domain's check and run pass and the whole file
    once, for the report; resumed, the label check reads the label's rows once more. At 2b02e4d it read the whole
    file 16 times (17 resumed) and the rows' times once: the check and run passes once per domain each, the wait
    pass, the label-noise check, the summary's row count, the report (and, resumed, the label check)."""
    from cog_pl.demo.synthetic import make_demo
    from cog_pl.results import read_rows

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    out = tmp_path / "out"
    calls = _count_reads(monkeypatch)
    argv = ["run", "--model", "external:demo_cnn", "--random-weights", "--in1k-root", str(tmp_path / "d" / "in1k"),
            "--in21k-root", str(tmp_path / "d" / "in21k"), "--benchmark", str(bench), "--out", str(out),
            "--num-workers", "0", "--accelerator", "cpu", "--probe-device", "cpu", "--seeds", "22", "--shots", "all",
            "--trials", "2", "--epochs", "2"]
    assert main(argv) == 0, capsys.readouterr().err
    assert len(read_rows(out / "results.sqlite")) == 6  # one row per domain
    assert "(6 new, 6 in all)" in capsys.readouterr().out
    first = dict(calls)
    calls.clear()
    assert main(argv) == 0, capsys.readouterr().err  # resumed: every store and row there
    assert "(0 new, 6 in all)" in capsys.readouterr().out
    probes, report = {("read_rows", ("model",)): 1}, {("read_rows", ()): 1, ("row_times", ()): 1}
    assert first == {**probes, **report}
    assert dict(calls) == {("read_rows", ("model",)): 2, **report}  # and the label check's


def _grid(tmp_path):
    """A run's probe stage on two plain stores of model ``m`` (domains cog_l1, cog_l2, one cell each), and how
    another worker makes the cog_l2 row: the same probe, its row marked."""
    from test_probe_fixtures import write_features

    from cog_pl.pipeline import ProbeOptions, RunConfig
    from cog_pl.probe.cell import Splits, probe

    out = tmp_path / "out"
    for domain in ("cog_l1", "cog_l2"):
        write_features(out / "features" / "m" / domain, classes=3, dim=8, per_class=20, test_per_class=4)
    cfg = RunConfig(model="external:demo_cnn", random_weights=True, in1k_root=None, in21k_root=str(tmp_path),
                    out=str(out), domains=("cog_l1", "cog_l2"), seeds=(22,), shots=(None,), check=False,
                    progress=False, probe=ProbeOptions(trials=2, epochs=2, device="cpu"))

    def other_row():
        splits = Splits.for_probes(out / "features" / "m" / "cog_l2", "cpu", cfg.protocol, cfg.probe.plan())
        row = probe(splits, seed=22, shots=None, storage=tmp_path / "other.db", model="m", domain="cog_l2",
                    protocol=cfg.protocol, plan=cfg.probe.plan(), device="cpu")
        return {**row, "made_by": "other"}

    return cfg, out, other_row


def test_a_row_another_worker_writes_after_the_rows_were_read_is_not_made_again(tmp_path, monkeypatch):
    """The rows are read once before the probes; a cell whose row another worker writes meanwhile is found so when
    it is claimed, and kept."""
    import cog_pl.evaluate.runner as runner
    from cog_pl.results import append_row, get_row

    cfg, out, other_row = _grid(tmp_path)
    original = runner.run_grid

    def run_grid(job, **kwargs):
        if job.domain == "cog_l2" and not kwargs.get("check_only"):  # written by another worker after the read
            append_row(job.results, other_row())
        return original(job, **kwargs)

    monkeypatch.setattr(runner, "run_grid", run_grid)
    assert probe_stage(cfg, out, "m") == 1  # cog_l1's row alone
    assert get_row(out / "results.sqlite", ("m", "linear", "cog_l2", None, 22))["made_by"] == "other"


def test_the_wait_pass_waits_for_a_cell_another_worker_holds_and_keeps_its_row(tmp_path):
    """A cell another worker holds is left to it; the wait pass reads the rows again, waits for its claim and
    finds the row it wrote."""
    import threading
    import time

    from cog_pl.results import append_row, get_row, has_row
    from cog_pl.results.claims import claim, release
    from cog_pl.results.identity import format_key

    cfg, out, other_row = _grid(tmp_path)
    results, key = out / "results.sqlite", ("m", "linear", "cog_l2", None, 22)
    elsewhere = claim(results, format_key(key), stale_after=3600, worker="other")
    written: list = []
    worker = threading.Thread(target=lambda: written.append(probe_stage(cfg, out, "m")))
    worker.start()
    deadline = time.monotonic() + 120
    while not has_row(results, ("m", "linear", "cog_l1", None, 22)) and time.monotonic() < deadline:
        time.sleep(0.1)
    row = other_row()
    time.sleep(1.5)  # the held cell asked for again, a poll or two
    assert worker.is_alive() and not has_row(results, key)
    append_row(results, row)
    release(elsewhere)
    worker.join(timeout=120)
    assert not worker.is_alive() and written == [1]
    assert get_row(results, key)["made_by"] == "other"


def test_rows_are_read_by_scope_as_frozen_rows_and_handed_down_without_a_read(tmp_path, monkeypatch):
    import dataclasses

    import pytest

    import cog_pl.results.rows as results
    from cog_pl.results import append_row, count_rows, read_rows, read_stored

    path = tmp_path / "r.sqlite"
    for model, method, domain in (("a", "linear", "in1k"), ("a", "knn", "in1k"), ("a", "linear", "cog_l1"),
                                  ("b", "linear", "in1k")):
        append_row(path, {"model": model, "method": method, "domain": domain, "shots": None, "seed": 22})
    assert count_rows(path) == 4 and count_rows(tmp_path / "none.sqlite") == 0
    assert [(r["model"], r["method"]) for r in read_rows(path, domain="in1k")] == [("a", "knn"), ("a", "linear"),
                                                                                 ("b", "linear")]
    stored = read_stored(path, model="a")
    assert len(stored) == 3 and stored.get(("a", "knn", "in1k", None, 22)).values["method"] == "knn"
    with pytest.raises(dataclasses.FrozenInstanceError):
        stored.rows[0].seed = 1
    with pytest.raises(TypeError):
        stored.rows[0].values["seed"] = 1
    calls: list = []
    monkeypatch.setattr(results, "read_rows", lambda *a, **k: calls.append(k) or [])
    narrowed = read_stored(path, model="a", method="linear", reuse=stored)  # within what was read: no read
    assert [r.domain for r in narrowed] == ["cog_l1", "in1k"] and calls == []
    assert len(read_stored(path, model="b", reuse=stored)) == 0 and calls == [
        {"model": "b", "method": None, "domain": None}]  # another model's rows: read
    read_stored(tmp_path / "other.sqlite", model="a", reuse=stored)  # another file's: read
    assert len(calls) == 2
