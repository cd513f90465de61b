"""Old option spellings, accepted for one release: each sets what its new spelling sets and prints one line naming
the new spelling; neither ``--help`` nor the CLI reference lists them."""

from __future__ import annotations

import pytest

from cog_pl.cli.main import build_parser, main
from cog_pl.cli.options import REMOVED_IN, deprecation_line
from cog_pl.cli.reference import cli_markdown

#: (command words, old spelling, new spelling, a value, the destination both set)
ALIASES = [
    (("probe", "tune", "--features", "f"), "--device", "--probe-device", "cpu", "device"),
    (("probe", "tune", "--features", "f"), "--precision", "--probe-precision", "32-true", "precision"),
    (("probe", "protocol", "--features", "f", "--results", "r"), "--device", "--probe-device", "cpu", "device"),
    (("probe", "protocol", "--features", "f", "--results", "r"), "--precision", "--probe-precision", "bf16-mixed",
     "precision"),
    (("probe", "protocol", "--features", "f", "--results", "r"), "--workers", "--probe-workers", "3", "workers"),
    (("probe", "knn", "--features", "f"), "--device", "--probe-device", "cuda:1", "device"),
    (("probe", "knn", "--features", "f"), "--precision", "--probe-precision", "64-true", "precision"),
    (("models", "check", "timm:resnet10t", "f.pth"), "--prefix", "--checkpoint-prefix", "encoder.",
     "checkpoint_prefix"),
    (("data", "check"), "--workers", "--num-workers", "2", "num_workers"),
]


@pytest.mark.parametrize(("words", "old", "new", "value", "dest"), ALIASES,
                         ids=[f"{' '.join(a[0][:2])} {a[1]}" for a in ALIASES])
def test_an_old_spelling_works_and_names_the_new_one(words, old, new, value, dest, capsys):
    parser = build_parser(only=words[0])
    by_old = parser.parse_args([*words, old, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [deprecation_line(old, new)]
    assert err[0] == f"cog-pl: warning: {old} is deprecated, use {new} ({old} goes in cog_pl {REMOVED_IN})"
    by_new = parser.parse_args([*words, new, value])
    assert capsys.readouterr().err == ""
    assert getattr(by_old, dest) == getattr(by_new, dest) == (int(value) if value.isdigit() else value)
    assert vars(by_old) == vars(by_new)


@pytest.mark.parametrize(("words", "old", "new", "value", "dest"), ALIASES[:1] + ALIASES[-1:])
def test_without_the_old_spelling_the_default_stands(words, old, new, value, dest):
    assert getattr(build_parser(only=words[0]).parse_args(list(words)), dest) is not None or dest == "precision"


def test_an_old_spelling_is_refused_as_its_new_one_is():
    with pytest.raises(SystemExit):
        build_parser(only="probe").parse_args(["probe", "protocol", "--features", "f", "--results", "r",
                                                "--workers", "0"])


def test_old_spellings_are_not_documented():
    text = cli_markdown()
    assert all(new in text for _, _, new, _, _ in ALIASES)
    assert "--workers" not in text.replace("--probe-workers", "").replace("--num-workers", "")


def test_through_the_command_the_line_comes_before_the_work(tmp_path, capsys):
    """``data check --workers`` (the command's own run, not only its parser): warned, then checked."""
    code = main(["data", "check", "--in21k-root", str(tmp_path / "nowhere"), "--workers", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == deprecation_line("--workers", "--num-workers") and code != 0


@pytest.mark.parametrize(("cls", "args", "new"), [("CoGLevelDataModule", ("cog_l2",), "in21k_root"),
                                                  ("ImageNetDataModule", (), "in1k_root")])
def test_an_image_datamodule_takes_its_former_root_for_one_release(cls, args, new, tmp_path):
    import cog_pl

    module = getattr(cog_pl, cls)
    with pytest.warns(FutureWarning, match=f"root=...\\) is deprecated, use {new}= \\(--data.{new}\\)"):
        old = module(*args, root=str(tmp_path))
    assert old.root == module(*args, **{new: str(tmp_path)}).root == str(tmp_path)
    with pytest.raises(ValueError, match=f"give {new} \\(root is its former name\\), not both"):
        module(*args, root=str(tmp_path), **{new: str(tmp_path)})
    with pytest.raises(ValueError, match=f"needs {new}"):
        module(*args)


def test_the_launcher_drops_the_old_workers_spelling_from_the_tasks_command(tmp_path, capsys):
    """``probe protocol --launcher ... --workers 3``: an array of 3 tasks whose command has neither spelling."""
    from test_probe_fixtures import write_features

    features = write_features(tmp_path / "m" / "d", classes=3, dim=8, per_class=10, test_per_class=2)
    argv = ["probe", "protocol", "--features", str(features), "--results", str(tmp_path / "r.sqlite"), "--launcher",
            "sbatch-scripts", "--workers", "3", "--dry-run"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert deprecation_line("--workers", "--probe-workers") in captured.err
    assert "probe/m/d  array of 3 tasks" in captured.out
    assert "--workers" not in captured.out and "--probe-workers" not in captured.out


@pytest.mark.parametrize("words", [("probe", "protocol", "--features", "f", "--results", "r"),
                                   ("run", "--model", "resnet50", "--in1k-root", "a", "--in21k-root", "b")],
                         ids=["probe protocol", "run"])
def test_claim_cells_is_accepted_does_nothing_and_says_so(words, capsys):
    """Every worker claims each cell now (cog_pl.evaluate.grid): the old flag changes nothing and says it goes."""
    parser = build_parser(only=words[0])
    flagged = parser.parse_args([*words, "--claim-cells"])
    assert capsys.readouterr().err.strip().splitlines() == [
        "cog-pl: warning: --claim-cells is deprecated and does nothing: every probe worker claims each cell before "
        f"tuning it (--claim-cells goes in cog_pl {REMOVED_IN})"]
    plain = parser.parse_args(list(words))
    assert {k: v for k, v in vars(flagged).items() if k != "claim_cells"} == {
        k: v for k, v in vars(plain).items() if k != "claim_cells"}
    assert "--claim-cells" not in cli_markdown()
