"""The level builder end to end: the level file contract, agreement with the official levels, image counting."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from cog_pl.levels.builder import load_level_file, write_level_file
from cog_pl.levels.compare import agreement_summary, compare_report
from cog_pl.levels.counts import count_images
from cog_pl.resources import LEVELS, official_levels


def test_level_file_contract(level_content):
    c = level_content
    assert c["format"] == "cog-pl-levels" and c["version"] == 1
    levels = c["levels"]
    assert list(levels) == list(LEVELS)
    assert all(len(v) == 1000 and v == sorted(v) for v in levels.values())
    assert len(set().union(*map(set, levels.values()))) == 5000
    assert len(c["ranking"]) == len(c["similarity"]) == c["eligibility"][-1]["remaining"] == 5216
    assert set(c["closest_seen"]) == set(c["similarity"])
    sims = [c["similarity"][w] for w in c["ranking"]]
    assert sims == sorted(sims, reverse=True)
    # L1 is the most similar level, L5 the least
    means = [sum(c["similarity"][w] for w in levels[lvl]) / 1000 for lvl in LEVELS]
    assert means == sorted(means, reverse=True)
    assert c["settings"]["protocol"]["measure"] == "lin" and c["settings"]["protocol"]["min_images"] == 782
    assert {"cog_pl", "nltk", "numpy", "wordnet"} <= set(c["versions"]) and c["versions"]["wordnet"] == "3.0"


def test_reproduces_the_official_levels_when_the_5000_are_ranked(level_content):
    summary = agreement_summary(level_content)
    assert summary["isolated_all"] == 1.0  # the issue asks >= 0.998; the deepest-LCS construction gives all 5000
    assert summary["levels_all"] > 0.95  # full-list cut: moves only because the 70 manual discards are unknown


def test_builder_is_fast_enough(level_content):
    assert level_content["timings"]["similarity_s"] < 30  # bulk numpy, not 5 million NLTK calls


def test_level_file_round_trip_is_atomic(level_content, tmp_path):
    path = tmp_path / "levels.json"
    write_level_file(path, level_content)
    assert load_level_file(path)["levels"] == level_content["levels"]
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_level_file(path, {"levels": {1, 2}})  # not serialisable: the old file must survive intact
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["levels.json"]


def _levels(**given) -> str:
    """A level file's text: one real, distinct IN-21K wnid per level, with ``given`` levels replaced."""
    levels = {lvl: [sorted(official_levels()[lvl])[0]] for lvl in ("L1", "L2", "L3", "L4", "L5")}
    return json.dumps({"format": "cog-pl-levels", "version": 1, "levels": {**levels, **given}})


@pytest.mark.parametrize(("text", "match"), [
    ("{not json", "not readable JSON"),
    ('{"levels": {"L1": []}}', "lacks level"),
    ('{"format": "cog-pl-levels", "version": 9, "levels": {}}', "reads cog-pl-levels up to v1"),
    ("[]", "holds a JSON list"),
    ('"abc"', "holds a JSON str"),
    ('{"levels": 3}', "no 'levels' mapping"),
    ('{"levels": "L1"}', "no 'levels' mapping"),
    ('{"version": null, "levels": {}}', "version None"),
    ('{"version": "1", "levels": {}}', "version '1'"),
    ('{"version": true, "levels": {}}', "version True"),
    ('{"version": 0, "levels": {}}', "version 0"),
    ('{"format": "other", "version": 1, "levels": {}}', "'other' version 1"),
    (_levels(L1=3), "level L1 is 3, not a non-empty list"),
    (_levels(L1="n01440764"), "level L1 is 'n01440764', not a non-empty list"),
    (_levels(L1=[]), "level L1 is \\[\\]"),
    (_levels(L2=[7]), "level L2 holds 7, not a wnid"),
    (_levels(L2=["cat"]), "level L2 holds 'cat', not a wnid"),
    (_levels(L3=["n99999999"]), "level L3 holds n99999999, which is not an ImageNet-21K"),
    (_levels(L4=["n01440764", "n01440764"]), "n01440764 is in level L4 twice"),
    (_levels(L5=["n01443537"], L4=["n01443537"]), "n01443537 is in level L5 and in L4"),
    (_levels(L6=["n01443537"]), "unknown level\\(s\\) 'L6'"),
])
def test_bad_level_files_are_named(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        load_level_file(path)
    assert str(path) in str(err.value)


def test_official_levels_compare_with_themselves():
    content = {"levels": {k: list(v) for k, v in official_levels().items()}}
    report = compare_report(content)
    assert "100.00%" in report and "not computable: 5000" in report


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, "JPEG")
    return buf.getvalue()


def _tree(root: Path, layout: dict[str, int], tars: bool) -> None:
    root.mkdir(parents=True, exist_ok=True)
    data = _jpeg()
    for wnid, n in layout.items():
        if tars:
            with tarfile.open(root / f"{wnid}.tar", "w") as tf:
                for k in range(n):
                    info = tarfile.TarInfo(f"{wnid}_{k}.JPEG")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        else:
            (root / wnid).mkdir()
            for k in range(n):
                (root / wnid / f"{wnid}_{k}.JPEG").write_bytes(data)
            (root / wnid / "notes.txt").write_text("not an image")


@pytest.mark.parametrize("tars", [False, True])
def test_counts_from_an_in21k_root(tmp_path, tars):
    layout = {"n01440764": 3, "n01443537": 5}
    _tree(tmp_path / "in21k", layout, tars)
    assert count_images(tmp_path / "in21k", layout) == layout


def test_counting_errors_name_the_problem(tmp_path):
    root = tmp_path / "in21k"
    _tree(root, {"n01440764": 2, "n01443537": 0}, tars=False)
    with pytest.raises(ValueError, match="1 synset.* hold no images: n01443537"):
        count_images(root, ["n01440764", "n01443537"])
    with pytest.raises(ValueError, match="1 of 2 synsets are missing .*n09999999"):
        count_images(root, ["n01440764", "n09999999"])
    assert count_images(root, ["n01440764", "n09999999"], allow_missing=True) == {"n01440764": 2, "n09999999": 0}
    (root / "n01530575.tar").write_bytes(b"this is not a tar archive" * 40)
    with pytest.raises(ValueError, match="unreadable synset .*n01530575.tar"):
        count_images(root, ["n01530575"])
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        count_images(tmp_path / "nowhere", ["n01440764"])


def test_level_file_is_valid_json_with_every_similarity(level_content, tmp_path):
    path = tmp_path / "l.json"
    write_level_file(path, level_content)
    data = json.loads(path.read_text())
    assert all(isinstance(v, float) for v in data["similarity"].values())
