"""The ``cog-pl`` commands of the level builder, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cog_pl.cli.main import main
from cog_pl.levels.builder import write_level_file
from cog_pl.resources import official_levels


@pytest.fixture(scope="module")
def level_file(level_content, tmp_path_factory):
    path = tmp_path_factory.mktemp("levels") / "levels.json"
    write_level_file(path, level_content)
    return path


def test_help_lists_the_commands():
    out = subprocess.run([sys.executable, "-m", "cog_pl.cli.main", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in ("levels", "similarity", "wordnet"):
        assert cmd in out.stdout


def test_a_named_command_starts_without_the_other_commands_modules():
    out = subprocess.run([sys.executable, "-m", "cog_pl.cli.main", "-v", "probe", "tune", "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "usage: cog-pl probe tune" in out.stdout
    from cog_pl.cli.main import _command, build_parser

    assert _command(["-v", "probe", "tune"]) == "probe" and _command(["--version"]) is None
    with pytest.raises(SystemExit):  # only the probe command is registered
        build_parser(only="probe").parse_args(["levels", "show"])
    probe_only = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom cog_pl.cli.main import build_parser, _command\n"
         "build_parser(only=_command(['probe', 'tune']))\nprint(sorted(m for m in sys.modules if m.startswith"
         "('cog_pl.cli.')))\nprint('numpy' in sys.modules)"], capture_output=True, text=True, check=True)
    modules, numpy = probe_only.stdout.splitlines()
    assert "cog_pl.cli.levels" not in modules and "cog_pl.cli.probe" in modules and numpy == "False"


def test_build_writes_file_report_and_plot(tmp_path, capsys, level_content):
    official = {w for ws in official_levels().values() for w in ws}
    dropped = next(w for w in level_content["ranking"] if w not in official)
    discard = tmp_path / "discard.txt"
    discard.write_text(f"{dropped}\n")
    out = tmp_path / "levels.json"
    png = tmp_path / "levels.png"
    assert main(["levels", "build", "--out", str(out), "--plot", str(png), "--discard", str(discard)]) == 0
    text = capsys.readouterr().out
    assert "5216" in text and "5146" in text and "100.00% in their level" in text
    data = json.loads(out.read_text())
    assert data["eligibility"][-1]["remaining"] == 5215 and data["settings"]["discard"] == [dropped]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_build_with_a_bad_discard_list_fails_clearly(tmp_path, capsys):
    bad = tmp_path / "discard.txt"
    bad.write_text("n0131827\n")
    assert main(["levels", "build", "--out", str(tmp_path / "x.json"), "--discard", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1" in err and "'n0131827' is not a wnid" in err
    assert not (tmp_path / "x.json").exists()


def test_compare_and_show_and_plot(level_file, tmp_path, capsys):
    assert main(["levels", "compare", str(level_file)]) == 0
    assert "5000/5000  100.00%" in capsys.readouterr().out
    assert main(["levels", "compare", str(level_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["isolated_all"] == 1.0
    assert main(["levels", "show"]) == 0
    assert "official ImageNet-CoG levels" in capsys.readouterr().out
    assert main(["levels", "show", str(level_file)]) == 0
    shown = capsys.readouterr().out
    assert "L5   1000 concepts  similarity" in shown
    assert main(["levels", "plot", str(level_file), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_compare_of_a_missing_file_fails_clearly(tmp_path, capsys):
    assert main(["levels", "compare", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("measure", ["lin", "path", "wup", "jcn"])
def test_similarity_prints_one_number(capsys, measure, wn, onto):
    tiger_cat, tabby = wn.synset_from_pos_and_offset("n", 2123159), wn.synset_from_pos_and_offset("n", 2123045)
    expected = {"lin": lambda: tiger_cat.lin_similarity(tabby, onto.nltk_ic()),  # LCS unique here: both rules agree
                "path": lambda: tiger_cat.path_similarity(tabby), "wup": lambda: tiger_cat.wup_similarity(tabby),
                "jcn": lambda: tiger_cat.jcn_similarity(tabby, onto.nltk_ic())}[measure]()
    assert main(["similarity", "n02123159", "n02123045", "--measure", measure]) == 0
    assert float(capsys.readouterr().out) == pytest.approx(expected, abs=1e-6)


def test_similarity_rejects_bad_wnids(capsys):
    assert main(["similarity", "n02123159", "tiger"]) == 2
    assert "malformed wnid 'tiger'" in capsys.readouterr().err
    assert main(["similarity", "n02123159", "n99999999"]) == 2
    assert "unknown wnid n99999999" in capsys.readouterr().err


def test_build_on_an_incomplete_in21k_root_names_the_missing_synsets(tmp_path, capsys):
    root = tmp_path / "in21k"
    (root / "n01440764").mkdir(parents=True)
    (root / "n01440764" / "a.JPEG").write_bytes(b"x")
    assert main(["levels", "build", "--out", str(tmp_path / "l.json"), "--in21k-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "21840 of 21841 synsets are missing" in err and "--allow-missing" in err


def test_reranking_the_official_concepts_refuses_eligibility_options(tmp_path, capsys):
    out = tmp_path / "v.json"
    # the protocol's own values too: given, they would be silently ignored
    for extra in (["--min-images", "100"], ["--leaf-rule", "eligible"], ["--in21k-root", str(tmp_path)],
                  ["--min-images", "782"], ["--leaf-rule", "in21k"]):
        assert main(["levels", "build", "--out", str(out), "--measure", "wup", "--concepts", "official", *extra]) == 2
        assert f"{extra[0]}: eligibility options" in capsys.readouterr().err
    assert not out.exists()
