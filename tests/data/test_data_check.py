"""``cog-pl data check``: a readable, counted report and an exit status that says whether the benchmark can run."""

import pytest
from conftest_data import TINY_PROTOCOL, tiny  # noqa: F401 - fixture

from cog_pl.cli import main as cli
from cog_pl.data import check


@pytest.fixture(autouse=True)
def _tiny_protocol(monkeypatch):
    monkeypatch.setattr(check, "FeatureProtocol", lambda: TINY_PROTOCOL)


def _run(capsys, *args):
    code = cli.main(["data", "check", *args])
    return code, capsys.readouterr().out


def test_healthy_data_passes(tiny, tmp_path, capsys):  # noqa: F811
    in1k = tiny.make_in1k(tmp_path / "in1k")
    in21k = tiny.make_in21k(tmp_path / "in21k", "tar")
    code, out = _run(capsys, "--in1k-root", str(in1k), "--in21k-root", str(in21k), "--decode", "--num-workers", "0",
                     "--cache-dir", str(tmp_path / "cache"))
    assert code == 0, out
    assert "cog_l3      3/3            18        9" in out and "in1k        3/3            12      150" in out
    assert "decoded 297 images: 0 unreadable" in out and out.rstrip().endswith("can run on this data.")


def test_problems_are_named_counted_and_fail_the_check(tiny, tmp_path, capsys):  # noqa: F811
    w_missing, w_few = tiny.levels["L1"][0], tiny.levels["L5"][1]
    gone, corrupt, cut = tiny.test["L2"][0], tiny.test["L3"][0], tiny.concept_files("L4", tiny.levels["L4"][0])
    cut = f"{tiny.levels['L4'][0]}/{next(n for n, s in cut.items() if s == 'train')}"
    in21k = tiny.make_in21k(tmp_path / "in21k", "folder", skip=(w_missing, gone), n_train={w_few: 1},
                            bad={corrupt: "corrupt", cut: "truncated"})
    bad_list = tmp_path / "bad.tsv"
    code, out = _run(capsys, "--in21k-root", str(in21k), "--decode", "--num-workers", "2", "--bad-list", str(bad_list))
    assert code == 1
    assert f"[cog_l1] missing synset: 1\n    {w_missing} (" in out
    assert "[cog_l2] missing test images: 1" in out and gone.split("/")[1] in out
    assert f"{w_few} (" in out and "1 train images, expected 3..6" in out
    assert "[cog_l3] unreadable test images: 1" in out and "not a recognised image format" in out
    assert "[cog_l4] unreadable train images: 1" in out and "truncated" in out  # extraction would stop at it
    assert "FAILED: 5 error(s)" in out, out
    assert "cog_l2      3/3            18        8" in out and "decoded 120 images: 2 unreadable" in out
    assert sorted(line.split("\t")[0] for line in bad_list.read_text().splitlines()) == sorted([corrupt, cut])
    # under the skip policy, as extraction does, they are skipped within the cap (warnings) and errors past it
    code, out = _run(capsys, "--in21k-root", str(in21k), "--decode", "--num-workers", "0", "--on-error", "skip")
    assert code == 1 and "FAILED: 3 error(s)" in out, out
    assert "warnings (2):" in out and "[cog_l3] unreadable test images (skipped): 1" in out
    assert "[cog_l4] unreadable train images (skipped): 1" in out
    code, out = _run(capsys, "--in21k-root", str(in21k), "--decode", "--num-workers", "0", "--on-error", "skip",
                     "--max-skipped", "0")
    assert "FAILED: 5 error(s)" in out and "unreadable train images (more than --max-skipped allows: 0): 1" in out


def test_missing_roots_are_clear(tmp_path, capsys):
    assert cli.main(["data", "check"]) == 2
    assert "give --in1k-root and/or --in21k-root" in capsys.readouterr().err
    code, out = _run(capsys, "--in1k-root", str(tmp_path))
    assert code == 1 and f"{tmp_path}/train is not a directory" in out


def test_split_export_then_import_installs_the_same_split(tiny, tmp_path, capsys):  # noqa: F811
    in21k = tiny.make_in21k(tmp_path / "in21k", "tar")
    out = tmp_path / "L2.split.json.gz"
    assert cli.main(["data", "split", "export", "--level", "L2", "--in21k-root", str(in21k), "--out", str(out),
                     "--cache-dir", str(tmp_path / "c1")]) == 0
    folders = tiny.make_in21k(tmp_path / "other-machine", "folder")
    assert cli.main(["data", "split", "import", str(out), "--in21k-root", str(folders),
                     "--cache-dir", str(tmp_path / "c2")]) == 0
    assert (tmp_path / "c2" / "splits" / "cog_L2.split.json.gz").read_bytes() == out.read_bytes()
    sparse = tiny.make_in21k(tmp_path / "sparse", "folder", skip=(tiny.levels["L2"][1],))
    assert cli.main(["data", "split", "import", str(out), "--in21k-root", str(sparse),
                     "--cache-dir", str(tmp_path / "c3")]) == 2
    assert "not installed" in capsys.readouterr().err
