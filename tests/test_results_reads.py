"""How often a default `cog-pl run` reads the results file (issue 38): each read of many rows is counted."""

from __future__ import annotations

import sys
from collections import Counter

from cog_pl.cli.main import main


def _count_reads(monkeypatch) -> Counter:
    """Count every call of the functions that read many rows of a results file, wherever a module bound them."""
    import cog_pl.results as results

    calls: Counter = Counter()
    for name in ("read_rows", "row_times"):
        original = getattr(results, name)

        def counting(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        for module in list(sys.modules.values()):  # `from cog_pl.results import read_rows` bound before the patch
            if module is not None and getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counting)
    return calls


def test_a_default_run_reads_the_results_file_a_bounded_number_of_times(onto, tmp_path, monkeypatch, capsys):
    """A `cog-pl run` of the default shape (the six domains, the linear probe, the label-noise check, the report)
    on the miniature benchmark, its reads of the results file counted."""
    from cog_pl.demo.synthetic import make_demo

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    out = tmp_path / "out"
    calls = _count_reads(monkeypatch)
    argv = ["run", "--model", "external:demo_cnn", "--random-weights", "--in1k-root", str(tmp_path / "d" / "in1k"),
            "--in21k-root", str(tmp_path / "d" / "in21k"), "--benchmark", str(bench), "--out", str(out),
            "--num-workers", "0", "--accelerator", "cpu", "--probe-device", "cpu", "--seeds", "22", "--shots", "all",
            "--trials", "2", "--epochs", "2"]
    assert main(argv) == 0, capsys.readouterr().err
    first = dict(calls)
    calls.clear()
    assert main(argv) == 0, capsys.readouterr().err  # resumed: every store and row there
    # at 2b02e4d: the check and run passes read the whole file once per domain, the wait pass, the label-noise
    # check, the summary's row count, the report (rows and their times) and, resumed, the label check once more
    assert first == {"read_rows": 16, "row_times": 1}
    assert dict(calls) == {"read_rows": 17, "row_times": 1}
