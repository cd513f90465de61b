"""Bad inputs a user or an attacker gives ``cog-pl``: each refused by the installed command in one line that names
the file, option, URL or synset, with a non-zero exit status, no traceback, no hang, and nothing written where a case
says (``absent``: no row, store or study).

The catalogue is tests/bad_input_cases.py (benchmarks/bad_inputs.py prints the same cases as a table). Cases that
need file permissions are skipped as root, which ignores them.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from bad_input_cases import CASES, COG_PL, Case, make_data, run_case

from cog_pl.cli.main import error_message, main

ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0
#: Cases of other helpers' defects not landed yet (the lead removes these marks).
PENDING: dict[str, str] = {
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("bad"))


def _param(case: Case):
    marks = [pytest.mark.slow] if case.slow else []
    if case.unix_permissions:
        marks.append(pytest.mark.skipif(ROOT_USER, reason="root ignores file permissions"))
    if case.name in PENDING:
        marks.append(pytest.mark.xfail(strict=False, reason=PENDING[case.name]))
    return pytest.param(case, id=case.name, marks=marks)


def test_the_catalogue_covers_every_command():
    words = {c.args[0] for c in CASES} | {" ".join(c.args[:2]) for c in CASES}
    assert len(CASES) >= 40 and len({c.name for c in CASES}) == len(CASES)
    assert {"wordnet", "similarity", "levels", "data", "features", "probe", "report", "run", "demo", "noise",
            "extract", "finetune"} <= words
    assert {"levels show", "levels compare", "levels plot", "levels build", "data check", "data split",
            "features info", "features import", "features export", "features regroup", "probe tune",
            "probe protocol", "probe fit", "probe knn", "finetune fit", "finetune test"} <= words


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input_is_one_clear_line(case, data, tmp_path):
    out = run_case(case, data, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode is not None, f"{case.name}: still running after {case.timeout:g} s"
    assert out.returncode != 0, f"{case.name}: accepted\n{out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr, f"{case.name}:\n{out.stderr[-3000:]}"
    assert out.one_line, f"{case.name}: last stderr line {out.last_line!r}"
    assert case.names.format(**data) in out.last_line, f"{case.name}: {out.last_line!r} lacks {case.names!r}"
    assert not case.written(data), f"{case.name}: refused, yet wrote {case.written(data)}"


def test_errors_of_the_machine_are_one_line_with_status_1(tmp_path, capsys, monkeypatch):
    """An OSError (permissions, a full disk) or a database error: status 1, one line naming the file; with
    COG_PL_DEBUG=1 (or --verbose) the traceback."""
    import errno
    import sqlite3

    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "features.npy"))
    assert error_message(full) == f"{tmp_path / 'features.npy'}: disk full (no space left on device)"
    denied = PermissionError(errno.EACCES, "Permission denied", "/data/in21k/n01440764.tar")
    assert error_message(denied) == "/data/in21k/n01440764.tar: Permission denied"
    assert error_message(sqlite3.OperationalError("database is locked\nmore")) == "database error: database is locked"
    wrapped = ValueError("cannot read checkpoint c.pt: Weights only load failed.\nPlease file an issue ...")
    wrapped.__cause__ = RuntimeError("x")
    assert error_message(wrapped) == "cannot read checkpoint c.pt: Weights only load failed."

    # through the real command: an export into a folder that cannot be made (a file stands in its way)
    from test_probe_fixtures import write_features

    store = write_features(tmp_path / "f", classes=2, dim=3, per_class=4, test_per_class=1) / "train"
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    argv = ["features", "export", str(store), str(blocker / "X_Y.pth")]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("cog-pl features: error: ") and len(err.splitlines()) == 1 and str(blocker) in err
    monkeypatch.setenv("COG_PL_DEBUG", "1")
    with pytest.raises(OSError):
        main(argv)


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 138 s (4 LightningCLI processes); the catalogue's cases stay fast
def test_lightning_commands_report_in_one_line_and_verbose_shows_the_traceback(tmp_path):
    argv = [str(COG_PL), "extract", "--model.model", "nosuch", "--data.out", str(tmp_path)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("COG_PL_DEBUG", None)
    quiet = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    assert quiet.stderr.strip().splitlines()[-1].startswith("cog-pl extract: error: unknown model 'nosuch'")
    loud = subprocess.run([argv[0], "--verbose", *argv[1:]], capture_output=True, text=True, env=env, timeout=300)
    assert loud.returncode != 0 and "Traceback" in loud.stderr and "unknown model 'nosuch'" in loud.stderr
