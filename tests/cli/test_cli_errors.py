"""A user's error and a defect of cog_pl read differently: a bad input (a :class:`~cog_pl.errors.CogError`) is one
line ``cog-pl CMD: error: ...`` with exit status 2; a ``KeyError``, ``RuntimeError``, or a plain ``ValueError`` or
``TypeError`` from the code is its traceback and a line saying it is a bug (status 1)."""

from __future__ import annotations

import pytest

from cog_pl.cli import models as models_cli
from cog_pl.cli.main import error_message, main
from cog_pl.errors import (
    CogError,
    MissingDependencyError,
    MissingFileError,
    NotFoundError,
    UnknownNameError,
    WrongTypeError,
)


def _raising(err: BaseException):
    def rows():
        raise err
    return rows


@pytest.mark.parametrize("err", [KeyError("n01440764"), RuntimeError("inconsistent state"), AssertionError("x"),
                                 TypeError("f() takes 1 argument"), ValueError("a bad value")])
def test_a_defect_shows_its_traceback_and_says_it_is_a_bug(err, monkeypatch, capsys):
    monkeypatch.delenv("COG_PL_DEBUG", raising=False)
    monkeypatch.setattr(models_cli, "model_rows", _raising(err))
    assert main(["models", "list"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == (f"cog-pl models: internal error ({type(err).__name__}): this is a bug in cog_pl, not in what "
                         "you gave; please report it with the traceback above")


@pytest.mark.parametrize("err", [CogError("--shots 0: must be at least 1"), NotFoundError("n0 is not in /data"),
                                 UnknownNameError("unknown model 'x'"), MissingDependencyError("needs pip install y"),
                                 MissingFileError("--config c.yaml: no such file"),
                                 WrongTypeError("image source 'x': 1 is not an ImageSource subclass")])
def test_a_bad_input_is_one_line_with_status_2(err, monkeypatch, capsys):
    monkeypatch.delenv("COG_PL_DEBUG", raising=False)
    monkeypatch.setattr(models_cli, "model_rows", _raising(err))
    assert main(["models", "list"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"cog-pl models: error: {err}"]


def test_debugging_shows_a_defect_as_python_does(monkeypatch):
    monkeypatch.setenv("COG_PL_DEBUG", "1")
    monkeypatch.setattr(models_cli, "model_rows", _raising(KeyError("k")))
    with pytest.raises(KeyError):
        main(["models", "list"])


def test_a_not_found_error_reads_as_a_sentence_and_is_still_a_key_error():
    err = NotFoundError("n01440764/x.JPEG is not in /data/in1k.tar")
    assert isinstance(err, KeyError) and isinstance(err, ValueError)
    assert str(err) == error_message(err) == "n01440764/x.JPEG is not in /data/in1k.tar"


def test_a_plain_value_error_from_inside_the_library_is_a_defect(tmp_path, monkeypatch, capsys):
    """A ``ValueError`` that the library raises (not a :class:`CogError`) is not taken for the user's error: ``cog-pl``
    shows its traceback and asks for a report, exit status 1, where before it printed one line with status 2."""
    import cog_pl.levels.builder as builder

    def broken(path):
        raise ValueError("operands could not be broadcast together with shapes (5,) (4,)")

    monkeypatch.delenv("COG_PL_DEBUG", raising=False)
    monkeypatch.setattr(builder, "load_level_file", broken)
    level_file = tmp_path / "levels.json"
    level_file.write_text("{}")
    assert main(["levels", "show", str(level_file)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert any("in broken" in line for line in lines)  # the traceback reaches into the library
    assert lines[-1] == ("cog-pl levels: internal error (ValueError): this is a bug in cog_pl, not in what you gave; "
                         "please report it with the traceback above")


def test_the_same_bad_level_file_is_still_one_line_with_status_2(tmp_path, capsys, monkeypatch):
    """The library's own refusal of that file is a CogError: one line naming the file, status 2."""
    monkeypatch.delenv("COG_PL_DEBUG", raising=False)
    level_file = tmp_path / "levels.json"
    level_file.write_text("[1, 2]")
    assert main(["levels", "show", str(level_file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cog-pl levels: error: level file {level_file} holds a JSON list, not an object with 'levels'"]
