"""What ``cog-pl run`` prints (issue 39, item 5): the Optuna trials behind ``--verbose``, a resumed run's stores
named once and one ``skip`` line per domain, the defaults in ``--help``, ``ProbeOptions`` from ``cog_pl``, and a run
after ``cog-pl extract`` that reuses its finished stores."""

from __future__ import annotations

import pytest
import torch

from cog_pl.cli.main import main
from cog_pl.results import read_rows

DOMAINS = ("cog_l1", "cog_l2")


def test_run_help_shows_the_grid_defaults_and_probe_options_is_public(capsys):
    import cog_pl
    from cog_pl.pipeline import ProbeOptions

    assert cog_pl.ProbeOptions is ProbeOptions and "ProbeOptions" in cog_pl.__all__
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for text in ("seeds of every probe (default: --protocol's: paper: 22 37 45 77 93; quick: 22)",
                 "(default: --protocol's: paper: all 1 2 4 8 16 32 64 128; quick: all 4)",
                 "Optuna trials per probe (default: --protocol's: paper: 30; quick: 10)",
                 "epochs per probe (default: --protocol's: paper: 100; quick: 30)", "--protocol {paper,quick}"):
        assert text in shown


def _trials(messages):
    return [m for m in messages if m.startswith("trials [")]


def test_a_run_after_extract_reuses_its_stores_and_says_each_thing_once(onto, tmp_path, capsys, caplog):
    """``cog-pl extract`` with a weights file, then ``cog-pl run``: without ``--checkpoint`` one line naming it;
    with it the stores are reused (each named once), the trials stay behind ``--verbose`` and a resumed run says
    one ``skip`` line per domain."""
    from cog_pl.demo.synthetic import make_demo
    from cog_pl.models import build_backbone

    bench = make_demo(tmp_path / "d", n_seen=3, n_per_level=2, train_per_concept=6, test_per_concept=3,
                      image_size=32, onto=onto)
    weights = tmp_path / "my_cnn.pth"
    torch.save(build_backbone("external:demo_cnn").model.state_dict(), weights)
    out, in21k = tmp_path / "out", str(tmp_path / "d" / "in21k")
    caplog.set_level("INFO", logger="cog_pl")
    assert main(["extract", "--model.model", "external:demo_cnn", "--model.checkpoint", str(weights),
                 "--data.in21k_root", in21k, "--data.benchmark", str(bench), "--data.domains", f"[{','.join(DOMAINS)}]",
                 "--data.out", str(out / "features"), "--data.num_workers", "0", "--data.batch_size", "16",
                 "--trainer.accelerator", "cpu", "--trainer.devices", "1"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    argv = ["run", "--model", "external:demo_cnn", "--in21k-root", in21k, "--benchmark", str(bench), "--out",
            str(out), "--domains", *DOMAINS, "--no-check", "--num-workers", "0", "--batch-size", "16", "--shots",
            "all", "--trials", "2", "--epochs", "2", "--probe-device", "cpu", "--no-noise-predictions", "--no-html"]

    caplog.clear()
    assert main([*argv, "--seeds", "22"]) == 2  # the demo's CNN without a file: refused, not run at random
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("cog-pl run: error: external:demo_cnn is built without weights") and \
        "give a file with --checkpoint FILE" in line
    assert main([*argv, "--seeds", "22", "--name", "demo_cnn", "--random-weights"]) == 2  # random weights, the
    (line,) = capsys.readouterr().err.strip().splitlines()  # stores' label: another set of weights
    assert line.startswith("cog-pl run: error: label demo_cnn already names") and \
        line.endswith(f"to reuse its feature stores, run with --checkpoint {weights}")

    run = [*argv, "--checkpoint", str(weights)]
    caplog.clear()
    assert main([*run, "--seeds", "22"]) == 0, capsys.readouterr().err
    stores = [out / "features" / "demo_cnn" / d / s for d in DOMAINS for s in ("train", "test")]
    for store in stores:  # reused: named once, not extracted again
        assert sum(str(store) in m for m in caplog.messages) == 1, caplog.messages
    assert not [m for m in caplog.messages if m.startswith("wrote feature store")]
    assert not _trials(caplog.messages)  # the Optuna trials: --verbose only
    assert len(read_rows(out / "results.sqlite")) == len(DOMAINS)

    caplog.clear()
    assert main(["-v", *run, "--seeds", "22", "37"]) == 0, capsys.readouterr().err  # resumed, one seed more
    for store in stores:
        assert sum(str(store) in m for m in caplog.messages) == 1
    skips = [m for m in caplog.messages if m.startswith("skip ")]
    assert skips == [f"skip demo_cnn/linear/{d}: 1 of 2 row(s) exist, made with the same inputs" for d in DOMAINS]
    assert _trials(caplog.messages)  # shown with --verbose
