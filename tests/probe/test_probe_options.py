"""Numeric options of ``cog-pl probe tune/protocol`` and ``cog-pl run``: a bad value is refused at once, in one line
naming the option, by the command and by the library objects behind it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cog_pl.cli.main import main
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol

BAD_PROBE_OPTIONS = [
    ("--trial-batch", "0"), ("--trial-batch", "-3"), ("--trials", "0"), ("--trials", "-1"), ("--epochs", "0"),
    ("--batch-size", "0"), ("--stale-after", "0"), ("--stale-after", "-5"), ("--stale-after", "nan"),
    ("--threads", "-2"), ("--seeds", "-1"), ("--shots", "0"), ("--shots", "-4"),
]


@pytest.mark.parametrize(("option", "value"), BAD_PROBE_OPTIONS)
def test_probe_protocol_refuses_a_bad_numeric_option_in_one_line(tmp_path, capsys, option, value):
    args = ["probe", "protocol", "--features", str(tmp_path / "missing"), "--results", str(tmp_path / "r.sqlite"),
            "--workdir", str(tmp_path / "w"), option, value]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0] and value.lstrip("-") in err[0], err
    assert not (tmp_path / "w").exists() and not (tmp_path / "r.sqlite").exists()  # refused before any work


@pytest.mark.parametrize(("option", "value"), [("--seed", "-1"), ("--shots", "0"), ("--trial-batch", "0"),
                                               ("--epochs", "0")])
def test_probe_tune_refuses_a_bad_numeric_option_in_one_line(tmp_path, capsys, option, value):
    args = ["probe", "tune", "--features", str(tmp_path / "missing"), "--workdir", str(tmp_path / "w"), option, value]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0], err


@pytest.mark.parametrize(("option", "value"), [("--trial-batch", "0"), ("--trials", "0"), ("--epochs", "-1"),
                                               ("--seeds", "-1"), ("--variant-seeds", "-2")])
def test_run_refuses_a_bad_probe_option_in_one_line(tmp_path, capsys, option, value):
    assert main(["run", "--model", "resnet50", "--out", str(tmp_path / "out"), option, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0], err
    assert not (tmp_path / "out").exists()


def test_trial_batch_zero_ends_at_once_instead_of_hanging(tmp_path):
    """The value that used to hang forever (the search asked batches of no trial and waited for them)."""
    from test_probe_fixtures import write_features

    features = write_features(tmp_path / "m" / "cog_l1", classes=3, dim=4, per_class=10, test_per_class=2)
    out = subprocess.run([sys.executable, "-m", "cog_pl.cli.main", "probe", "protocol", "--features", str(features),
                          "--results", str(tmp_path / "r.sqlite"), "--workdir", str(tmp_path / "w"),
                          "--probe-device", "cpu", "--trials", "3", "--epochs", "1", "--seeds", "1", "--shots", "all",
                          "--trial-batch", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "cog-pl probe: error: search plan: --trial-batch must be an integer of at least 1, got 0"]


@pytest.mark.parametrize("values", [{"trial_batch": 0}, {"trial_batch": -1}, {"startup_trials": -1},
                                    {"stale_after": 0.0}, {"heartbeat_every": -1.0}, {"trial_batch": 1.5}])
def test_search_plan_refuses_bad_values_by_name(values):
    (name,) = values
    with pytest.raises(ValueError, match=f"search plan: {name} must be"):
        SearchPlan(**values)


@pytest.mark.parametrize(("values", "name"), [({"seeds": (22, -1)}, "seeds"), ({"seeds": ()}, "seeds"),
                                              ({"shots": (0,)}, "shots"), ({"trials": 2.5}, "trials")])
def test_probe_protocol_refuses_bad_grids_by_name(values, name):
    with pytest.raises(ValueError, match=f"probe protocol: {name} must be"):
        ProbeProtocol(**values)


def test_the_library_grid_refuses_bad_seeds_and_shots(tmp_path):
    from test_probe_fixtures import write_features

    from cog_pl.evaluate.runner import run_on_stores

    features = write_features(tmp_path / "m" / "cog_l1", classes=3, dim=4, per_class=10, test_per_class=2)
    for grid in ({"seeds": (-1,)}, {"shots": (0,)}):
        with pytest.raises(ValueError, match="must be"):
            run_on_stores("linear", features, tmp_path / "r.sqlite", storage=tmp_path / "s.db", **grid)
    assert not (tmp_path / "r.sqlite").exists()
