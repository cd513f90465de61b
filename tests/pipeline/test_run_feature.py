"""``cog-pl run --feature NAME`` and ``cog-pl extract --model.feature NAME`` (issue 40): the definition is checked
before any work, and a token definition with a method that reads one vector per image is refused."""

from __future__ import annotations

import pytest

from cog_pl.cli.main import main
from cog_pl.errors import CogError, UnknownNameError
from cog_pl.evaluate import Method, register_method, unregister_method
from cog_pl.pipeline import RunConfig


def _config(tmp_path, **kw):
    given = {"in1k_root": str(tmp_path), "in21k_root": None, "domains": ("in1k",), **kw}
    return RunConfig(model="demo_cnn", random_weights=True, out=str(tmp_path / "out"), **given)


def test_a_token_definition_is_refused_with_methods_that_read_vectors(tmp_path):
    assert _config(tmp_path, feature="cls_last4").feature == "cls_last4"  # checked on the network when built
    with pytest.raises(CogError) as err:
        _config(tmp_path, feature="tokens2x2", methods=("linear", "knn"))
    assert str(err.value) == ("--feature tokens2x2: a token definition makes token stores, which linear, knn cannot "
                              "read; methods that take token stores: attentive, mlp")
    class Stub(Method):
        name, reads, order = "attentive_stub", "tokens", 7.0

    register_method(Stub())
    try:
        assert _config(tmp_path, feature="tokens2x2", methods=("attentive_stub",)).feature == "tokens2x2"
        with pytest.raises(CogError, match=r"which linear cannot read; methods that take token stores: "
                                           r"attentive, mlp, attentive_stub$"):
            _config(tmp_path, feature="tokens_full", methods=("attentive_stub", "linear"))
    finally:
        unregister_method("attentive_stub")
    assert not (tmp_path / "out").exists()


def test_an_unknown_feature_is_refused_by_the_command_in_one_line(tmp_path, capsys):
    code = main(["run", "--model", "demo_cnn", "--random-weights", "--in1k-root", str(tmp_path), "--domains", "in1k",
                 "--out", str(tmp_path / "out"), "--feature", "cls_lst4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("cog-pl run: error: ") and "unknown feature definition 'cls_lst4'; did you mean " \
        "'cls_last4'?" in err[0]
    with pytest.raises(UnknownNameError):
        _config(tmp_path, feature="patch_avg")


def test_extract_takes_the_definition_as_a_model_option(capsys):
    from cog_pl.cli import extract

    with pytest.raises(SystemExit) as exit_:
        extract.run(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "--model.feature FEATURE" in out
